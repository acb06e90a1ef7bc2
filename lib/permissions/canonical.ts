/**
 * Path canonicalisation helpers for the resolver. The only I/O here is lstat/realpath/readFile on
 * the paths the caller named.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

/** realpath, or null when the path (or a component) does not exist. Other errors propagate. */
export function realpathOrNull(p: string): string | null {
  try {
    return fs.realpathSync.native(p);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw err;
  }
}

/**
 * Canonical form of a path that may not exist yet: realpath of the longest existing prefix, with
 * the missing tail appended. Used for carve-outs, which must be protected before they exist.
 */
export function canonicalizeMaybeMissing(p: string): string {
  const abs = path.resolve(p);
  const direct = realpathOrNull(abs);
  if (direct !== null) return direct;
  const tail: string[] = [];
  let cur = abs;
  for (;;) {
    const parent = path.dirname(cur);
    tail.unshift(path.basename(cur));
    if (parent === cur) return abs;
    const real = realpathOrNull(parent);
    if (real !== null) {
      // A dangling symlink in the middle would make the tail land somewhere else; the parent is
      // real, so joining the remaining (non-existent) names is exact.
      return path.join(real, ...tail);
    }
    cur = parent;
  }
}

export function lstatOrNull(p: string): fs.Stats | null {
  try {
    // A missing path is the common answer: no exception for it (~4 us each, many per spawn).
    return fs.lstatSync(p, { throwIfNoEntry: false }) ?? null;
  } catch {
    return null;
  }
}

export function statOrNull(p: string): fs.Stats | null {
  try {
    return fs.statSync(p, { throwIfNoEntry: false }) ?? null;
  } catch {
    return null;
  }
}

/** Workspace text files read while planning (git config, pointers) are read up to this size. */
export const MAX_PLAN_READ_BYTES = 1 << 20;

/**
 * The text of a small regular file, or null. The workspace is written by the sandboxed command,
 * so what a plan reads there is hostile input: a FIFO would block the host forever on open or
 * read, /dev/zero would never end, a symlink could be swapped between checks. So: resolve the
 * path first, open the result with O_NONBLOCK|O_NOFOLLOW (a FIFO opens at once, a swapped-in link
 * fails), fstat the open file and refuse anything but a regular file, and read at most `maxBytes`
 * (what lies beyond is not looked at).
 */
export function readTextOrNull(p: string, maxBytes = MAX_PLAN_READ_BYTES): string | null {
  // Only a final symlink needs resolving (links in the middle are followed by open itself);
  // an lstat is cheaper than a realpath in the common case, a plain file.
  const first = lstatOrNull(p);
  if (first === null) return null;
  let real: string | null = p;
  if (first.isSymbolicLink()) {
    try {
      real = realpathOrNull(p);
    } catch {
      return null;
    }
    if (real === null) return null;
  } else if (!first.isFile()) {
    return null;
  }
  const { O_RDONLY, O_NONBLOCK, O_NOFOLLOW } = fs.constants;
  let fd: number;
  try {
    fd = fs.openSync(real, O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
  } catch {
    return null;
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) return null;
    const buf = Buffer.alloc(Math.min(st.size, maxBytes));
    let got = 0;
    while (got < buf.length) {
      const n = fs.readSync(fd, buf, got, buf.length - got, got);
      if (n <= 0) break;
      got += n;
    }
    return buf.subarray(0, got).toString('utf8');
  } catch {
    return null;
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Every symlink met while walking `abs` component by component, as the canonical location of the
 * link itself (canonical parent + link name). These are the inodes whose rewrite would redirect
 * the path.
 */
export function symlinkComponents(abs: string): string[] {
  const links: string[] = [];
  const parts = path.resolve(abs).split(path.sep).filter((s) => s !== '');
  let cur = path.parse(path.resolve(abs)).root;
  for (const part of parts) {
    const next = path.join(cur, part);
    const st = lstatOrNull(next);
    if (st === null) break;
    if (st.isSymbolicLink()) {
      const parentReal = realpathOrNull(cur) ?? cur;
      links.push(path.join(parentReal, part));
      const target = realpathOrNull(next);
      if (target === null) break;
      cur = target;
    } else {
      cur = next;
    }
  }
  return links;
}
