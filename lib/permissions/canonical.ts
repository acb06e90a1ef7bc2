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

/** True when `child` equals `parent` or lies below it (both absolute, normalised). */
export function isWithin(child: string, parent: string): boolean {
  if (child === parent) return true;
  const rel = path.relative(parent, child);
  return rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
}

/** True when `child` lies strictly below `parent`. */
export function isStrictlyWithin(child: string, parent: string): boolean {
  return child !== parent && isWithin(child, parent);
}

export function lstatOrNull(p: string): fs.Stats | null {
  try {
    return fs.lstatSync(p);
  } catch {
    return null;
  }
}

export function statOrNull(p: string): fs.Stats | null {
  try {
    return fs.statSync(p);
  } catch {
    return null;
  }
}

export function readTextOrNull(p: string): string | null {
  try {
    return fs.readFileSync(p, 'utf8');
  } catch {
    return null;
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
