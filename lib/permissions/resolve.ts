/**
 * The one resolver. Both the ergonomic `policy` option (policy.ts) and Codex PermissionProfile
 * JSON (profile.ts) are first turned into a ResolverInput (a flat list of path entries with an
 * access mode), and this module alone turns that list into ResolvedRules.
 *
 * Semantics (the same as Codex's FileSystemSandboxPolicy):
 * - For any path, the most specific entry containing it decides its access.
 * - For equally specific entries (same canonical path), deny beats read and write beats read;
 *   write and deny on one path is a contradiction and refused (EINVALID_POLICY), as is a
 *   `protect` entry equal to a writable root. Codex profiles (equalWriteDeny: 'deny') resolve
 *   it as Codex does: deny beats write.
 * - A `root` access covers everything that no entry covers.
 *
 * Mapping onto ResolvedRules:
 * - `readAll`: the root is readable (read or write).
 * - `writeRoots`: write entries whose nearest enclosing entry is not already write.
 * - `readOnly`: read entries nested in a writable area, plus the protected metadata of every
 *   writable root (.git hooks/config or whole .git, followed through `gitdir:` pointers; .codex;
 *   .agents; `protect` entries). Carve-outs outside every writable root are dropped.
 * - `denyRead`: deny entries that something readable would otherwise expose.
 * - Writable roots are readable; they are not repeated in `readRoots`.
 * - `readRoots` (meaningful when readAll is false): read entries not already readable through an
 *   enclosing entry. An entry re-allowed inside a denied area also lands here; a planner that
 *   ignores it under readAll leaves the area denied (less access, never more).
 * Writable roots and readable roots nested inside a denied path are valid (most specific wins):
 * planners apply denyRead masks before re-exposing such nested roots.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import type { NetworkRule, ProtectPreset, ResolvedRules } from '../rules';
import type { ResourceLimits, SandboxMode, TmpMode } from '../policy-types';
import { cachedWalk } from './walk-cache';
import { isStrictlyWithin, isWithin } from '../paths';
import {
  canonicalizeMaybeMissing,
  lstatOrNull,
  readTextOrNull,
  realpathOrNull,
  statOrNull,
  symlinkComponents,
} from './canonical';

export type Access = 'read' | 'write' | 'deny';

/** What to do when an entry's path does not exist. */
export type MissingBehavior =
  /** A missing writable root is an error; a missing read/deny entry is dropped. */
  | 'default'
  /** Drop the entry silently (Codex `missing_path_behavior: "skip"`). */
  | 'skip';

export interface ResolverEntry {
  /** Absolute native path (not yet canonical). */
  path: string;
  access: Access;
  missing: MissingBehavior;
  /** Where the entry came from, for error messages (e.g. `policy.filesystem.write[0]`). */
  source: string;
  /**
   * For write entries: protect metadata paths (.git hooks/config, .codex, .agents) even when they
   * do not exist yet (default true). Shared scratch roots (/tmp, $TMPDIR) set false: only the
   * metadata that already exists there is protected.
   */
  protectMissingMetadata?: boolean;
}

/**
 * How `.git` inside a writable root is protected. 'hooks-and-config' (default) and 'whole' both
 * keep a missing `.git` from being created (a placeholder holds the name, as Codex does); only
 * 'allow-init' lets the command create a new repository there (an existing one is protected as
 * with 'hooks-and-config'), and the report lists that gap.
 */
export type GitProtection = 'hooks-and-config' | 'whole' | 'allow-init';
export const GIT_PROTECTIONS: readonly GitProtection[] = ['hooks-and-config', 'whole', 'allow-init'];

export interface ResolverInput {
  /** Access for everything no entry covers. null: nothing (only entries grant access). */
  root: Access | null;
  entries: ResolverEntry[];
  /** Extra read-only carve-outs (absolute), protected even when missing. */
  protect: string[];
  git: GitProtection;
  /** Protect `.codex` / `.agents` / `.aws` / `.git` metadata inside writable roots (default true). */
  protectMetadata?: boolean;
  /** Named sets of protected names searched in every writable root (opt-in). */
  protectPresets?: ProtectPreset[];
  tmp: TmpMode;
  network: NetworkRule;
  mode: SandboxMode;
  degraded: boolean;
  /** Landlock mode: hide other processes' /proc entries (policy.procPrivacy). */
  procPrivacy?: boolean;
  limits: ResourceLimits;
  /**
   * Write and deny on one path: 'refuse' (default: the ergonomic policy, where it is a mistake to
   * fix) or 'deny' (Codex's profiles: ties go deny > write > read, and Codex runs such a profile
   * with the path denied, neither readable nor writable).
   */
  equalWriteDeny?: 'refuse' | 'deny';
}

const PRECEDENCE: Record<Access, number> = { read: 0, write: 1, deny: 2 };

interface CanonEntry {
  path: string;
  access: Access;
  source: string;
  protectMissingMetadata: boolean;
}

function canonicalizeEntry(e: ResolverEntry): CanonEntry | null {
  if (!path.isAbsolute(e.path)) {
    throw new SandboxError('EINVALID_POLICY', `${e.source} must be an absolute path, got ${JSON.stringify(e.path)}`, {
      detail: { field: e.source, path: e.path },
    });
  }
  const real = realpathOrNull(e.path);
  if (real === null) {
    if (e.access === 'write' && e.missing !== 'skip') {
      throw new SandboxError('EINVALID_POLICY', `${e.source}: writable root ${e.path} does not exist`, {
        detail: { field: e.source, path: e.path },
      });
    }
    // A deny-read path that does not exist yet must not become readable once created: keep it, so
    // planners can hold its place (Linux) or match it by name (macOS).
    if (e.access === 'deny' && e.missing !== 'skip') {
      return { path: canonicalizeMaybeMissing(e.path), access: e.access, source: e.source, protectMissingMetadata: false };
    }
    return null;
  }
  return { path: real, access: e.access, source: e.source, protectMissingMetadata: e.protectMissingMetadata !== false };
}

/**
 * A writable root reached through a symlink that itself lives inside a writable root could be
 * re-pointed by the sandboxed command between two runs: refuse it instead of silently widening.
 */
function checkSymlinkedWriteRoots(rawWrites: ResolverEntry[], canonWriteRoots: string[]): void {
  for (const e of rawWrites) {
    for (const link of symlinkComponents(e.path)) {
      const owner = canonWriteRoots.find((root) => isWithin(link, root));
      if (owner !== undefined) {
        throw new SandboxError(
          'ESYMLINK_ROOT',
          `${e.source}: writable root ${e.path} goes through the symlink ${link}, which lies inside the writable root ${owner}; use the real path ${realpathOrNull(e.path) ?? e.path}`,
          { detail: { field: e.source, path: e.path, symlink: link, writableRoot: owner } },
        );
      }
    }
  }
}

/** Parse a `gitdir: <path>` pointer file; relative targets are relative to the file's directory. */
function readGitdirPointer(file: string): string | null {
  const text = readTextOrNull(file);
  if (text === null) return null;
  const m = /^gitdir:\s*(.+?)\s*$/m.exec(text);
  if (!m) return null;
  return path.resolve(path.dirname(file), m[1]!);
}

const GIT_PROTECTED_NAMES = ['hooks', 'config', 'config.worktree'];

function listDirs(dir: string): string[] {
  try {
    return fs
      .readdirSync(dir, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => path.join(dir, d.name));
  } catch {
    return [];
  }
}

/** The protected metadata paths of one writable root (canonical, possibly missing). */
/**
 * Paths a git config file points at that decide what code runs: core.hooksPath and the files it
 * includes (include.path, includeIf.*.path), followed through nested includes. Relative hooksPath
 * resolves against the worktree, relative includes against the including file.
 */
export function gitConfigCodePaths(configFile: string, worktree: string, depth = 0, seen = new Set<string>()): string[] {
  // Includes form a graph the sandboxed command may have shaped: each file is read once (a loop
  // ends where it closes, keeping everything found on the way), at most GIT_INCLUDE_MAX_DEPTH
  // deep (git's own limit) and GIT_INCLUDE_MAX_FILES in all. Reads are bounded (readTextOrNull).
  const key = path.resolve(configFile); // (different spellings of one file are bounded by the caps)
  if (depth > GIT_INCLUDE_MAX_DEPTH || seen.has(key) || seen.size >= GIT_INCLUDE_MAX_FILES) return [];
  seen.add(key);
  const text = readTextOrNull(configFile);
  if (text === null) return [];
  const out: string[] = [];
  const home = process.env.HOME ?? '';
  const expand = (v: string, base: string) => {
    const t = v.trim().replace(/^"(.*)"$/, '$1');
    if (t === '') return null;
    if (t.startsWith('~/')) return path.join(home, t.slice(2));
    return path.resolve(base, t);
  };
  let section = '';
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.replace(/(^|\s)[#;].*$/, '').trim();
    const sec = /^\[\s*([A-Za-z0-9.-]+)(?:\s+"[^"]*")?\s*\]/.exec(line);
    if (sec) {
      section = sec[1]!.toLowerCase();
      continue;
    }
    const kv = /^([A-Za-z0-9-]+)\s*=\s*(.*)$/.exec(line);
    if (!kv) continue;
    const key = kv[1]!.toLowerCase();
    if (runsProgram(section, key)) {
      // A program git runs later (fsmonitor, ssh, diff/merge drivers, filters, credential
      // helpers, `!` aliases): if it names a file in the workspace, that file is protected.
      const program = programPath(kv[2]!, worktree);
      if (program) out.push(...withLinks(program));
      continue;
    }
    if (section === 'core' && key === 'hookspath') {
      const p = expand(kv[2]!, worktree);
      if (p) out.push(...withLinks(p));
    } else if ((section === 'include' || section === 'includeif') && key === 'path') {
      const p = expand(kv[2]!, path.dirname(configFile));
      if (p) {
        out.push(...withLinks(p));
        out.push(...gitConfigCodePaths(p, worktree, depth + 1, seen));
      }
    }
  }
  return out;
}

/** git refuses includes nested deeper than this (MAX_INCLUDE_DEPTH in git's config.c). */
export const GIT_INCLUDE_MAX_DEPTH = 10;
export const GIT_INCLUDE_MAX_FILES = 64;

const PROGRAM_KEYS: Record<string, string[]> = {
  core: ['fsmonitor', 'sshcommand', 'editor', 'pager', 'askpass'],
  diff: ['external', 'command', 'textconv'],
  merge: ['driver'],
  filter: ['clean', 'smudge', 'process'],
  credential: ['helper'],
  sequence: ['editor'],
  gpg: ['program'],
  alias: ['*'],
};

function runsProgram(section: string, key: string): boolean {
  const keys = PROGRAM_KEYS[section.split('.')[0]!];
  return keys !== undefined && (keys.includes(key) || keys.includes('*'));
}

/** The file a command-valued git setting runs, when it is a path (relative: from the worktree). */
function programPath(value: string, worktree: string): string | null {
  let v = value.trim().replace(/^"(.*)"$/, '$1');
  if (v.startsWith('!')) v = v.slice(1).trim();
  const first = v.split(/\s+/)[0] ?? '';
  if (first === '' || !first.includes('/')) return null; // a bare name is looked up in PATH
  return path.resolve(worktree, first);
}

/**
 * A protected path as git (or the host) will look it up later: its canonical target, plus every
 * symlink on the way as the link's own location. Protecting only the target is not enough: the
 * command could replace a link that lies in its writable root with a real directory holding
 * planted hooks or config, and the next lookup by name finds those. Planners protect the link
 * names they are given, or refuse (a link itself cannot be made read-only by a mount).
 */
export function withLinks(p: string): string[] {
  return [canonicalizeMaybeMissing(p), ...symlinkComponents(p)];
}

/** The opt-in protection presets (their type lives with ResolvedRules, which records them). */
export type { ProtectPreset };
export const PROTECT_PRESETS: readonly ProtectPreset[] = ['startup-files'];
export const STARTUP_FILES = ['.bashrc', '.bash_profile', '.zshrc', '.zprofile', '.profile', '.gitconfig', '.gitmodules', '.mcp.json', '.ripgreprc'];
export const STARTUP_DIRS = ['.vscode', '.idea', '.claude/commands', '.claude/agents'];
/** The preset is searched this deep below a writable root, within this many directories. */
export const STARTUP_SEARCH_MAX_DEPTH = 3;
export const STARTUP_SEARCH_MAX_DIRS = 512;
const WALK_SKIP = new Set(['.git', 'node_modules']);

/**
 * The 'startup-files' paths of one writable root: at the root every name (a missing one by its
 * first missing component, so a placeholder holds it), below it the existing ones found by a
 * bounded walk. `truncated` says whether the walk stopped before the end of the tree.
 */
export function startupFilesFor(
  root: string,
  includeMissing: boolean,
): { paths: string[]; truncated: boolean; unknown: string[]; below: string[] } {
  const names = [...STARTUP_FILES, ...STARTUP_DIRS];
  const out: string[] = [];
  for (const name of names) {
    const parts = name.split('/');
    let cur = root;
    for (const part of parts) {
      cur = path.join(cur, part);
      if (lstatOrNull(cur) === null) break;
    }
    if (lstatOrNull(cur) !== null || includeMissing) out.push(cur);
  }
  const firsts = new Map<string, string[]>();
  for (const name of names) {
    const [first, ...rest] = name.split('/');
    firsts.set(first!, [...(firsts.get(first!) ?? []), rest.join('/')]);
  }
  const unknown: string[] = [];
  const below: string[] = [];
  const truncated = walkBelow(
    root,
    STARTUP_SEARCH_MAX_DEPTH,
    STARTUP_SEARCH_MAX_DIRS,
    (dir, e, child) => {
      const tails = firsts.get(e.name);
      if (tails === undefined || dir === root) return; // the root's own names are handled above
      for (const t of tails) {
        const p = t === '' ? child : path.join(child, t);
        if (t === '' || lstatOrNull(p) !== null) below.push(p);
      }
    },
    undefined,
    undefined,
    unknown,
  );
  return { paths: [...out, ...below], truncated, unknown: sortUnique(unknown), below };
}

/** Nested repositories are searched this deep below a writable root, within this many directories. */
export const NESTED_REPO_MAX_DEPTH = 3;
export const NESTED_REPO_MAX_DIRS = 256;

/**
 * Directories at a writable root that are protected as a whole (protectedMetadataFor), so a
 * repository inside them needs nothing more: the walk does not enter them. It also keeps the
 * walk, and its cache, blind to their placeholders coming and going with every spawn.
 */
const WHOLE_AT_ROOT: ReadonlySet<string> = new Set(['.codex', '.agents', '.aws']);

/**
 * Directories below `root` (not root itself) that hold a `.git` entry: nested repositories and
 * submodule checkouts, whose hooks and config run code later just like the root's (FS-08). The
 * walk is bounded (depth and directory count) so spawning stays cheap in large trees.
 */
export function findNestedRepos(
  root: string,
  cut?: { truncated: boolean; nodeModules?: string[] },
  unknownOut?: string[],
): string[] {
  // Cached between spawns while nothing the walk looked at changes (walk-cache.ts).
  const { found, truncated, unknown, skipped } = cachedWalk(root, lstatOrNull(root), () => {
    const repos: string[] = [];
    const dirs: string[] = [];
    const unknown: string[] = [];
    const skipped: string[] = [];
    let probes = NODE_MODULES_MAX_PROBES;
    // Looks into `child` for .git: a repository, not one, or unknown (not searchable: mode 000).
    const probe = (child: string) => {
      dirs.push(child);
      const git = lstatState(path.join(child, '.git'));
      if (git === 'present') repos.push(child);
      else if (git === 'unknown' && unknownDirState(child, { code: 'EACCES' }) === 'unknown') unknown.push(child);
    };
    // The packages of a node_modules, one level (and @scope/name), are only probed for .git:
    // a package checked out from git, or linked in as a real directory, carries hooks that run
    // when git is used there. Within NODE_MODULES_MAX_PROBES per walk; past that, a gap.
    const probePackages = (nm: string) => {
      dirs.push(nm);
      const scan = (dir: string, scopes: boolean): void => {
        let list: fs.Dirent[];
        try {
          list = fs.readdirSync(dir, { withFileTypes: true });
        } catch (e) {
          if (unknownDirState(dir, e) === 'unknown') unknown.push(dir);
          return;
        }
        for (const d of list) {
          if (!d.isDirectory() || d.name.startsWith('.')) continue; // .bin, .cache, .package-lock.json
          const p = path.join(dir, d.name);
          if (probes-- <= 0) {
            skipped.push(nm);
            return;
          }
          if (scopes && d.name.startsWith('@')) {
            dirs.push(p);
            scan(p, false);
            if (probes <= 0) return;
          } else {
            probe(p);
          }
        }
      };
      scan(nm, true);
    };
    const stopped = walkBelow(
      root,
      NESTED_REPO_MAX_DEPTH,
      NESTED_REPO_MAX_DIRS,
      (_dir, e, child) => {
        if (!e.isDirectory()) return;
        if (e.name === 'node_modules') probePackages(child);
        else if (!WALK_SKIP.has(e.name)) probe(child); // (and read, if within the walk's reach)
      },
      dirs,
      WHOLE_AT_ROOT,
      unknown,
    );
    return { found: repos, truncated: stopped, dirs, unknown: sortUnique(unknown), skipped: sortUnique(skipped) };
  }, new Set([...WHOLE_AT_ROOT, '.git']));
  if (truncated && cut) cut.truncated = true;
  if (skipped.length > 0 && cut) (cut.nodeModules ??= []).push(...skipped);
  unknownOut?.push(...(unknown ?? []));
  return found;
}

/** Packages (node_modules/<name>, node_modules/@scope/<name>) probed for .git per walk. */
export const NODE_MODULES_MAX_PROBES = 1024;

/**
 * Breadth-first walk below `root` for the searches a plan makes on every spawn: at most `maxDepth`
 * levels and `maxDirs` directories read, so planning stays cheap in a large tree. `visit` sees
 * every entry of every directory read; `.git` and `node_modules` are never entered. Returns true
 * when the walk stopped before the end of the tree (directories left unread), which the caller
 * reports as a gap.
 */
function walkBelow(
  root: string,
  maxDepth: number,
  maxDirs: number,
  visit: (dir: string, entry: fs.Dirent, child: string) => void,
  read?: string[],
  skipAtRoot?: ReadonlySet<string>,
  unknown?: string[],
): boolean {
  let budget = maxDirs;
  let truncated = false;
  let level = [root];
  for (let depth = 1; level.length > 0; depth++) {
    const next: string[] = [];
    for (const dir of level) {
      if (budget-- <= 0) {
        truncated = true; // directories left unread at this level
        break;
      }
      let entries: fs.Dirent[];
      try {
        entries = fs.readdirSync(dir, { withFileTypes: true });
        if (dir === root) read?.push(dir); // every other directory read was visited as a child first
      } catch (e) {
        // Gone (or no longer a directory) since its parent was read: nothing in it to protect.
        // Any other failure (EACCES on a `chmod 000` directory, EIO...) leaves its contents
        // unknown, which is not the same as empty: the caller protects it whole.
        if (unknownDirState(dir, e) === 'unknown') unknown?.push(dir);
        continue;
      }
      for (const e of entries) {
        if (dir === root && skipAtRoot?.has(e.name)) continue;
        const child = path.join(dir, e.name);
        visit(dir, e, child);
        if (e.isDirectory() && !WALK_SKIP.has(e.name)) next.push(child);
      }
    }
    // Directories found at the last level (or past the budget) are not read.
    if (next.length > 0 && (depth >= maxDepth || budget <= 0)) truncated = true;
    if (depth >= maxDepth) break;
    level = next;
  }
  return truncated;
}

/**
 * Whether a directory the walk failed on (`err`) hides something the command could reach.
 * 'gone': it vanished or stopped being a directory. 'unknown': its contents could not be seen.
 * 'sealed': it belongs to another user, the caller is not root and cannot even search it; the
 * command runs with the caller's uid, so it can neither reach anything below it nor chmod it
 * open (the walk's blindness there is the command's too). Everything else that fails is
 * 'unknown', the caller's own `chmod 000` directory above all, and root's when it lacks the
 * DAC capabilities (a container that drops them).
 */
function unknownDirState(dir: string, err: unknown): 'gone' | 'unknown' | 'sealed' {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  if (code === 'ENOENT' || code === 'ENOTDIR') return 'gone';
  const euid = process.geteuid?.() ?? -1;
  const st = lstatOrNull(dir);
  if (st === null) return 'unknown';
  if (euid !== 0 && st.uid !== euid) {
    try {
      fs.accessSync(dir, fs.constants.X_OK);
    } catch {
      return 'sealed';
    }
  }
  return 'unknown';
}

/** lstat that tells a missing path from one it could not look at (EACCES on a parent...). */
function lstatState(p: string): 'present' | 'missing' | 'unknown' {
  try {
    // A missing path is the common answer: no exception for it (an exception costs ~10x the lstat).
    return fs.lstatSync(p, { throwIfNoEntry: false }) === undefined ? 'missing' : 'present';
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR' ? 'missing' : 'unknown';
  }
}

/** Our placeholder for a missing directory: empty, mode exactly 0555 (lib/platform/linux/index.ts). */
function isPlaceholderDir(p: string, st: fs.Stats | null): boolean {
  if (st === null || !st.isDirectory() || (st.mode & 0o7777) !== 0o555) return false;
  try {
    return fs.readdirSync(p).length === 0;
  } catch {
    return false;
  }
}

export function protectedMetadataFor(
  root: string,
  git: GitProtection,
  nested = true,
  cut?: { truncated: boolean; nodeModules?: string[] },
  unknown?: string[],
  /** When given, nested repositories' metadata goes here instead of into the result. */
  nestedOut?: string[],
): string[] {
  const out: string[] = [];
  const addGitDir = (gitdir: string, depth = 0): void => {
    if (git === 'whole') {
      out.push(gitdir);
      return;
    }
    // Every file git reads code-running settings from: hooks, config (core.hooksPath, filters,
    // aliases) and config.worktree (when worktreeConfig is on), protected even before they exist.
    for (const name of GIT_PROTECTED_NAMES) out.push(path.join(gitdir, name));
    // commondir moves hooks/config elsewhere, so an existing one is protected. A missing one is
    // not: git dies on a commondir it cannot read, so a placeholder would break every repository.
    // (Known gap: a planted commondir; `git: 'whole'` closes it.)
    const commondir = path.join(gitdir, 'commondir');
    if (lstatOrNull(commondir) !== null) out.push(commondir);
    // Settings can live outside .git: core.hooksPath (husky's .husky/, say) and included config
    // files. Where those sit in the workspace they are as dangerous as .git/hooks itself.
    for (const name of ['config', 'config.worktree']) out.push(...gitConfigCodePaths(path.join(gitdir, name), root));
    // Existing submodule gitdirs (<gitdir>/modules/<name>, nested) carry their own hooks/config.
    if (depth < 3) {
      for (const mod of listDirs(path.join(gitdir, 'modules'))) addGitDir(mod, depth + 1);
    }
  };
  const dotGit = path.join(root, '.git');
  // A concurrent run's placeholder (an empty 0555 directory) is a missing .git: protecting
  // hooks/config inside it would fill the placeholder, which then outlives every run.
  const found = lstatOrNull(dotGit);
  const st = isPlaceholderDir(dotGit, found) ? null : found;
  if (st !== null && st.isFile()) {
    // Worktree or submodule: protect the pointer itself (re-pointing it is as good as rewriting
    // hooks) and the gitdir it names.
    out.push(dotGit);
    const target = readGitdirPointer(dotGit);
    if (target !== null) {
      const gitdir = canonicalizeMaybeMissing(target);
      out.push(...symlinkComponents(target));
      addGitDir(gitdir);
      // Linked worktree: <main>/.git/worktrees/<name> names the shared repository in `commondir`.
      const common = readTextOrNull(path.join(gitdir, 'commondir'));
      if (common !== null && common.trim() !== '') {
        addGitDir(canonicalizeMaybeMissing(path.resolve(gitdir, common.trim())));
      }
    }
  } else if (st !== null && st.isSymbolicLink()) {
    // A symlinked .git: protect what it points at, and the link itself (replacing it with a real
    // directory would be a fresh .git with planted hooks). Planners refuse what they cannot hold.
    out.push(dotGit);
    addGitDir(canonicalizeMaybeMissing(dotGit));
  } else if (st === null && git !== 'allow-init') {
    // No repository yet: `git init` by the command would plant hooks and config that run when
    // git is next used here outside. The name itself is held (a placeholder), as Codex does.
    out.push(dotGit);
  } else if (st !== null) {
    addGitDir(dotGit);
  }
  // Agent and cloud-CLI configuration (Codex protects `.aws` in writable roots too).
  out.push(path.join(root, '.codex'), path.join(root, '.agents'), path.join(root, '.aws'));
  if (nested) {
    for (const repo of findNestedRepos(root, cut, unknown)) {
      // Only what exists: a nested directory is not a workspace root of its own.
      (nestedOut ?? out).push(
        ...protectedMetadataFor(repo, git, false).filter(
          (m) => lstatOrNull(m) !== null && !m.endsWith('/.codex') && !m.endsWith('/.agents') && !m.endsWith('/.aws'),
        ),
      );
    }
  }
  return out;
}

/**
 * Directories the walks below writable root `w` could not read (unknownDirState): a repository or
 * start-up file in one is invisible to the planner, so the directory is protected whole
 * (read-only, which also keeps the command from chmodding it open), and the report says so: the
 * protection there is not the one asked for, so it is listed as a gap. A writable root the
 * planner cannot read at all is refused: it cannot be made read-only and still be writable.
 */
function protectUnknown(w: CanonEntry, unknown: string[], carve: string[], gaps: string[]): void {
  const dirs = sortUnique(unknown);
  if (dirs.length === 0) return;
  if (dirs.includes(w.path)) {
    throw new SandboxError(
      'EUNSUPPORTED_POLICY',
      `${w.source}: the writable root ${w.path} cannot be read by the planner, so the repositories and agent ` +
        `config in it cannot be found and protected; make it readable (chmod u+rx) or drop it from the writable roots`,
      { detail: { field: w.source, path: w.path } },
    );
  }
  carve.push(...dirs);
  gaps.push(
    `unreadable directories in ${w.path} are protected whole (read-only): ${dirs.join(', ')}; the planner could not ` +
      `list them, so a repository or start-up file in them could not be protected on its own (make them readable to ` +
      `write there)`,
  );
}

function sortUnique(paths: string[]): string[] {
  return [...new Set(paths)].sort();
}

/** Resolve an entry list into the single internal rule form. */
export function resolveEntries(input: ResolverInput): ResolvedRules {
  // 1. Canonicalise and collapse equal paths by precedence.
  const byPath = new Map<string, CanonEntry>();
  for (const e of input.entries) {
    const c = canonicalizeEntry(e);
    if (c === null) continue;
    const prev = byPath.get(c.path);
    if (prev !== undefined && prev.access !== c.access && prev.access !== 'read' && c.access !== 'read' && input.equalWriteDeny !== 'deny') {
      // Equally specific write and deny: deny would win and the root would be neither writable
      // nor readable, which nobody asks for on purpose. Refuse instead of guessing.
      const [w, d] = prev.access === 'write' ? [prev, c] : [c, prev];
      throw new SandboxError(
        'EINVALID_POLICY',
        `${c.path} is both a writable root (${w.source}) and deny-read (${d.source}); deny would win and leave it ` +
          `neither readable nor writable. Drop it from one of the two: keep only the deny to hide it, keep only the ` +
          `write to use it, or deny a path inside the writable root`,
        { detail: { path: c.path, write: w.source, denyRead: d.source } },
      );
    }
    if (prev === undefined || PRECEDENCE[c.access] > PRECEDENCE[prev.access]) byPath.set(c.path, c);
    else if (prev.access === c.access) prev.protectMissingMetadata ||= c.protectMissingMetadata;
  }
  // A path entry equal to `/` behaves like the root access itself.
  let root = input.root;
  const fsRoot = path.parse(process.cwd()).root;
  const rootEntry = byPath.get(fsRoot);
  if (rootEntry !== undefined) {
    if (root === null || PRECEDENCE[rootEntry.access] > PRECEDENCE[root]) root = rootEntry.access;
    byPath.delete(fsRoot);
  }
  const entries = [...byPath.values()];

  // Effective access inherited from the nearest enclosing entry (or the root): walk up the
  // ancestors, O(depth) per lookup, so thousands of expanded glob matches stay cheap.
  const parentAccess = (p: string): Access | null => {
    let cur = p;
    for (;;) {
      const up = path.dirname(cur);
      if (up === cur) return root;
      const hit = byPath.get(up);
      if (hit !== undefined) return hit.access;
      cur = up;
    }
  };

  const rootWritable = root === 'write';
  const readAll = root === 'read' || root === 'write';

  // 2. Writable roots.
  const allWrites = entries.filter((e) => e.access === 'write');
  let writeRoots = sortUnique([
    ...(rootWritable ? [fsRoot] : []),
    ...allWrites.filter((e) => parentAccess(e.path) !== 'write').map((e) => e.path),
  ]);
  if (!rootWritable) {
    checkSymlinkedWriteRoots(
      input.entries.filter((e) => e.access === 'write' && realpathOrNull(e.path) !== null),
      writeRoots,
    );
  }

  // 3. Read-only carve-outs inside writable roots.
  const explicitWrite = new Set(allWrites.map((e) => e.path));
  // Carve-outs held even when missing (a placeholder keeps the name), and those protected only
  // because they exist (ResolvedRules.presentOnly).
  const held: string[] = [];
  const present: string[] = [];
  const gaps: string[] = [];
  if (input.protectMetadata !== false) {
    // Metadata only exists below directories; a writable file root has none.
    for (const w of allWrites) {
      if (!statOrNull(w.path)?.isDirectory()) continue;
      const cut: { truncated: boolean; nodeModules?: string[] } = { truncated: false };
      const unknown: string[] = [];
      const nestedMeta: string[] = [];
      const meta = protectedMetadataFor(w.path, input.git, true, cut, unknown, nestedMeta);
      if (w.protectMissingMetadata) held.push(...meta);
      else present.push(...meta.filter((m) => lstatOrNull(m) !== null));
      present.push(...nestedMeta);
      if (cut.nodeModules && w.protectMissingMetadata) {
        gaps.push(
          `nested repositories in ${cut.nodeModules.join(', ')} are searched in the first ${NODE_MODULES_MAX_PROBES} ` +
            `packages only; a repository in a package past that keeps writable hooks and config`,
        );
      }
      if (cut.truncated && w.protectMissingMetadata) {
        gaps.push(
          `nested repositories in ${w.path} are searched ${NESTED_REPO_MAX_DEPTH} levels deep (within ` +
            `${NESTED_REPO_MAX_DIRS} directories); a repository below that keeps writable hooks and config`,
        );
      }
      if (input.protectPresets?.includes('startup-files')) {
        const found = startupFilesFor(w.path, w.protectMissingMetadata);
        const atRoot = found.paths.filter((p) => !found.below.includes(p));
        (w.protectMissingMetadata ? held : present).push(...atRoot);
        present.push(...found.below);
        unknown.push(...found.unknown);
        if (found.truncated) {
          gaps.push(
            `protectPresets 'startup-files': the search in ${w.path} stopped after ${STARTUP_SEARCH_MAX_DEPTH} levels or ` +
              `${STARTUP_SEARCH_MAX_DIRS} directories; start-up files deeper in the tree are not protected`,
          );
        }
      }
      protectUnknown(w, unknown, present, gaps);
      if (input.git === 'allow-init' && w.protectMissingMetadata && lstatOrNull(path.join(w.path, '.git')) === null) {
        gaps.push(
          `git: 'allow-init': ${path.join(w.path, '.git')} can be created; hooks and config planted in it run when git is used there outside the sandbox`,
        );
      }
    }
  }
  for (const p of input.protect) {
    if (!path.isAbsolute(p)) {
      throw new SandboxError('EINVALID_POLICY', `protect entry must be an absolute path, got ${JSON.stringify(p)}`, {
        detail: { path: p },
      });
    }
    // A carve-out equal to a writable root would make the whole root read-only, which is not
    // what either entry asks for; it used to be dropped while the report said 'enforced'.
    const target = canonicalizeMaybeMissing(p);
    if (explicitWrite.has(target) || writeRoots.includes(target)) {
      const w = allWrites.find((e) => e.path === target);
      throw new SandboxError(
        'EINVALID_POLICY',
        `protect entry ${p} is the writable root ${target}${w ? ` (${w.source})` : ''} itself, which a carve-out ` +
          `cannot make read-only while it stays writable. Drop it from the writable roots to make it read-only, or ` +
          `protect paths inside it`,
        { detail: { path: p, writableRoot: target, ...(w ? { field: w.source } : {}) } },
      );
    }
    held.push(...withLinks(p));
  }
  for (const e of entries) {
    if (e.access === 'read' && parentAccess(e.path) === 'write') held.push(e.path);
  }
  const carve = [...held, ...present];
  const heldSet = new Set(held);
  const presentSet = new Set(present.filter((p) => !heldSet.has(p)));
  const kept = sortUnique(carve.filter((c) => !explicitWrite.has(c) && writeRoots.some((w) => isStrictlyWithin(c, w))));
  // A carve-out inside another carve-out is already read-only (and a missing one cannot be
  // created there), unless a writable root in between makes it writable again.
  const allWriteRoots = [...explicitWrite];
  const readOnly = kept.filter(
    (c) =>
      !kept.some(
        (outer) =>
          isStrictlyWithin(c, outer) && !allWriteRoots.some((w) => isWithin(c, w) && isStrictlyWithin(w, outer)),
      ),
  );
  // An explicit writable entry inside a carve-out (ws/.codex/cache under the protected .codex)
  // is the most specific entry there: it is a writable root of its own, re-opened inside it.
  const reopened = allWrites.map((e) => e.path).filter((w) => !writeRoots.includes(w) && readOnly.some((c) => isStrictlyWithin(w, c)));
  if (reopened.length > 0) writeRoots = sortUnique([...writeRoots, ...reopened]);

  // 4. Deny-read paths: only those something readable would expose.
  const denyRead = sortUnique(
    entries
      .filter((e) => e.access === 'deny')
      .filter((e) => {
        const parent = parentAccess(e.path);
        return parent === 'read' || parent === 'write';
      })
      .map((e) => e.path),
  );

  // 5. Readable roots not already readable through an enclosing entry.
  const readRoots = sortUnique(
    entries
      .filter((e) => e.access === 'read')
      .filter((e) => {
        const parent = parentAccess(e.path);
        return parent === null || parent === 'deny';
      })
      .map((e) => e.path),
  );

  const presentOnly = readOnly.filter((c) => presentSet.has(c));
  return {
    readAll,
    readRoots,
    writeRoots,
    readOnly,
    ...(presentOnly.length > 0 ? { presentOnly } : {}),
    denyRead,
    tmp: input.tmp,
    network: input.network,
    mode: input.mode,
    degraded: input.degraded,
    ...(input.procPrivacy ? { procPrivacy: true } : {}),
    limits: { ...input.limits },
    ...(gaps.length > 0 ? { gaps } : {}),
    ...(input.protectMetadata !== false && (input.protectPresets ?? []).length > 0 ? { protectPresets: [...new Set(input.protectPresets)] } : {}),
  };
}
