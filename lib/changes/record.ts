/**
 * Landlock mode's `changes: 'record'`, the host's half. The path and metadata supervisors carry
 * out every write-open, create, rename, removal, link, truncate and chmod of the command; with a
 * journal they save what each call is about to change first (native/linux/supervisor/changes_journal.h).
 * Here: the journal directory is made (0700, outside every writable root) and denied to the
 * command like a deny-read path; when the sandbox has ended the journal is closed (a call still in
 * progress finishes first, later ones fail) and its final states are written (journal.ts).
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import { isWithin } from '../paths';
import type { LinuxNative } from '../native';
import type { ResolvedRules } from '../rules';
import { createJournalDir, finishJournal, listJournal, revertJournal } from './journal';
import type { ChangesBackend, ChangesOptions } from './types';

/** What the plan hands the path supervisor (LinuxNativePlan seccomp.pathSupervisor.changes). */
export interface RecordPlan {
  dir: string;
  roots: string[];
  maxBytes?: number;
  /** Paths under the roots that are not recorded (the planner adds the run's private TMPDIR). */
  exclude?: string[];
}

export interface RecordRun {
  /** The rules with the journal directory denied to the command. */
  rules: ResolvedRules;
  plan: RecordPlan;
  /** The handle once the command runs; `exited` resolves when the whole sandbox has ended. */
  backend(exited: Promise<unknown>): ChangesBackend;
  /** The command never ran: the journal is closed, and a directory made for it is removed. */
  abort(): void;
}

/**
 * Refuses what the mode cannot do, makes the journal directory and returns the rules and plan.
 * defaultParent: this uid's 0700 directory for per-run files (null when it cannot be trusted).
 */
export function prepareRecord(
  opts: ChangesOptions,
  mode: 'isolated' | 'landlock',
  rules: ResolvedRules,
  native: LinuxNative,
  defaultParent: () => string | null,
): RecordRun {
  if (opts.mode === 'stage' && mode === 'landlock') {
    throw new SandboxError(
      'EUNSUPPORTED_POLICY',
      "changes: 'stage' needs a mount namespace (the command writes into a copy-on-write layer over each writable root), " +
        "which Landlock mode does not have: use isolated mode, or changes: 'record'",
      { detail: { changes: opts.mode, mode } },
    );
  }
  if (mode !== 'landlock' || typeof native.closeChangesJournal !== 'function') {
    throw new SandboxError(
      'EUNSUPPORTED_POLICY',
      `changes: '${opts.mode}' is not available in ${mode} mode with this build: use mode: 'landlock' (changes: 'record')`,
      { detail: { changes: opts.mode, mode } },
    );
  }
  const made = opts.dir === undefined;
  const parent = made ? defaultParent() : null;
  const name = `changes-${process.pid}-${crypto.randomBytes(8).toString('hex')}`;
  // (createJournalDir refuses a name someone else made first: not an empty 0700 directory of ours.)
  const dir = opts.dir ?? path.join(parent ?? os.tmpdir(), parent ? name : `process-sandbox-${name}`);
  if (made) {
    // (A given dir was checked by spawn(): normalizeChanges.)
    const inside = rules.writeRoots.find((w) => isWithin(dir, w) || isWithin(w, dir));
    if (inside) {
      throw new SandboxError('EINVALID_ARGUMENT', `changes: the default journal directory ${dir} lies in the writable root ${inside}: pass changes.dir outside the writable roots`, { detail: { dir, root: inside } });
    }
  }
  createJournalDir(dir, { mode: 'record', roots: rules.writeRoots });
  const real = fs.realpathSync(dir);
  const plan: RecordPlan = { dir: real, roots: [...rules.writeRoots], ...(opts.maxBytes !== undefined ? { maxBytes: opts.maxBytes } : {}) };
  return {
    rules: { ...rules, denyRead: [...rules.denyRead, real] },
    plan,
    backend: (exited) => recordBackend(native, real, exited),
    abort: () => {
      native.closeChangesJournal?.(real);
      if (made) fs.rmSync(real, { recursive: true, force: true });
      else for (const n of fs.readdirSync(real)) fs.rmSync(path.join(real, n), { recursive: true, force: true });
    },
  };
}

function recordBackend(native: LinuxNative, dir: string, exited: Promise<unknown>): ChangesBackend {
  const end = () => {
    const closed = native.closeChangesJournal!(dir);
    finishJournal(dir);
    if (closed < 0) {
      fs.writeFileSync(path.join(dir, 'incomplete'), 'a record could not be written during the run\n', { mode: 0o600 });
      throw new SandboxError('ENOT_ENFORCED', `changes: the journal in ${dir} could not be written during the run; it is incomplete`, { detail: { dir } });
    }
  };
  const settled = exited.then(end, end);
  settled.catch(() => {});
  return {
    mode: 'record',
    dir,
    settled,
    list: () => settled.then(() => listJournal(dir)),
    revert: () => settled.then(() => revertJournal(dir)),
  };
}
