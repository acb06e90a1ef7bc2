/**
 * Expansion of deny-only glob patterns to the concrete paths that exist now. Sandboxes enforce
 * concrete paths, so a pattern is a snapshot taken before launch: a file created later is not
 * covered, and matches deeper than the depth cap are not found (Codex's `glob_scan_max_depth`).
 * Symlinked directories are not descended into (no loops); a matching symlink is returned and the
 * resolver canonicalises it to its target.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { SandboxError } from '../errors';

export const DEFAULT_GLOB_MAX_DEPTH = 8;
export const DEFAULT_GLOB_MAX_MATCHES = 4096;

export function hasGlobMeta(s: string): boolean {
  return /[*?[{]/.test(s);
}

function segmentToRegExp(seg: string): RegExp {
  let src = '';
  for (let i = 0; i < seg.length; i++) {
    const ch = seg[i]!;
    if (ch === '*') src += '[^/]*';
    else if (ch === '?') src += '[^/]';
    else if (ch === '[') {
      const end = seg.indexOf(']', i + 2);
      if (end === -1) {
        src += '\\[';
        continue;
      }
      let body = seg.slice(i + 1, end);
      if (body.startsWith('!')) body = '^' + body.slice(1);
      src += '[' + body.replace(/\\/g, '\\\\') + ']';
      i = end;
    } else if (ch === '{') {
      const end = seg.indexOf('}', i);
      if (end === -1) {
        src += '\\{';
        continue;
      }
      const alts = seg.slice(i + 1, end).split(',');
      src += '(?:' + alts.map((a) => a.replace(/[.+^$()|\\]/g, '\\$&').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]')).join('|') + ')';
      i = end;
    } else src += ch.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${src}$`, 's');
}

export interface GlobLimits {
  maxDepth?: number;
  maxMatches?: number;
}

/**
 * Every existing path matching an absolute pattern (`*`, `?`, `[...]`, `{a,b}` within a segment;
 * `**` for any number of directories). Throws EUNSUPPORTED_POLICY past the match cap, so a deny
 * list is never silently truncated.
 */
export function expandGlob(pattern: string, limits: GlobLimits = {}, p: typeof path = path): string[] {
  const maxDepth = limits.maxDepth ?? DEFAULT_GLOB_MAX_DEPTH;
  const maxMatches = limits.maxMatches ?? DEFAULT_GLOB_MAX_MATCHES;
  if (!p.isAbsolute(pattern)) {
    throw new SandboxError('EINVALID_POLICY', `glob pattern ${JSON.stringify(pattern)} must be absolute`);
  }
  const norm = p.normalize(pattern);
  const rootDir = p.parse(norm).root;
  const segs = norm.slice(rootDir.length).split(p.sep).filter((s) => s !== '');
  let base = rootDir;
  let i = 0;
  while (i < segs.length && !hasGlobMeta(segs[i]!)) base = p.join(base, segs[i++]!);
  const rest = segs.slice(i);
  const matchers = rest.map((s) => (s === '**' ? null : segmentToRegExp(s)));
  const found = new Set<string>();

  const add = (m: string): void => {
    found.add(m);
    if (found.size > maxMatches) {
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        `glob pattern ${JSON.stringify(pattern)} matches more than ${maxMatches} paths; narrow it or deny a directory instead`,
        { detail: { pattern, maxMatches } },
      );
    }
  };

  const walk = (dir: string, k: number, depth: number): void => {
    if (k === matchers.length) {
      add(dir);
      return;
    }
    const m = matchers[k];
    if (m === null) {
      // `**`: zero directories here, or descend one more level and stay on `**`.
      walk(dir, k + 1, depth);
      if (depth >= maxDepth) return;
      for (const d of readDir(dir)) {
        if (d.isDirectory()) walk(p.join(dir, d.name), k, depth + 1);
      }
      return;
    }
    if (depth >= maxDepth) return;
    for (const d of readDir(dir)) {
      if (!m!.test(d.name)) continue;
      const child = p.join(dir, d.name);
      if (k + 1 === matchers.length) add(child);
      else if (d.isDirectory()) walk(child, k + 1, depth + 1);
    }
  };

  if (matchers.length === 0) {
    if (fs.existsSync(base)) add(base);
  } else {
    walk(base, 0, 0);
  }
  return [...found].sort();
}

function readDir(dir: string): fs.Dirent[] {
  try {
    return fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
}
