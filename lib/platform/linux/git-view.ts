/**
 * Isolated mode holds a missing protected name (`.mcp.json`, `.gitmodules`, `.codex`, ...) with a
 * placeholder: a read-only mount needs a name to sit on, so the command lists it (Landlock mode's
 * path supervisor refuses the create instead and leaves no placeholder). Git run inside must not
 * take the placeholders for the command's files: `git add -A` committed them as empty blobs, and
 * the host's tree showed them deleted once they were removed after the run. So every repository
 * with placeholders in its worktree gets, for the run, a view of its info/exclude that also names
 * them (MountKind.ViewFile: a file in a tmpfs of the sandbox's own, bound read-only over the
 * host's, which is not touched). git status, add -A, stash -u and clean -n then pass them by.
 */
import fs from 'node:fs';
import path from 'node:path';

import type { LinuxMountOp } from '../../native';
import { isWithin } from '../../paths';
import { lstatOrNull } from '../../permissions/canonical';

/** A view larger than this is not made (the native step writes it into a 1 MiB tmpfs). */
const MAX_VIEW_BYTES = 512 * 1024;


function readOrNull(p: string): string | null {
  try {
    return fs.readFileSync(p, 'utf8');
  } catch {
    return null;
  }
}

/**
 * The worktree top and info/exclude of the repository git finds from `dir` (its discovery: the
 * nearest `.git` that is a repository, a directory with HEAD or a `gitdir:` file; a linked
 * worktree's exclude is its common dir's). `held`: this run's placeholders (an empty `.git` one
 * is no repository, and git walks on past it).
 */
function repositoryOf(dir: string, held: ReadonlySet<string>): { top: string; exclude: string } | null {
  for (let d = dir; ; d = path.dirname(d)) {
    const dotGit = path.join(d, '.git');
    const st = held.has(dotGit) ? null : lstatOrNull(dotGit);
    let gitdir: string | null = null;
    if (st?.isDirectory() && lstatOrNull(path.join(dotGit, 'HEAD')) !== null) gitdir = dotGit;
    else if (st?.isFile()) {
      const m = /^gitdir: (.+)$/m.exec(readOrNull(dotGit) ?? '');
      if (m) gitdir = path.resolve(d, m[1]!.trim());
    }
    if (gitdir !== null) {
      const common = readOrNull(path.join(gitdir, 'commondir'));
      const commonDir = common === null ? gitdir : path.resolve(gitdir, common.trim());
      return { top: d, exclude: path.join(commonDir, 'info', 'exclude') };
    }
    if (d === '/') return null;
  }
}

/** An exclude pattern matching exactly the path `rel` below the worktree top (null: none can). */
function anchoredPattern(rel: string): string | null {
  if (/[\n\r]/.test(rel)) return null;
  // A backslash makes the next character literal: glob characters, a leading '#' or '!' and
  // trailing spaces would otherwise mean something else.
  return `/${rel.replace(/[\\*?[\]#!]/g, '\\$&').replace(/ +$/, (s) => s.replace(/ /g, '\\ '))}`;
}

/**
 * The ViewFile steps for `ghosts` (this run's placeholders): one per repository whose worktree
 * holds some, outside its .git. A repository whose exclude file is missing, not a regular file,
 * unreadable or hidden by a deny-read path gets none (git then lists the placeholders, as before).
 */
export function gitExcludeViews(ghosts: string[], denyRead: string[], viewKind: number): LinuxMountOp[] {
  const held = new Set(ghosts);
  const byExclude = new Map<string, string[]>();
  for (const g of ghosts) {
    if (g.split('/').includes('.git')) continue; // inside a gitdir, or a .git itself: git never lists those
    const repo = repositoryOf(path.dirname(g), held);
    if (repo === null) continue;
    const line = anchoredPattern(path.relative(repo.top, g));
    if (line === null) continue;
    byExclude.set(repo.exclude, [...(byExclude.get(repo.exclude) ?? []), line]);
  }
  const ops: LinuxMountOp[] = [];
  for (const [exclude, lines] of byExclude) {
    if (!lstatOrNull(exclude)?.isFile() || denyRead.some((d) => isWithin(exclude, d))) continue;
    const own = readOrNull(exclude);
    if (own === null || own.includes('\0')) continue;
    const data =
      own + (own === '' || own.endsWith('\n') ? '' : '\n') + '# process-sandbox: this run\'s placeholders for missing protected names\n' + lines.join('\n') + '\n';
    if (Buffer.byteLength(data) > MAX_VIEW_BYTES) continue;
    ops.push({ kind: viewKind, path: exclude, data });
  }
  return ops;
}
