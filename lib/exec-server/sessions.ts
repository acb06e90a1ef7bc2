/**
 * Sessions, as the reference keeps them: `initialize` creates one (a random id) or, with
 * `resumeSessionId`, re-attaches a detached one. A session owns its processes; when its connection
 * goes it is detached and its processes live on for the detached lifetime (30 s by default), so a
 * client that reconnects and resumes finds them, with the output retained meanwhile. Then they
 * are killed. One connection at a time: resuming an attached session is refused (-32010).
 *
 * The id is the only thing a resume needs, so it is a random UUID, and only clients that passed
 * the transport's auth can try one.
 */
import { randomUUID } from 'node:crypto';
import { INVALID_REQUEST, RpcError } from './decode';
import { limitOf, tooManyServerProcesses } from './limits';
import { ProcessTable, type TableAttachment } from './process-sessions';
import type { ExecServerOptions, SpawnPreparedFn } from './types';

export const SESSION_ALREADY_ATTACHED = -32010;
const DEFAULT_DETACHED_TTL_MS = 30_000;

export interface Session {
  readonly id: string;
  readonly processes: ProcessTable;
  attached: boolean;
  expiry?: NodeJS.Timeout;
}

export class SessionRegistry {
  private readonly sessions = new Map<string, Session>();
  /** Sandboxed fs helpers running (reserveHelper). */
  private helpers = 0;

  constructor(private readonly options: ExecServerOptions & { spawnPrepared: SpawnPreparedFn }) {}

  attach(resumeSessionId: string | undefined, to: TableAttachment): Session {
    if (resumeSessionId === undefined) {
      const max = limitOf(this.options, 'maxSessions');
      if (this.sessions.size >= max) throw new RpcError(INVALID_REQUEST, `too many sessions on this server (at most ${max}, detached ones included)`);
      const s: Session = { id: randomUUID(), processes: new ProcessTable(this.options, () => this.live()), attached: true };
      this.sessions.set(s.id, s);
      s.processes.attach(to);
      return s;
    }
    const s = this.sessions.get(resumeSessionId);
    if (!s) throw new RpcError(INVALID_REQUEST, `unknown session id ${resumeSessionId}`);
    if (s.attached) throw new RpcError(SESSION_ALREADY_ATTACHED, `session ${resumeSessionId} is already attached to another connection`);
    if (s.expiry) clearTimeout(s.expiry);
    s.expiry = undefined;
    s.attached = true;
    s.processes.attach(to);
    return s;
  }

  /** The connection of `s` went away: keep it for a resume, then end it. */
  detach(s: Session): void {
    if (!this.sessions.has(s.id) || !s.attached) return;
    s.attached = false;
    s.processes.attach(null);
    s.expiry = setTimeout(() => void this.end(s), this.options.detachedSessionTtlMs ?? DEFAULT_DETACHED_TTL_MS);
    s.expiry.unref();
  }

  async end(s: Session): Promise<void> {
    if (s.expiry) clearTimeout(s.expiry);
    this.sessions.delete(s.id);
    await s.processes.shutdown();
  }

  /** Ends every session (the server closes), killing every process. */
  async shutdown(): Promise<void> {
    await Promise.all([...this.sessions.values()].map((s) => this.end(s)));
  }

  /**
   * Takes a server-wide process slot for a sandboxed fs helper (fs/open's handle, a one-shot fs
   * call, capabilities/discoverV2): it holds a process as a session's command does. Returns the
   * release (idempotent).
   */
  reserveHelper(): () => void {
    const max = limitOf(this.options, 'maxServerProcesses');
    if (this.live() >= max) throw tooManyServerProcesses(max);
    this.helpers++;
    let held = true;
    return () => {
      if (held) this.helpers--;
      held = false;
    };
  }

  /** Processes starting or running: every session's, and the fs helpers (the server-wide cap counts these). */
  live(): number {
    let n = this.helpers;
    for (const s of this.sessions.values()) n += s.processes.live();
    return n;
  }

  /** Every running process of every session (tests, diagnostics). */
  pids(): number[] {
    return [...this.sessions.values()].flatMap((s) => s.processes.pids());
  }
}
