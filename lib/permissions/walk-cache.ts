/**
 * A cache of the planner's bounded walk below a writable root (findNestedRepos, resolve.ts),
 * kept valid by directory watches. The same cache keeps Landlock mode's listing of / (linux/plan.ts
 * landlockReadAllRules), a walk of one directory.
 *
 * Why: the walk reads up to NESTED_REPO_MAX_DIRS directories and looks for `.git` in each of
 * their subdirectories, on every spawn: in a real checkout that is most of a sandboxed spawn's
 * planning time (this repository, 46 directories: ~2.5 ms per spawn; a tree that fills the
 * budget, several times that), and an agent runs command after command in the same workspace.
 *
 * What keeps it correct: every directory the walk read or probed is watched (inotify, through
 * the addon: native/linux/dir_watch.h) for entries created, removed or renamed, attribute
 * changes, and its own removal or move; the mount table is watched too. Before a cached walk is
 * used, the pending events are drained synchronously: the kernel queues an event in the very
 * syscall that made the change, so any change made before this spawn is seen, however recent.
 * A change to any watched directory drops every cached walk that read or probed it; an overflowed
 * queue or a changed mount table drops them all.
 *
 * Filling: a walk is cached only on its second miss (a workspace seen once pays nothing extra),
 * and only if a second walk after the watches were added finds exactly the same directories and
 * repositories with no event in between: a change between the first walk and the watches shows
 * up as a difference or an event, and the walk is then used once, uncached. The root is keyed by
 * its device and inode too (a workspace removed and made again is a new key).
 *
 * Limits: at most MAX_WATCHES watches in all (the uid's inotify watches are shared with the host
 * and its sandboxes: lib/platform/linux/quotas.ts keeps half of the limit for the host, and this
 * takes a small part of that half); the walks used longest ago make room for a new one, and a
 * walk that needs more than all of it is not cached. Without the addon's
 * watches (not Linux, or no inotify) nothing is cached.
 */
import * as fs from 'node:fs';

import { tryLoadNative, type LinuxNative } from '../native';

export const MAX_WATCHES = 4096;
let budget = MAX_WATCHES;

export interface WalkResult {
  found: string[];
  truncated: boolean;
  /** Every directory the walk read or looked into. */
  dirs: string[];
  /** Directories it could not read or look into (resolve.ts protects them whole). */
  unknown?: string[];
  /** Directories it searched only in part (a node_modules past its probe cap). */
  skipped?: string[];
}

interface Entry {
  found: string[];
  truncated: boolean;
  unknown: string[];
  skipped: string[];
  wds: number[];
  /** The root's own watch, and the names whose events there do not concern the walk. */
  rootWd: number;
  ignore: ReadonlySet<string>;
}

interface Watcher {
  native: LinuxNative;
  fd: number;
  mountFd: number;
}

let watcher: Watcher | null | undefined;
const entries = new Map<string, Entry>();
const seen = new Set<string>();
let hits = 0;
/** wd -> the cached walks that depend on it. */
const users = new Map<number, Set<string>>();

function getWatcher(): Watcher | null {
  if (watcher !== undefined) return watcher;
  watcher = null;
  if (process.platform !== 'linux') return null;
  const { binding } = tryLoadNative();
  const native = binding?.platform === 'linux' ? binding : undefined;
  if (!native?.dirWatchOpen) return null;
  const { fd, mountFd } = native.dirWatchOpen();
  if (fd < 0 || mountFd < 0) return null;
  watcher = { native, fd, mountFd };
  // A Worker that ends takes its copy of this module with it: its fds must not outlive it.
  process.once('exit', () => {
    for (const f of [fd, mountFd]) {
      try {
        fs.closeSync(f);
      } catch {
        // closed already
      }
    }
  });
  return watcher;
}

function drop(key: string, w: Watcher): void {
  const e = entries.get(key);
  if (!e) return;
  entries.delete(key);
  for (const wd of e.wds) {
    const u = users.get(wd);
    u?.delete(key);
    if (u && u.size === 0) {
      users.delete(wd);
      w.native.dirWatchRemove(w.fd, wd);
    }
  }
}

/** Whether an event (watch, entry name) can change a walk whose root has `rootWd`: not one on
 * the root's watch for a name the walk never enters. */
function concerns(wd: number, name: string, rootWd: number, ignore: ReadonlySet<string>): boolean {
  return !(wd === rootWd && name !== '' && ignore.has(name));
}

/** Drops every cached walk that `events` ([wd, name, ...] from dirWatchPoll; null: everything) touch. */
function dropTouched(w: Watcher, events: Array<number | string> | null): void {
  if (events === null) {
    for (const key of [...entries.keys()]) drop(key, w);
    return;
  }
  for (let i = 0; i < events.length; i += 2) {
    const wd = events[i] as number;
    const name = events[i + 1] as string;
    for (const key of [...(users.get(wd) ?? [])]) {
      const e = entries.get(key);
      if (e && !concerns(wd, name, e.rootWd, e.ignore)) continue;
      drop(key, w);
    }
  }
}

/** Drains pending events and drops every cached walk they touch. */
function sync(w: Watcher): void {
  dropTouched(w, w.native.dirWatchPoll(w.fd, w.mountFd));
}

function watchedCount(): number {
  return users.size;
}

/**
 * The walk's result for `root` (whose lstat is `st`), from the cache when it is still valid,
 * else from `walk()` (and cached when it can be; see the file comment).
 */
export function cachedWalk(
  root: string,
  st: fs.Stats | null,
  walk: () => WalkResult,
  /** Names at the root the walk never enters (their churn, e.g. placeholders, is not a change). */
  ignoreAtRoot: ReadonlySet<string> = new Set(),
  /** Which walk this is, when several kinds start at one root (the key holds it). */
  kind = 'nested-repos',
): { found: string[]; truncated: boolean; unknown: string[]; skipped: string[] } {
  const w = st?.isDirectory() ? getWatcher() : null;
  const plain = (r: WalkResult) => ({ found: r.found, truncated: r.truncated, unknown: r.unknown ?? [], skipped: r.skipped ?? [] });
  if (!w) return plain(walk());
  const key = `${kind}:${st!.dev}:${st!.ino}:${root}`;
  sync(w);
  const hit = entries.get(key);
  if (hit) {
    hits++;
    entries.delete(key); // most recently used last: the eviction order
    entries.set(key, hit);
    return { found: [...hit.found], truncated: hit.truncated, unknown: [...hit.unknown], skipped: [...hit.skipped] };
  }
  const first = walk();
  if (!seen.has(key)) {
    seen.add(key);
    if (seen.size > 1024) seen.clear();
    return plain(first);
  }
  // An unreadable root (a change above it would go unseen) or a walk too big alone: not cached.
  if (first.dirs[0] !== root || first.dirs.length > budget) return plain(first);
  // Room for it: the walks used longest ago go first (a host that moves between workspaces).
  for (const old of entries.keys()) {
    if (watchedCount() + first.dirs.length <= budget) break;
    drop(old, w);
  }
  const wds: number[] = [];
  const undo = () => {
    for (const wd of wds) if (!users.has(wd)) w.native.dirWatchRemove(w.fd, wd);
  };
  for (const dir of first.dirs) {
    const wd = w.native.dirWatchAdd(w.fd, dir);
    if (wd < 0) {
      undo();
      return plain(first);
    }
    wds.push(wd);
  }
  const second = walk();
  // An event on a directory this walk watches (earlier ones were drained by sync()), or a
  // different second walk, and the walk is not trusted to stay as it is. Events on other
  // directories (other walks', or removed watches' IN_IGNORED) are not about this one.
  const changed = w.native.dirWatchPoll(w.fd, w.mountFd);
  const mine = new Set(wds);
  const rootWd = wds[0]!; // first.dirs[0] is the root
  let touched = false;
  for (let i = 0; changed !== null && i < changed.length; i += 2) {
    const wd = changed[i] as number;
    const name = changed[i + 1] as string;
    if (mine.has(wd) && concerns(wd, name, rootWd, ignoreAtRoot)) touched = true;
  }
  const same =
    changed !== null &&
    !touched &&
    second.truncated === first.truncated &&
    second.found.join('\0') === first.found.join('\0') &&
    (second.unknown ?? []).join('\0') === (first.unknown ?? []).join('\0') &&
    (second.skipped ?? []).join('\0') === (first.skipped ?? []).join('\0') &&
    second.dirs.join('\0') === first.dirs.join('\0');
  dropTouched(w, changed);
  if (!same) {
    undo();
    return plain(second);
  }
  const unique = [...new Set(wds)];
  for (const wd of unique) {
    let u = users.get(wd);
    if (!u) users.set(wd, (u = new Set()));
    u.add(key);
  }
  const result = plain(second);
  entries.set(key, { ...result, wds: unique, rootWd, ignore: ignoreAtRoot });
  return { found: [...result.found], truncated: result.truncated, unknown: [...result.unknown], skipped: [...result.skipped] };
}

/** Test hook: the watch budget (MAX_WATCHES unless a test makes it small). */
export function setWalkCacheBudget(n: number): void {
  budget = n;
}

/** Test hook: how many walks are cached, how many directories are watched, how many hits so far. */
export function walkCacheStats(): { entries: number; watches: number; hits: number } {
  return { entries: entries.size, watches: users.size, hits };
}
