'use strict';
// Batch files and cmd.exe (BatBadBut): CreateProcess runs .bat/.cmd through cmd.exe,
// which parses the command line by its own rules. The reproduction `run('t.bat', ['"&echo INJECTED'])`
// must not run a second command and `%VAR%` must not expand. Every case checks from outside that
// the injected command's side effect (a marker file) did not happen; the controls show, with the old
// MSVC-style command line, that this cmd.exe really does run the injection (so the test can fail).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');

function setup() {
  const dir = h.tmpDir('bat');
  const bat = path.join(dir, 't.bat');
  // %1 (not %~1): the quoted form echoes literally; echo. avoids "ECHO is off" for a missing arg.
  fs.writeFileSync(bat, '@echo off\r\necho.arg1=%1\r\necho.arg2=%2\r\necho.arg3=%3\r\n');
  const cmdFile = path.join(dir, 'tool.cmd');
  fs.copyFileSync(bat, cmdFile);
  return { dir, bat, cmdFile, marker: path.join(dir, 'INJECTED.txt') };
}

// The marker path has no spaces (a temp dir), so it needs no quotes of its own.
const injection = (marker) => `"&echo INJECTED>${marker}`;

/** The pre-fix launch: the .bat handed straight to CreateProcess with MSVC quoting. */
function oldStyleRun(file, argv, env) {
  const outFile = path.join(path.dirname(file), 'old-run.txt');
  const fd = fs.openSync(outFile, 'w');
  return new Promise((resolve) => {
    h.native.winSpawn(
      { file, commandLine: h.win32.buildCommandLine(argv), env: Object.entries(env), cwd: path.dirname(file), stdio: ['ignore', fd, fd], sandboxed: false, job: {} },
      (code) => {
        fs.closeSync(fd);
        resolve(`${code}, output ${JSON.stringify(fs.readFileSync(outFile, 'utf8'))}`);
      },
    );
  });
}

test('control: the old launch of a .bat runs the injected command (this cmd.exe is vulnerable)', { timeout: 90000 }, async () => {
  const t = setup();
  // Up to 3 launches: under wine the first cmd.exe a test process starts sometimes exits 0 without
  // running the batch file at all (no output either); a real run then shows the injection.
  const runs = [];
  for (let i = 0; i < 3 && !fs.existsSync(t.marker); i++) {
    runs.push(await oldStyleRun(t.bat, [t.bat, injection(t.marker)], h.baseEnv()));
  }
  assert.equal(fs.existsSync(t.marker), true, `the old command line let cmd.exe run a second command: ${runs.join('; ')}`);
});

for (const sandboxed of [false, true]) {
  const label = sandboxed ? 'sandboxed' : 'plain';
  test(`${label}: an argument with '"' for a .bat is refused, and the injected command never runs`, () => {
    const t = setup();
    assert.throws(
      () => h.backend.spawn({ file: t.bat, argv: ['t.bat', injection(t.marker)], env: h.baseEnv(), cwd: t.dir, stdio: ['ignore', 'ignore', 'ignore'], rules: sandboxed ? h.rules() : null }),
      (e) => e instanceof h.SandboxError && e.code === 'EINVALID_ARGUMENT' && /BatBadBut/.test(e.message) && /argv\[1\]/.test(e.message),
    );
    assert.equal(fs.existsSync(t.marker), false);
  });

  test(`${label}: %VAR% in an argument for a .cmd is refused (it would expand)`, () => {
    const t = setup();
    assert.throws(
      () => h.backend.spawn({ file: t.cmdFile, argv: ['tool', 'ok', '%PSB_SECRET%'], env: h.baseEnv({ PSB_SECRET: 'leaked' }), cwd: t.dir, stdio: ['ignore', 'ignore', 'ignore'], rules: sandboxed ? h.rules() : null }),
      (e) => e instanceof h.SandboxError && e.code === 'EINVALID_ARGUMENT' && /'%'/.test(e.message) && /argv\[2\]/.test(e.message),
    );
  });

  test(`${label}: cmd metacharacters reach the batch file as text, not as commands`, { timeout: 60000 }, async () => {
    const t = setup();
    const { stdout, exit } = await h.runBackend({
      file: t.bat,
      argv: ['t.bat', `a&echo INJECTED>"${t.marker}"`.replace(/"/g, ''), 'x|y^z<(w)>', 'semi;comma,eq=!bang!'],
      cwd: t.dir,
      rules: sandboxed ? h.rules() : null,
    });
    assert.equal(exit.code, 0);
    const lines = stdout.split(/\r?\n/);
    assert.ok(lines.includes(`arg1="a&echo INJECTED>${t.marker}"`), stdout);
    assert.ok(lines.includes('arg2="x|y^z<(w)>"'), stdout);
    assert.ok(lines.includes('arg3="semi;comma,eq=!bang!"'), stdout);
    assert.equal(fs.existsSync(t.marker), false, 'no second command ran');
  });
}

test('control: with the old launch, %VAR% in an argument expands', { timeout: 60000 }, async () => {
  const t = setup();
  const bat = path.join(t.dir, 'dump.bat');
  fs.writeFileSync(bat, `@echo off\r\necho %1> "${path.join(t.dir, 'arg.txt')}"\r\n`);
  for (let i = 0; i < 3 && !fs.existsSync(path.join(t.dir, 'arg.txt')); i++) {
    await oldStyleRun(bat, [bat, '%PSB_SECRET%'], h.baseEnv({ PSB_SECRET: 'leaked' }));
  }
  assert.match(fs.readFileSync(path.join(t.dir, 'arg.txt'), 'utf8'), /leaked/);
});

test('public API: a .cmd found on PATH (as npm/npx/yarn are) gets the same protection', async () => {
  const t = setup();
  const api = require(path.join(h.root, 'dist', 'index.js'));
  const env = h.baseEnv();
  const pathKey = Object.keys(env).find((k) => k.toUpperCase() === 'PATH');
  env[pathKey] = `${t.dir};${env[pathKey]}`;
  await assert.rejects(
    async () => api.run('tool', [injection(t.marker)], { env, cwd: t.dir, policy: null }),
    (e) => e.code === 'EINVALID_ARGUMENT' && /BatBadBut/.test(e.message),
  );
  assert.equal(fs.existsSync(t.marker), false);
  const ok = await api.run('tool', ['plain', 'two words'], { env, cwd: t.dir, policy: null });
  assert.match(ok.stdout, /arg1=plain\r?\narg2="two words"/);
});
