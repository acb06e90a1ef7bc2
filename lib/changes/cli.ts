/**
 * The CLI's side of `changes` (lib/cli/run.ts, run-args.ts, revert.ts, changes.ts, apply.ts and discard.ts use these):
 *
 *   process-sandbox run --changes record [--changes-dir DIR] [--changes-max-bytes N] -- cmd
 *   process-sandbox changes [--json] DIR     list what a journal recorded (or a layer staged)
 *   process-sandbox revert DIR               undo it
 *   process-sandbox run --changes stage [--changes-dir DIR] -- cmd
 *   process-sandbox apply DIR [paths...]     write the staged changes (or some) into the roots
 *   process-sandbox discard DIR              drop the layer
 */
import * as path from 'node:path';
import { SandboxError, exitStatusForError } from '../errors';
import { listChanges, openStagedChanges, revertChanges, type ChangesHandle } from './index';
import type { ChangeEntry, ChangesMode, ChangesOptions } from './types';

/** The lines `run --help` lists for these options. */
export const RUN_CHANGES_USAGE = `  --changes <mode>       record: list and undo what the command changes in the writable roots
                         (a journal; see 'process-sandbox revert') | stage: the writes land in a
                         layer until 'process-sandbox apply' (or 'discard')
  --changes-dir <dir>    keep the journal (or layer) there (absolute, new or empty, outside the
                         writable roots; default: a new directory in this user's temp area)
  --changes-max-bytes <n> bound on the journal's saved copies; past it the command's write fails
                         with ENOSPC (never unrecorded)
`;

export const REVERT_USAGE = `Usage: process-sandbox revert <dir>

Undoes what a 'run --changes record' command changed, from the journal in <dir>: every recorded
path is put back as it was when the command started (contents, modes, symlinks, names). When a
recorded path was changed since the run by someone else, nothing is changed: the paths are named
and the exit status is 125. Reverting a journal twice does nothing the second time.
`;

export const CHANGES_USAGE = `Usage: process-sandbox changes [--json] <dir>

Lists what a 'run --changes record' command changed, from the journal in <dir>, or what a
'run --changes stage' command staged, from the layer in <dir>: one line per path, "created",
"modified", "deleted" or "renamed" (with the old path), and its type.
  --json                 a JSON array of { path, kind, from?, type } on stdout
`;

export const APPLY_USAGE = `Usage: process-sandbox apply <dir> [paths...]

Writes what a 'run --changes stage' command staged in the layer <dir> into the writable roots:
every change, or those at or below the paths named (relative ones are taken from the current
directory). When a chosen path was changed outside during the run, nothing is applied: the paths
are named and the exit status is 125. The layer stays until 'process-sandbox discard <dir>'.
`;

export const DISCARD_USAGE = `Usage: process-sandbox discard <dir>

Drops what a 'run --changes stage' command staged: removes the layer <dir> (and the journals of
its applies); the writable roots stay as they are.
`;

/** run's --changes options, parsed: the `changes` option of spawn(), or undefined. */
export function changesOption(mode: string | undefined, dir: string | undefined, maxBytes: string | undefined): ChangesMode | ChangesOptions | undefined {
  if (mode === undefined) {
    const stray = dir !== undefined ? '--changes-dir' : maxBytes !== undefined ? '--changes-max-bytes' : undefined;
    if (stray) throw new Error(`${stray} needs --changes record (or stage)`);
    return undefined;
  }
  if (mode !== 'record' && mode !== 'stage') throw new Error(`--changes must be one of record, stage`);
  const out: ChangesOptions = { mode };
  if (dir !== undefined) out.dir = dir;
  if (maxBytes !== undefined) {
    if (!/^[0-9]+$/.test(maxBytes) || Number(maxBytes) < 1 || !Number.isSafeInteger(Number(maxBytes))) throw new Error(`--changes-max-bytes expects a positive number of bytes, got ${maxBytes}`);
    out.maxBytes = Number(maxBytes);
  }
  return out;
}

/** What --json reports of a run's changes (and a note on stderr saying where the journal is). */
export async function changesReport(handle: ChangesHandle | null): Promise<Record<string, unknown> | undefined> {
  if (!handle) return undefined;
  try {
    const list = await handle.list();
    if (handle.mode === 'record') process.stderr.write(`process-sandbox: ${list.length} change(s) recorded in ${handle.dir}; undo with: process-sandbox revert ${handle.dir}\n`);
    else {
      process.stderr.write(
        `process-sandbox: ${list.length} change(s) staged in ${handle.dir}; nothing reached the writable roots. ` +
          `List with: process-sandbox changes ${handle.dir}; apply with: process-sandbox apply ${handle.dir} [paths...]; drop with: process-sandbox discard ${handle.dir}\n`,
      );
    }
    return { mode: handle.mode, dir: handle.dir, list };
  } catch (e) {
    process.stderr.write(`process-sandbox: the changes could not be listed: ${(e as Error).message}\n`);
    return { mode: handle.mode, dir: handle.dir, error: { code: (e as SandboxError).code, message: (e as Error).message } };
  }
}

/** The directory (and, `more`, further operands) and flags of a journal or layer subcommand; a number: exit now. */
function oneDir(argv: string[], usage: string, flags: string[], more = false): { dir: string; rest: string[]; flags: Set<string> } | number {
  const set = new Set<string>();
  const rest: string[] = [];
  for (const a of argv) {
    if (a === '--help' || a === '-h') {
      process.stdout.write(usage);
      return 0;
    }
    if (a.startsWith('-') && a !== '-') {
      if (!flags.includes(a)) return usageError(`unknown option: ${a}`, usage);
      set.add(a);
    } else rest.push(a);
  }
  if (rest.length === 0 || (!more && rest.length > 1)) return usageError(more ? 'expects a layer directory (and the paths to apply)' : 'expects one directory', usage);
  return { dir: path.resolve(rest[0]!), rest: rest.slice(1).map((p) => path.resolve(p)), flags: set };
}

function usageError(message: string, usage: string): number {
  process.stderr.write(`process-sandbox: ${message}\n${usage}`);
  return 125;
}

function failed(e: unknown): number {
  process.stderr.write(`process-sandbox: ${(e as Error).message}\n`);
  return exitStatusForError(e);
}

export async function cmdRevert(argv: string[]): Promise<number> {
  const a = oneDir(argv, REVERT_USAGE, []);
  if (typeof a === 'number') return a;
  try {
    await revertChanges(a.dir);
  } catch (e) {
    return failed(e);
  }
  return 0;
}

const line = (e: ChangeEntry): string => `${e.kind.padEnd(8)} ${e.type.padEnd(9)} ${e.path}${e.from !== undefined ? ` (from ${e.from})` : ''}\n`;

export async function cmdChanges(argv: string[]): Promise<number> {
  const a = oneDir(argv, CHANGES_USAGE, ['--json']);
  if (typeof a === 'number') return a;
  let list: ChangeEntry[];
  try {
    list = await listChanges(a.dir);
  } catch (e) {
    return failed(e);
  }
  process.stdout.write(a.flags.has('--json') ? JSON.stringify(list, null, 2) + '\n' : list.map(line).join(''));
  return 0;
}

export async function cmdApply(argv: string[]): Promise<number> {
  const a = oneDir(argv, APPLY_USAGE, [], true);
  if (typeof a === 'number') return a;
  try {
    const layer = openStagedChanges(a.dir);
    const count = (await layer.list()).length;
    await layer.apply(a.rest.length > 0 ? a.rest : undefined);
    const left = (await layer.list()).length;
    process.stderr.write(`process-sandbox: applied; ${count - left} of ${count} staged change(s) written, ${left} left in ${a.dir} (drop the layer with: process-sandbox discard ${a.dir})\n`);
  } catch (e) {
    return failed(e);
  }
  return 0;
}

export async function cmdDiscard(argv: string[]): Promise<number> {
  const a = oneDir(argv, DISCARD_USAGE, []);
  if (typeof a === 'number') return a;
  try {
    await openStagedChanges(a.dir).discard();
  } catch (e) {
    return failed(e);
  }
  return 0;
}
