/**
 * ResolvedRules → Seatbelt profile text + parameters, for `/usr/bin/sandbox-exec -p`.
 *
 *   const { profile, params } = buildSeatbeltProfile(rules, { proxyPorts: [43128] });
 *   const argv = seatbeltArgs(rules, ['/bin/ls', '-l'], { proxyPorts: [43128] });
 *   // → ['-p', profile, '-DWRITABLE_ROOT_0=/Users/me/w', ..., '--', '/bin/ls', '-l']
 *
 * Rules of the generator:
 * - The profile text is built only from the static files in lib/profiles/ and from constant
 *   fragments in this file. Every path (and every regex derived from a path or a glob) goes in as a
 *   `-D NAME=value` parameter referenced with (param "NAME"). A path can therefore never change
 *   the meaning of the profile, whatever characters it contains.
 * - Every parameter that is defined is referenced and vice versa (checked before returning).
 * - Seatbelt applies the last matching rule, so the allowances come first and the denials
 *   (deny-read, protected paths, rename protection) come last and win over every allowance,
 *   including the platform defaults. The allowances also carry require-not exclusions, so the
 *   result does not depend on that ordering alone.
 * - Seatbelt matches real paths: top-level aliases (/tmp, /var, /etc → /private/...) are
 *   normalised, and a writable root reached through any other symlink is refused (ESYMLINK_ROOT).
 *
 * The only I/O here is reading the .sb files once and lstat() of writable-root components (the
 * symlink check).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import { isWithin } from '../paths';
import type { ResolvedRules } from '../rules';
import { STARTUP_DIRS, STARTUP_FILES } from '../permissions/resolve';
import { readSbpl, referencedParams, type SbplNode } from './darwin-sbpl';

export const SANDBOX_EXEC_PATH = '/usr/bin/sandbox-exec';

export interface SeatbeltOptions {
  /** Loopback ports of the managed proxy (network kind 'proxy'). None → no network at all. */
  proxyPorts?: number[];
  /** Absolute globs that must stay unreadable, including files created later. */
  denyReadGlobs?: string[];
  /** tmp: 'host' → this directory (the caller's TMPDIR) is writable besides /tmp and /var/tmp. */
  hostTmpDir?: string;
  /** tmp: 'private' → a fresh per-run directory the launcher created (and removes at exit). */
  privateTmpDir?: string;
  /**
   * The program's real path. With restricted reads it is readable (that file only), as on Linux:
   * sandbox-exec must be able to map it even when it lies outside the listed roots.
   */
  executable?: string;
}

export interface SeatbeltProfile {
  profile: string;
  /** NAME → value, passed as -DNAME=value, in a stable order. */
  params: Record<string, string>;
  /** Known gaps for this policy (for the enforcement report). */
  gaps: string[];
  /**
   * rules.gaps (what the caller opted into at resolution time) that still hold here. Those the
   * profile closes are dropped: the 'startup-files' walk limit, since the names are matched at
   * any depth below every writable root.
   */
  ruleGaps: string[];
  /** What stays readable besides the listed roots with restricted reads (mechanisms.platformReads). */
  platformReads: string[];
  /** network.unixSockets as enforced: 'all', or the real socket paths connect() may reach. */
  unixSockets?: 'all' | string[];
}

// ---------------------------------------------------------------------------------------------
// Static profile files

/**
 * The .sb files ship in lib/profiles (package.json "files"). From source (vitest, ts-node) this
 * module sits in lib/platform, so they are at ../profiles; after tsc it sits in dist/platform, so
 * they are at ../../lib/profiles. Reading them at runtime keeps the .sb files the single source of
 * truth (no generated copy to drift). There is deliberately no environment override: whoever could
 * set it could substitute a permissive profile.
 */
const PROFILE_DIRS = [
  path.join(__dirname, '..', 'profiles'),
  path.join(__dirname, '..', '..', 'lib', 'profiles'),
];

export type ProfileFile = 'base.sb' | 'network.sb' | 'platform-read.sb';
const profileCache = new Map<ProfileFile, string>();

export function loadProfileFile(name: ProfileFile): string {
  const cached = profileCache.get(name);
  if (cached !== undefined) return cached;
  for (const dir of PROFILE_DIRS) {
    let text: string;
    try {
      text = fs.readFileSync(path.join(dir, name), 'utf8');
    } catch {
      continue;
    }
    if (name === 'base.sb' && !(/^\(version 1\)/.test(text) && text.includes('\n(deny default)\n'))) {
      throw new SandboxError(
        'ESEATBELT_UNAVAILABLE',
        `Seatbelt base profile ${path.join(dir, name)} does not start with (version 1) (deny default); refusing to use it`,
      );
    }
    profileCache.set(name, text);
    return text;
  }
  throw new SandboxError(
    'ESEATBELT_UNAVAILABLE',
    `Seatbelt profile ${name} not found (looked in ${PROFILE_DIRS.join(', ')}); the package is incomplete`,
    { detail: { file: name, searched: PROFILE_DIRS } },
  );
}

// ---------------------------------------------------------------------------------------------
// Paths

const TOP_LEVEL_ALIASES: ReadonlyArray<readonly [string, string]> = [
  ['/tmp', '/private/tmp'],
  ['/var', '/private/var'],
  ['/etc', '/private/etc'],
];

/** `s` (a path or a glob) with a leading /tmp, /var or /etc component spelled as its /private target. */
function unaliased(s: string): string {
  for (const [alias, target] of TOP_LEVEL_ALIASES) {
    if (s === alias || s.startsWith(alias + '/')) return target + s.slice(alias.length);
  }
  return s;
}

function invalidPath(p: string, why: string): SandboxError {
  return new SandboxError('EINVALID_POLICY', `Seatbelt: path ${JSON.stringify(p)} ${why}`, {
    detail: { path: p },
  });
}

/**
 * Canonical spelling for Seatbelt: absolute, no empty/`.`/`..` components, no trailing slash, and
 * /tmp, /var, /etc rewritten to their /private targets (they are symlinks on every macOS).
 */
export function normaliseDarwinPath(p: string): string {
  if (typeof p !== 'string' || p.length === 0) throw invalidPath(String(p), 'is empty');
  if (p.includes('\0')) throw invalidPath(p, 'contains a NUL byte');
  if (!p.startsWith('/')) throw invalidPath(p, 'is not absolute');
  const parts = p.split('/').filter((c) => c !== '');
  if (parts.some((c) => c === '.' || c === '..')) throw invalidPath(p, 'contains . or .. components');
  const s = '/' + parts.join('/');
  return unaliased(s);
}


function uniq(paths: string[]): string[] {
  return [...new Set(paths)];
}

/**
 * Refuses a writable root that is reached through a symlink (other than the top-level aliases):
 * Seatbelt would match the link's target, so the grant would silently not apply where the caller
 * thinks it does. Components that do not exist end the walk (nothing to follow there).
 */
export function assertNoSymlinkInRoot(root: string): void {
  const parts = root.split('/').filter((c) => c !== '');
  let cur = '';
  for (const part of parts) {
    cur += '/' + part;
    let st: fs.Stats;
    try {
      st = fs.lstatSync(cur);
    } catch {
      return;
    }
    if (!st.isSymbolicLink()) continue;
    if (TOP_LEVEL_ALIASES.some(([alias]) => alias === cur)) continue;
    let target = '(unresolvable)';
    try {
      target = fs.realpathSync(root);
    } catch {
      /* keep the placeholder */
    }
    throw new SandboxError(
      'ESYMLINK_ROOT',
      `symlinked writable roots are not supported by the macOS sandbox: ${root} goes through the symbolic link ${cur}; pass the resolved path ${target} instead`,
      { detail: { root, link: cur, resolved: target } },
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Regexes (Seatbelt uses POSIX extended regexes)

function regexEscape(s: string): string {
  return s.replace(/[.^$*+?()[\]{}|\\]/g, '\\$&');
}

function literalChar(ch: string, caseInsensitive: boolean): string {
  if (caseInsensitive && /^[A-Za-z]$/.test(ch)) return `[${ch.toLowerCase()}${ch.toUpperCase()}]`;
  return regexEscape(ch);
}

/**
 * `^<path>(/.*)?$` with ASCII letters matched in either case. APFS is case-insensitive by default,
 * so `mkdir .CODEX` would create what every later reader sees as `.codex`; these regexes back up
 * the exact (subpath ...) rules for paths that may be created under another spelling.
 */
export function caseInsensitiveSubtreeRegex(p: string): string {
  if (p === '/') return '^/.*$';
  return '^' + [...p].map((ch) => literalChar(ch, true)).join('') + '(/.*)?$';
}

/** `^<path>$`, ASCII letters in either case: the directory itself, nothing below it. */
export function caseInsensitiveExactRegex(p: string): string {
  return '^' + [...p].map((ch) => literalChar(ch, true)).join('') + '$';
}

function swapCase(s: string): string {
  return s.replace(/[A-Za-z]/g, (c) => (c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase()));
}

/**
 * Adds the other case of every letter and letter range in a bracket-expression body. Left as is
 * when a `-` is anything but a range between two letters of one case, where swapping could build
 * an invalid or wider range.
 */
function foldClassBody(body: string): string {
  for (let i = 0; i < body.length; i++) {
    if (body[i] !== '-') continue;
    const a = body[i - 1] ?? '';
    const b = body[i + 1] ?? '';
    const sameCaseLetters = (/^[a-z]$/.test(a) && /^[a-z]$/.test(b)) || (/^[A-Z]$/.test(a) && /^[A-Z]$/.test(b));
    if (!sameCaseLetters) return body;
  }
  const extra = swapCase(body.replace(/[^A-Za-z-]/g, ''));
  return extra.length === 0 ? body : extra + body;
}

/** Finds the `}` matching the `{` at `open`, or -1. */
function matchingBrace(src: string, open: number): number {
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    const ch = src[i];
    if (ch === '\\') {
      i += 1;
      continue;
    }
    if (ch === '{') depth += 1;
    else if (ch === '}') {
      depth -= 1;
      if (depth === 0) return i;
    }
  }
  return -1;
}

/** Splits on commas at brace depth 0 (escapes and nested braces respected). */
function splitAlternatives(body: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < body.length; i++) {
    const ch = body[i];
    if (ch === '\\') {
      i += 1;
      continue;
    }
    if (ch === '{') depth += 1;
    else if (ch === '}') depth -= 1;
    else if (ch === ',' && depth === 0) {
      out.push(body.slice(start, i));
      start = i + 1;
    }
  }
  out.push(body.slice(start));
  return out;
}

function translateGlob(src: string, ci: boolean): string {
  let re = '';
  let i = 0;
  while (i < src.length) {
    const ch = src[i];
    if (ch === '\\' && i + 1 < src.length) {
      re += literalChar(src[i + 1], ci);
      i += 2;
      continue;
    }
    if (ch === '*') {
      if (src[i + 1] === '*') {
        const wholeComponentStart = i === 0 || src[i - 1] === '/';
        if (wholeComponentStart && src[i + 2] === '/') {
          re += '(.*/)?'; // `**/`: zero or more whole components
          i += 3;
          continue;
        }
        if (wholeComponentStart && i + 2 === src.length) {
          re += '.*'; // trailing `/**`: everything below
          i += 2;
          continue;
        }
        // `**` glued to other text behaves as `*` (git's rule).
        while (src[i] === '*') i += 1;
        re += '[^/]*';
        continue;
      }
      re += '[^/]*';
      i += 1;
      continue;
    }
    if (ch === '?') {
      re += '[^/]';
      i += 1;
      continue;
    }
    if (ch === '[') {
      let j = i + 1;
      const negated = src[j] === '!' || src[j] === '^';
      if (negated) j += 1;
      if (src[j] === ']') {
        // `]` as a member is spelled differently by POSIX and other regex dialects; refuse it
        // rather than risk a class that means something else to Seatbelt.
        throw invalidPath(src, 'uses ] inside a bracket expression, which this sandbox cannot translate');
      }
      const close = src.indexOf(']', j);
      if (close === -1) {
        re += '\\[';
        i += 1;
        continue;
      }
      let body = src.slice(negated ? i + 2 : i + 1, close);
      // Inside a bracket expression only \ needs care (POSIX has no escapes there).
      body = body.replace(/\\/g, '\\\\');
      if (ci) body = foldClassBody(body);
      if (negated) {
        // A negated class must not match the separator either. Put `/` where it cannot form a
        // range: first, unless the body starts with a literal `-`, then last.
        const leadingDash = body.length > 1 && body.startsWith('-');
        if (leadingDash && body.endsWith('-')) {
          throw invalidPath(src, 'has a bracket expression this sandbox cannot translate');
        }
        re += leadingDash ? `[^${body}/]` : `[^/${body}]`;
      } else {
        re += `[${body}]`;
      }
      i = close + 1;
      continue;
    }
    if (ch === '{') {
      const close = matchingBrace(src, i);
      if (close !== -1) {
        const alternatives = splitAlternatives(src.slice(i + 1, close));
        if (alternatives.length > 1) {
          re += '(' + alternatives.map((a) => translateGlob(a, ci)).join('|') + ')';
          i = close + 1;
          continue;
        }
      }
      re += '\\{';
      i += 1;
      continue;
    }
    re += literalChar(ch, ci);
    i += 1;
  }
  return re;
}

function normaliseGlob(glob: string): string {
  if (typeof glob !== 'string' || glob.length === 0) throw invalidPath(String(glob), 'is an empty glob');
  if (glob.includes('\0')) throw invalidPath(glob, 'contains a NUL byte');
  if (!glob.startsWith('/')) throw invalidPath(glob, 'is not an absolute glob');
  let s = glob.replace(/\/{2,}/g, '/');
  if (s.length > 1) s = s.replace(/\/+$/, '');
  return unaliased(s);
}

/**
 * Translates an absolute glob into an anchored Seatbelt regex: `*` and `?` stay within one path
 * component, `**` as a whole component spans any depth, `[...]`/`[!...]` are classes, `{a,b}` are
 * alternatives and `\` escapes. Whatever the glob matches is covered with its whole subtree, so a
 * matching directory cannot be read through a known file name below it. /tmp, /var and /etc
 * prefixes are normalised like paths.
 */
export function globToSeatbeltRegex(glob: string, opts: { caseInsensitive?: boolean } = {}): string {
  const s = normaliseGlob(glob);
  if (s === '/') return '^/.*$';
  return '^' + translateGlob(s, opts.caseInsensitive === true) + '(/.*)?$';
}

/** Components of a glob, split on `/` outside braces and classes. */
function globComponents(s: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let inClass = false;
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    if (ch === '\\' && i + 1 < s.length) {
      cur += ch + s[i + 1];
      i += 1;
      continue;
    }
    if (inClass) {
      if (ch === ']') inClass = false;
    } else if (ch === '[') inClass = true;
    else if (ch === '{') depth += 1;
    else if (ch === '}') depth = Math.max(0, depth - 1);
    if (ch === '/' && depth === 0 && !inClass) {
      parts.push(cur);
      cur = '';
      continue;
    }
    cur += ch;
  }
  parts.push(cur);
  return parts.filter((p) => p !== '');
}

/**
 * Exact regexes for the directories above whatever a glob matches, up to the first `**`
 * component. Denying their unlink/rename stops the "move the parent directory away, then read the
 * file under its new name" escape. Below a `**` the file keeps matching wherever it is moved
 * within the same base, so those levels are not frozen (that would forbid rm -rf of any directory).
 */
export function globAncestorRegexes(glob: string, opts: { caseInsensitive?: boolean } = {}): string[] {
  const comps = globComponents(normaliseGlob(glob));
  const out: string[] = [];
  for (let k = 1; k < comps.length; k++) {
    if (comps[k - 1] === '**') break;
    const prefix = '/' + comps.slice(0, k).join('/');
    out.push('^' + translateGlob(prefix, opts.caseInsensitive === true) + '$');
  }
  return out;
}

/** `^<path>` with ASCII letters in either case, ready for a `/...` suffix (`/` → empty). */
function caseInsensitivePrefix(p: string): string {
  return '^' + (p === '/' ? '' : [...p].map((ch) => literalChar(ch, true)).join(''));
}

/** Regex alternation of the preset's names (each may span components, like .claude/commands). */
function namesAlternation(names: string[]): string {
  return '(' + names.map((n) => [...n].map((ch) => literalChar(ch, true)).join('')).join('|') + ')';
}

/**
 * 'startup-files' below a writable root, at any depth: `^<root>/(.*\/)?(\.bashrc|...)(/.*)?$`.
 * Sound against moves: Seatbelt checks both ends of a rename, every writable root carries the
 * rule (so no matching name can be prepared in another writable root and moved in), and a tree
 * moved as a whole carries only names that already existed, whose contents stay unwritable.
 */
export function startupFilesRegex(root: string): string {
  return caseInsensitivePrefix(root) + '/(.*/)?' + namesAlternation([...STARTUP_FILES, ...STARTUP_DIRS]) + '(/.*)?$';
}

/**
 * The directories above the multi-component names (`.claude` for .claude/commands) at any
 * depth, exactly: they cannot be created, removed or renamed, or `mv prepared .claude` would
 * carry a ready-made commands/ directory into place (the same rule as PROTECTED_ANCESTOR).
 */
export function startupAncestorsRegex(root: string): string | null {
  const dirs = new Set<string>();
  for (const name of STARTUP_DIRS) {
    const parts = name.split('/');
    for (let k = 1; k < parts.length; k++) dirs.add(parts.slice(0, k).join('/'));
  }
  if (dirs.size === 0) return null;
  return caseInsensitivePrefix(root) + '/(.*/)?' + namesAlternation([...dirs]) + '$';
}

/**
 * A unix socket path as Seatbelt sees it at connect(): the real path of an existing socket (or of
 * its directory, for one not created yet), else the normalised spelling.
 */
export function seatbeltSocketPath(sock: string): string {
  const norm = normaliseDarwinPath(sock); // validates (absolute, no NUL, no ..)
  try {
    return normaliseDarwinPath(fs.realpathSync(sock));
  } catch {
    try {
      return normaliseDarwinPath(path.posix.join(fs.realpathSync(path.posix.dirname(sock)), path.posix.basename(sock)));
    } catch {
      return norm;
    }
  }
}

/**
 * The rules of platform-read.sb that grant reads (file-read*; metadata-only rules excluded), read
 * from the file itself so the report cannot drift from the profile. `subtree`: a (subpath ...)
 * rule; otherwise a (literal ...) rule, which grants that entry only (for `/`: listing the root).
 */
export function platformReadRules(): Array<{ path: string; subtree: boolean }> {
  const out: Array<{ path: string; subtree: boolean }> = [];
  for (const form of readSbpl(loadProfileFile('platform-read.sb'))) {
    if (form.kind !== 'list') continue;
    const [head, ...rest] = form.items;
    if (head?.kind !== 'symbol' || head.value !== 'allow') continue;
    if (!rest.some((n) => n.kind === 'symbol' && n.value === 'file-read*')) continue;
    for (const n of rest as SbplNode[]) {
      if (n.kind !== 'list') continue;
      const [f, arg] = n.items;
      if (f?.kind === 'symbol' && (f.value === 'subpath' || f.value === 'literal') && arg?.kind === 'string') {
        out.push({ path: arg.value, subtree: f.value === 'subpath' });
      }
    }
  }
  return out;
}

/** platformReadRules() as the report lists them (mechanisms.platformReads). */
export function platformReadPaths(): string[] {
  return uniq(platformReadRules().map((r) => r.path));
}

/** true when the platform set already makes `file` readable. */
function platformReadable(file: string): boolean {
  return platformReadRules().some((r) => (r.subtree ? isWithin(file, r.path) : file === r.path));
}

// ---------------------------------------------------------------------------------------------
// Generation

class ParamTable {
  readonly values: Record<string, string> = {};
  set(name: string, value: string): string {
    if (!/^[A-Z][A-Z0-9_]*$/.test(name)) throw new Error(`bad Seatbelt parameter name ${name}`);
    if (value.includes('\0')) throw invalidPath(value, 'contains a NUL byte');
    this.values[name] = value;
    return `(param "${name}")`;
  }
}

function validatePorts(ports: number[] | undefined): number[] {
  const out = new Set<number>();
  for (const port of ports ?? []) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new SandboxError('EPROXY_CONFIG', `proxy port ${String(port)} is not an integer in 1..65535`, {
        detail: { port },
      });
    }
    out.add(port);
  }
  return [...out].sort((a, b) => a - b);
}

/** Builds the full profile and its parameters. Throws SandboxError; never returns a weaker profile. */
export function buildSeatbeltProfile(rules: ResolvedRules, opts: SeatbeltOptions = {}): SeatbeltProfile {
  const p = new ParamTable();
  const gaps: string[] = [];

  // --- inputs, normalised --------------------------------------------------------------------
  const tmpRoots: string[] = [];
  if (rules.tmp === 'host') {
    tmpRoots.push('/private/tmp', '/private/var/tmp');
    if (opts.hostTmpDir) tmpRoots.push(opts.hostTmpDir);
  } else if (rules.tmp === 'private') {
    if (opts.privateTmpDir) tmpRoots.push(opts.privateTmpDir);
    else gaps.push('tmp: no private temporary directory was provided; /tmp and TMPDIR are not writable');
  }
  for (const root of [...rules.writeRoots, ...tmpRoots]) {
    normaliseDarwinPath(root); // validate before touching the filesystem
    assertNoSymlinkInRoot(root);
  }
  const writeRoots = uniq([...rules.writeRoots, ...tmpRoots].map(normaliseDarwinPath));
  const denyRead = uniq(rules.denyRead.map(normaliseDarwinPath));
  const readOnly = uniq(rules.readOnly.map(normaliseDarwinPath)).filter((ro) =>
    writeRoots.some((w) => isWithin(ro, w) || isWithin(w, ro)),
  );
  const readRoots = rules.readAll ? [] : uniq([...rules.readRoots.map(normaliseDarwinPath), ...writeRoots]);
  const globs = uniq(opts.denyReadGlobs ?? []);
  const executable = opts.executable === undefined ? undefined : normaliseDarwinPath(opts.executable);
  const needsExecutable =
    !rules.readAll && executable !== undefined && !readRoots.some((r) => isWithin(executable, r)) && !platformReadable(executable);
  const startupFiles = (rules.protectPresets ?? []).includes('startup-files');
  const unixSockets =
    rules.network.kind === 'full' || rules.network.unixSockets === undefined
      ? undefined
      : rules.network.unixSockets === 'all'
        ? 'all'
        : uniq(rules.network.unixSockets.map(seatbeltSocketPath));
  const ports = rules.network.kind === 'proxy' ? validatePorts(opts.proxyPorts) : [];

  // Parameters for the denied and protected paths are shared by the allow and deny sections.
  const denyParams = denyRead.map((d, k) => ({
    path: d,
    exact: p.set(`DENY_READ_${k}`, d),
    ci: p.set(`DENY_READ_${k}_CI`, caseInsensitiveSubtreeRegex(d)),
  }));
  const protectedParams = readOnly.map((ro, k) => ({
    path: ro,
    exact: p.set(`PROTECTED_${k}`, ro),
    ci: p.set(`PROTECTED_${k}_CI`, caseInsensitiveSubtreeRegex(ro)),
  }));

  const sections: string[] = [loadProfileFile('base.sb').trimEnd()];

  // --- reads ---------------------------------------------------------------------------------
  const read: string[] = ['; ---- reads (generated) ----'];
  if (rules.readAll) {
    if (denyParams.length === 0) {
      read.push('(allow file-read* file-map-executable)');
    } else {
      read.push(
        '(allow file-read* file-map-executable',
        '  (require-all',
        '    (subpath "/")',
        ...denyParams.map((d) => `    (require-not (subpath ${d.exact}))`),
        '    ))',
      );
    }
  } else {
    readRoots.forEach((root, i) => {
      const rootParam = p.set(`READABLE_ROOT_${i}`, root);
      const excluded = denyParams.filter((d) => isWithin(d.path, root) || isWithin(root, d.path));
      if (excluded.length === 0) {
        read.push(`(allow file-read* file-map-executable (subpath ${rootParam}))`);
      } else {
        read.push(
          '(allow file-read* file-map-executable',
          '  (require-all',
          `    (subpath ${rootParam})`,
          ...excluded.map((d) => `    (require-not (subpath ${d.exact}))`),
          '    ))',
        );
      }
      // stat() of the directories above a root (getcwd, realpath, Node's module resolution).
      if (root !== '/') read.push(`(allow file-read-metadata file-test-existence (path-ancestors ${rootParam}))`);
    });
    if (readRoots.length === 0) read.push('; no readable roots besides the platform defaults');
    if (needsExecutable) {
      // The program itself (that file only): what Linux grants too (mechanisms.platformReads).
      read.push(`(allow file-read* file-map-executable (literal ${p.set('EXECUTABLE', executable)}))`);
    }
  }
  sections.push(read.join('\n'));
  if (!rules.readAll) sections.push(loadProfileFile('platform-read.sb').trimEnd());

  // --- writes --------------------------------------------------------------------------------
  const write: string[] = ['; ---- writes (generated) ----'];
  const rootParams: string[] = [];
  writeRoots.forEach((root, i) => {
    const rootParam = p.set(`WRITABLE_ROOT_${i}`, root);
    rootParams.push(rootParam);
    const prot = protectedParams.filter((x) => isWithin(x.path, root) || isWithin(root, x.path));
    const denied = denyParams.filter((d) => isWithin(d.path, root) || isWithin(root, d.path));
    if (prot.length === 0 && denied.length === 0) {
      write.push(`(allow file-write* (subpath ${rootParam}))`);
      return;
    }
    write.push(
      '(allow file-write*',
      '  (require-all',
      `    (subpath ${rootParam})`,
      ...prot.flatMap((x) => [
        `    (require-not (literal ${x.exact}))`,
        `    (require-not (subpath ${x.exact}))`,
        `    (require-not (regex ${x.ci}))`,
      ]),
      ...denied.flatMap((d) => [`    (require-not (subpath ${d.exact}))`, `    (require-not (regex ${d.ci}))`]),
      '    ))',
    );
  });
  if (writeRoots.length === 0) write.push('; no writable roots');
  sections.push(write.join('\n'));

  // --- network -------------------------------------------------------------------------------
  const net: string[] = [`; ---- network: ${rules.network.kind} (generated) ----`];
  if (rules.network.kind === 'full') {
    net.push('(allow network-outbound)', '(allow network-inbound)', '(allow network-bind)', '(allow system-socket)');
    net.push(loadProfileFile('network.sb').trimEnd());
  } else if (rules.network.kind === 'proxy') {
    if (ports.length === 0) {
      net.push('; no proxy port: no network at all (fail closed)');
    } else {
      // Only the proxy's loopback listeners; no DNS, no other loopback service, no bind.
      for (const port of ports) net.push(`(allow network-outbound (remote ip "localhost:${port}"))`);
      net.push(loadProfileFile('network.sb').trimEnd());
    }
  } else {
    net.push(
      unixSockets === undefined
        ? '; nothing allowed: (deny default) covers IP and unix-socket traffic'
        : '; no IP traffic: (deny default) covers it',
    );
  }
  // network.unixSockets: connect() only (network-bind stays denied), by the socket's path; a
  // list is enforced as exactly that list. Independent of the proxy: it grants no IP traffic.
  if (unixSockets === 'all') {
    net.push(
      '; unix sockets: connecting to any pathname socket (no bind)',
      '(allow system-socket (socket-domain AF_UNIX))',
      '(allow network-outbound (remote unix-socket))',
    );
  } else if (unixSockets !== undefined && unixSockets.length > 0) {
    net.push('; unix sockets: connecting to these socket paths only (no bind)', '(allow system-socket (socket-domain AF_UNIX))');
    unixSockets.forEach((sock, k) => {
      net.push(`(allow network-outbound (remote unix-socket (path-literal ${p.set(`UNIX_SOCKET_${k}`, sock)})))`);
    });
  }
  sections.push(net.join('\n'));

  // --- denials: last, so they win over every allowance above --------------------------------
  const deny: string[] = ['; ---- denials (generated; later rules win) ----'];
  // Seatbelt matches paths, not inodes: a hard link to a denied or protected file, made in a
  // writable root, would be a second name that no rule covers (read the secret, rewrite the hook
  // through it). link() is checked as its own operation, file-link: it is denied for these paths
  // and, below, for every file outside the writable roots (a host file such as ~/.zshrc linked
  // into the workspace would be writable there). Not yet verified on a Mac which of link()'s two
  // paths the filter sees; denying both ends' names covers either (test/darwin checks it).
  for (const d of denyParams) {
    deny.push(`(deny file-read* file-map-executable file-write* (subpath ${d.exact}))`);
    deny.push(`(deny file-read* file-map-executable file-write* (regex ${d.ci}))`);
    deny.push(`(deny file-link (subpath ${d.exact}))`, `(deny file-link (regex ${d.ci}))`);
  }
  for (const x of protectedParams) {
    deny.push(`(deny file-write* (subpath ${x.exact}))`);
    deny.push(`(deny file-write* (regex ${x.ci}))`);
    deny.push(`(deny file-link (subpath ${x.exact}))`, `(deny file-link (regex ${x.ci}))`);
  }
  globs.forEach((glob, k) => {
    const g = p.set(`DENY_GLOB_${k}`, globToSeatbeltRegex(glob, { caseInsensitive: true }));
    deny.push(`(deny file-read* file-map-executable file-write* (regex ${g}))`);
    deny.push(`(deny file-link (regex ${g}))`);
    globAncestorRegexes(glob, { caseInsensitive: true }).forEach((re, j) => {
      const a = p.set(`DENY_GLOB_${k}_ANCESTOR_${j}`, re);
      deny.push(`(deny file-write-unlink (require-all (vnode-type DIRECTORY) (regex ${a})))`);
    });
  });
  // Directories between a protected/denied path and its writable root cannot be renamed or
  // removed: otherwise `mv .git x && mkdir -p .git/hooks` or `mv secrets x && cat x/key` escape.
  // Above a protected path they cannot be created either: Seatbelt checks only the two end points
  // of a rename, so `mv prepared .git` would otherwise carry a ready-made hooks/ directory into
  // place when .git does not exist yet. (Where .git exists, refusing to create it changes nothing.)
  const ancestors = new Map<string, { create: boolean }>();
  const addAncestors = (target: string, create: boolean): void => {
    for (const root of writeRoots) {
      if (!isWithin(target, root) || target === root) continue;
      for (let a = path.posix.dirname(target); a !== root && isWithin(a, root); a = path.posix.dirname(a)) {
        const seen = ancestors.get(a);
        ancestors.set(a, { create: create || (seen?.create ?? false) });
      }
    }
  };
  readOnly.forEach((ro) => addAncestors(ro, true));
  denyRead.forEach((d) => addAncestors(d, false));
  [...ancestors.entries()].forEach(([a, { create }], m) => {
    const ops = create ? 'file-write-create file-write-unlink' : 'file-write-unlink';
    deny.push(`(deny ${ops} (literal ${p.set(`PROTECTED_ANCESTOR_${m}`, a)}))`);
    deny.push(`(deny ${ops} (regex ${p.set(`PROTECTED_ANCESTOR_${m}_CI`, caseInsensitiveExactRegex(a))}))`);
  });
  // protectPresets 'startup-files': the names at any depth below every writable root (tmp
  // directories included, so none can be prepared there and moved in), existing or not.
  if (startupFiles) {
    writeRoots.forEach((root, i) => {
      const names = p.set(`STARTUP_FILES_${i}`, startupFilesRegex(root));
      deny.push(`(deny file-write* (regex ${names}))`, `(deny file-link (regex ${names}))`);
      const anc = startupAncestorsRegex(root);
      if (anc !== null) {
        deny.push(`(deny file-write-create file-write-unlink (regex ${p.set(`STARTUP_ANCESTORS_${i}`, anc)}))`);
      }
    });
  }
  if (rootParams.length === 0) deny.push('(deny file-link)');
  else deny.push(`(deny file-link (require-all ${rootParams.map((r) => `(require-not (subpath ${r}))`).join(' ')}))`);
  // A writable root itself cannot be replaced (removed and recreated as something else).
  for (const rootParam of rootParams) {
    deny.push(`(deny file-write-unlink (require-all (literal ${rootParam}) (vnode-type DIRECTORY)))`);
  }
  // XPC services are launched by launchd outside this sandbox; none is needed by CLI tools.
  deny.push('(deny mach-lookup (xpc-service-name-prefix ""))');
  // F_MAKECOMPRESSED (80) and F_TRANSFEREXTENTS (110) modify files through read-only descriptors.
  deny.push('(deny system-fcntl (fcntl-command 80 110))');
  sections.push(deny.join('\n'));

  const profile = sections.join('\n\n') + '\n';
  assertParamsConsistent(profile, p.values);
  const ruleGaps = (rules.gaps ?? []).filter((g) => !(startupFiles && isStartupWalkGap(g)));
  const platformReads = rules.readAll
    ? []
    : [...platformReadPaths(), ...(needsExecutable ? [executable!] : [])];
  return { profile, params: p.values, gaps, ruleGaps, platformReads, ...(unixSockets !== undefined ? { unixSockets } : {}) };
}

/** The resolver's "startup-files search cut short" gap (lib/permissions/resolve.ts). */
function isStartupWalkGap(gap: string): boolean {
  return gap.startsWith("protectPresets 'startup-files': the search in ");
}

/** Fails closed if the profile is unbalanced or its (param ...) uses and definitions differ. */
function assertParamsConsistent(profile: string, params: Record<string, string>): void {
  const used = new Set(referencedParams(readSbpl(profile)));
  const defined = new Set(Object.keys(params));
  const missing = [...used].filter((n) => !defined.has(n));
  const unused = [...defined].filter((n) => !used.has(n));
  if (missing.length > 0 || unused.length > 0) {
    throw new SandboxError(
      'ESEATBELT_UNAVAILABLE',
      `internal error: Seatbelt profile parameters do not match (undefined: ${missing.join(', ') || '-'}; unused: ${unused.join(', ') || '-'})`,
    );
  }
}

/** `-p <profile> -DNAME=value ... -- argv...`: the arguments after /usr/bin/sandbox-exec. */
export function seatbeltArgs(rules: ResolvedRules, argv: string[], opts: SeatbeltOptions = {}): string[] {
  const { profile, params } = buildSeatbeltProfile(rules, opts);
  return [
    '-p',
    profile,
    ...Object.entries(params).map(([name, value]) => `-D${name}=${value}`),
    '--',
    ...argv,
  ];
}
