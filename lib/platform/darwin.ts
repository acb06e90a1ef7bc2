/**
 * macOS backend: Seatbelt through `/usr/bin/sandbox-exec`.
 *
 *   const plan = planDarwinSpawn(req, { proxyPorts, arg0Customized });
 *   // plan.file === '/usr/bin/sandbox-exec'; plan.argv = [file, '-p', profile, '-D…', '--', cmd…]
 *   // the generic POSIX launcher spawns plan.file/plan.argv/plan.env in req.cwd with req.stdio.
 *
 * Planning is pure apart from checking that /usr/bin/sandbox-exec exists and the lstat()s of the
 * profile generator (lib/platform/darwin-profile.ts). Everything that cannot be enforced throws a
 * SandboxError before anything runs. sandbox-exec is only ever run by absolute path, so a PATH
 * entry cannot substitute it.
 *
 * Failures that only show after launch (sandbox-exec refusing to apply the profile, most often
 * because the host already runs inside a Seatbelt sandbox) are recognised from its stderr with
 * isNestedSandboxFailure() / seatbeltLaunchError(); the command itself never ran in that case.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { SandboxError } from '../errors';
import type { Backend, BackendProcess, BackendSpawnRequest, EnforcementReport, ProbeReport, StdioSpec } from '../backend';
import { unsandboxedReport } from '../backend';
import type { ResourceLimits } from '../policy-types';
import {
  SANDBOX_EXEC_PATH,
  buildSeatbeltProfile,
  loadProfileFile,
  type SeatbeltOptions,
} from './darwin-profile';

export {
  SANDBOX_EXEC_PATH,
  buildSeatbeltProfile,
  seatbeltArgs,
  globToSeatbeltRegex,
  normaliseDarwinPath,
} from './darwin-profile';

export interface DarwinPlanOptions extends SeatbeltOptions {
  /** The caller asked for an argv[0] other than the program path: sandbox-exec cannot pass it. */
  arg0Customized?: boolean;
  /** Overrides the /usr/bin/sandbox-exec existence check (tests on other hosts). */
  sandboxExecAvailable?: boolean;
}

export interface DarwinSpawnPlan {
  /** /usr/bin/sandbox-exec, or req.file for an explicit unsandboxed run (rules === null). */
  file: string;
  /** Full argv including argv[0]. */
  argv: string[];
  /** The child's environment (req.env, plus TMPDIR when a private tmp directory was given). */
  env: Record<string, string>;
  enforcement: EnforcementReport;
}

function isExecutableFile(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

export function sandboxExecAvailable(): boolean {
  return isExecutableFile(SANDBOX_EXEC_PATH);
}

function unavailableError(): SandboxError {
  return new SandboxError(
    'ESEATBELT_UNAVAILABLE',
    `${SANDBOX_EXEC_PATH} not found or not executable: the macOS Seatbelt sandbox is unavailable on this host, so nothing was run`,
    { detail: { path: SANDBOX_EXEC_PATH } },
  );
}

const NESTED_MARKER = /sandbox_apply: Operation not permitted/;

/** true when sandbox-exec failed because this process is already inside a Seatbelt sandbox. */
export function isNestedSandboxFailure(stderr: string | Buffer): boolean {
  return NESTED_MARKER.test(typeof stderr === 'string' ? stderr : stderr.toString('utf8'));
}

/**
 * Maps sandbox-exec's own failure (profile not applied, command never started) to a SandboxError,
 * or returns null when stderr does not show one. A launcher calls this when the child exits
 * non-zero before producing anything; the text matched is what sandbox-exec prints itself.
 */
export function seatbeltLaunchError(stderr: string | Buffer): SandboxError | null {
  const text = typeof stderr === 'string' ? stderr : stderr.toString('utf8');
  if (isNestedSandboxFailure(text)) {
    return new SandboxError(
      'ESEATBELT_UNAVAILABLE',
      'sandbox-exec could not apply the profile: sandbox_apply: Operation not permitted. This process already runs inside a Seatbelt sandbox and macOS does not allow nesting one; run the host outside that sandbox',
      { syscall: 'sandbox_apply', errno: 1, detail: { nested: true } },
    );
  }
  const line = /^sandbox-exec: (.*)$/m.exec(text);
  if (line) {
    return new SandboxError('ESEATBELT_UNAVAILABLE', `sandbox-exec refused the generated profile: ${line[1]}`, {
      detail: { stderr: line[1] },
    });
  }
  return null;
}

function realpathOr(file: string): string {
  try {
    // Seatbelt matches real paths: a program reached through a symlink (Homebrew, nvm) is mapped
    // from its target.
    return fs.realpathSync(file);
  } catch {
    return file;
  }
}

/**
 * Gaps every Seatbelt run has beyond its policy's, for the resource limits and host safety
 * (Seatbelt filters access, not amounts; this backend sets no rlimits).
 */
export function darwinLimitGaps(limits: ResourceLimits): string[] {
  const gaps: string[] = [];
  const asked = (['maxProcesses', 'memoryBytes', 'openFiles', 'tmpBytes'] as const).filter((k) => limits[k] !== undefined);
  if (asked.length > 0) {
    gaps.push(
      `limits (${asked.map((k) => `limits.${k}`).join(', ')}) are not enforced on macOS: Seatbelt has no resource controls, there are no cgroups, and this backend sets no rlimits (setrlimit would be the only mechanism, and macOS does not enforce RLIMIT_AS)`,
    );
  }
  gaps.push(
    "no process or memory cap: a fork bomb is bounded only by the user's kern.maxprocperuid (shared with the host's own processes), open files only per process (the system-wide kern.maxfiles table can be filled), memory only by the machine",
    '/tmp is not a private sized tmpfs on macOS: files written to writable roots and temp directories fill the host disk (limits.tmpBytes does not apply)',
    'setpriority() on other processes of the same user is not filtered by the profile (they can be niced down, not up)',
    // base.sb allows these for Python multiprocessing and OpenMP; their names are host-wide.
    'POSIX named semaphores and the OpenMP shared-memory names (/__KMP_REGISTERED_LIB_<n>) are host-wide: two sandboxes (or a sandbox and a host process) can pass data through them',
  );
  return gaps;
}

function hostTmpDirFromEnv(env: Record<string, string>): string | undefined {
  const dir = env.TMPDIR;
  if (!dir || !dir.startsWith('/')) return undefined;
  try {
    // The caller's TMPDIR is only a convenience grant: use its real path rather than refusing
    // the run when it happens to sit behind a symlink.
    return fs.realpathSync(dir);
  } catch {
    return undefined;
  }
}

/** Turns a spawn request into the sandbox-exec invocation and its enforcement report. */
export function planDarwinSpawn(req: BackendSpawnRequest, opts: DarwinPlanOptions = {}): DarwinSpawnPlan {
  const rules = req.rules;
  if (rules === null) {
    return {
      file: req.file,
      argv: [...req.argv],
      env: { ...req.env },
      enforcement: unsandboxedReport('darwin'),
    };
  }
  if (opts.arg0Customized) {
    throw new SandboxError(
      'EINVALID_ARGUMENT',
      `a custom argv[0] (${JSON.stringify(req.argv[0])}) cannot be passed through ${SANDBOX_EXEC_PATH}: it starts the command with argv[0] set to the program path. Drop the custom argv[0] on macOS`,
      { detail: { arg0: req.argv[0], file: req.file } },
    );
  }
  if (rules.mode === 'isolated' || rules.mode === 'landlock') {
    throw new SandboxError(
      'EUNSUPPORTED_POLICY',
      `sandbox mode '${rules.mode}' exists only on Linux; macOS always uses Seatbelt (use mode 'auto')`,
      { detail: { mode: rules.mode } },
    );
  }
  if (!path.isAbsolute(req.file)) {
    throw new SandboxError('EINVALID_ARGUMENT', `program path ${JSON.stringify(req.file)} must be absolute`);
  }
  if (!(opts.sandboxExecAvailable ?? sandboxExecAvailable())) throw unavailableError();

  const env = { ...req.env };
  const profileOpts: SeatbeltOptions = {
    proxyPorts: opts.proxyPorts,
    denyReadGlobs: opts.denyReadGlobs,
    hostTmpDir: opts.hostTmpDir ?? (rules.tmp === 'host' ? hostTmpDirFromEnv(req.env) : undefined),
    privateTmpDir: opts.privateTmpDir,
    executable: opts.executable ?? realpathOr(req.file),
  };
  if (rules.tmp === 'private' && opts.privateTmpDir) env.TMPDIR = opts.privateTmpDir;

  const { profile, params, gaps, ruleGaps, platformReads, unixSockets: unix } = buildSeatbeltProfile(rules, profileOpts);
  // sandbox-exec execvp()s the first word after `--`; an absolute path means no PATH lookup.
  const argv = [
    SANDBOX_EXEC_PATH,
    '-p',
    profile,
    ...Object.entries(params).map(([name, value]) => `-D${name}=${value}`),
    '--',
    req.file,
    ...req.argv.slice(1),
  ];

  const ports = rules.network.kind === 'proxy' ? [...new Set(opts.proxyPorts ?? [])].sort((a, b) => a - b) : [];
  const hasDenyRead = rules.denyRead.length > 0 || (opts.denyReadGlobs ?? []).length > 0;
  const allGaps = [
    ...gaps,
    ...ruleGaps,
    'processIsolation: macOS has no PID namespace; other processes can be listed (kern.proc sysctls), but signals and process inspection are limited to this sandbox',
    'treeTeardown: the tree is signalled through its process group; a descendant that calls setsid() leaves the group',
  ];
  if (rules.tmp === 'private' && opts.privateTmpDir) {
    allGaps.push('tmp: /tmp is the host\'s and read-only here; TMPDIR points to a per-run directory instead');
  }
  if (rules.network.kind !== 'full') {
    allGaps.push('network: no private loopback on macOS; servers inside the sandbox cannot bind or accept connections');
  }
  if (rules.network.kind === 'proxy' && ports.length > 0) {
    allGaps.push(
      `the proxy listens on the host's loopback (port${ports.length > 1 ? 's' : ''} ${ports.join(', ')}), so other local processes can use it too (and are attributed to this sandbox)`,
    );
  }
  allGaps.push(...darwinLimitGaps(rules.limits));

  return {
    file: SANDBOX_EXEC_PATH,
    argv,
    env,
    enforcement: {
      platform: 'darwin',
      sandboxed: true,
      mode: 'seatbelt',
      mechanisms: {
        seatbelt: SANDBOX_EXEC_PATH,
        profileBytes: Buffer.byteLength(profile),
        parameters: Object.keys(params).length,
        network: rules.network.kind,
        ...(rules.network.kind === 'proxy' ? { proxyPorts: ports } : {}),
        // Enforced by path (path-literal rules), connect only; 'all': any pathname socket.
        ...(unix !== undefined ? { unixSockets: unix } : {}),
        // Restricted reads: what is readable besides the listed roots (README, macOS).
        ...(rules.readAll ? {} : { platformReads }),
        // Missing protected names (.git, .codex, .agents, .aws, start-up files) are denied by
        // name: no placeholders are created on macOS.
        protectedMissing: 'denied by name',
        ...((rules.protectPresets ?? []).includes('startup-files') ? { startupFiles: 'any depth below every writable root' } : {}),
        limits: 'none',
        tmp:
          rules.tmp === 'host'
            ? 'host'
            : rules.tmp === 'private' && opts.privateTmpDir
              ? 'private-directory'
              : 'read-only',
      },
      guarantees: {
        filesystemRead: rules.readAll && !hasDenyRead ? 'not-requested' : 'enforced',
        filesystemWrite: 'enforced',
        protectedPaths:
          rules.readOnly.length === 0 && ruleGaps.length === 0 && !(rules.protectPresets ?? []).length
            ? 'not-requested'
            : ruleGaps.length > 0
              ? 'partial'
              : 'enforced',
        denyRead: hasDenyRead ? 'enforced' : 'not-requested',
        network: rules.network.kind === 'full' ? 'not-requested' : 'enforced',
        processIsolation: 'partial',
        treeTeardown: 'partial',
      },
      gaps: allGaps,
    },
  };
}


// ---------------------------------------------------------------------------------------------
// Probe

let trialCache: { nested: boolean; ok: boolean; error?: string } | undefined;

/**
 * Runs a trivial allow-all profile once to learn whether sandbox_apply works here (it fails when
 * the host process is itself sandboxed). Cached for the life of the process.
 */
function trialRun(): { nested: boolean; ok: boolean; error?: string } {
  if (trialCache) return trialCache;
  const r = spawnSync(SANDBOX_EXEC_PATH, ['-p', '(version 1)(allow default)', '--', '/usr/bin/true'], {
    encoding: 'utf8',
    timeout: 10_000,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const stderr = r.stderr ?? '';
  trialCache =
    r.status === 0
      ? { nested: false, ok: true }
      : { nested: isNestedSandboxFailure(stderr), ok: false, error: stderr.trim() || String(r.error ?? r.status) };
  return trialCache;
}

export interface DarwinProbeOptions {
  addonLoaded?: boolean;
  addonError?: string;
  /** Run sandbox-exec once to detect a nested sandbox (default: true on macOS). */
  trial?: boolean;
}

export function darwinProbe(opts: DarwinProbeOptions = {}): ProbeReport {
  const onDarwin = process.platform === 'darwin';
  const available = sandboxExecAvailable();
  const features: Record<string, unknown> = { sandboxExec: available, sandboxExecPath: SANDBOX_EXEC_PATH };
  let usable = onDarwin && available;
  try {
    loadProfileFile('base.sb');
    features.profiles = 'ok';
  } catch (err) {
    features.profiles = (err as Error).message;
    usable = false;
  }
  if (usable && (opts.trial ?? true)) {
    const t = trialRun();
    features.nestedSandbox = t.nested;
    if (!t.ok) {
      features.sandboxApplyError = t.error;
      usable = false;
    }
  }
  return {
    platform: process.platform,
    arch: process.arch,
    addonLoaded: opts.addonLoaded ?? false,
    ...(opts.addonError !== undefined ? { addonError: opts.addonError } : {}),
    defaultMode: usable ? 'seatbelt' : null,
    features,
  };
}

// ---------------------------------------------------------------------------------------------
// Backend

/** What the generic POSIX launcher needs; it owns stdio, process groups, exit watching, limits. */
export interface PosixLaunchRequest {
  file: string;
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  stdio: StdioSpec[];
}
export type PosixLauncher = (launch: PosixLaunchRequest) => Omit<BackendProcess, 'enforcement'>;

/**
 * A fresh 0700 directory for tmp: 'private' (macOS cannot give a process its own /tmp). It lives
 * under the host's real temporary directory; `remove()` deletes it with everything inside.
 */
export function makePrivateTmpDir(parent: string = os.tmpdir()): { path: string; remove(): void } {
  const dir = fs.mkdtempSync(path.join(fs.realpathSync(parent), 'process-sandbox-tmp-'));
  fs.chmodSync(dir, 0o700);
  return {
    path: dir,
    // Never throws (it runs from the exit path): a command's chmod 000 can leave parts the owner
    // cannot list; its directories get u+rwx (found by lstat, changed with lchmod where there is
    // one: never a symlink's target) and the removal is tried once more. What stays, stays.
    remove(): void {
      try {
        fs.rmSync(dir, { recursive: true, force: true });
      } catch {
        try {
          openDirs(dir);
          fs.rmSync(dir, { recursive: true, force: true });
        } catch {
          // left behind
        }
      }
    },
  };
}

/** Gives every directory under `dir` (itself included) mode 0700, never through a symlink. */
function openDirs(dir: string): void {
  const stack = [dir];
  while (stack.length > 0) {
    const d = stack.pop()!;
    try {
      if (!fs.lstatSync(d).isDirectory()) continue;
      (process.platform === 'darwin' ? fs.lchmodSync : fs.chmodSync)(d, 0o700);
      for (const n of fs.readdirSync(d)) stack.push(path.join(d, n));
    } catch {
      // gone, or not ours: the second removal reports nothing either way
    }
  }
}

/**
 * The Backend for macOS: plans with planDarwinSpawn and hands the plan to the launcher shared
 * with the other POSIX platform. `options` supplies per-backend facts (proxy ports, globs).
 * For tmp: 'private' without a given directory, it creates one per run and removes it once the
 * command has exited (or straight away when planning or launching fails).
 *
 * The launcher should start the child in a new session (setsid): besides making the process
 * group killable as a whole, it detaches the terminal, so TIOCSTI cannot inject input into it.
 */
export function createDarwinBackend(
  launch: PosixLauncher,
  options: (req: BackendSpawnRequest) => DarwinPlanOptions = () => ({}),
  probeOptions: DarwinProbeOptions = {},
): Backend {
  return {
    name: 'darwin-seatbelt',
    spawn(req: BackendSpawnRequest): BackendProcess {
      const opts = { ...options(req) };
      let tmp: { path: string; remove(): void } | undefined;
      if (req.rules?.tmp === 'private' && opts.privateTmpDir === undefined) {
        tmp = makePrivateTmpDir();
        opts.privateTmpDir = tmp.path;
      }
      let proc: Omit<BackendProcess, 'enforcement'>;
      let plan: DarwinSpawnPlan;
      try {
        plan = planDarwinSpawn(req, opts);
        proc = launch({ file: plan.file, argv: plan.argv, env: plan.env, cwd: req.cwd, stdio: req.stdio });
      } catch (err) {
        tmp?.remove();
        throw err;
      }
      if (tmp) {
        const t = tmp;
        proc.exited.then(
          () => t.remove(),
          () => t.remove(),
        );
      }
      // Assign rather than spread: the launcher's handle may be a class with prototype methods.
      return Object.assign(proc, { enforcement: plan.enforcement });
    },
    probe(): ProbeReport {
      return darwinProbe(probeOptions);
    },
  };
}
