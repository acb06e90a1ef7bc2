'use strict';
// Electron and every other host whose executable is not named node.exe must load the addon.
// node.exe is copied to electron-like.exe, which loads the addon through
// node-gyp-build and spawns a sandboxed child; and a check of the import table, which must not
// name NODE.EXE (that import is what made LoadLibrary fail with "module not found").
const test = require('node:test');
const assert = require('node:assert/strict');
const cp = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');

/** DLL names in the PE import directory of `file` (a small PE reader; no tools needed). */
function importedDlls(file) {
  const b = fs.readFileSync(file);
  const pe = b.readUInt32LE(0x3c);
  assert.equal(b.toString('latin1', pe, pe + 4), 'PE\0\0');
  const opt = pe + 24;
  assert.equal(b.readUInt16LE(opt), 0x20b, 'PE32+');
  const sections = [];
  const nsec = b.readUInt16LE(pe + 6);
  const secStart = opt + b.readUInt16LE(pe + 20);
  for (let i = 0; i < nsec; i++) {
    const s = secStart + i * 40;
    sections.push({ va: b.readUInt32LE(s + 12), size: b.readUInt32LE(s + 16), raw: b.readUInt32LE(s + 20) });
  }
  const off = (rva) => {
    const s = sections.find((x) => rva >= x.va && rva < x.va + x.size);
    assert.ok(s, `rva ${rva} in a section`);
    return rva - s.va + s.raw;
  };
  const importRva = b.readUInt32LE(opt + 112 + 8); // data directory 1: imports
  const names = [];
  for (let d = off(importRva); b.readUInt32LE(d + 12) !== 0; d += 20) {
    const n = off(b.readUInt32LE(d + 12));
    names.push(b.toString('latin1', n, b.indexOf(0, n)));
  }
  return names;
}

test('the addon imports no NODE.EXE (Node-API comes from the host process)', () => {
  const dlls = importedDlls(h.addonPath).map((d) => d.toUpperCase());
  assert.ok(dlls.includes('KERNEL32.DLL'), `the PE reader works: ${dlls}`);
  assert.ok(!dlls.includes('NODE.EXE'), `imports: ${dlls.join(', ')}`);
});

test('a renamed host (electron-like.exe) loads the addon and spawns a sandboxed child', { timeout: 120000 }, () => {
  const dir = h.tmpDir('electron');
  const exe = path.join(dir, 'electron-like.exe');
  fs.copyFileSync(process.execPath, exe);
  const script = path.join(dir, 'host.js');
  const out = path.join(dir, 'out.json');
  // Runs in electron-like.exe: the public API, so the addon is found the way an app finds it.
  fs.writeFileSync(
    script,
    `'use strict';
const fs = require('fs');
const api = require(${JSON.stringify(path.join(h.root, 'dist', 'index.js'))});
const res = { execPath: process.execPath, probe: api.probe() };
api.run(${JSON.stringify(h.probeChild)}, ['report', '5'], {
  env: ${JSON.stringify(h.baseEnv({ PSB_PROBE: 'renamed-host' }))},
  policy: { degraded: ${h.wine !== null}, network: 'full' },
}).then((r) => { res.run = { code: r.code, stdout: r.stdout, sandboxed: r.enforcement.sandboxed }; },
        (e) => { res.error = { code: e.code, message: e.message }; })
  .finally(() => fs.writeFileSync(${JSON.stringify(out)}, JSON.stringify(res)));
`,
  );
  // stdio to files/ignore: under wine node's stdout must not be a Unix pipe.
  const r = cp.spawnSync(exe, [script], { stdio: 'ignore', timeout: 100000, env: { ...process.env, PREBUILDS_ONLY: '1' } });
  assert.equal(r.status, 0, `electron-like.exe exited ${r.status} ${r.error ?? ''}`);
  const res = JSON.parse(fs.readFileSync(out, 'utf8'));
  assert.match(res.execPath, /electron-like\.exe$/i);
  assert.equal(res.probe.addonLoaded, true, res.probe.addonError);
  assert.equal(res.error, undefined, JSON.stringify(res.error));
  assert.equal(res.run.code, 5);
  assert.equal(res.run.sandboxed, true);
  assert.equal(h.parseReport(res.run.stdout).env, 'renamed-host');
});
