/**
 * Environment handling: the secret-name heuristic and Codex's `envPolicy`
 * (ShellEnvironmentPolicy) semantics for building a child env from the server's env.
 */
import { SandboxError } from '../errors';

/**
 * Patterns (case-insensitive, `*` = any run, `?` = one char) of names that look like secrets.
 * The first three are Codex's default excludes; the rest widen the net the same way. Matching is
 * case-insensitive everywhere: Windows env names are, and on POSIX `github_token` is as secret
 * as `GITHUB_TOKEN`.
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
  // Auth material by another name: NPM_CONFIG__AUTH (base64 user:pass), *_AUTHORIZATION headers,
  // BASIC_AUTH, SSH_AUTH_SOCK (the agent socket signs as the user; the path itself is the
  // capability when the socket is reachable from inside).
  '*_AUTH*',
  'AUTH',
  'AUTH_*',
  'AUTHORIZATION*',
  'SSH_AUTH_SOCK',
  'NPM_CONFIG__AUTH',
  // Connection strings carry passwords (SENTRY_DSN, DATABASE_DSN, ODBC DSNs).
  '*_DSN',
  'DSN',
];

/**
 * Names `*_AUTH*` would catch that are identity, not credentials. Git reads these for every
 * commit; scrubbing them would make `git commit` inside the sandbox fail for no security gain.
 */
const NOT_SECRET_ENV_NAMES: readonly string[] = ['GIT_AUTHOR_NAME', 'GIT_AUTHOR_EMAIL', 'GIT_AUTHOR_DATE'];

/**
 * A URL with credentials in its userinfo anywhere in the value: `scheme://user:pass@host`, or
 * `scheme://TOKEN@host` with a token-like user (20+ chars, as GitHub and GitLab tokens are).
 * A plain short user (`ssh://git@github.com`) is not a secret. Checked on every variable's
 * value, not only `*_URL` names: `DATABASE`, `REDIS`, `HTTPS_PROXY` and `PIP_INDEX_URL` all carry
 * such URLs in the wild.
 */
const CREDENTIAL_URL = /[a-z][a-z0-9+.-]*:\/\/(?:[^\s/?#@:]*:[^\s/?#@]*|[A-Za-z0-9_.~%-]{20,})@/i;

export function hasCredentialUrl(value: string): boolean {
  return CREDENTIAL_URL.test(value);
}

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

/** True when a variable name looks like it holds a secret (used for the default env). */
export function isSecretEnvName(name: string): boolean {
  if (NOT_SECRET_ENV_NAMES.includes(name.toUpperCase())) return false;
  return envNameMatches(name, SECRET_ENV_PATTERNS);
}

/** True when a variable should be scrubbed: a secret-looking name, or a value holding a URL with credentials. */
export function isSecretEnvEntry(name: string, value: string): boolean {
  return isSecretEnvName(name) || hasCredentialUrl(value);
}

/**
 * Drop secret-looking variables from an environment (returns a new object). This is the default
 * env of the CLI and of spawn()/run() when `env` is omitted; an explicit `env` is passed exactly.
 */
export function withoutSecretEnv(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  // Keys, then each value: process.env has no cheaper way, and no [k, v] pairs are built.
  for (const k of Object.keys(env)) {
    const v = env[k];
    if (v !== undefined && !isSecretEntryMemo(k, v)) out[k] = v;
  }
  return out;
}

/**
 * isSecretEnvEntry is pure, and the default env is the same process.env spawn after spawn: the
 * answer for a name is kept with the value it was given for (most of a spawn's env scrub was the
 * pattern matching), and a changed value is judged afresh. Keyed by name, no string is built per
 * variable. Bounded: cleared when full.
 */
const secretMemo = new Map<string, { value: string; secret: boolean }>();
function isSecretEntryMemo(name: string, value: string): boolean {
  const known = secretMemo.get(name);
  if (known !== undefined && known.value === value) return known.secret;
  if (secretMemo.size >= 4096) secretMemo.clear();
  const secret = isSecretEnvEntry(name, value);
  secretMemo.set(name, { value, secret });
  return secret;
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
