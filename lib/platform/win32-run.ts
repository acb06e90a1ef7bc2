/**
 * One Windows run's resources and state, freed in one place. The journal of the run's ACL edits,
 * placeholders and private temp dir is undone by release() (off the JS thread, in the backend's
 * ACL queue); the child's handle (its job object, private desktop and restricted token) is closed
 * by winRelease when the command exits, and the job's kill-on-close ends whatever it left running.
 * A run whose deferred start fails or is cancelled is freed by abandon().
 */
import type { ExitInfo } from '../backend';
import type { Win32Native } from '../native';
import type { RunJournal } from './win32-journal';

/** Host stdio forwarded to and from a child that was given pipes instead of our console. */
export interface Forwarding {
  /** Resolves when the forwarded outputs have ended. */
  outputsDone: Promise<void>;
  /** Detaches the host's stdin when the child is gone. */
  detach: () => void;
}

export class Win32Run {
  /** The child's handle from winSpawn (job, desktop, token), released when it exits. */
  handle: unknown;
  pid?: number;
  forwarding: Forwarding | null = null;
  killedWith: NodeJS.Signals | null = null;
  done = false;
  /** A deferred start whose ACL batch has not finished: kill() cancels it. */
  starting = false;
  cancelBatch: (() => void) | null = null;
  readonly exited: Promise<ExitInfo>;
  private resolveExit!: (info: ExitInfo) => void;
  private rejectExit!: (err: unknown) => void;

  constructor(
    readonly native: Win32Native,
    readonly journal: RunJournal | null,
    private readonly undo: (journal: RunJournal) => Promise<void>,
  ) {
    this.exited = new Promise<ExitInfo>((resolve, reject) => {
      this.resolveExit = resolve;
      this.rejectExit = reject;
    });
    this.exited.catch(() => {}); // rejected only for a deferred start that failed; the handle reports it
  }

  /** Everything the run changed, undone (ACLs off the JS thread) before the exit is reported. Never rejects. */
  release(): Promise<void> {
    return this.journal !== null ? this.undo(this.journal) : Promise.resolve();
  }

  /** winSpawn's exit callback. */
  onExit(code: number): void {
    this.done = true;
    // Closing the job (kill-on-close) ends whatever the command left running.
    this.native.winRelease(this.handle);
    const info: ExitInfo = this.killedWith !== null ? { code: null, signal: this.killedWith } : { code, signal: null };
    const outputs = this.forwarding === null ? Promise.resolve() : (this.forwarding.detach(), this.forwarding.outputsDone);
    void Promise.all([this.release(), outputs]).then(() => this.resolveExit(info));
  }

  /** A deferred start that ends before the command runs: cancelled (`info`) or failed (`err`, rethrown). */
  async abandon(io: { abandon(): void }, info: ExitInfo | null, err?: unknown): Promise<null> {
    this.done = true;
    this.starting = false;
    io.abandon();
    await this.release();
    if (info) {
      this.resolveExit(info);
      return null;
    }
    this.rejectExit(err);
    throw err;
  }

  kill(signal: NodeJS.Signals | number): boolean {
    if (this.done) return false;
    if (signal === 0) return true; // existence check, as process.kill(pid, 0)
    if (this.killedWith === null) this.killedWith = typeof signal === 'string' ? signal : 'SIGKILL';
    if (this.starting) {
      // Not started yet: cancel (the batch stops before its next edit; nothing is launched).
      this.cancelBatch?.();
      return true;
    }
    return this.native.winKill(this.handle, 1);
  }
}
