/**
 * The `changes` option: what a sandboxed command changed in its writable roots, listed, reverted
 * (record) or applied and discarded (stage).
 *
 *   const child = spawn('sh', ['-c', cmd], { policy, changes: 'record' });
 *   await child.exited;
 *   console.log(await child.changes!.list());   // [{ path, kind: 'modified', type: 'file' }, ...]
 *   await child.changes!.revert();              // the roots as they were when it started
 *
 * A journal kept in a directory the host named (`changes: { mode: 'record', dir }`) can be listed
 * and reverted by a later process: listChanges(dir), revertChanges(dir). A finished staged layer
 * (isolated mode) is reopened by one with openStagedChanges(dir): list(), apply(paths?), discard().
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import { isWithin } from '../paths';
import type { ResolvedRules } from '../rules';
import { loadLinuxNative } from '../native';
import { listJournal, revertJournal } from './journal';
import { reopenStage, stageBackend } from './overlay';
import type { ChangeEntry, ChangesBackend, ChangesMode, ChangesOptions } from './types';

export type { ChangeEntry, ChangeKind, ChangesMode, ChangesOptions } from './types';

/** `child.changes` / `result.changes`: every call waits until the sandbox has ended. */
export class ChangesHandle {
  constructor(private readonly backend: ChangesBackend) {}

  get mode(): ChangesMode {
    return this.backend.mode;
  }

  /** The journal (record) or layer (stage) directory. */
  get dir(): string {
    return this.backend.dir;
  }

  /** Resolves once the sandbox has ended and the journal or layer is final. */
  get settled(): Promise<void> {
    return this.backend.settled;
  }

  /** The net changes: created, modified, deleted and renamed paths (absolute), sorted by path. */
  async list(): Promise<ChangeEntry[]> {
    await this.backend.settled;
    return this.backend.list();
  }

  /**
   * record: puts the writable roots back as they were when the command started. A path someone
   * else changed since the run ends it with nothing changed (SandboxError ECHANGED_OUTSIDE).
   */
  async revert(): Promise<void> {
    const revert = this.method('record', 'revert', this.backend.revert);
    await this.backend.settled;
    return revert();
  }

  /** stage: writes the staged changes (all, or those at or below `paths`) into the roots. */
  async apply(paths?: readonly string[]): Promise<void> {
    const apply = this.method('stage', 'apply', this.backend.apply);
    if (paths !== undefined) {
      if (!Array.isArray(paths)) throw new SandboxError('EINVALID_ARGUMENT', 'changes.apply(paths): paths must be an array of absolute paths');
      for (const p of paths) {
        if (typeof p !== 'string' || !path.isAbsolute(p)) throw new SandboxError('EINVALID_ARGUMENT', `changes.apply(paths): ${JSON.stringify(p)} is not an absolute path`);
      }
    }
    await this.backend.settled;
    return apply(paths);
  }

  /** stage: drops the staged changes; the roots stay as they are. */
  async discard(): Promise<void> {
    const discard = this.method('stage', 'discard', this.backend.discard);
    await this.backend.settled;
    return discard();
  }

  private method<F extends (...a: never[]) => Promise<void>>(mode: ChangesMode, name: string, f: F | undefined): F {
    if (this.backend.mode !== mode || f === undefined) {
      const other = this.backend.mode === 'record' ? 'list() and revert()' : 'list(), apply() and discard()';
      throw new SandboxError('EINVALID_ARGUMENT', `changes.${name}() is for changes: '${mode}'; this run has changes: '${this.backend.mode}' (${other})`);
    }
    return f.bind(this.backend) as F;
  }
}

/**
 * Lists the changes a finished journal (changes: 'record') in `dir` recorded, or those a finished
 * staged layer (changes: 'stage') holds.
 */
export async function listChanges(dir: string): Promise<ChangeEntry[]> {
  if (readMeta(dir).mode === 'stage') return openStagedChanges(dir).list();
  return listJournal(checkJournalDir(dir));
}

/**
 * Reopens a finished staged layer (changes: 'stage', isolated mode) from its directory, in any
 * process (the one that ran the command may be gone): the handle lists, applies (all, or the
 * changes at or below `paths`) and discards it as `child.changes` does, with the same check for
 * paths changed outside during the run (nothing applied, SandboxError ECHANGED_OUTSIDE). A
 * directory that is not a finished layer of this user is refused (SandboxError EINVALID_ARGUMENT).
 */
export function openStagedChanges(dir: string): ChangesHandle {
  absoluteDir(dir, 'layer');
  if (process.platform !== 'linux') throw new SandboxError('EPLATFORM_UNSUPPORTED', `changes: staged layers are supported on Linux only, not on ${process.platform}`);
  return new ChangesHandle(stageBackend(reopenStage(loadLinuxNative(), dir), Promise.resolve()));
}

/**
 * Reverts the changes a finished journal in `dir` recorded, from any process (the one that ran the
 * command may be gone). Refuses, with nothing changed, when a recorded path was changed since
 * (SandboxError ECHANGED_OUTSIDE naming them). A journal reverted already is left as it is.
 */
export async function revertChanges(dir: string): Promise<void> {
  revertJournal(checkJournalDir(dir));
}

function absoluteDir(dir: unknown, what: string): void {
  if (typeof dir !== 'string' || !path.isAbsolute(dir)) throw new SandboxError('EINVALID_ARGUMENT', `changes: the ${what} directory must be an absolute path, got ${JSON.stringify(dir)}`);
}

/** The meta.json of a journal or layer directory. */
function readMeta(dir: string): { mode?: unknown } {
  absoluteDir(dir, 'journal');
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'meta.json'), 'utf8')) as { mode?: unknown };
  } catch (e) {
    throw new SandboxError('EINVALID_ARGUMENT', `changes: ${dir} is not a changes journal (no readable meta.json)`, { cause: e, detail: { path: dir } });
  }
}

function checkJournalDir(dir: string): string {
  const meta = readMeta(dir);
  if (meta.mode === 'stage') throw new SandboxError('EINVALID_ARGUMENT', `changes: ${dir} holds a staged layer, not a journal to revert: apply or discard it`, { detail: { path: dir } });
  if (meta.mode !== 'record') throw new SandboxError('EINVALID_ARGUMENT', `changes: ${dir} is not a changes journal (meta.json names mode ${JSON.stringify(meta.mode)})`, { detail: { path: dir } });
  return dir;
}

const CHANGES_KEYS = new Set(['mode', 'dir', 'maxBytes']);

function bad(message: string): never {
  throw new SandboxError('EINVALID_ARGUMENT', message);
}

/** A path as it will be once made: the deepest existing ancestor canonical, the rest appended. */
function canonicalFuture(p: string): string {
  let rest = '';
  for (let cur = path.resolve(p); ; cur = path.dirname(cur)) {
    try {
      return path.join(fs.realpathSync(cur), rest);
    } catch {
      if (cur === path.dirname(cur)) return path.resolve(p);
      rest = rest === '' ? path.basename(cur) : path.join(path.basename(cur), rest);
    }
  }
}

/**
 * Validates options.changes (spawn/run): 'record' | 'stage' | { mode, dir?, maxBytes? }. The
 * journal directory must lie outside every writable root and hold no root of the policy (a root
 * inside it would open it to the command).
 */
export function normalizeChanges(v: unknown, rules: ResolvedRules | null): ChangesOptions | undefined {
  if (v === undefined) return undefined;
  let o: Record<string, unknown>;
  if (typeof v === 'string') o = { mode: v };
  else if (v !== null && typeof v === 'object' && !Array.isArray(v)) o = v as Record<string, unknown>;
  else bad("options.changes must be 'record', 'stage' or an object { mode, dir?, maxBytes? }");
  for (const k of Object.keys(o)) if (!CHANGES_KEYS.has(k)) bad(`unknown option: changes.${k}`);
  if (o.mode !== 'record' && o.mode !== 'stage') bad(`options.changes.mode must be 'record' or 'stage', got ${JSON.stringify(o.mode)}`);
  const out: ChangesOptions = { mode: o.mode };
  if (rules === null) bad('options.changes needs a sandbox: with policy: null the command runs unsandboxed and nothing would be recorded');
  if (o.maxBytes !== undefined) {
    if (typeof o.maxBytes !== 'number' || !Number.isSafeInteger(o.maxBytes) || o.maxBytes <= 0) bad(`options.changes.maxBytes must be a positive integer number of bytes, got ${String(o.maxBytes)}`);
    out.maxBytes = o.maxBytes;
  }
  if (o.dir !== undefined) {
    if (typeof o.dir !== 'string' || o.dir.length === 0 || o.dir.includes('\0')) bad('options.changes.dir must be a non-empty string');
    if (!path.isAbsolute(o.dir)) bad(`options.changes.dir must be an absolute path, got ${o.dir}`);
    const dir = canonicalFuture(o.dir);
    const inside = rules.writeRoots.find((w) => isWithin(dir, w));
    if (inside) bad(`options.changes.dir (${o.dir}) lies in the writable root ${inside}: the command could alter its own journal`);
    const holds = [...rules.writeRoots, ...rules.readRoots].find((r) => isWithin(r, dir));
    if (holds) bad(`options.changes.dir (${o.dir}) holds ${holds}, a root of the policy: the command could reach the journal`);
    out.dir = path.resolve(o.dir);
  }
  if (process.platform !== 'linux') throw new SandboxError('EPLATFORM_UNSUPPORTED', `options.changes is supported on Linux only, not on ${process.platform} yet`);
  return out;
}
