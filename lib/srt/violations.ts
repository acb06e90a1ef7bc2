/**
 * srt's SandboxViolationStore shape, filled with real events: each refusal of our proxy (an
 * audit event with decision 'deny') and each run our sandbox reported as denied.
 */
import type { IgnoreViolationsConfig } from './config';

export interface SandboxViolationEvent {
  line: string;
  command?: string;
  encodedCommand?: string;
  timestamp: Date;
}

/** srt compares attribution keys on their first 100 characters. */
export const KEY_LENGTH = 100;
const MAX_STORED = 100;

export class SandboxViolationStore {
  private violations: SandboxViolationEvent[] = [];
  private totalCount = 0;
  private listeners = new Set<(v: SandboxViolationEvent[]) => void>();

  addViolation(violation: SandboxViolationEvent): void {
    this.violations.push(violation);
    this.totalCount++;
    if (this.violations.length > MAX_STORED) this.violations.splice(0, this.violations.length - MAX_STORED);
    const copy = this.getViolations();
    for (const l of this.listeners) {
      try {
        l(copy);
      } catch {
        /* a listener must not break the store */
      }
    }
  }
  getViolations(limit?: number): SandboxViolationEvent[] {
    const v = limit === undefined ? this.violations : this.violations.slice(-limit);
    return v.map((x) => ({ ...x }));
  }
  getCount(): number {
    return this.violations.length;
  }
  getTotalCount(): number {
    return this.totalCount;
  }
  getViolationsForCommand(command: string): SandboxViolationEvent[] {
    const key = command.slice(0, KEY_LENGTH);
    return this.violations.filter((v) => v.encodedCommand === key).map((x) => ({ ...x }));
  }
  clear(): void {
    this.violations = [];
  }
  subscribe(listener: (violations: SandboxViolationEvent[]) => void): () => void {
    this.listeners.add(listener);
    listener(this.getViolations());
    return () => {
      this.listeners.delete(listener);
    };
  }
}

/** srt's ignoreViolations: `*` or a command containing the pattern; a line naming an ignored path. */
export function shouldIgnore(line: string, command: string | undefined, ignore: IgnoreViolationsConfig | undefined): boolean {
  if (!ignore) return false;
  for (const [pattern, paths] of Object.entries(ignore)) {
    if (pattern !== '*' && !(command ?? '').includes(pattern)) continue;
    if (paths.some((p) => line.includes(p))) return true;
  }
  return false;
}
