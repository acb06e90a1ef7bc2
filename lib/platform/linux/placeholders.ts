/**
 * The host side of isolated mode's placeholders for missing protected names: every run that relies
 * on one holds a shared lock on it, and the last one removes it (native placeholder_ops.cc).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import { SandboxError } from '../../errors';
import type { LinuxNative } from '../../native';

/**
 * Placeholders for missing protected or deny-read paths live on the host while runs use them.
 * Concurrent runs in one workspace (in this process or another) share them: a later run sees the
 * placeholder as an existing path and binds it, and removing it would detach that bind. So every
 * run holds a shared lock on each placeholder-looking path it relies on, and a placeholder is
 * removed only by a run that can take it exclusively. A placeholder left by a host that died is
 * picked up and removed the same way by the next run that uses it.
 */
export interface HeldPlaceholder {
  path: string;
  fd: number;
}

/**
 * Ours look like this: an empty 0555 directory, or an empty 0444 file. `shape` skips the listing
 * of a directory: enough where the next step is our own lock or rmdir (which takes only an empty
 * directory), and it is what runs on every spawn's path (a missing path costs one lstat, no throw).
 */
export function looksLikePlaceholder(p: string, shape = false): boolean {
  try {
    const st = fs.lstatSync(p, { throwIfNoEntry: false });
    if (st === undefined) return false;
    const mode = st.mode & 0o7777;
    if (st.isDirectory()) return mode === 0o555 && (shape || fs.readdirSync(p).length === 0);
    return st.isFile() && mode === 0o444 && st.size === 0;
  } catch {
    return false;
  }
}

const EWOULDBLOCK = os.constants.errno.EWOULDBLOCK;


/**
 * The addon never waits on a lock (a sandboxed command can hold one on a placeholder it sees).
 * Placeholders init just made for this run: one already locked by someone else (the command itself
 * could race for it) cannot be relied on, since its holder's run could remove it mid-run and the
 * command could then create the path for real. The caller stops the command (fail closed).
 */
export function lockPlaceholders(native: LinuxNative, paths: string[]): HeldPlaceholder[] {
  const held: HeldPlaceholder[] = [];
  for (const p of paths) {
    if (!looksLikePlaceholder(p, true)) continue;
    const fd = native.lockPlaceholder(p);
    if (fd >= 0) {
      held.push({ path: p, fd });
    } else if (fd === -EWOULDBLOCK) {
      releasePlaceholders(native, held);
      throw placeholderBusy(p);
    }
  }
  return held;
}

function placeholderBusy(p: string): SandboxError {
  return new SandboxError(
    'ESPAWN',
    `the placeholder ${p} is locked by another process (a running sandboxed command can hold it) and could ` +
      `not be replaced; it cannot be relied on to keep the protected path from being created, so nothing was started`,
    // spawn() reports it as a start failure ('error' event, rejected `exited`), never a throw: a
    // command must not be able to make the host's other spawns throw.
    { detail: { path: p, startFailure: true } },
  );
}

/**
 * Existing placeholders (another run's, or a dead host's) that this run will rely on, held with a
 * shared lock before the plan is made. A lookalike whose lock stays exclusively held (past the
 * addon's short retries, which ride out a host's release) is relied on by no run: a run relying on
 * it holds a shared lock, which excludes an exclusive one. Only a command that sees it holds it so
 * (an attack on the host's other spawns), so it is removed like any unused placeholder; the plan
 * then finds the path missing and this run's own init makes a fresh placeholder, locked after the
 * spawn. Removal without the lock is safe (native.removeLookalike): it takes only what still looks
 * like a placeholder, and looks it up without following a link on the way (the command holding
 * the lock can swap a directory it may write on the way for a link to anywhere: removing by path
 * would then delete the file of that name there, outside the sandbox).
 */
export function claimPlaceholders(native: LinuxNative, paths: string[]): HeldPlaceholder[] {
  const held: HeldPlaceholder[] = [];
  try {
    for (const p of paths) {
      if (!looksLikePlaceholder(p)) continue;
      let fd = native.lockPlaceholder(p);
      if (fd === -EWOULDBLOCK) {
        native.removeLookalike(p); // gone already, no longer a lookalike, or a link on the way: the next look decides
        if (!looksLikePlaceholder(p)) continue; // gone: the plan makes a fresh one
        fd = native.lockPlaceholder(p); // a new lookalike appeared at once (a racing command)
        if (fd === -EWOULDBLOCK) throw placeholderBusy(p);
      }
      if (fd >= 0) held.push({ path: p, fd });
    }
  } catch (e) {
    releasePlaceholders(native, held);
    throw e;
  }
  return held;
}

/** Deepest first: a directory made on the way is empty, and so removable, only after what is in it. */
export function releasePlaceholders(native: LinuxNative, held: HeldPlaceholder[]): void {
  const depth = (p: string): number => p.split('/').length;
  for (const h of [...held].sort((a, b) => depth(b.path) - depth(a.path))) {
    native.releasePlaceholder(h.fd, h.path, looksLikePlaceholder(h.path, true));
  }
}
