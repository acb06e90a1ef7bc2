/**
 * The srt settings format (`~/.srt-settings.json`, `SandboxManager.initialize(config)`): its
 * validation, and its mapping onto our SandboxPolicy.
 *
 * Validation follows srt's own rules where a user would meet them (required `network` and
 * `filesystem` with their lists, domain patterns, ports, the 1..10 search depth). The mapping is
 * the reverse of what an srt user expects to lose: every setting either maps onto something we
 * enforce, or is refused with a SandboxError naming it. Nothing is dropped silently, because an
 * srt setting we did not understand may be a restriction the user relies on.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { isIP } from 'node:net';
import { SandboxError } from '../errors';
import { patternProblem } from '../network/matcher';
import { isWithin } from '../paths';
import { lstatOrNull } from '../permissions/canonical';
import type { SandboxPolicy } from '../policy-types';

/** `denyRead` / `allowRead` / `allowWrite` / `denyWrite` entry: a spelling, or a path marked literal. */
export type FilesystemPathEntry = string | { path: string; literal: true };

export interface NetworkConfig {
  allowedDomains: string[];
  deniedDomains: string[];
  deniedDomainReasons?: Record<string, string>;
  strictAllowlist?: boolean;
  deniedResolvedAddresses?: string[];
  allowUnixSockets?: string[];
  allowAllUnixSockets?: boolean;
  allowLocalBinding?: boolean;
  allowMachLookup?: string[];
  httpProxyPort?: number;
  socksProxyPort?: number;
  [key: string]: unknown;
}

export interface FilesystemConfig {
  disabled?: boolean;
  denyRead: FilesystemPathEntry[];
  allowRead?: FilesystemPathEntry[];
  allowWrite: FilesystemPathEntry[];
  denyWrite: FilesystemPathEntry[];
  allowGitConfig?: boolean;
}

export type IgnoreViolationsConfig = Record<string, string[]>;

export interface CredentialFileConfig {
  path: string;
  mode: 'deny' | 'mask';
  [key: string]: unknown;
}
export interface CredentialEnvVarConfig {
  name: string;
  mode: 'deny' | 'mask';
  [key: string]: unknown;
}
export interface CredentialsConfig {
  files?: CredentialFileConfig[];
  envVars?: CredentialEnvVarConfig[];
  [key: string]: unknown;
}

export interface SandboxRuntimeConfig {
  network: NetworkConfig;
  filesystem: FilesystemConfig;
  credentials?: CredentialsConfig;
  ignoreViolations?: IgnoreViolationsConfig;
  enableWeakerNestedSandbox?: boolean;
  allowNestedUserNamespaces?: boolean;
  enableWeakerNetworkIsolation?: boolean;
  allowAppleEvents?: boolean;
  ripgrep?: { command: string; args?: string[]; argv0?: string };
  mandatoryDenySearchDepth?: number;
  allowPty?: boolean;
  seccomp?: { applyPath?: string; argv0?: string };
  bwrapPath?: string;
  socatPath?: string;
  javaAgentJarPath?: string;
  git?: { safeDirectories?: string[] };
  /**
   * Ours, ignored by srt (its schema drops keys it does not know): `degraded: true` accepts
   * Landlock mode's gaps where user namespaces are unavailable (where srt cannot run at all);
   * `mode` picks the sandbox mode.
   */
  processSandbox?: { degraded?: boolean; mode?: 'auto' | 'isolated' | 'landlock' };
  [key: string]: unknown;
}

/** How deep our start-up-file walk goes below each writable root (lib/permissions/resolve.ts). */
const OUR_SEARCH_DEPTH = 3;

function invalid(issues: string[]): never {
  throw new SandboxError('EINVALID_POLICY', `srt settings do not hold a valid config: ${issues.join('; ')}`, {
    detail: { issues },
  });
}

/** A setting we cannot express: refused, never dropped (fail closed). */
export function unsupported(setting: string, why: string): never {
  throw new SandboxError('EUNSUPPORTED_POLICY', `srt setting ${setting} is not supported by process-sandbox: ${why}`, {
    detail: { setting },
  });
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

// srt's domain grammar (its isValidDomainPattern): a name with a dot, `localhost`, `*.name.tld`, an
// IPv4 literal, or a bracketed IPv6 literal; an optional `:port` 1-65535.
function splitPort(entry: string): { host: string; port: number | undefined; ok: boolean } {
  if (entry.startsWith('[')) {
    const close = entry.indexOf(']');
    if (close === -1) return { host: entry, port: undefined, ok: false };
    const host = entry.slice(1, close);
    const rest = entry.slice(close + 1);
    if (rest === '') return { host, port: undefined, ok: isIP(host) === 6 };
    const port = parsePort(rest.startsWith(':') ? rest.slice(1) : '');
    return { host, port, ok: isIP(host) === 6 && port !== undefined };
  }
  const first = entry.indexOf(':');
  if (first === -1) return { host: entry, port: undefined, ok: true };
  // An unbracketed multi-colon entry is ambiguous (srt refuses it).
  if (entry.indexOf(':', first + 1) !== -1) return { host: entry, port: undefined, ok: false };
  const port = parsePort(entry.slice(first + 1));
  return { host: entry.slice(0, first), port, ok: port !== undefined };
}
function parsePort(s: string): number | undefined {
  if (!/^[1-9][0-9]{0,4}$/.test(s)) return undefined;
  const n = Number(s);
  return n > 65535 ? undefined : n;
}
function validHostPattern(v: string): boolean {
  if (isIP(v) !== 0) return true;
  if (v.includes('://') || v.includes('/') || v.includes(':')) return false;
  if (v === 'localhost') return true;
  if (v.startsWith('*.')) {
    const d = v.slice(2);
    return d.includes('.') && !d.startsWith('.') && !d.endsWith('.') && d.split('.').every((p) => p.length > 0) && !d.includes('*');
  }
  if (v.includes('*')) return false;
  return v.includes('.') && !v.startsWith('.') && !v.endsWith('.');
}

function checkList(v: unknown, name: string, issues: string[], item: (x: unknown, at: string) => void): void {
  if (!Array.isArray(v)) {
    issues.push(`${name}: Expected array, received ${v === null ? 'null' : typeof v}`);
    return;
  }
  v.forEach((x, i) => item(x, `${name}.${i}`));
}
function checkPathEntry(x: unknown, at: string, issues: string[]): void {
  if (typeof x === 'string') {
    if (x === '') issues.push(`${at}: Path cannot be empty`);
    return;
  }
  if (isObj(x) && typeof x.path === 'string' && x.path !== '' && x.literal === true && Object.keys(x).length === 2) return;
  issues.push(`${at}: Expected a path, or { "path": "...", "literal": true }`);
}
function checkBoolField(o: Record<string, unknown>, key: string, at: string, issues: string[]): void {
  if (o[key] !== undefined && typeof o[key] !== 'boolean') issues.push(`${at}${key}: Expected boolean`);
}

/**
 * Validates srt settings the way srt does (required lists, domain grammar, ports, depth) and
 * returns them typed. Unknown top-level keys are ignored, as srt ignores them.
 * Throws SandboxError EINVALID_POLICY listing every issue as `field.path: message`.
 */
export function validateConfig(raw: unknown): SandboxRuntimeConfig {
  const issues: string[] = [];
  if (!isObj(raw)) invalid(['(root): Expected object']);
  const n = raw.network;
  if (!isObj(n)) issues.push('network: Required');
  else {
    checkList(n.allowedDomains, 'network.allowedDomains', issues, (x, at) => {
      const s = typeof x === 'string' ? splitPort(x) : null;
      if (!s || !s.ok || !validHostPattern(s.host)) issues.push(`${at}: Invalid domain pattern ${JSON.stringify(x)}`);
    });
    checkList(n.deniedDomains, 'network.deniedDomains', issues, (x, at) => {
      const s = typeof x === 'string' ? splitPort(x) : null;
      if (!s || !s.ok || !(s.host === '*' || validHostPattern(s.host))) issues.push(`${at}: Invalid domain pattern ${JSON.stringify(x)}`);
    });
    if (n.deniedResolvedAddresses !== undefined) {
      checkList(n.deniedResolvedAddresses, 'network.deniedResolvedAddresses', issues, (x, at) => {
        if (typeof x !== 'string' || parseRange(x) === null) issues.push(`${at}: Invalid IP address or CIDR range`);
      });
    }
    if (n.allowUnixSockets !== undefined) {
      checkList(n.allowUnixSockets, 'network.allowUnixSockets', issues, (x, at) => {
        if (typeof x !== 'string') issues.push(`${at}: Expected string`);
      });
    }
    for (const k of ['strictAllowlist', 'allowAllUnixSockets', 'allowLocalBinding']) checkBoolField(n, k, 'network.', issues);
    for (const k of ['httpProxyPort', 'socksProxyPort']) {
      const p = n[k];
      if (p !== undefined && !(Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535)) {
        issues.push(`network.${k}: Expected an integer from 1 to 65535`);
      }
    }
  }
  const f = raw.filesystem;
  if (!isObj(f)) issues.push('filesystem: Required');
  else {
    for (const k of ['denyRead', 'allowWrite', 'denyWrite']) {
      checkList(f[k], `filesystem.${k}`, issues, (x, at) => checkPathEntry(x, at, issues));
    }
    if (f.allowRead !== undefined) checkList(f.allowRead, 'filesystem.allowRead', issues, (x, at) => checkPathEntry(x, at, issues));
    checkBoolField(f, 'disabled', 'filesystem.', issues);
    checkBoolField(f, 'allowGitConfig', 'filesystem.', issues);
    // srt: a deny glob ending in a separator can match nothing, so it is refused.
    for (const k of ['denyRead', 'denyWrite']) {
      if (!Array.isArray(f[k])) continue;
      (f[k] as unknown[]).forEach((x, i) => {
        if (typeof x === 'string' && /[*?[\]]/.test(x) && x.endsWith('/')) {
          issues.push(`filesystem.${k}.${i}: A deny glob must not end in a separator`);
        }
      });
    }
  }
  const d = raw.mandatoryDenySearchDepth;
  if (d !== undefined && !(Number.isInteger(d) && (d as number) >= 1 && (d as number) <= 10)) {
    issues.push('mandatoryDenySearchDepth: Expected an integer from 1 to 10');
  }
  if (raw.ignoreViolations !== undefined) {
    const iv = raw.ignoreViolations;
    if (!isObj(iv) || Object.values(iv).some((v) => !Array.isArray(v) || v.some((s) => typeof s !== 'string'))) {
      issues.push('ignoreViolations: Expected a map of command patterns to arrays of paths');
    }
  }
  for (const k of ['enableWeakerNestedSandbox', 'allowNestedUserNamespaces', 'enableWeakerNetworkIsolation', 'allowAppleEvents', 'allowPty']) {
    checkBoolField(raw, k, '', issues);
  }
  for (const k of ['bwrapPath', 'socatPath', 'javaAgentJarPath']) {
    if (raw[k] !== undefined && !(typeof raw[k] === 'string' && path.isAbsolute(raw[k] as string))) issues.push(`${k}: Binary path must be absolute`);
  }
  const ps = raw.processSandbox;
  if (ps !== undefined) {
    if (!isObj(ps) || Object.keys(ps).some((k) => !['degraded', 'mode'].includes(k))) issues.push('processSandbox: Expected { degraded?, mode? }');
    else {
      checkBoolField(ps, 'degraded', 'processSandbox.', issues);
      if (ps.mode !== undefined && !['auto', 'isolated', 'landlock'].includes(ps.mode as string)) issues.push("processSandbox.mode: Expected 'auto', 'isolated' or 'landlock'");
    }
  }
  if (issues.length > 0) invalid(issues);
  return raw as SandboxRuntimeConfig;
}

/** An IPv4/IPv6 address or CIDR range, as srt's deniedResolvedAddresses takes them. */
export function parseRange(s: string): { bytes: number[]; bits: number } | null {
  const slash = s.indexOf('/');
  const addr = slash === -1 ? s : s.slice(0, slash);
  const bytes = ipBytes(addr);
  if (!bytes) return null;
  const max = bytes.length * 8;
  if (slash === -1) return { bytes, bits: max };
  const b = s.slice(slash + 1);
  if (!/^[0-9]{1,3}$/.test(b) || Number(b) > max) return null;
  return { bytes, bits: Number(b) };
}

/** 4 or 16 bytes of an IP literal (IPv4-mapped IPv6 is returned as its IPv4 bytes), or null. */
export function ipBytes(a: string): number[] | null {
  const v = isIP(a);
  if (v === 4) return a.split('.').map(Number);
  if (v !== 6) return null;
  const zone = a.indexOf('%');
  let s = zone === -1 ? a : a.slice(0, zone);
  let tail: number[] = [];
  const dotted = s.match(/:([0-9.]+)$/);
  if (dotted && isIP(dotted[1]!) === 4) {
    tail = dotted[1]!.split('.').map(Number);
    s = s.slice(0, s.length - dotted[1]!.length) + '0:0';
  }
  const [head, rest] = s.split('::') as [string, string | undefined];
  const h = head === '' ? [] : head.split(':');
  const r = rest === undefined ? [] : rest === '' ? [] : rest.split(':');
  const fill = rest === undefined ? 0 : 8 - h.length - r.length;
  const groups = [...h, ...Array(fill).fill('0'), ...r].map((g) => parseInt(g, 16));
  const out: number[] = [];
  for (const g of groups) out.push(g >> 8, g & 0xff);
  if (tail.length) out.splice(12, 4, ...tail);
  // ::ffff:a.b.c.d is judged as a.b.c.d.
  if (out.slice(0, 10).every((x) => x === 0) && out[10] === 0xff && out[11] === 0xff) return out.slice(12);
  return out;
}

export function inRange(addr: number[], r: { bytes: number[]; bits: number }): boolean {
  if (addr.length !== r.bytes.length) return false;
  for (let i = 0; i < r.bits; i++) {
    const bit = (x: number[]) => (x[i >> 3]! >> (7 - (i & 7))) & 1;
    if (bit(addr) !== bit(r.bytes)) return false;
  }
  return true;
}

/** srt's `~` expansion, then relative paths against `cwd`; trailing slashes dropped. */
export function resolveSrtPath(p: string, cwd: string): string {
  let s = p.length > 1 ? p.replace(/\/+$/, '') || '/' : p;
  if (s === '~') s = os.homedir();
  else if (s.startsWith('~/')) s = os.homedir() + s.slice(1);
  return path.resolve(cwd, s);
}

const GLOB = /[*?[\]]/;

/** srt binds where a path really is: an existing path is resolved through its links. */
function real(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return p;
  }
}


function entryPath(e: FilesystemPathEntry): { path: string; literal: boolean } {
  return typeof e === 'string' ? { path: e, literal: false } : { path: e.path, literal: true };
}

export interface MappedConfig {
  policy: SandboxPolicy;
  /** Environment variables the command must not get (credentials.envVars with mode 'deny'). */
  unsetEnv: string[];
  /** srt's NO_PROXY for the command (see toPolicy). */
  noProxy: string;
  /** deniedResolvedAddresses and the IP literals of deniedDomains, for the proxy's resolver. */
  deniedRanges: Array<{ bytes: number[]; bits: number }>;
  /** The IP literals of deniedDomains alone (they refuse even what a loopback name resolves to). */
  refusedLiterals: Array<{ bytes: number[]; bits: number }>;
  /** IP literals listed in allowedDomains without a port: a name may resolve to those. */
  allowedLiterals: number[][];
  /** IP literals listed with a port (`127.0.0.1:3000`): a name may resolve to those for that port. */
  allowedLiteralPorts: Array<{ bytes: number[]; port: number }>;
  /** The ask callback may be consulted (no strictAllowlist). */
  askAllowed: boolean;
  /** The resolved paths, for srt's getFsReadConfig / getFsWriteConfig. */
  paths: { denyRead: string[]; allowRead: string[]; allowWrite: string[]; denyWrite: string[] };
}

/** srt's getNetworkRestrictionConfig: an empty allow list is kept (it means "nothing allowed"). */
export function networkRestrictionOf(cfg: SandboxRuntimeConfig): { allowedHosts?: string[]; deniedHosts?: string[] } {
  const denied = cfg.network.deniedDomains;
  return { allowedHosts: cfg.network.allowedDomains, ...(denied.length > 0 ? { deniedHosts: denied } : {}) };
}

/** srt's NO_PROXY: local traffic is not sent to the proxy (it meets the sandbox's own loopback). */
export const SRT_NO_PROXY = 'localhost,127.0.0.1,::1,169.254.0.0/16,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16';

/**
 * Maps validated srt settings onto our policy, resolving `~` and relative paths against `cwd` as
 * srt resolves them against the working directory when a command is wrapped.
 */
export function toPolicy(cfg: SandboxRuntimeConfig, cwd: string): MappedConfig {
  const n = cfg.network;
  const f = cfg.filesystem;

  // ---- settings that would loosen what we enforce, or that name machinery we do not have ----
  const macOnly = ['enableWeakerNetworkIsolation', 'allowAppleEvents', 'allowPty'] as const;
  for (const k of macOnly) if (cfg[k] === true && process.platform === 'darwin') unsupported(k, 'the macOS sandbox here has no such exception');
  if (n.allowMachLookup?.length && process.platform === 'darwin') unsupported('network.allowMachLookup', 'Mach lookups cannot be opened per service');
  if (cfg.allowNestedUserNamespaces === true) {
    unsupported('allowNestedUserNamespaces', 'the sandboxed command may never create user namespaces here (they would let it undo the write denies); run such a command without the sandbox');
  }
  if (f.allowGitConfig === true) {
    unsupported('filesystem.allowGitConfig', '.git/config stays read-only in every writable root; change git config outside the sandbox');
  }
  if (f.disabled === true) unsupported('filesystem.disabled', 'a sandbox with no filesystem rules is not offered; list the paths in allowWrite');
  if (cfg.mandatoryDenySearchDepth !== undefined && cfg.mandatoryDenySearchDepth > OUR_SEARCH_DEPTH) {
    unsupported('mandatoryDenySearchDepth', `start-up files are searched ${OUR_SEARCH_DEPTH} levels below each writable root, not ${cfg.mandatoryDenySearchDepth}`);
  }
  for (const k of ['httpProxyPort', 'socksProxyPort'] as const) {
    if (n[k] !== undefined) unsupported(`network.${k}`, 'an external proxy cannot be used; the allow and deny lists are enforced by our own proxy');
  }
  const netUnknown = ['mitmProxy', 'filterRequest', 'tlsTerminate', 'parentProxy', 'allowPlaintextHeaderSet', 'stripResponseHeaders', 'refuseOpaqueTunnels', 'requireHostMatch', 'ambiguousRequestTarget'];
  for (const k of netUnknown) if (n[k] !== undefined) unsupported(`network.${k}`, 'request inspection and rewriting are not offered through the srt settings');
  if ((cfg.git?.safeDirectories?.length ?? 0) > 0) unsupported('git.safeDirectories', 'safe.directory entries are not injected');

  // ---- network ----
  const deny: string[] = [];
  let denyAll = false;
  for (const entry of n.deniedDomains) {
    const { host, port } = splitPort(entry);
    if (host === '*') {
      if (port !== undefined) unsupported(`network.deniedDomains "${entry}"`, 'a deny-all for one port cannot be expressed; deny the hosts by name');
      denyAll = true;
      continue;
    }
    deny.push(entry);
  }
  const allow = denyAll ? [] : [...n.allowedDomains];
  // srt accepts some patterns our matcher refuses (a wildcard over a public suffix, `*.co.uk`):
  // refused here by name rather than widened or dropped.
  for (const [list, entries] of [['allowedDomains', allow], ['deniedDomains', deny]] as const) {
    for (const e of entries) {
      const why = patternProblem(e, list === 'allowedDomains' ? 'allow' : 'deny');
      if (why !== null) unsupported(`network.${list} "${e}"`, why);
    }
  }
  const refusedLiterals: Array<{ bytes: number[]; bits: number }> = [];
  for (const e of deny) {
    const { host } = splitPort(e);
    const r = parseRange(host);
    if (r) refusedLiterals.push(r);
  }
  const deniedRanges = [...(n.deniedResolvedAddresses ?? []).map((r) => parseRange(r)!), ...refusedLiterals];
  const allowedLiterals: number[][] = [];
  const allowedLiteralPorts: Array<{ bytes: number[]; port: number }> = [];
  for (const e of allow) {
    const { host, port } = splitPort(e);
    const b = ipBytes(host);
    if (b && port === undefined) allowedLiterals.push(b);
    else if (b && port !== undefined) allowedLiteralPorts.push({ bytes: b, port });
  }
  // Unix sockets: srt on Linux cannot filter by path and ignores allowUnixSockets (creation stays
  // blocked); allowAllUnixSockets lifts the block. Elsewhere the list is the allowed paths.
  let unixSockets: string[] | 'all' | undefined;
  if (n.allowAllUnixSockets === true) unixSockets = 'all';
  else if (process.platform !== 'linux' && n.allowUnixSockets?.length) unixSockets = n.allowUnixSockets.map((p) => resolveSrtPath(p, cwd));
  // allowLocalBinding: on Linux srt ignores it (the command has a loopback of its own), as we do.

  // ---- filesystem ----
  const write: string[] = [];
  for (const e of f.allowWrite) {
    const { path: p0, literal } = entryPath(e);
    const p = literal ? p0 : p0.replace(/\/\*\*$/, '') || '/';
    // srt skips a write glob it cannot bind (less access; the same here).
    if (!literal && GLOB.test(p)) continue;
    const abs = resolveSrtPath(p, cwd);
    // A path that does not exist is skipped, as bubblewrap skips it for srt.
    if (fs.existsSync(abs)) write.push(real(abs));
  }
  const protect: string[] = [];
  const denies: string[] = [];
  for (const e of f.denyWrite) {
    const { path: p0, literal } = entryPath(e);
    const p = literal ? p0 : p0.replace(/\/\*\*$/, '') || '/';
    if (!literal && GLOB.test(p)) unsupported(`filesystem.denyWrite "${p0}"`, 'write-deny patterns are not expanded; list the paths');
    denies.push(real(resolveSrtPath(p, cwd)));
  }
  // denyWrite wins over allowWrite (srt): a writable root at or below a denied path is dropped,
  // and a denied path inside a remaining root is kept read-only there.
  const kept = write.filter((w) => !denies.some((d) => isWithin(w, d)));
  write.splice(0, write.length, ...kept);
  for (const d of denies) {
    // A deny outside every writable root is already read-only.
    if (write.some((w) => isWithin(d, w))) protect.push(d);
  }
  const denyRead: string[] = [];
  for (const e of [...f.denyRead, ...(cfg.credentials?.files ?? []).map((c) => credFile(c))]) {
    const { path: p0, literal } = entryPath(e);
    const p = literal ? p0 : p0.replace(/\/\*\*$/, '') || '/';
    if (!literal && GLOB.test(p)) {
      // Expanded to what exists now, as srt expands it when it wraps (docs/srt.md).
      denyRead.push(...expandDenyGlob(resolveSrtPath(p, cwd), p0));
      continue;
    }
    const abs = resolveSrtPath(p, cwd);
    // srt: a denyRead of a path that does not exist hides nothing.
    if (fs.existsSync(abs)) denyRead.push(real(abs));
  }
  const allowRead: string[] = [];
  for (const e of f.allowRead ?? []) {
    const { path: p0, literal } = entryPath(e);
    const p = literal ? p0 : p0.replace(/\/\*\*$/, '') || '/';
    if (!literal && GLOB.test(p)) continue; // an allow we cannot expand is left out: less access
    const abs = resolveSrtPath(p, cwd);
    if (fs.existsSync(abs)) allowRead.push(real(abs));
  }
  // allowRead re-opens a path inside a denyRead (srt: it wins over a broader deny, loses to a
  // more specific one). Our planner re-exposes writable roots inside a denied directory, not
  // readable ones, so the deny is carved instead: every entry of the denied directory is denied
  // but the ones on the way to a re-opened path (or a writable root), level by level. This is a
  // snapshot taken when the command starts, as srt's own glob expansion is: what appears in the
  // denied directory afterwards is not hidden (docs/srt.md).
  const deniedEffective: string[] = [];
  let carved = 0;
  const carve = (dir: string, keep: string[]): string[] => {
    if (keep.includes(dir)) return [];
    const st = lstatOrNull(dir);
    // Only a real directory can be carved; a link or a file on the way is denied whole.
    if (!st || !st.isDirectory()) return [dir];
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      return [dir]; // cannot be listed: denied whole (so is it by srt)
    }
    const out: string[] = [];
    for (const name of names) {
      const child = path.join(dir, name);
      const inner = keep.filter((k) => isWithin(k, child));
      if (inner.length === 0) out.push(child);
      else out.push(...carve(child, inner));
    }
    carved += out.length;
    if (carved > 4096) unsupported('filesystem.allowRead', `re-opening it inside ${dir} needs more than 4096 read-deny entries; deny narrower directories`);
    return out;
  };
  for (const d of denyRead) {
    const reopened = allowRead.filter((a) => isWithin(a, d));
    if (reopened.length === 0) {
      deniedEffective.push(d);
      continue;
    }
    deniedEffective.push(...carve(d, [...reopened, ...write.filter((w) => isWithin(w, d))]));
  }
  // A more specific deny inside a re-opened path stays denied: it is its own entry above.
  const filesystem: NonNullable<SandboxPolicy['filesystem']> = {
    write,
    protectPresets: ['startup-files'],
    git: 'hooks-and-config',
  };
  const uniqueDenies = [...new Set(deniedEffective)];
  if (uniqueDenies.length) filesystem.denyRead = uniqueDenies;
  if (protect.length) filesystem.protect = protect;

  const unsetEnv = (cfg.credentials?.envVars ?? []).map((v) => {
    if (v.mode !== 'deny') unsupported(`credentials.envVars "${v.name}" mode "${v.mode}"`, 'masking is not offered; use mode "deny"');
    return v.name;
  });
  const credKeys = Object.keys(cfg.credentials ?? {}).filter((k) => !['files', 'envVars'].includes(k));
  if (credKeys.length) unsupported(`credentials.${credKeys[0]}`, 'not offered');

  const policy: SandboxPolicy = {
    filesystem,
    network: {
      proxy: { allow, deny, allowLocal: true },
      ...(unixSockets !== undefined ? { unixSockets } : {}),
    },
    ...(cfg.processSandbox?.degraded ? { degraded: true } : {}),
    ...(cfg.processSandbox?.mode ? { mode: cfg.processSandbox.mode } : {}),
  };
  const paths = { denyRead, allowRead, allowWrite: write, denyWrite: denies };
  return { policy, unsetEnv, noProxy: SRT_NO_PROXY, deniedRanges, refusedLiterals, allowedLiterals, askAllowed: n.strictAllowlist !== true, paths, allowedLiteralPorts };
}

/** Entries a read-deny pattern may visit before it is refused rather than walked further. */
const GLOB_WALK_LIMIT = 200_000;

/** git-style glob as a regex over absolute paths: `**` any depth, `*` and `?` within a name, `[...]` sets. */
function globRegex(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '*' && pattern[i + 1] === '*') {
      i++;
      if (pattern[i + 1] === '/') {
        i++;
        re += '(?:.*/)?';
      } else re += '.*';
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const end = pattern.indexOf(']', i + 2);
      const body = end === -1 ? '' : pattern.slice(i + 1, end);
      // Brackets that spell no set are the text they are (srt: `[user-id]`, `list[].ts`).
      if (end === -1 || body === '' || /([^\\])-([^\\])/.test(body) && [...body.matchAll(/(.)-(.)/g)].some((m) => m[1]! > m[2]!)) {
        re += '\\[';
      } else {
        const neg = body.startsWith('!') || body.startsWith('^');
        const inner = (neg ? body.slice(1) : body).replace(/[\\\]]/g, '\\$&');
        re += neg ? `[^/${inner}]` : `[${inner}]`;
        i = end;
      }
    } else re += c.replace(/[.+^${}()|\\\]]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/**
 * The existing paths a read-deny pattern matches, resolved through links (denied where they
 * really are). Walked from its literal leading directories; symlinked directories are descended
 * once each. A pattern with a wildcard in its first component, or a walk past GLOB_WALK_LIMIT
 * entries, is refused (srt skips the first and so hides nothing: fail closed instead).
 */
function expandDenyGlob(abs: string, spelled: string): string[] {
  const parts = abs.split('/').slice(1);
  let i = 0;
  while (i < parts.length && !GLOB.test(parts[i]!)) i++;
  if (i === 0) unsupported(`filesystem.denyRead "${spelled}"`, 'a pattern needs a literal directory to start from');
  const out = expandFrom(`/${parts.slice(0, i).join('/')}`, parts.slice(i), spelled);
  // srt also reads the entry as the path it spells where a directory holding `*`, `?`, `[` or `]`
  // in its name exists (`[WIP] project/*`): the deny covers both readings.
  let j = i;
  while (j < parts.length && lstatOrNull(`/${parts.slice(0, j + 1).join('/')}`)) j++;
  if (j > i) {
    const named = `/${parts.slice(0, j).join('/')}`;
    if (j === parts.length) out.push(real(named));
    else out.push(...expandFrom(named, parts.slice(j), spelled));
  }
  return [...new Set(out)];
}

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function expandFrom(start: string, rest: string[], spelled: string): string[] {
  // Without `**` a match lies exactly this many levels below the start.
  const maxDepth = rest.some((x) => x.includes('**')) ? Infinity : rest.length;
  const body = globRegex(rest.join('/')).source.slice(1, -1);
  const re = new RegExp(`^${escapeRegex(start === '/' ? '' : start)}/${body}$`);
  const out: string[] = [];
  const seen = new Set<string>();
  let visited = 0;
  const walk = (dir: string, spelledDir: string, depth: number): void => {
    const r = real(dir);
    if (seen.has(r)) return;
    seen.add(r);
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      // What cannot be listed is denied whole (srt does the same).
      out.push(r);
      return;
    }
    for (const e of entries) {
      if (++visited > GLOB_WALK_LIMIT) unsupported(`filesystem.denyRead "${spelled}"`, `the pattern visits more than ${GLOB_WALK_LIMIT} entries; narrow it`);
      const name = path.join(spelledDir, e.name);
      const actual = path.join(dir, e.name);
      if (re.test(name)) {
        out.push(real(actual));
        continue; // denied whole: nothing below needs a deny of its own
      }
      if (depth + 1 >= maxDepth) continue;
      let isDir = e.isDirectory();
      if (e.isSymbolicLink()) isDir = statOrNull(actual)?.isDirectory() ?? false;
      if (isDir) walk(actual, name, depth + 1);
    }
  };
  if (statOrNull(start)?.isDirectory()) walk(start, start, 0);
  return out;
}

function statOrNull(p: string): fs.Stats | null {
  try {
    return fs.statSync(p);
  } catch {
    return null;
  }
}

function credFile(c: CredentialFileConfig): FilesystemPathEntry {
  if (c.mode !== 'deny') unsupported(`credentials.files "${c.path}" mode "${c.mode}"`, 'masking is not offered; use mode "deny"');
  return c.path;
}
