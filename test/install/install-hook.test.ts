/**
 * scripts/install.js, the npm "install" hook, without compiling anything: node-gyp is replaced by
 * a stand-in (npm_config_node_gyp, which npm sets for lifecycle scripts) that prints node-gyp's
 * usual chatter, so the test checks what the hook lets through and when it builds at all.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(__dirname, '..', '..');

describe('the install hook (scripts/install.js)', () => {
  let work: string;
  let fake: string;
  let pkg: string;
  beforeAll(() => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-install-hook-'));
    pkg = path.join(work, 'pkg');
    fs.mkdirSync(path.join(pkg, 'scripts'), { recursive: true });
    fs.mkdirSync(path.join(pkg, 'node_modules'));
    fs.copyFileSync(path.join(ROOT, 'scripts', 'install.js'), path.join(pkg, 'scripts', 'install.js'));
    fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'process-sandbox', version: '0.0.0' }));
    fs.symlinkSync(path.join(ROOT, 'node_modules', 'node-gyp-build'), path.join(pkg, 'node_modules', 'node-gyp-build'));
    fake = path.join(work, 'fake-node-gyp.js');
    fs.writeFileSync(
      fake,
      `const fs = require('fs');
       fs.appendFileSync(${JSON.stringify(path.join(work, 'calls'))}, process.argv.slice(2).join(' ') + '\\n');
       // Like node-gyp: info lines on stderr unless the log level is raised.
       if (!process.argv.includes('--loglevel=warn')) for (let i = 0; i < 30; i++) console.error('gyp info it worked if it ends with ok');
       console.log('make: Entering directory');
       console.log('  CXX(target) Release/obj.target/process_sandbox/native/binding.o');
       if (process.env.FAKE_WARN) console.error('native/binding.cc:1:1: warning: something');
       process.exit(Number(process.env.FAKE_STATUS || 0));`,
    );
  });
  afterAll(() => {
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  /** Runs the hook as npm does, or (`platform` given) its install() as if on that platform. */
  const hook = (env: Record<string, string> = {}, platform?: string) => {
    fs.rmSync(path.join(work, 'calls'), { force: true });
    const script = path.join(pkg, 'scripts', 'install.js');
    const argv = platform ? ['-e', `process.exitCode = require(${JSON.stringify(script)}).install({ platform: ${JSON.stringify(platform)} })`] : [script];
    const r = spawnSync(process.execPath, argv, {
      cwd: pkg,
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '', npm_config_node_gyp: fake, ...env },
      timeout: 60_000,
    });
    const calls = fs.existsSync(path.join(work, 'calls')) ? fs.readFileSync(path.join(work, 'calls'), 'utf8') : '';
    return { ...r, calls };
  };

  it('no loadable prebuild: builds with node-gyp at --loglevel=warn and prints one line, no gyp/make chatter', () => {
    const r = hook();
    expect(r.status, r.stderr).toBe(0);
    expect(r.calls).toBe('rebuild --loglevel=warn\n');
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^process-sandbox: no prebuilt addon loads on .*; compiling it/);
    expect(r.stderr).not.toMatch(/gyp info|make: Entering|CXX\(target\)/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('compiler warnings still reach the user', () => {
    const r = hook({ FAKE_WARN: '1' });
    expect(r.status).toBe(0);
    expect(r.stderr).toContain('warning: something');
  });

  it('a failed build shows the whole log and fails the install', () => {
    const r = hook({ FAKE_STATUS: '3' });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('make: Entering directory');
    expect(r.stderr).toContain('CXX(target)');
    expect(r.stderr).toMatch(/building the addon failed \(node-gyp exited with 3\)/);
  });

  it('macOS with no prebuild: nothing is compiled, one note says why, and the install succeeds', () => {
    const r = hook({}, 'darwin');
    expect(r.status, r.stderr).toBe(0);
    expect(r.calls).toBe('');
    expect(r.stderr).toMatch(/^process-sandbox: no prebuilt addon for macOS; not compiling it: the macOS sandbox \(Seatbelt.*does not use it\n$/);
    // Control: the same hook as Linux compiles.
    expect(hook({}, 'linux').calls).toBe('rebuild --loglevel=warn\n');
  });

  it('macOS with --build-from-source: a failed build is shown but does not fail the install (it does on Linux)', () => {
    const r = hook({ npm_config_build_from_source: 'true', FAKE_STATUS: '3' }, 'darwin');
    expect(r.calls).toBe('rebuild --loglevel=warn\n');
    expect(r.stderr).toContain('CXX(target)');
    expect(r.stderr).toMatch(/building the addon failed \(node-gyp exited with 3\); macOS does not need it/);
    expect(r.status).toBe(0);
    expect(hook({ npm_config_build_from_source: 'true', FAKE_STATUS: '3' }, 'linux').status).toBe(1);
  });

  it('a current build/Release (newer than binding.gyp and every native source, and loads): nothing is built; anything newer or unloadable builds', () => {
    const built = path.join(ROOT, 'build', 'Release', 'process_sandbox.node');
    if (!fs.existsSync(built)) throw new Error(`no ${built}: global-setup builds it`);
    const out = path.join(pkg, 'build', 'Release', 'process_sandbox.node');
    const src = path.join(pkg, 'native', 'linux', 'x.cc');
    const gyp = path.join(pkg, 'binding.gyp');
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.mkdirSync(path.dirname(src), { recursive: true });
    fs.copyFileSync(built, out);
    fs.writeFileSync(src, '// source\n');
    fs.writeFileSync(gyp, '{}\n');
    const now = Date.now() / 1000;
    const age = (f: string, s: number) => fs.utimesSync(f, now - s, now - s);
    try {
      age(src, 100);
      age(gyp, 100);
      age(out, 50);
      const r = hook();
      expect(r.status, r.stderr).toBe(0);
      expect(r.calls).toBe('');
      expect(r.stdout + r.stderr).toBe('');
      // A native source edited after the build.
      age(src, 10);
      expect(hook().calls).toBe('rebuild --loglevel=warn\n');
      age(src, 100);
      // binding.gyp edited after the build.
      age(gyp, 10);
      expect(hook().calls).toBe('rebuild --loglevel=warn\n');
      age(gyp, 100);
      expect(hook().calls).toBe('');
      // A current-looking file that is not a loadable addon.
      fs.writeFileSync(out, 'not an addon');
      age(out, 50);
      expect(hook().calls).toBe('rebuild --loglevel=warn\n');
      // --build-from-source builds a current tree anyway.
      fs.copyFileSync(built, out);
      age(out, 50);
      expect(hook({ npm_config_build_from_source: 'true' }).calls).toBe('rebuild --loglevel=warn\n');
    } finally {
      for (const d of ['build', 'native', 'binding.gyp']) fs.rmSync(path.join(pkg, d), { recursive: true, force: true });
    }
  });

  it('a prebuild that loads: nothing is built and nothing printed (positive control: the real build of this tree)', () => {
    const built = path.join(ROOT, 'build', 'Release', 'process_sandbox.node');
    if (!fs.existsSync(built)) throw new Error(`no ${built}: global-setup builds it`);
    const dir = path.join(pkg, 'prebuilds', `${process.platform}-${process.arch}`);
    fs.mkdirSync(dir, { recursive: true });
    fs.copyFileSync(built, path.join(dir, 'process-sandbox.node'));
    try {
      const r = hook();
      expect(r.status, r.stderr).toBe(0);
      expect(r.calls).toBe('');
      expect(r.stdout + r.stderr).toBe('');
      // --build-from-source builds anyway.
      expect(hook({ npm_config_build_from_source: 'true' }).calls).toBe('rebuild --loglevel=warn\n');
    } finally {
      fs.rmSync(path.join(pkg, 'prebuilds'), { recursive: true, force: true });
    }
  });
});
