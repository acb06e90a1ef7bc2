/**
 * scripts/prepack.sh's choice of what the tarball ships, without compiling: prebuildify (run as
 * `npx prebuildify`) is replaced by a stand-in that writes this tree's real build as the
 * linux-x64 prebuild, and the host's tools are offered without the aarch64 cross compiler. The
 * pack must skip linux-arm64 with a line saying so instead of failing, and ship only what this
 * run built and checked: binaries left in prebuilds/ by an earlier run are gone.
 * (test/install/prebuilt.test.ts runs the real pack end to end.)
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(__dirname, '..', '..');
const BUILT = path.join(ROOT, 'build', 'Release', 'process_sandbox.node');
const hasObjdump = spawnSync('sh', ['-c', 'command -v objdump']).status === 0;
// eslint-disable-next-line no-console
if (process.platform === 'linux' && !hasObjdump) console.warn('[prepack] SKIPPING: prepack checks binaries with objdump (binutils), which is not installed');

describe.runIf(process.platform === 'linux' && hasObjdump)('prepack: what the tarball ships', () => {
  let work: string;
  let pkg: string;
  let bin: string;
  beforeAll(() => {
    if (!fs.existsSync(BUILT)) throw new Error(`no ${BUILT}: global-setup builds it`);
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-prepack-'));
    pkg = path.join(work, 'pkg');
    fs.mkdirSync(path.join(pkg, 'scripts'), { recursive: true });
    fs.mkdirSync(path.join(pkg, 'node_modules'));
    for (const f of ['package.json', 'binding.gyp', 'native']) fs.cpSync(path.join(ROOT, f), path.join(pkg, f), { recursive: true });
    fs.copyFileSync(path.join(ROOT, 'scripts', 'prepack.sh'), path.join(pkg, 'scripts', 'prepack.sh'));
    // The host's tools, minus the aarch64 cross toolchain, plus the prebuildify stand-in.
    bin = path.join(work, 'bin');
    fs.mkdirSync(bin);
    // First hit on PATH wins, by name: a dangling link (rust-clang -> clang-14 without clang) must
    // not look absent to existsSync and be linked twice.
    const taken = new Set<string>();
    for (const dir of (process.env.PATH ?? '/usr/bin:/bin').split(':')) {
      let names: string[] = [];
      try {
        names = fs.readdirSync(dir);
      } catch {
        continue;
      }
      for (const n of names) {
        if (n.startsWith('aarch64-linux-gnu-') || taken.has(n)) continue;
        taken.add(n);
        fs.symlinkSync(path.join(dir, n), path.join(bin, n));
      }
    }
    fs.rmSync(path.join(bin, 'npx'), { force: true });
    fs.writeFileSync(
      path.join(bin, 'npx'),
      `#!/bin/sh
# prebuildify --out DIR: this tree's build as DIR/prebuilds/linux-x64/process-sandbox.glibc.node
out=
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out/prebuilds/linux-x64" && cp ${JSON.stringify(BUILT)} "$out/prebuilds/linux-x64/process-sandbox.glibc.node"
`,
      { mode: 0o755 },
    );
  });
  afterAll(() => {
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  const stale = () => {
    for (const t of ['win32-x64', 'linux-arm64', 'darwin-arm64']) {
      fs.mkdirSync(path.join(pkg, 'prebuilds', t), { recursive: true });
      fs.writeFileSync(path.join(pkg, 'prebuilds', t, 'process-sandbox.node'), 'left by an earlier run');
    }
  };
  const prepack = (targets: string) =>
    spawnSync('bash', ['scripts/prepack.sh'], {
      cwd: pkg,
      encoding: 'utf8',
      env: { PATH: bin, HOME: work, PSB_PREBUILD_TARGETS: targets },
      timeout: 120_000,
    });

  it('no aarch64 cross compiler: linux-arm64 is skipped with a line saying so; only this run\'s linux-x64 ships', () => {
    stale();
    const r = prepack('linux-x64,linux-arm64');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stderr).toMatch(/^prepack: SKIPPING linux-arm64: aarch64-linux-gnu-g\+\+ is missing/m);
    expect(r.stdout).toMatch(/^prepack: prebuilds\/linux-x64\/process-sandbox\.glibc\.node \(elf64-x86-64, /m);
    expect(r.stdout).toMatch(/^prepack: the tarball ships prebuilds for: linux-x64$/m);
    // The stale Windows, arm64 and macOS binaries are gone: the tarball ships prebuilds/ as is.
    expect(fs.readdirSync(path.join(pkg, 'prebuilds'))).toEqual(['linux-x64']);
    expect(fs.readFileSync(path.join(pkg, 'prebuilds', 'linux-x64', 'process-sandbox.glibc.node')).equals(fs.readFileSync(BUILT))).toBe(true);
  });

  it('a narrowed pack (linux-x64 only) ships linux-x64 only: binaries of other targets left from an earlier run are removed', () => {
    stale();
    const r = prepack('linux-x64');
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(fs.readdirSync(path.join(pkg, 'prebuilds'))).toEqual(['linux-x64']);
  });

  it('a pack that can build nothing fails, and leaves no stale binary behind either', () => {
    stale();
    const r = prepack('linux-arm64');
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/SKIPPING linux-arm64/);
    expect(r.stderr).toMatch(/no prebuild was built \(targets: linux-arm64\): nothing to ship/);
    expect(fs.existsSync(path.join(pkg, 'prebuilds'))).toBe(false);
  });
});
