/**
 * Windows planning, pure: ResolvedRules -> what the restricted-token backend will do (capability
 * grants, deny-write carve-outs, job settings, env overrides) plus the EnforcementReport, or a
 * SandboxError when the rules ask for something this backend cannot enforce. No I/O here beyond
 * what the caller passes in (`exists`), so it is unit-testable on every OS.
 */
import * as path from 'node:path';
import { SandboxError } from '../errors';
import type { EnforcementReport, Guarantee } from '../backend';
import { unsandboxedReport as unsandboxedReportFor } from '../backend';
import { isWithinWin32, winKey } from '../paths';
import type { ResolvedRules } from '../rules';

export type WindowsSandboxLevel = 'disabled' | 'restricted-token' | 'elevated' | 'mxc';

export interface WindowsLevelMapping {
  /** false for 'disabled': run with a plain CreateProcessW. */
  sandboxed: boolean;
  mode: 'none' | 'restricted-token';
}

/**
 * Codex's `windowsSandboxLevel` values. `elevated` (dedicated sandbox users + firewall rules) and
 * `mxc` (Microsoft's container runner) do not exist in this package yet, so they are refused with
 * errors that say so, rather than quietly downgraded to the restricted token.
 */
export function mapWindowsSandboxLevel(level: WindowsSandboxLevel | string): WindowsLevelMapping {
  switch (level) {
    case 'disabled':
      return { sandboxed: false, mode: 'none' };
    case 'restricted-token':
      return { sandboxed: true, mode: 'restricted-token' };
    case 'elevated':
      throw new SandboxError(
        'ENOT_ENFORCED',
        "windowsSandboxLevel 'elevated' is not implemented: it needs the elevated Windows sandbox backend " +
          "(dedicated sandbox users and firewall rules set up with administrator rights); use 'restricted-token'",
        { detail: { windowsSandboxLevel: level } },
      );
    case 'mxc':
      throw new SandboxError('ENOT_ENFORCED', 'native MXC is unavailable on this executor', {
        detail: { windowsSandboxLevel: level },
      });
    default:
      throw new SandboxError(
        'EINVALID_POLICY',
        `windowsSandboxLevel must be 'disabled', 'restricted-token', 'elevated' or 'mxc', got ${JSON.stringify(level)}`,
      );
  }
}

/**
 * The dead proxy settings of Codex's legacy (unelevated) Windows backend. Advisory only: a
 * program that ignores them still reaches the network.
 */
export const DEAD_PROXY_ENV: Readonly<Record<string, string>> = {
  HTTP_PROXY: 'http://127.0.0.1:9',
  HTTPS_PROXY: 'http://127.0.0.1:9',
  ALL_PROXY: 'http://127.0.0.1:9',
  NO_PROXY: 'localhost,127.0.0.1,::1',
  PIP_NO_INDEX: '1',
  NPM_CONFIG_OFFLINE: 'true',
  CARGO_NET_OFFLINE: 'true',
  GIT_ALLOW_PROTOCOL: 'file',
};

export interface WindowsJobPlan {
  uiRestrictions: boolean;
  activeProcessLimit?: number;
  processMemoryLimit?: number;
}

export interface WindowsPlan {
  /** Roots that get a persistent per-root capability SID with inheritable modify rights. */
  writeRoots: string[];
  /**
   * Read-only runs: roots granted to a per-run SID and revoked when the run ends (Codex keeps
   * grants only for workspace-write runs, where reuse pays off).
   */
  temporaryRoots: string[];
  /** Existing carve-outs: deny-write ACE for the capability SIDs of the roots that contain them. */
  protectedPaths: Array<{ path: string; roots: string[] }>;
  /**
   * Missing carve-outs (`.git` before `git init`, `.codex`, ...): an empty placeholder is created
   * at the highest missing ancestor inside the root, then protected like protectedPaths, so the
   * name cannot be created; removed at exit if still empty.
   */
  placeholders: Array<{ path: string; type: 'dir' | 'file'; roots: string[] }>;
  /** Carve-outs that could not be held (none today; kept for the report's shape). */
  missingProtectedPaths: string[];
  /**
   * DELETE denied on the object itself (not inherited): every directory between a writable root
   * and a carve-out, and the root itself, so `.git` cannot be renamed away and a new one planted,
   * and the workspace cannot be moved into a writable temp dir.
   */
  denyDelete: Array<{ path: string; roots: string[] }>;
  /** FILE_DELETE_CHILD denied on the object itself: the parent of each carve-out and of each of the above. */
  denyDeleteChild: Array<{ path: string; roots: string[] }>;
  /** Per-run temp dir (tmp: 'private'): created, granted to a per-run SID, revoked and removed at exit. */
  privateTmp: boolean;
  job: WindowsJobPlan;
  /** Set in the child's env (names compared case-insensitively, as Windows does). */
  envOverrides: Record<string, string>;
  report: EnforcementReport;
}

export interface PlanContext {
  /** wine version when running under wine (restrictions are not enforced there). */
  wine: string | null;
  /** Host temp dir, added to the writable roots for tmp: 'host'. */
  hostTmp: string;
  exists(p: string): boolean;
  /** Symlink or junction (lstat). ACLs on a link apply to its target; the link stays replaceable. */
  isLink?(p: string): boolean;
}

/** `config`, `config.worktree`, `x.cfg` are files; `.git`, `.codex`, `hooks` directories (as on Linux). */
export function placeholderType(p: string): 'dir' | 'file' {
  const base = path.win32.basename(p);
  return base === 'config' || /^[^.].*\.[a-z0-9]+$/i.test(base) ? 'file' : 'dir';
}

/** Ancestors of `inner` strictly below `root`, nearest first (`inner` itself excluded). */
function ancestorsBelow(root: string, inner: string): string[] {
  const out: string[] = [];
  let cur = path.win32.dirname(inner);
  while (winKey(cur) !== winKey(root) && isWithinWin32(cur, root) && cur !== path.win32.dirname(cur)) {
    out.push(cur);
    cur = path.win32.dirname(cur);
  }
  return out;
}

export function planWindowsSandbox(rules: ResolvedRules, ctx: PlanContext): WindowsPlan {
  const gaps: string[] = [];

  if (rules.mode !== 'auto') {
    throw new SandboxError(
      'EUNSUPPORTED_POLICY',
      `mode '${rules.mode}' names a Linux backend; on Windows only 'auto' (the restricted-token backend) exists`,
      { detail: { mode: rules.mode } },
    );
  }
  if (rules.denyRead.length > 0) {
    throw new SandboxError(
      'EUNSUPPORTED_POLICY',
      'deny-read paths require the elevated Windows sandbox backend, which is not implemented; ' +
        'the restricted-token backend cannot hide files from the child',
      { detail: { denyRead: rules.denyRead } },
    );
  }
  if (rules.network.kind === 'proxy') {
    throw new SandboxError(
      'ENETWORK_NOT_ENFORCEABLE',
      'managed networking requires the elevated Windows sandbox backend: without administrator rights ' +
        'Windows cannot confine one process to a proxy',
      { detail: { network: 'proxy' } },
    );
  }
  if (rules.network.kind === 'none' && !rules.degraded) {
    // Fail closed (issue #14): the default policy asks for no network, and nothing here can stop
    // a same-user process from opening sockets. Running it with a "not-enforced" line in the
    // report is exactly the silent downgrade every other unenforceable rule refuses.
    throw new SandboxError(
      'ENETWORK_NOT_ENFORCEABLE',
      "network: 'none' (the default) cannot be enforced on Windows by this backend: without administrator " +
        'rights Windows cannot block the network for one process, so the child could open sockets. ' +
        'Enforcement needs the elevated Windows sandbox backend (a dedicated sandbox user plus Windows Firewall ' +
        "rules, set up once with administrator rights), which is not implemented yet. To run anyway, pass " +
        "degraded: true (only advisory dead proxy variables are set, and the report says network: not-enforced), " +
        "or network: 'full' if the command may use the network",
      { detail: { network: 'none', enforceableWith: 'elevated backend (not implemented)' } },
    );
  }
  let filesystemRead: Guarantee = 'not-requested';
  if (!rules.readAll) {
    if (!rules.degraded) {
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        'a read-restricted policy (filesystem.read as a list of roots) cannot be expressed by the ' +
          'restricted-token backend, which restricts writes only; pass degraded: true to run with reads unrestricted',
        { detail: { readRoots: rules.readRoots } },
      );
    }
    filesystemRead = 'not-enforced';
    gaps.push('filesystemRead: the restricted-token backend restricts writes only; every path stays readable');
  }

  const writeRoots: string[] = [];
  const seen = new Set<string>();
  const addRoot = (p: string) => {
    const k = winKey(p);
    if (!seen.has(k)) {
      seen.add(k);
      writeRoots.push(p);
    }
  };
  for (const r of rules.writeRoots) addRoot(r);
  const temporaryRoots: string[] = [];
  if (rules.tmp === 'host') {
    if (writeRoots.length > 0) addRoot(ctx.hostTmp);
    else temporaryRoots.push(ctx.hostTmp);
  }

  const protectedPaths: WindowsPlan['protectedPaths'] = [];
  const placeholders: WindowsPlan['placeholders'] = [];
  const missingProtectedPaths: string[] = [];
  const denyDelete = new Map<string, { path: string; roots: Set<string> }>();
  const denyDeleteChild = new Map<string, { path: string; roots: Set<string> }>();
  const addTo = (m: typeof denyDelete, p: string, root: string) => {
    const k = winKey(p);
    if (!m.has(k)) m.set(k, { path: p, roots: new Set() });
    m.get(k)!.roots.add(root);
  };
  // Every writable root: not DELETE on itself (moving the workspace into a writable temp dir).
  for (const r of writeRoots) addTo(denyDelete, r, r);
  const linkGaps: string[] = [];
  for (const p of rules.readOnly) {
    const roots = writeRoots.filter((r) => isWithinWin32(p, r) && winKey(r) !== winKey(p));
    if (roots.length === 0) continue; // not under a writable root: already read-only
    let target = p;
    if (ctx.exists(p)) {
      protectedPaths.push({ path: p, roots });
    } else {
      // Hold the highest missing ancestor, so nothing on the way to `p` can be created either.
      const missing = [p, ...ancestorsBelow(roots[0]!, p)].filter((a) => !ctx.exists(a));
      target = missing[missing.length - 1]!;
      if (!placeholders.some((x) => winKey(x.path) === winKey(target))) {
        placeholders.push({ path: target, type: target === p ? placeholderType(p) : 'dir', roots });
      }
    }
    for (const root of roots) {
      for (const a of ancestorsBelow(root, target)) {
        if (ctx.isLink?.(a)) linkGaps.push(a);
        addTo(denyDelete, a, root);
        addTo(denyDeleteChild, path.win32.dirname(a), root);
      }
      if (ctx.isLink?.(target)) linkGaps.push(target);
      addTo(denyDeleteChild, path.win32.dirname(target), root);
    }
  }
  if (linkGaps.length > 0) {
    const links = [...new Set(linkGaps)];
    if (!rules.degraded) {
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        `protected path(s) are reached through a symlink or junction inside a writable root (${links.join(', ')}); ` +
          'an ACL on a link protects its target, but the link itself can be replaced. Replace the link with the ' +
          'real directory, or pass degraded: true to accept the gap',
        { detail: { links } },
      );
    }
    gaps.push(`protectedPaths: the link(s) ${links.join(', ')} can be replaced (only their targets are protected)`);
  }
  // Gaps the caller opted into while resolving (git: 'allow-init').
  const ruleGaps = rules.gaps ?? [];
  gaps.push(...ruleGaps);
  let protectedGuarantee: Guarantee = 'not-requested';
  if (protectedPaths.length > 0 || placeholders.length > 0 || ruleGaps.length > 0) {
    protectedGuarantee = linkGaps.length === 0 && ruleGaps.length === 0 ? 'enforced' : 'partial';
  }

  const envOverrides: Record<string, string> = {};
  let network: Guarantee = 'not-requested';
  if (rules.network.kind === 'none') {
    network = 'not-enforced';
    Object.assign(envOverrides, DEAD_PROXY_ENV);
    gaps.push(
      'network: Windows cannot block the network per process without administrator rights; ' +
        'only dead proxy variables are set (advisory)',
    );
    if (rules.network.unixSockets !== undefined) {
      gaps.push('network.unixSockets: not enforced either: any AF_UNIX socket the command can reach is connectable');
    }
  }

  const job: WindowsJobPlan = { uiRestrictions: true };
  if (rules.limits.maxProcesses !== undefined) job.activeProcessLimit = rules.limits.maxProcesses;
  if (rules.limits.memoryBytes !== undefined) job.processMemoryLimit = rules.limits.memoryBytes;
  if (rules.limits.openFiles !== undefined) {
    gaps.push('limits.openFiles: Windows has no per-process handle limit to set; not enforced');
  }

  // Everyone and the logon SID are restricting SIDs (Codex's choice; without them the child cannot
  // even create its own pipes), so whatever grants *them* write access stays writable.
  let filesystemWrite: Guarantee = 'partial';
  gaps.push(
    'filesystemWrite: paths writable by Everyone or by the logon session (e.g. C:\\Users\\Public) stay writable',
  );
  let processIsolation: Guarantee = 'partial';
  let treeTeardown: Guarantee = 'enforced';
  if (ctx.wine !== null) {
    // wine accepts the token, the ACLs and the integrity level, and enforces none of them.
    if (!rules.degraded) {
      throw new SandboxError(
        'ENOT_ENFORCED',
        `running under wine ${ctx.wine}, which ignores restricted tokens and file ACLs; ` +
          'pass degraded: true to run with the gaps reported',
        { detail: { wine: ctx.wine } },
      );
    }
    filesystemWrite = 'not-enforced';
    processIsolation = 'not-enforced';
    if (protectedGuarantee !== 'not-requested') protectedGuarantee = 'not-enforced';
    gaps.push(`wine ${ctx.wine}: token restrictions and file ACLs are not enforced; only the job and desktop are real`);
  }
  gaps.push('processIsolation: same user account; a write-restricted token, not a separate identity');
  // Until the child runs at Low integrity or as another identity (docs/windows.md): PROCESS_VM_READ
  // is a read right, which WRITE_RESTRICTED does not restrict, and Medium is the user's own level.
  gaps.push(
    "processIsolation: other processes' memory readable: the child runs at the user's Medium integrity level, so it " +
      'can open every process of this user for reading (PROCESS_VM_READ) and read their memory, secrets included',
  );
  gaps.push(
    "processIsolation: the child keeps the logon SID, so it may open the user's default desktop (WinSta0\\Default) " +
      'and, from there, send input or set hooks; the private desktop and the job UI limits do not stop OpenDesktop',
  );

  const report: EnforcementReport = {
    platform: 'win32',
    sandboxed: true,
    mode: 'restricted-token',
    mechanisms: {
      token: 'write-restricted',
      tokenFlags: ['DISABLE_MAX_PRIVILEGE', 'LUA_TOKEN', 'WRITE_RESTRICTED'],
      capabilitySids: writeRoots.length + (rules.tmp === 'private' || temporaryRoots.length > 0 ? 1 : 0) || 1,
      restrictingSids: ['capability', 'logon', 'everyone'],
      privateDesktop: true,
      job: { killOnClose: true, ...job },
      network: rules.network.kind === 'none' ? 'dead-proxy-env' : 'unrestricted',
      wine: ctx.wine,
    },
    guarantees: {
      filesystemRead,
      filesystemWrite,
      protectedPaths: protectedGuarantee,
      denyRead: 'not-requested',
      network,
      processIsolation,
      treeTeardown,
    },
    gaps,
    limits: { maxProcesses: job.activeProcessLimit ?? null, memoryBytes: job.processMemoryLimit ?? null, openFiles: null },
  };
  const list = (m: typeof denyDelete) => [...m.values()].map((v) => ({ path: v.path, roots: [...v.roots] }));
  return {
    writeRoots,
    temporaryRoots,
    protectedPaths,
    placeholders,
    missingProtectedPaths,
    denyDelete: list(denyDelete),
    denyDeleteChild: list(denyDeleteChild),
    privateTmp: rules.tmp === 'private',
    job,
    envOverrides,
    report,
  };
}

/** The report of an explicit unsandboxed run (`policy: null` / windowsSandboxLevel 'disabled'). */
export function unsandboxedReport(): EnforcementReport {
  return unsandboxedReportFor('win32', { mechanisms: { job: { killOnClose: true } }, treeTeardown: 'enforced' });
}

/**
 * One argv entry quoted for CommandLineToArgvW / the MSVC runtime: wrapped in quotes when it is
 * empty or holds whitespace or quotes; backslashes doubled only before a quote.
 */
export function quoteWindowsArg(arg: string): string {
  if (arg !== '' && !/[\s"]/.test(arg)) return arg;
  let out = '"';
  let backslashes = 0;
  for (const ch of arg) {
    if (ch === '\\') {
      backslashes++;
    } else if (ch === '"') {
      out += '\\'.repeat(backslashes * 2 + 1) + '"';
      backslashes = 0;
    } else {
      out += '\\'.repeat(backslashes) + ch;
      backslashes = 0;
    }
  }
  return out + '\\'.repeat(backslashes * 2) + '"';
}

export function buildCommandLine(argv: string[]): string {
  return argv.map(quoteWindowsArg).join(' ');
}

/**
 * Merge env overrides, replacing existing names case-insensitively (Windows env semantics). Names
 * that differ only in case collapse to one entry (the last one wins), since a Windows environment
 * block cannot hold both.
 */
export function mergeEnvCaseInsensitive(
  env: Record<string, string>,
  overrides: Record<string, string>,
): Array<[string, string]> {
  const byKey = new Map<string, [string, string]>();
  for (const [k, v] of Object.entries(env)) byKey.set(k.toUpperCase(), [k, v]);
  for (const [k, v] of Object.entries(overrides)) byKey.set(k.toUpperCase(), [k, v]);
  return [...byKey.values()];
}

/**
 * A batch file as Win32 would see it: CreateProcess runs `.bat`/`.cmd` through cmd.exe, and the
 * path lookup drops trailing dots and spaces, so `t.bat.` and `t.BAT ` are batch files too.
 */
export function isBatchFile(file: string): boolean {
  const name = file.replace(/::\$DATA$/i, '').replace(/[. ]+$/, '');
  return /\.(bat|cmd)$/i.test(name);
}

// Plain words cmd.exe passes through unchanged; anything else is quoted. `,` `;` `=` split batch
// arguments, and `^ & | < > ( )` are cmd syntax outside quotes.
const CMD_PLAIN = /^[A-Za-z0-9_\-+.:/\\@]+$/;
// What cmd.exe interprets even inside double quotes, so no quoting can make it safe: `%` (variable
// expansion, also %VAR:~..% and %~ forms), `"` (ends the quoted region: BatBadBut), line breaks
// (end the command), and other control characters.
const CMD_UNQUOTABLE = /["%\x00-\x08\x0a-\x1f\x7f]/;

/**
 * The cmd.exe invocation for running a batch file with arguments (BatBadBut, CVE-2024-24576 /
 * CVE-2024-27980). CreateProcess would hand a `.bat` to `cmd.exe /c` with our MSVC-quoted command
 * line, which cmd parses by different rules: `"&calc` escapes the quotes and runs a second command,
 * `%VAR%` expands. Instead we start cmd.exe ourselves, with AutoRun off (/d), delayed expansion off
 * (/v:OFF, so `!` is literal), and /s so exactly the outer quotes are stripped; every argument is
 * either a plain word or wrapped in double quotes, inside which cmd treats `& | < > ^ ( )` as text.
 * Arguments holding `"`, `%` or line breaks cannot be passed safely and are refused, as Node
 * (EINVAL without shell: true) and Rust (InvalidInput) refuse them.
 *
 * What the batch file then does with %1 is its own business: a script that expands `%~1` unquoted
 * into a command line re-parses it (second-order injection, outside what any launcher can fix).
 */
export function buildBatchCommandLine(
  file: string,
  argv: string[],
  systemRoot: string,
): { application: string; commandLine: string } {
  if (CMD_UNQUOTABLE.test(file)) {
    throw new SandboxError(
      'EINVALID_ARGUMENT',
      `the batch file path ${JSON.stringify(file)} contains a character cmd.exe would interpret ('%', '"' or a control character)`,
      { detail: { file } },
    );
  }
  const parts = [`"${file}"`];
  argv.slice(1).forEach((arg, i) => {
    const bad = CMD_UNQUOTABLE.exec(arg);
    if (bad) {
      const ch = bad[0] === '"' ? '"' : bad[0] === '%' ? '%' : `\\x${bad[0].charCodeAt(0).toString(16).padStart(2, '0')}`;
      throw new SandboxError(
        'EINVALID_ARGUMENT',
        `argv[${i + 1}] cannot be passed safely to the batch file ${path.win32.basename(file)}: it contains '${ch}', ` +
          'which cmd.exe interprets even inside quotes (command injection, BatBadBut). Node and Rust refuse such ' +
          'arguments too; run the program the batch file wraps directly, or pass the value through the environment',
        { detail: { argIndex: i + 1, character: ch, file } },
      );
    }
    parts.push(arg !== '' && CMD_PLAIN.test(arg) ? arg : `"${arg}"`);
  });
  const cmd = path.win32.join(systemRoot, 'System32', 'cmd.exe');
  return { application: cmd, commandLine: `"${cmd}" /d /e:ON /v:OFF /s /c "${parts.join(' ')}"` };
}
