/**
 * filesystem.caches: ordinary tools install and build in the default sandbox without touching the
 * user's caches. One warm HOME (npm, npx, pnpm and yarn 1 through corepack, pip, cargo, go) is
 * made unsandboxed per file; each test runs a real tool sandboxed with the workspace as the only
 * writable root and checks, from outside, that nothing under that HOME changed or was added
 * (snapshot: file list, mtimes, hashes; and no file newer than the run's start), with positive
 * controls: the run did write a cache of its own (a file newer than its start in the tool's cache
 * dir, seen from inside), isolated mode's hits stay hits (--offline installs), and the same
 * check does see a change when the caches are 'host-writable'.
 *
 * Network: only the npm registry is reachable on the test machines, and registry.npmjs.org
 * resolves there to 203.0.113.80 (a documentation range), which the managed proxy refuses as not
 * public unless allowLocal is set: the policy sets it for that one name. Traffic is kept to
 * is-number, semver and (once per user) pnpm and yarn 1 through corepack.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SandboxError } from '../../lib/errors';
import { resolvePolicy } from '../../lib/permissions';
import { parseRunArgs, policyFromArgs } from '../../lib/cli/run-args';
import { planCaches } from '../../lib/platform/linux/caches';
import type { ResolvedRules } from '../../lib/rules';
import type { CachesMode, SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { withHostCacheEnv } from '../helpers/host-env';
import { NODE, SYS_PATH, eventually, expectUnchanged, makeScene, sh, snapshot, type Scene } from '../helpers/sandbox';
import { clearSpares, spareStats } from '../../lib/platform/linux/spare';

const REGISTRY = 'registry.npmjs.org';
const PNPM = 'pnpm@9.15.0';
const YARN = 'yarn@1.22.22';

function exe(p: string): string | null {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return p;
  } catch {
    return null;
  }
}

/** Debian's cargo (root's rustup in /root is not reachable by other users or from a fake HOME). */
const CARGO = exe('/usr/bin/cargo');
const GO = exe('/usr/bin/go');
const COREPACK = exe(path.join(path.dirname(NODE), 'corepack')) ?? exe('/usr/bin/corepack');
const PYTHON = exe('/usr/bin/python3');

let home = '';
let world: Scene | undefined;
/** Why each tool cannot be tested here (set while warming). */
const missing: Record<string, string> = {};
let env: Record<string, string> = {};

function unsandboxed(cmd: string, args: string[], cwd: string, extra: Record<string, string> = {}): string {
  return execFileSync(cmd, args, { cwd, env: { ...env, ...extra }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 240_000 });
}

function writeSdist(dir: string, name: string): void {
  const src = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-sdist-'));
  const top = path.join(src, `${name}-1.0`);
  fs.mkdirSync(top);
  fs.writeFileSync(path.join(top, 'setup.py'), `from setuptools import setup\nsetup(name="${name}", version="1.0", py_modules=["${name}"])\n`);
  fs.writeFileSync(path.join(top, `${name}.py`), 'VALUE = 42\n');
  fs.writeFileSync(path.join(top, 'PKG-INFO'), `Metadata-Version: 1.0\nName: ${name}\nVersion: 1.0\n`);
  execFileSync('tar', ['czf', path.join(dir, `${name}-1.0.tar.gz`), '-C', src, `${name}-1.0`]);
  fs.rmSync(src, { recursive: true, force: true });
}

/** Files and dirs under `root` newer than `since` (ms), or added. */
function newerThan(root: string, since: number): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    const st = fs.lstatSync(p);
    if (st.mtimeMs > since || st.ctimeMs > since) out.push(p);
    if (st.isDirectory()) for (const n of fs.readdirSync(p)) walk(path.join(p, n));
  };
  walk(root);
  return out;
}

describe('filesystem.caches: the knob', () => {
  it('the API accepts the three values and refuses others with a SandboxError naming the field', () => {
    for (const c of ['private', 'host-readonly', 'host-writable'] as const) {
      expect(resolvePolicy({ filesystem: { caches: c } }, '/').caches).toBe(c);
    }
    expect(resolvePolicy({}, '/').caches).toBeUndefined(); // planners read absent as 'private'
    let err: unknown;
    try {
      resolvePolicy({ filesystem: { caches: 'shared' as never } }, '/');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('EINVALID_POLICY');
    expect((err as Error).message).toContain('policy.filesystem.caches');
  });

  it('the CLI takes --caches <mode> and --caches=<mode>, and refuses unknown modes', () => {
    expect(policyFromArgs(parseRunArgs(['--caches', 'host-readonly', 'true']))?.filesystem?.caches).toBe('host-readonly');
    expect(policyFromArgs(parseRunArgs(['--caches=host-writable', 'true']))?.filesystem?.caches).toBe('host-writable');
    expect(policyFromArgs(parseRunArgs(['true']))?.filesystem?.caches).toBeUndefined();
    expect(() => parseRunArgs(['--caches=shared', 'true'])).toThrow(/--caches must be one of private, host-readonly, host-writable/);
  });
});

describe.runIf(caps.linux)('filesystem.caches: the plan', () => {
  const rulesWith = (over: Partial<ResolvedRules>): ResolvedRules => ({
    readAll: true, readRoots: [], writeRoots: [], readOnly: [], denyRead: [], tmp: 'private',
    network: { kind: 'none' }, mode: 'auto', degraded: false, limits: {}, ...over,
  });
  let tmpHome: string;
  beforeAll(() => {
    tmpHome = fs.mkdtempSync(path.join('/var/tmp', 'psb-caches-plan-'));
    fs.mkdirSync(path.join(tmpHome, '.npm', 'secret'), { recursive: true });
    fs.mkdirSync(path.join(tmpHome, '.cache'));
  });
  afterAll(() => fs.rmSync(tmpHome, { recursive: true, force: true }));

  it('overlays an existing cache; a missing one is moved by its variable into the private /tmp, never created', () => {
    const p = planCaches({ rules: rulesWith({}), mode: 'isolated', env: { HOME: tmpHome }, tmpfsData: 'size=4096' });
    expect(p.report.npm).toMatch(/^overlay /);
    expect(p.mounts.filter((m) => m.kind === 18).map((m) => m.path)).toEqual([path.join(tmpHome, '.npm'), path.join(tmpHome, '.cache')]);
    expect(p.env.CARGO_HOME).toBe('/tmp/.process-sandbox-caches/cargo');
    expect(fs.existsSync(path.join(tmpHome, '.cargo'))).toBe(false);
  });

  // An overlay shows the lower directory's own contents, not the mounts below it: a deny-read
  // mask inside the cache would be undone.
  it('a deny-read path inside a cache keeps that cache off the overlay (moved by env instead)', () => {
    const p = planCaches({
      rules: rulesWith({ denyRead: [path.join(tmpHome, '.npm', 'secret')] }),
      mode: 'isolated',
      env: { HOME: tmpHome },
      tmpfsData: 'size=4096',
    });
    expect(p.mounts.some((m) => m.path.startsWith(path.join(tmpHome, '.npm')))).toBe(false);
    expect(p.env.npm_config_cache).toBe('/tmp/.process-sandbox-caches/npm');
    expect(p.report.npm).toMatch(/deny-read, protected or writable path lies inside it/);
  });

  it('a cache the policy does not let the command read is not overlaid (its contents stay unreadable)', () => {
    const p = planCaches({ rules: rulesWith({ readAll: false, readRoots: ['/usr'] }), mode: 'isolated', env: { HOME: tmpHome }, tmpfsData: '' });
    expect(p.mounts).toEqual([]);
    expect(p.report.npm).toMatch(/not readable under this policy/);
    expect(p.env.npm_config_cache).toBe('/tmp/.process-sandbox-caches/npm');
  });

  it('Landlock mode moves every cache into the run\'s TMPDIR; host-readonly changes nothing, host-writable reports what the resolver granted', () => {
    const l = planCaches({ rules: rulesWith({}), mode: 'landlock', env: { HOME: tmpHome }, tmpfsData: '', landlockTmpDir: '/tmp/run-x' });
    expect(l.mounts).toEqual([]);
    expect(l.env).toMatchObject({ npm_config_cache: '/tmp/run-x/caches/npm', XDG_CACHE_HOME: '/tmp/run-x/caches/xdg-cache', CARGO_HOME: '/tmp/run-x/caches/cargo' });
    const ro = planCaches({ rules: rulesWith({ caches: 'host-readonly' }), mode: 'isolated', env: { HOME: tmpHome }, tmpfsData: '' });
    expect([ro.mounts, ro.env]).toEqual([[], {}]);
    // 'host-writable': the host process's caches (its HOME here), made writable roots by the
    // resolver; the command's environment names none of them.
    withHostCacheEnv({ HOME: tmpHome }, () => {
      const rules = resolvePolicy({ filesystem: { caches: 'host-writable' } }, '/');
      expect(rules.writeRoots).toEqual([path.join(tmpHome, '.cache'), path.join(tmpHome, '.npm')]);
      const rw = planCaches({ rules, mode: 'isolated', env: { HOME: '/nonexistent', XDG_CACHE_HOME: '/' }, tmpfsData: '' });
      expect([rw.mounts, rw.env]).toEqual([[], {}]);
      expect(rw.report.npm).toBe(`host ${path.join(tmpHome, '.npm')}, writable (protected paths inside it stay read-only)`);
      expect(rw.report.cargo).toMatch(/^absent /);
    });
  });
});

describe.runIf(caps.linux)('tool caches in the default sandbox', () => {
  beforeAll(() => {
    const extraCa = process.env.NODE_EXTRA_CA_CERTS ?? (fs.existsSync('/etc/ssl/certs/ca-certificates.crt') ? '/etc/ssl/certs/ca-certificates.crt' : undefined);
    world = makeScene('caches-home');
    home = path.join(world.root, 'home');
    fs.mkdirSync(home);
    env = {
      PATH: `${path.dirname(NODE)}:${SYS_PATH}`,
      LANG: 'C.UTF-8',
      HOME: home,
      // The registry mirror here serves no signatures: corepack's check would refuse every download.
      COREPACK_INTEGRITY_KEYS: '0',
      COREPACK_ENABLE_DOWNLOAD_PROMPT: '0',
      COREPACK_ENABLE_AUTO_PIN: '0',
      npm_config_update_notifier: 'false',
      npm_config_fund: 'false',
      npm_config_audit: 'false',
      PIP_DISABLE_PIP_VERSION_CHECK: '1',
      GOFLAGS: '-mod=mod',
      GOTOOLCHAIN: 'local',
      GIT_CONFIG_NOSYSTEM: '1',
      // corepack fetches pnpm and yarn 1 from the npm registry (yarn's own host serves the same here).
      COREPACK_NPM_REGISTRY: 'https://registry.npmjs.org',
      // yarn 1 as root would use /usr/local/share/.cache/yarn: keep it in the test's HOME.
      YARN_CACHE_FOLDER: path.join(home, '.cache', 'yarn'),
      // corepack downloads with Node's fetch, which trusts only Node's own CAs: hosts whose TLS
      // goes through a local CA (the test machines) have it in the system store.
      ...(extraCa ? { NODE_EXTRA_CA_CERTS: extraCa } : {}),
    };
    const warm = path.join(world.root, 'warm');
    fs.mkdirSync(warm);
    const step = (tool: string, f: () => void) => {
      try {
        f();
      } catch (e) {
        const err = e as { stderr?: string; message: string };
        const lines = (err.stderr || err.message).trim().split('\n');
        const why = lines.filter((l) => /error/i.test(l)).slice(0, 3);
        missing[tool] = `warming the host cache failed: ${(why.length ? why : lines.slice(-3)).join(' | ')}`;
      }
    };
    // npm and npx: is-number in ~/.npm/_cacache, semver's bin in ~/.npm/_npx.
    step('npm', () => {
      fs.writeFileSync(path.join(warm, 'package.json'), '{"name":"warm","version":"1.0.0"}');
      unsandboxed('npm', ['install', '--no-save', 'is-number'], warm);
      unsandboxed('npx', ['--yes', 'semver', '1.2.3'], warm);
    });
    if (COREPACK) {
      // pnpm and yarn 1 in corepack's cache (~/.cache/node/corepack), is-number in their stores.
      step('pnpm', () => {
        const d = path.join(warm, 'pnpm');
        fs.mkdirSync(d);
        fs.writeFileSync(path.join(d, 'package.json'), '{"name":"warm","version":"1.0.0"}');
        unsandboxed(COREPACK, [PNPM, 'add', 'is-number'], d);
      });
      step('yarn', () => {
        const d = path.join(warm, 'yarn');
        fs.mkdirSync(d);
        fs.writeFileSync(path.join(d, 'package.json'), '{"name":"warm","version":"1.0.0"}');
        unsandboxed(COREPACK, [YARN, 'add', 'is-number'], d);
      });
    } else {
      missing.pnpm = missing.yarn = 'corepack is not installed';
    }
    // pip: a wheel built from a local sdist lands in ~/.cache/pip/wheels (PyPI is unreachable here).
    if (PYTHON) {
      step('pip', () => {
        const links = path.join(world!.root, 'links');
        fs.mkdirSync(links);
        writeSdist(links, 'psbtinya');
        writeSdist(links, 'psbtinyb');
        // --system-site-packages: the system's `wheel` builds the sdist (no index to fetch it from).
        unsandboxed(PYTHON, ['-m', 'venv', '--system-site-packages', path.join(warm, 'venv')], warm);
        unsandboxed(path.join(warm, 'venv', 'bin', 'pip'), ['install', '--no-index', '--find-links', links, '--no-build-isolation', 'psbtinya'], warm);
        if (!fs.existsSync(path.join(home, '.cache', 'pip', 'wheels'))) throw new Error('pip stored no wheel in its cache');
      });
    } else missing.pip = '/usr/bin/python3 is not installed';
    if (CARGO) {
      step('cargo', () => {
        unsandboxed(CARGO, ['new', '-q', '--vcs', 'none', 'cw'], warm);
        unsandboxed(CARGO, ['build', '-q'], path.join(warm, 'cw'));
      });
    } else missing.cargo = '/usr/bin/cargo is not installed (apt-get install cargo; root\'s rustup in /root is not usable by other users)';
    if (GO) {
      step('go', () => {
        const d = path.join(warm, 'gw');
        fs.mkdirSync(d);
        fs.writeFileSync(path.join(d, 'go.mod'), 'module example.com/gw\n\ngo 1.19\n');
        fs.writeFileSync(path.join(d, 'main.go'), 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("go", 6*7) }\n');
        unsandboxed(GO, ['build', '-o', 'gw', '.'], d);
      });
    } else missing.go = '/usr/bin/go is not installed (apt-get install golang-go)';
    fs.rmSync(warm, { recursive: true, force: true });
    for (const [tool, why] of Object.entries(missing)) {
      // eslint-disable-next-line no-console
      console.warn(`[caches] SKIPPING the ${tool} tests as ${os.userInfo().username}: ${why}`);
    }
  }, 600_000);
  afterAll(() => world?.cleanup());

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const policyFor = (ws: string, extra: SandboxPolicy['filesystem'] = {}): SandboxPolicy =>
      modePolicy(mode, {
        filesystem: { write: [ws], ...extra },
        // allowLocal: the registries resolve to a documentation address on the test machines (yarn 1
        // rewrites registry.npmjs.org to registry.yarnpkg.com, the same mirror there).
        network: { proxy: { allow: [REGISTRY, 'registry.yarnpkg.com'], allowLocal: true } },
      });

    interface ToolRun {
      r: Awaited<ReturnType<typeof sh>>;
      before: ReturnType<typeof snapshot>;
      after: ReturnType<typeof snapshot>;
      /** Files under the host HOME newer than the run's start. */
      changed: string[];
      ws: string;
    }

    /**
     * Runs `script` sandboxed in a fresh git workspace (cwd), then `check` on the result; the
     * workspace is removed either way. The script's last line must print the tool's cache dir as
     * it sees it; the helper adds the in-sandbox positive control (a file newer than the run's
     * start in that dir) and the outside checks.
     */
    async function runTool(
      tool: string,
      script: string,
      opts: { caches?: CachesMode; files?: Record<string, string> },
      check: (res: ToolRun) => void,
    ): Promise<void> {
      const scene = makeScene(`caches-${tool}-${mode}`);
      try {
        execFileSync('git', ['init', '-q', '-b', 'main', scene.ws], { env });
        for (const [name, text] of Object.entries(opts.files ?? {})) {
          fs.mkdirSync(path.dirname(path.join(scene.ws, name)), { recursive: true });
          fs.writeFileSync(path.join(scene.ws, name), text);
        }
        const before = snapshot(home);
        const start = Date.now();
        // Leave the clock a tick so that "newer than start" cannot confuse a file of the warm-up.
        await new Promise((r) => setTimeout(r, 20));
        const wrapped = [
          'touch .run-start',
          `( set -e\n${script}\n) > .run-out`,
          'rc=$?',
          'cache_dir=$(tail -n 1 .run-out)',
          'echo "rc=$rc cache=$cache_dir"',
          // The run's own cache got a file this run wrote (seen from inside).
          'if [ -n "$cache_dir" ] && [ -n "$(find "$cache_dir" -newer .run-start -type f 2>/dev/null | head -n 1)" ]; then echo WROTE-OWN-CACHE; fi',
        ].join('\n');
        const r = await sh(wrapped, {
          cwd: scene.ws,
          env,
          policy: policyFor(scene.ws, opts.caches ? { caches: opts.caches } : {}),
          timeout: 200_000,
        });
        const after = snapshot(home);
        check({ r, before, after, changed: newerThan(home, start), ws: scene.ws });
      } finally {
        scene.cleanup();
      }
    }

    const expectHostUntouched = (res: ToolRun) => {
      expect(res.changed, 'files under the host HOME newer than the run').toEqual([]);
      expectUnchanged(res.before, res.after, 'the host caches');
    };

    /** The script succeeded, wrote a cache of its own (seen from inside), and the host HOME is as it was. */
    const expectPrivateRun = (res: ToolRun) => {
      expect(res.r.stdout, res.r.stderr).toContain('rc=0');
      expect(res.r.stdout).toContain('WROTE-OWN-CACHE');
      expectHostUntouched(res);
    };

    const expectInstalled = (res: ToolRun, pkg: string) =>
      expect(fs.existsSync(path.join(res.ws, 'node_modules', pkg, 'package.json'))).toBe(true);

    const PACKAGE_JSON = { 'package.json': '{"name":"t","version":"1.0.0"}' };

    // Decided at run time: what is missing is known only once the host caches were warmed.
    const skipUnless = (tool: string, ctx: { skip: (note?: string) => void }) => {
      const why = skip ?? missing[tool];
      if (why) ctx.skip(why);
    };

    it('npm install and npx work; the host ~/.npm is unchanged; the run wrote its own cache', async (ctx) => {
      skipUnless('npm', ctx);
      await runTool(
        'npm',
        [
          mode === 'isolated'
            ? // Hits stay hits: --offline succeeds only from the host's cache, seen through the overlay.
              'npm install --offline --no-save is-number >&2'
            : 'npm install --no-save is-number >&2',
          'npx --yes semver 1.2.3 >&2',
          'node -e "process.exit(require(\'is-number\')(5) ? 0 : 1)"',
          'npm config get cache',
        ].join('\n'),
        { files: PACKAGE_JSON },
        (res) => {
          expectPrivateRun(res);
          expect(res.r.stderr).toContain('1.2.3');
          expectInstalled(res, 'is-number');
          expect(String(res.r.enforcement.mechanisms.caches && (res.r.enforcement.mechanisms.caches as Record<string, string>).npm)).toMatch(
            mode === 'isolated' ? /^overlay / : /^env npm_config_cache=.*private, cold/,
          );
        },
      );
    }, 240_000);

    // The failure this knob fixes, and the outside check's own positive control.
    it("caches 'host-readonly': npm install fails on the read-only ~/.npm (the old behaviour)", async (ctx) => {
      skipUnless('npm', ctx);
      await runTool('npm-ro', 'npm install --no-save is-number >&2\nnpm config get cache', { caches: 'host-readonly', files: PACKAGE_JSON }, (res) => {
        expect(res.r.stdout).not.toContain('rc=0');
        expect(res.r.stderr).toMatch(/EROFS|EACCES|read-only|permission denied/i);
        expectHostUntouched(res);
      });
    }, 240_000);

    it("caches 'host-writable': the install writes the host's ~/.npm, and the outside check sees it", async (ctx) => {
      skipUnless('npm', ctx);
      // The caches are the host process's: its HOME is the test's home for this run.
      await withHostCacheEnv({ HOME: home }, () =>
        runTool('npm-rw', 'npm install --no-save is-number >&2\nnpm config get cache', { caches: 'host-writable', files: PACKAGE_JSON }, (res) => {
          expect(res.r.stdout, res.r.stderr).toContain('rc=0');
          expect(res.changed.some((p) => p.startsWith(path.join(home, '.npm')))).toBe(true);
          expect((res.r.enforcement.mechanisms.caches as Record<string, string>).npm).toMatch(/writable/);
        }),
      );
    }, 240_000);

    // pnpm and yarn 1 through corepack, the same steps. In isolated mode is-number is a hit from
    // the host's store or cache (--offline); semver is fetched into the run's own.
    for (const { tool, spec, cacheDir, title } of [
      { tool: 'pnpm', spec: PNPM, cacheDir: 'store path', title: 'pnpm (through corepack) installs; the host store and corepack cache are unchanged' },
      { tool: 'yarn', spec: YARN, cacheDir: 'cache dir', title: 'yarn 1 (through corepack) installs; the host caches are unchanged' },
    ]) {
      it(title, async (ctx) => {
        skipUnless(tool, ctx);
        await runTool(
          tool,
          [
            `corepack ${spec} add ${mode === 'isolated' ? '--offline ' : ''}is-number >&2`,
            `corepack ${spec} add semver >&2`,
            `corepack ${spec} ${cacheDir}`,
          ].join('\n'),
          { files: PACKAGE_JSON },
          (res) => {
            expectPrivateRun(res);
            expectInstalled(res, 'is-number');
          },
        );
      }, 300_000);
    }

    it('pip in a venv installs from local sdists; the host pip cache is unchanged', async (ctx) => {
      skipUnless('pip', ctx);
      const links = path.join(world!.root, 'links');
      await runTool(
        'pip',
        [
          `${PYTHON} -m venv --system-site-packages .venv`,
          // psbtinya's wheel is in the host cache (a hit in isolated mode); psbtinyb's is built and
          // stored in the run's own cache.
          `.venv/bin/pip install --no-index --find-links ${links} --no-build-isolation psbtinya psbtinyb >&2`,
          '.venv/bin/python -c "import psbtinya, psbtinyb"',
          '.venv/bin/pip cache dir',
        ].join('\n'),
        {},
        (res) => {
          expectPrivateRun(res);
          if (mode === 'isolated') expect(res.r.stderr, res.r.stderr).toMatch(/Using cached psbtinya-1\.0-py3-none-any\.whl/);
        },
      );
    }, 240_000);

    // `cargo install` writes CARGO_HOME (bin/, .crates.toml): a binary planted in the host's
    // ~/.cargo/bin would run at the user's next command of that name.
    it('cargo builds and installs a dependency-free crate; the host CARGO_HOME is unchanged', async (ctx) => {
      skipUnless('cargo', ctx);
      await runTool(
        'cargo',
        [
          'cargo new -q --vcs none hello',
          'cd hello && cargo build -q >&2 && ./target/debug/hello >&2 && cargo install -q --path . >&2',
          '"${CARGO_HOME:-$HOME/.cargo}/bin/hello" >&2',
          'echo "${CARGO_HOME:-$HOME/.cargo}"',
        ].join('\n'),
        {},
        (res) => {
          expectPrivateRun(res);
          expect(res.r.stderr).toContain('Hello, world!');
        },
      );
    }, 240_000);

    // A sandbox prepared ahead checks at the go that every Landlock rule path is still the inode it
    // was: the rule for an overlaid cache names the sandbox's own overlay, not the host's directory
    // (whose identity the clone step checks). Without that exception no such spare was ever used.
    // (Landlock mode has no overlays: nothing of this applies there.)
    it.skipIf(mode !== 'isolated')('isolated: a sandbox prepared ahead with the cache overlays is used, and its cache is private too', async (ctx) => {
      skipUnless('npm', ctx);
      const scene = makeScene('caches-spare');
      try {
        clearSpares();
        const policy = policyFor(scene.ws);
        const ready = spareStats().ready;
        for (let i = 0; i < 2; i++) expect((await sh('true', { cwd: scene.ws, env, policy })).code).toBe(0);
        expect(await eventually(() => spareStats().ready > ready, 10_000), 'a spare was prepared').toBe(true);
        const before = spareStats();
        const hostBefore = snapshot(home);
        const r = await sh('ls "$HOME/.npm/_cacache" >/dev/null && echo planted > "$HOME/.npm/planted" && cat "$HOME/.npm/planted"', { cwd: scene.ws, env, policy });
        expect(spareStats().used, 'the spawn was served by the spare').toBe(before.used + 1);
        expect(r.enforcement.mechanisms.preparedAhead).toBe(true);
        expect(r.stdout, r.stderr).toBe('planted\n');
        expect(fs.existsSync(path.join(home, '.npm', 'planted'))).toBe(false);
        expectUnchanged(hostBefore, snapshot(home), 'the host caches');
      } finally {
        clearSpares();
        scene.cleanup();
      }
    }, 60_000);

    it("caches 'host-readonly': cargo install fails on the read-only CARGO_HOME (control)", async (ctx) => {
      skipUnless('cargo', ctx);
      const script = ['cargo new -q --vcs none hello', 'cd hello && cargo install -q --path . >&2', 'echo "$HOME/.cargo"'].join('\n');
      await runTool('cargo-ro', script, { caches: 'host-readonly' }, (res) => {
        expect(res.r.stdout).not.toContain('rc=0');
        expect(res.r.stderr).toMatch(/read-only|permission denied/i);
        expectHostUntouched(res);
      });
    }, 240_000);

    it('go builds a dependency-free module; the host GOCACHE is unchanged', async (ctx) => {
      skipUnless('go', ctx);
      const files = {
        'go.mod': 'module example.com/gw\n\ngo 1.19\n',
        'main.go': 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("go", 6*7) }\n',
      };
      await runTool('go', ['go build -o gw . >&2 && ./gw >&2', 'go env GOCACHE'].join('\n'), { files }, (res) => {
        expectPrivateRun(res);
        expect(res.r.stderr).toContain('go 42');
      });
    }, 240_000);
  });
});
