/**
 * vitest globalSetup: builds what the tests need, once per run, only when it is missing or stale.
 *
 *   - the addon (build/Release/*.node) from native/**, binding.gyp and native/sources.json;
 *   - dist/ (the CLI and the published entry points) from lib/**, tsconfig.json, scripts/post-build.js.
 *
 * Up to date means one directory walk comparing mtimes, so a run with nothing to do stays fast.
 * A tree we cannot write (the suite run as an unprivileged user over a build made by root) is used
 * as it is: stale outputs there are reported loudly, never rebuilt. Concurrent runs in one tree
 * serialise on a lock directory so two node-gyp or tsc runs never write the same outputs.
 *
 * Failures are handed to the tests through `provide` (inject('buildErrors')) so the tests that need
 * the output fail with the build log instead of silently testing an old build.
 */
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..');

export interface BuildErrors {
  addon?: string;
  dist?: string;
}

// The matching `ProvidedContext` augmentation lives in test/contract/helpers.ts, beside inject().

function newestMtime(paths: string[], filter: (p: string) => boolean = () => true): number {
  let newest = 0;
  const visit = (p: string) => {
    let st: fs.Stats;
    try {
      st = fs.statSync(p);
    } catch {
      return;
    }
    if (st.isDirectory()) {
      for (const e of fs.readdirSync(p)) visit(path.join(p, e));
    } else if (filter(p)) {
      newest = Math.max(newest, st.mtimeMs);
    }
  };
  paths.forEach(visit);
  return newest;
}

/** Oldest mtime among the outputs, or 0 when one is missing. */
function oldestOutput(paths: string[]): number {
  let oldest = Infinity;
  for (const p of paths) {
    try {
      oldest = Math.min(oldest, fs.statSync(p).mtimeMs);
    } catch {
      return 0;
    }
  }
  return oldest;
}

function addonFile(): string | undefined {
  const dir = path.join(ROOT, 'build', 'Release');
  try {
    const f = fs.readdirSync(dir).find((n) => n.endsWith('.node'));
    return f ? path.join(dir, f) : undefined;
  } catch {
    return undefined;
  }
}

function writable(p: string): boolean {
  try {
    fs.accessSync(p, fs.constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A lock directory in os.tmpdir() keyed by the tree's path; a dead holder's lock is taken over. */
async function withLock<T>(fn: () => T): Promise<T> {
  const key = crypto.createHash('sha256').update(ROOT).digest('hex').slice(0, 16);
  const lock = path.join(os.tmpdir(), `process-sandbox-build-${key}-${process.getuid?.() ?? 0}.lock`);
  const deadline = Date.now() + 15 * 60_000;
  for (;;) {
    try {
      fs.mkdirSync(lock);
      fs.writeFileSync(path.join(lock, 'pid'), String(process.pid));
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      let holder = 0;
      try {
        holder = Number(fs.readFileSync(path.join(lock, 'pid'), 'utf8'));
      } catch {
        /* being created or removed right now */
      }
      let alive = true;
      if (holder > 0) {
        try {
          process.kill(holder, 0);
        } catch {
          alive = false;
        }
      }
      if (!alive) {
        fs.rmSync(lock, { recursive: true, force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`global-setup: gave up waiting for the build lock ${lock}`);
      await sleep(500);
    }
  }
  try {
    return fn();
  } finally {
    fs.rmSync(lock, { recursive: true, force: true });
  }
}

/**
 * node-gyp needs Node's headers. Without a configured nodedir it downloads them, which fails
 * offline; an unprivileged user has no ~/.npmrc saying nodedir=/usr, so point it at the headers
 * installed beside this node when they exist.
 */
function buildEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  const prefix = path.resolve(process.execPath, '..', '..');
  if (!env.npm_config_nodedir && fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h'))) {
    const configured = spawnSync('npm', ['config', 'get', 'nodedir'], { encoding: 'utf8' }).stdout?.trim();
    if (!configured || configured === 'undefined' || configured === 'null') env.npm_config_nodedir = prefix;
  }
  return env;
}

function runStep(cmd: string, args: string[]): string | undefined {
  const r = spawnSync(cmd, args, { cwd: ROOT, env: buildEnv(), encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.status === 0) return undefined;
  const log = `${r.stdout ?? ''}\n${r.stderr ?? ''}`.trim().split('\n').slice(-40).join('\n');
  return `\`${cmd} ${args.join(' ')}\` failed (${r.error?.message ?? `status ${r.status}, signal ${r.signal}`}):\n${log}`;
}

function addonStale(): boolean {
  const out = addonFile();
  if (!out) return true;
  const outTime = fs.statSync(out).mtimeMs;
  const inTime = newestMtime([path.join(ROOT, 'native'), path.join(ROOT, 'binding.gyp')]);
  return inTime > outTime;
}

function configStale(): boolean {
  const makefile = oldestOutput([path.join(ROOT, 'build', 'Makefile'), path.join(ROOT, 'build', 'config.gypi')]);
  if (makefile === 0) return true;
  return newestMtime([path.join(ROOT, 'binding.gyp'), path.join(ROOT, 'native', 'sources.json')]) > makefile;
}

const DIST_OUTPUTS = ['dist/index.js', 'dist/index.mjs', 'dist/index.d.ts', 'dist/cli.js', 'dist/srt/index.js', 'dist/srt/index.mjs'].map((p) => path.join(ROOT, p));

function distStale(): boolean {
  const outTime = oldestOutput(DIST_OUTPUTS);
  if (outTime === 0) return true;
  const inTime = newestMtime(
    [path.join(ROOT, 'lib'), path.join(ROOT, 'tsconfig.json'), path.join(ROOT, 'scripts', 'post-build.js')],
    (p) => p.endsWith('.ts') || p.endsWith('.json') || p.endsWith('.js'),
  );
  return inTime > outTime;
}

function buildAddon(): string | undefined {
  if (!addonStale()) return undefined;
  const jobs = process.env.PSB_BUILD_JOBS ?? '1';
  const nodeGyp = path.join(ROOT, 'node_modules', '.bin', 'node-gyp');
  const bin = fs.existsSync(nodeGyp) ? nodeGyp : 'node-gyp';
  console.log(`[global-setup] building the addon (node-gyp, -j ${jobs})`);
  // An existing configuration is rebuilt incrementally (make tracks header deps); a new or changed
  // binding.gyp/sources.json needs a full rebuild.
  const err = configStale() ? runStep(bin, ['rebuild', '-j', jobs]) : runStep(bin, ['build', '-j', jobs]);
  // make leaves the .node alone when only files it does not compile changed (native/win/*, docs);
  // mark it current so the next run does not invoke make again.
  const out = addonFile();
  if (!err && out) {
    const now = new Date();
    fs.utimesSync(out, now, now);
  }
  return err;
}

function buildDist(): string | undefined {
  if (!distStale()) return undefined;
  console.log('[global-setup] building dist/ (npm run build:ts)');
  // tsc still emits on type errors; the error is provided to the tests that use dist/ either way.
  return runStep('npm', ['run', '--silent', 'build:ts']);
}

export default async function setup(project: { provide: (key: 'buildErrors', value: BuildErrors) => void }): Promise<void> {
  const errors: BuildErrors = {};
  if (process.env.PSB_SKIP_BUILD === '1') {
    console.warn('[global-setup] PSB_SKIP_BUILD=1: using build/ and dist/ as they are');
  } else if (!addonStale() && !distStale()) {
    // Nothing to do.
  } else if (!writable(ROOT) || (fs.existsSync(path.join(ROOT, 'build')) && !writable(path.join(ROOT, 'build')))) {
    const what = [addonStale() ? 'the addon (build/Release)' : '', distStale() ? 'dist/' : ''].filter(Boolean).join(' and ');
    const missing = (addonStale() && !addonFile()) || oldestOutput(DIST_OUTPUTS) === 0;
    const msg = `[global-setup] ${what} ${missing ? 'is missing' : 'looks older than its sources'}, and ${ROOT} is not writable by uid ${process.getuid?.()}; build it first (npm run build) as its owner`;
    console.warn(msg);
    if (missing) {
      if (!addonFile()) errors.addon = msg;
      if (oldestOutput(DIST_OUTPUTS) === 0) errors.dist = msg;
    }
  } else {
    await withLock(() => {
      errors.addon = buildAddon();
      errors.dist = buildDist();
    });
  }
  for (const [what, err] of Object.entries(errors)) if (err) console.error(`[global-setup] ${what} build failed:\n${err}`);
  project.provide('buildErrors', errors);
}
