/**
 * Path containment: is a path a root itself or below it? One spelling for the host's paths
 * (isWithin) and one for Windows paths on any host (isWithinWin32). Both take the inner path
 * first: `isWithin(child, parent)`. Pure string work, no I/O.
 */
import * as path from 'node:path';

/** An absolute path with no empty, `.` or `..` component and no trailing slash (but `/`). */
const NORMALISED = /^\/(?:(?!\.\.?(?:\/|$))[^/]+(?:\/(?!\.\.?(?:\/|$))[^/]+)*)?$/;

/**
 * True when `child` equals `parent` or lies below it (both absolute). `p` is the path module whose
 * rules a path that is not normalised is compared by: the host's (tests pass path.win32).
 */
export function isWithin(child: string, parent: string, p: path.PlatformPath = path): boolean {
  if (child === parent) return true;
  // The planner calls this for every pair of rules, per spawn: compare strings where both are
  // normalised already (path.relative resolves both on every call), else fall back to it.
  if (NORMALISED.test(child) && NORMALISED.test(parent)) {
    return parent === '/' || (child.startsWith(parent) && child.charCodeAt(parent.length) === 47 /* '/' */);
  }
  // A name that merely begins with dots ('..cache') is inside: only '..' itself climbs out, with
  // the separator path.relative writes ('\\' on Windows).
  const rel = p.relative(parent, child);
  return rel !== '' && rel !== '..' && !rel.startsWith('../') && !rel.startsWith('..' + p.sep) && !p.isAbsolute(rel);
}

/** True when `child` lies strictly below `parent`. */
export function isStrictlyWithin(child: string, parent: string, p: path.PlatformPath = path): boolean {
  return child !== parent && isWithin(child, parent, p);
}

/** A Windows path as Windows compares it: `\` separators, no trailing one, lower case. */
export function winKey(p: string): string {
  return p.replace(/\//g, '\\').replace(/\\+$/, '').toLowerCase();
}

/** True when `child` equals `parent` or lies below it (Windows paths, case-insensitive). */
export function isWithinWin32(child: string, parent: string): boolean {
  const r = winKey(parent);
  const i = winKey(child);
  return i === r || i.startsWith(r.endsWith('\\') ? r : r + '\\');
}
