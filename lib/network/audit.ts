/**
 * Audit: every decision and refusal becomes one AuditEvent, handed to the host's onAudit sink;
 * refusals are also kept (the last RECENT_BLOCKED) for ManagedProxy.recentBlocked().
 */
import type { AuditEvent } from './options';

/** How many refusals recentBlocked() keeps. */
export const RECENT_BLOCKED = 256;

export class AuditLog {
  /** The last refusals (newest last), for `recentBlocked()`. */
  private readonly blocked: AuditEvent[] = [];

  constructor(private readonly onAudit: ((event: AuditEvent) => void) | undefined) {}

  emit(event: AuditEvent): void {
    if (event.decision === 'deny') {
      this.blocked.push(event);
      if (this.blocked.length > RECENT_BLOCKED) this.blocked.splice(0, this.blocked.length - RECENT_BLOCKED);
    }
    if (!this.onAudit) return;
    try {
      this.onAudit(event);
    } catch {
      /* an audit sink must not break the proxy */
    }
  }

  /** The last `limit` refusals, newest last (copies). */
  recent(limit: number): AuditEvent[] {
    const n = Math.min(limit, this.blocked.length);
    return this.blocked.slice(this.blocked.length - n).map((e) => ({ ...e }));
  }
}
