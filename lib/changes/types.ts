/**
 * The `changes` option: what a sandboxed command changed in its writable roots, seen and undone.
 *
 * `record`: the command's writes land as usual, and a journal (lib/changes/journal.ts) saved what
 * each write was about to change, so the host can list the changes and revert them.
 * `stage`: the command writes into a copy-on-write layer; nothing reaches the writable roots until
 * the host applies the changes (all or some paths), or discards them.
 */
export type ChangesMode = 'record' | 'stage';
export interface ChangesOptions {
  mode: ChangesMode;
  /** The journal (record) or layer (stage) directory: absolute, new or empty, outside every writable root. */
  dir?: string;
  /** Bound on the bytes the journal's saved copies (or the layer) may hold; past it the command's write fails ENOSPC. */
  maxBytes?: number;
}
export type ChangeKind = 'created' | 'modified' | 'deleted' | 'renamed';
export interface ChangeEntry {
  /** Absolute. */
  path: string;
  kind: ChangeKind;
  /** renamed: the old absolute path. */
  from?: string;
  /** What is (or, deleted: was) at path. */
  type: 'file' | 'directory' | 'symlink' | 'other';
}
/** What a platform backend returns for a run with `changes` (BackendProcess.changes). */
export interface ChangesBackend {
  readonly mode: ChangesMode;
  /** The journal (record) or layer (stage) directory. */
  readonly dir: string;
  /** Resolves once the sandbox has ended and the journal/layer is final (record: final states written). */
  readonly settled: Promise<void>;
  list(): Promise<ChangeEntry[]>;
  /** record */
  revert?(): Promise<void>;
  /** stage */
  apply?(paths?: readonly string[]): Promise<void>;
  /** stage */
  discard?(): Promise<void>;
}
