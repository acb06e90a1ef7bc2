/**
 * Environment handling: the secret-name heuristic and Codex's `envPolicy`
 * (ShellEnvironmentPolicy) semantics for building a child env from the server's env.
 */
import { SandboxError } from '../errors';

/**
 * Patterns (case-insensitive, `*` = any run, `?` = one char) of names that look like secrets.
 * The first three are Codex's default excludes; the rest widen the net the same way.
 */
export const SECRET_ENV_PATTERNS: readonly string[] = [
  '*KEY*',
  '*SECRET*',
  '*TOKEN*',
  '*PASSWORD*',
  '*PASSWD*',
  '*PASSPHRASE*',
  '*CREDENTIAL*',
  '*PRIVATE*',
  'AWS_*',
  '*_PAT',
];

/** Codex's default excludes for `envPolicy` (ignoreDefaultExcludes turns them off). */
export const CODEX_DEFAULT_ENV_EXCLUDES: readonly string[] = ['*KEY*', '*SECRET*', '*TOKEN*'];

const regexCache = new Map<string, RegExp>();

/** Compile a Codex-style env pattern (`*`, `?`, otherwise literal) into an anchored, case-insensitive RegExp. */
export function envPatternToRegExp(pattern: string): RegExp {
  let re = regexCache.get(pattern);
  if (re === undefined) {
    let src = '';
    for (const ch of pattern) {
      if (ch === '*') src += '.*';
      else if (ch === '?') src += '.';
      else src += ch.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
    re = new RegExp(`^${src}$`, 'is');
    regexCache.set(pattern, re);
  }
  return re;
}

export function envNameMatches(name: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => envPatternToRegExp(p).test(name));
}

/** True when a variable name looks like it holds a secret (used for the CLI's default env). */
export function isSecretEnvName(name: string): boolean {
  return envNameMatches(name, SECRET_ENV_PATTERNS);
}

/** Drop secret-looking names from an environment (returns a new object). */
export function withoutSecretEnv(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (v !== undefined && !isSecretEnvName(k)) out[k] = v;
  }
  return out;
}

/** Codex's `envPolicy` (ExecParams.envPolicy, camelCase on the wire). */
export interface ExecEnvPolicy {
  inherit: 'all' | 'core' | 'none';
  ignoreDefaultExcludes: boolean;
  exclude: string[];
  set: Record<string, string>;
  includeOnly: string[];
}

const CORE_VARS_POSIX = ['HOME', 'LOGNAME', 'PATH', 'SHELL', 'USER', 'USERNAME', 'TMPDIR', 'TEMP', 'TMP'];
const CORE_VARS_WINDOWS = [
  ...CORE_VARS_POSIX,
  'PATHEXT',
  'SYSTEMROOT',
  'SYSTEMDRIVE',
  'WINDIR',
  'COMSPEC',
  'USERPROFILE',
  'APPDATA',
  'LOCALAPPDATA',
  'PROGRAMDATA',
  'PROGRAMFILES',
  'PROGRAMFILES(X86)',
  'HOMEDRIVE',
  'HOMEPATH',
];

/**
 * Build the child env from `base` (the server's own env) as Codex does:
 * 1. start from all / core / no variables; 2. drop the default excludes unless ignored;
 * 3. drop `exclude` matches; 4. apply `set`; 5. keep only `includeOnly` matches when non-empty.
 */
export function applyEnvPolicy(
  base: Record<string, string | undefined>,
  policy: ExecEnvPolicy,
  platform: NodeJS.Platform = process.platform,
): Record<string, string> {
  let env: Record<string, string> = {};
  const entries = Object.entries(base).filter((e): e is [string, string] => e[1] !== undefined);
  if (policy.inherit === 'all') {
    env = Object.fromEntries(entries);
  } else if (policy.inherit === 'core') {
    const core = platform === 'win32' ? CORE_VARS_WINDOWS : CORE_VARS_POSIX;
    const keep = (k: string): boolean =>
      platform === 'win32' ? core.includes(k.toUpperCase()) : core.includes(k);
    env = Object.fromEntries(entries.filter(([k]) => keep(k)));
  }
  const retain = (pred: (k: string) => boolean): void => {
    for (const k of Object.keys(env)) if (!pred(k)) delete env[k];
  };
  if (!policy.ignoreDefaultExcludes) retain((k) => !envNameMatches(k, CODEX_DEFAULT_ENV_EXCLUDES));
  if (policy.exclude.length > 0) retain((k) => !envNameMatches(k, policy.exclude));
  for (const [k, v] of Object.entries(policy.set)) env[k] = v;
  if (policy.includeOnly.length > 0) retain((k) => envNameMatches(k, policy.includeOnly));
  return env;
}

/** Validate a wire envPolicy object (all fields optional on input, Codex defaults applied). */
export function parseEnvPolicy(v: unknown, field = 'envPolicy'): ExecEnvPolicy {
  const bad = (msg: string): never => {
    throw new SandboxError('EREQUEST_INVALID', `${field}${msg}`, { detail: { field } });
  };
  if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(' must be an object');
  const o = v as Record<string, unknown>;
  const allowed = ['inherit', 'ignoreDefaultExcludes', 'exclude', 'set', 'includeOnly'];
  for (const k of Object.keys(o)) if (!allowed.includes(k)) bad(`.${k} is not a known field`);
  const inherit = o.inherit ?? 'all';
  if (inherit !== 'all' && inherit !== 'core' && inherit !== 'none') bad(`.inherit must be 'all', 'core' or 'none'`);
  const ignoreDefaultExcludes = o.ignoreDefaultExcludes ?? false;
  if (typeof ignoreDefaultExcludes !== 'boolean') bad('.ignoreDefaultExcludes must be a boolean');
  const list = (name: string): string[] => {
    const x = o[name] ?? [];
    if (!Array.isArray(x) || !x.every((s) => typeof s === 'string')) bad(`.${name} must be an array of strings`);
    return x as string[];
  };
  const set = o.set ?? {};
  if (typeof set !== 'object' || set === null || Array.isArray(set)) bad('.set must be an object of strings');
  for (const [k, val] of Object.entries(set as Record<string, unknown>)) {
    if (typeof val !== 'string') bad(`.set.${k} must be a string`);
    if (k.includes('\0') || (val as string).includes('\0') || k.includes('=') || k === '') bad(`.set.${k} is not a valid variable`);
  }
  return {
    inherit: inherit as ExecEnvPolicy['inherit'],
    ignoreDefaultExcludes: ignoreDefaultExcludes as boolean,
    exclude: list('exclude'),
    set: { ...(set as Record<string, string>) },
    includeOnly: list('includeOnly'),
  };
}
