/**
 * The prebuilt install path, end to end, as a user gets it: `npm pack` (its prepack hook builds
 * prebuilds/ for linux-x64, linux-arm64 and win32-x64; prepare builds dist/), then the tarball is
 * installed into two fresh consumer projects:
 *   - with `--ignore-scripts` (no install hook at all: only a shipped prebuild can work), and
 *   - with the install hook running and PREBUILDS_ONLY=1 (the hook must find the prebuild and
 *     compile nothing, quietly).
 * Both are used through require() and import(), plainly and sandboxed, with no build/ directory in
 * the installed package. One pack per run serves every case.
 *
 * All of it happens in a scratch copy of the package, so the shared tree's build/ and prebuilds/
 * are never touched and a read-only tree works.
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireBuilt } from '../contract/helpers';
import { neededVersions, readmeFloors, versionFloor, versionLess, versionText } from './elf-glibc';

const ROOT = path.resolve(__dirname, '..', '..');
const hasNpm = spawnSync('npm', ['--version'], { encoding: 'utf8' }).status === 0;
if (!hasNpm) console.warn('SKIPPING the prebuilt-install test: npm is not on PATH');

/** node-gyp needs headers; use the ones installed beside node when npm has no nodedir configured. */
function buildEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, JOBS: process.env.PSB_BUILD_JOBS ?? '1' };
  const prefix = path.resolve(process.execPath, '..', '..');
  if (!env.npm_config_nodedir && fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h'))) env.npm_config_nodedir = prefix;
  return env;
}

function sh(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = buildEnv()): SpawnSyncReturns<string> {
  return spawnSync(cmd, args, { cwd, env, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 10 * 60_000 });
}

function must(r: SpawnSyncReturns<string>, what: string): string {
  if (r.status !== 0) throw new Error(`${what} failed (status ${r.status}, ${r.error?.message ?? r.signal ?? ''}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

const COPY = ['package.json', 'binding.gyp', 'CMakeLists.txt', 'cmake', 'tsconfig.json', 'native', 'lib', 'scripts', 'README.md', 'LICENSE'];

/** What prepack can build on this host; a missing cross toolchain narrows the set, loudly. */
function has(bin: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${bin}`]).status === 0;
}
const TARGETS = ['linux-x64', ...(has('aarch64-linux-gnu-g++') ? ['linux-arm64'] : []), ...(has('x86_64-w64-mingw32-g++-posix') && has('cmake') ? ['win32-x64'] : [])];
for (const t of ['linux-arm64', 'win32-x64']) {
  if (!TARGETS.includes(t)) console.warn(`SKIPPING the ${t} prebuild in the install test: its cross toolchain is not installed (.ci/run installs it)`);
}

/**
 * The README's promise for each Linux prebuild (glibc, and libstdc++ as GLIBCXX_x.y.z) against
 * what a binary's version needs say. A binary that needs more than the README states fails, so a
 * toolchain upgrade cannot raise the floor unnoticed (the README once said 2.33 while the binaries
 * needed 2.34).
 */
function checkFloors(file: string, target: string): void {
  const stated = readmeFloors(fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8'));
  const glibc = versionFloor(file, 'GLIBC_');
  const glibcxx = versionFloor(file, 'GLIBCXX_');
  expect(stated.glibc[target], `README states no glibc floor for ${target}`).toBeDefined();
  expect(glibc, `${file} needs no GLIBC_ version at all: not a glibc build?`).not.toBeNull();
  expect(versionLess(stated.glibc[target], glibc!), `${file} needs GLIBC_${versionText(glibc!)}; the README says ${target} needs glibc ≥ ${versionText(stated.glibc[target])}`).toBe(false);
  if (glibcxx) {
    expect(stated.glibcxx, `${file} needs GLIBCXX_${versionText(glibcxx)}; the README states no libstdc++ floor`).not.toBeNull();
    expect(versionLess(stated.glibcxx!, glibcxx), `${file} needs GLIBCXX_${versionText(glibcxx)}; the README says GLIBCXX_${versionText(stated.glibcxx!)}`).toBe(false);
  }
}

describe.skipIf(process.platform !== 'linux')('the glibc and libstdc++ the README states for the Linux prebuilds', () => {
  // This host's addon is the linux-x64 (or arm64) prebuild's compile: same binding.gyp, compiler and flags.
  const target = `linux-${process.arch}`;
  const addon = path.join(ROOT, 'build', 'Release', 'process_sandbox.node');

  it(`this host's build (${target}) needs no more than the README states`, () => {
    requireBuilt('addon');
    checkFloors(addon, target);
  });

  it('the version-needs reader agrees with binutils (objdump -T) where it is installed', (ctx) => {
    requireBuilt('addon');
    const r = spawnSync('objdump', ['-T', addon], { encoding: 'utf8' });
    if (r.error || r.status !== 0) return ctx.skip(`objdump is not installed (binutils): ${r.error?.message ?? r.stderr}`);
    const fromObjdump = [...new Set(r.stdout.match(/\b(GLIBC|GLIBCXX|CXXABI|GCC)_[0-9.]+/g) ?? [])].sort();
    expect(new Set(neededVersions(addon))).toEqual(new Set(fromObjdump));
  });

  it('the README floor check fails a binary that needs more (a README stating 2.33 against this build)', () => {
    requireBuilt('addon');
    const floor = versionFloor(addon, 'GLIBC_')!;
    const lower = [floor[0], floor[1] - 1, 0];
    expect(versionLess(lower, floor)).toBe(true);
    expect(versionLess(floor, floor)).toBe(false);
    expect(readmeFloors(`**${target} (glibc ≥ ${versionText(lower)})**`).glibc[target]).toEqual(lower);
  });

  it('checks any prebuilds/ already in the tree (after a pack)', (ctx) => {
    const found = ['linux-x64', 'linux-arm64'].flatMap((t) => {
      const dir = path.join(ROOT, 'prebuilds', t);
      return fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.glibc.node')).map((f) => [path.join(dir, f), t] as const) : [];
    });
    if (found.length === 0) return ctx.skip('no prebuilds/ in the tree: the packed ones are checked in the install test below');
    for (const [file, t] of found) checkFloors(file, t);
  });
});

describe.skipIf(!hasNpm || process.platform !== 'linux')('prebuilt install from the packed tarball', () => {
  let work: string;
  let pkgSrc: string;
  let proj: string;
  let installed: string;
  let projNoScripts: string;
  let installedNoScripts: string;
  let tarball: string;
  let packLog = '';
  let installLog = '';

  /** npm install <tarball> in a fresh project; offline first (this user's cache), then online. */
  function install(dir: string, extra: string[], env: NodeJS.ProcessEnv): string {
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'psb-install-probe', version: '1.0.0', private: true }));
    const common = ['install', '--no-audit', '--no-fund', ...extra, tarball];
    let r = sh('npm', [...common.slice(0, 1), '--offline', ...common.slice(1)], dir, env);
    let log = `offline: ${r.stdout}\n${r.stderr}`;
    if (r.status !== 0) {
      console.warn('npm install --offline failed; retrying online (the npm registry is reachable here)');
      r = sh('npm', common, dir, env);
      log += `\nonline: ${r.stdout}\n${r.stderr}`;
    }
    must(r, `npm install ${extra.join(' ')} <tarball>`);
    return log;
  }

  beforeAll(() => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-install-'));
    pkgSrc = path.join(work, 'pkg');
    fs.mkdirSync(pkgSrc);
    for (const f of COPY) if (fs.existsSync(path.join(ROOT, f))) fs.cpSync(path.join(ROOT, f), path.join(pkgSrc, f), { recursive: true });
    // The tree's node_modules by symlink, except node-addon-api: gyp writes makefiles beside its
    // .gyp file, and the tree may be read-only (the suite run by an unprivileged user).
    const nm = path.join(pkgSrc, 'node_modules');
    fs.mkdirSync(nm);
    for (const e of fs.readdirSync(path.join(ROOT, 'node_modules'))) {
      const from = path.join(ROOT, 'node_modules', e);
      if (e === 'node-addon-api') fs.cpSync(from, path.join(nm, e), { recursive: true });
      else fs.symlinkSync(from, path.join(nm, e));
    }

    // The real release path: npm pack runs prepack (prebuilds) and prepare (dist).
    const packEnv = { ...buildEnv(), PSB_PREBUILD_TARGETS: TARGETS.join(',') };
    const pr = sh('npm', ['pack', '--json', '--foreground-scripts', '--pack-destination', work], pkgSrc, packEnv);
    packLog = `${pr.stdout}\n${pr.stderr}`;
    const out = must(pr, 'npm pack');
    const packed = JSON.parse(out.slice(out.search(/^\[$/m)));
    tarball = path.join(work, packed[0].filename);

    proj = path.join(work, 'proj');
    installLog = install(proj, ['--foreground-scripts'], { ...buildEnv(), PREBUILDS_ONLY: '1' });
    installed = path.join(proj, 'node_modules', 'process-sandbox');
    projNoScripts = path.join(work, 'proj-no-scripts');
    install(projNoScripts, ['--ignore-scripts'], buildEnv());
    installedNoScripts = path.join(projNoScripts, 'node_modules', 'process-sandbox');
  }, 15 * 60_000);

  afterAll(() => {
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('npm pack (prepack) built every expected prebuild and checked it', () => {
    for (const t of TARGETS) expect(packLog, `prepack output names ${t}`).toMatch(new RegExp(`prepack: prebuilds/${t}/\\S+\\.node \\(`));
  });

  it('each packed Linux prebuild needs no more glibc and libstdc++ than the README states', () => {
    for (const t of TARGETS.filter((x) => x.startsWith('linux-'))) {
      const dir = path.join(pkgSrc, 'prebuilds', t);
      const nodes = fs.readdirSync(dir).filter((f) => f.endsWith('.glibc.node'));
      expect(nodes, t).toHaveLength(1);
      checkFloors(path.join(dir, nodes[0]), t);
    }
  });

  it('the pack wrote prebuilds/linux-x64/*.glibc.node in the package', () => {
    const dir = path.join(pkgSrc, 'prebuilds', `${process.platform}-${process.arch}`);
    const nodes = fs.readdirSync(dir).filter((f) => f.endsWith('.node'));
    expect(nodes.length).toBe(1);
    expect(nodes[0]).toMatch(/\.glibc\.node$|\.musl\.node$/);
  });

  it('the tarball ships dist, the prebuild and the build inputs, but no build/', () => {
    const list = must(sh('tar', ['-tzf', tarball], work), 'tar -t').split('\n');
    for (const f of ['package/dist/index.js', 'package/dist/index.mjs', 'package/dist/index.d.ts', 'package/dist/cli.js', 'package/binding.gyp', 'package/package.json']) {
      expect(list, f).toContain(f);
    }
    for (const t of TARGETS) {
      expect(list.some((f) => f.startsWith(`package/prebuilds/${t}/`) && f.endsWith('.node')), `prebuilds/${t} in the tarball`).toBe(true);
    }
    expect(list).toContain('package/scripts/install.js');
    expect(list.some((f) => f.startsWith('package/build/'))).toBe(false);
    // Only what a user needs: no tests, no sources of the TS build, no cross-build scratch.
    expect(list.some((f) => f.startsWith('package/test/') || f.startsWith('package/.win/'))).toBe(false);
  });

  it('installs without any build step (no build/ in the installed package), and quietly', () => {
    for (const dir of [installed, installedNoScripts]) {
      expect(fs.existsSync(path.join(dir, 'package.json'))).toBe(true);
      expect(fs.existsSync(path.join(dir, 'build')), `install log:\n${installLog}`).toBe(false);
      expect(fs.existsSync(path.join(dir, 'prebuilds', `${process.platform}-${process.arch}`))).toBe(true);
    }
    // The install hook found the prebuild: nothing was compiled and node-gyp said nothing.
    expect(installLog).not.toMatch(/gyp info|compiling it/);
    // Runtime dependencies: node-gyp-build, node-addon-api, node-forge (the proxy's MITM CA) and ws.
    const deps = Object.keys(JSON.parse(fs.readFileSync(path.join(installed, 'package.json'), 'utf8')).dependencies ?? {}).sort();
    // ws: the exec-server's WebSocket transport (loaded only when that transport is used).
    expect(deps).toEqual(['node-addon-api', 'node-forge', 'node-gyp-build', 'ws']);
  });

  const script = (body: string) => `
    const out = {};
    const main = async (p) => {
      out.exports = ['spawn', 'run', 'probe', 'SandboxError'].map((k) => typeof p[k]);
      const probe = p.probe();
      out.addonLoaded = probe.addonLoaded;
      out.defaultMode = probe.defaultMode;
      const plain = await p.run('sh', ['-c', 'echo plain-ok'], { policy: null });
      out.plain = plain.stdout;
      if (probe.defaultMode) {
        // A Landlock-only host refuses the default policy unless degraded enforcement is accepted.
        const policy = probe.defaultMode === 'landlock' ? { degraded: true } : undefined;
        const sb = await p.run('sh', ['-c', 'echo sandboxed-ok'], { cwd: '/', policy });
        out.sandboxed = sb.stdout;
        out.sandboxedMode = sb.enforcement.mode;
      }
      try { p.spawn('', []); } catch (e) { out.errorIsSandboxError = e instanceof p.SandboxError && e.code === 'EINVALID_ARGUMENT'; }
      out.resolved = require('node-gyp-build').resolve(${JSON.stringify('__PKG__')});
      console.log(JSON.stringify(out));
    };
    ${body}
  `;

  function runIn(file: string, text: string, env: NodeJS.ProcessEnv = { ...process.env, PREBUILDS_ONLY: '1' }, where: 'scripts' | 'no-scripts' = 'scripts') {
    const [dir, pkg] = where === 'scripts' ? [proj, installed] : [projNoScripts, installedNoScripts];
    fs.writeFileSync(path.join(dir, file), text.replaceAll('__PKG__', pkg));
    return sh(process.execPath, [file], dir, env);
  }

  function expectWorking(r: SpawnSyncReturns<string>) {
    const out = JSON.parse(must(r, 'the consumer script').trim().split('\n').at(-1)!);
    expect(out.exports).toEqual(['function', 'function', 'function', 'function']);
    expect(out.addonLoaded).toBe(true);
    expect(out.plain).toBe('plain-ok\n');
    if (out.defaultMode) {
      expect(out.sandboxed).toBe('sandboxed-ok\n');
      expect(out.sandboxedMode).toBe(out.defaultMode);
    } else {
      console.warn('SKIPPING the sandboxed spawn from the installed package: probe() reports no enforceable mode');
    }
    expect(out.errorIsSandboxError).toBe(true);
    expect(out.resolved).toContain(`${path.sep}prebuilds${path.sep}`);
  }

  for (const where of ['scripts', 'no-scripts'] as const) {
    const how = where === 'scripts' ? 'installed with its install hook' : 'installed with --ignore-scripts';
    it(`require("process-sandbox") spawns plainly and sandboxed (${how})`, () => {
      expectWorking(runIn('consumer.cjs', script(`main(require('process-sandbox')).catch((e) => { console.error(e); process.exit(1); });`), undefined, where));
    });

    it(`import("process-sandbox") spawns plainly and sandboxed (${how})`, () => {
      const text = `import { createRequire } from 'node:module';
        const require = createRequire(import.meta.url);
        ${script(`const p = await import('process-sandbox'); await main(p);
        const named = await import('process-sandbox');
        if (typeof named.spawn !== 'function' || typeof named.default?.spawn !== 'function') throw new Error('ESM exports missing');`)}`;
      expectWorking(runIn('consumer.mjs', text, undefined, where));
    });
  }

  it('ships type declarations for both entry points', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(installed, 'package.json'), 'utf8'));
    expect(fs.existsSync(path.join(installed, pkg.types))).toBe(true);
    expect(fs.existsSync(path.join(installed, pkg.exports['.'].import.types))).toBe(true);
    expect(fs.existsSync(path.join(installed, pkg.exports['.'].require.types))).toBe(true);
  });

  it('the installed bin runs a command', () => {
    const bin = path.join(proj, 'node_modules', '.bin', 'process-sandbox');
    const r = sh(bin, ['run', '--no-sandbox', '--', 'sh', '-c', 'echo bin-ok; exit 4'], proj, { ...process.env, PREBUILDS_ONLY: '1' });
    expect(r.stdout).toBe('bin-ok\n');
    expect(r.status).toBe(4);
  });

  it('a missing native build is SandboxError EADDON_LOAD naming the tag and the fix', () => {
    const empty = path.join(work, 'no-prebuilds');
    fs.mkdirSync(empty, { recursive: true });
    const env = { ...process.env, PREBUILDS_ONLY: '1', PROCESS_SANDBOX_PREBUILD: empty };
    const r = runIn(
      'missing.cjs',
      `const p = require('process-sandbox');
       const probe = p.probe();
       let thrown = null;
       try { p.spawn('true', [], { policy: null }); } catch (e) { thrown = { code: e.code, message: e.message, isSandboxError: e instanceof p.SandboxError }; }
       console.log(JSON.stringify({ addonLoaded: probe.addonLoaded, addonError: probe.addonError, thrown }));`,
      env,
    );
    const out = JSON.parse(must(r, 'missing.cjs').trim());
    expect(out.addonLoaded).toBe(false);
    expect(out.addonError).toMatch(new RegExp(`native addon for ${process.platform}-${process.arch}-(glibc|musl) could not be loaded: No native build was found for platform=`));
    expect(out.thrown).toMatchObject({ code: 'EADDON_LOAD', isSandboxError: true });
    expect(out.thrown.message).toMatch(/Fix: /);
  });
});
