/**
 * A sandboxed run's ACL edits as they are planned (win32.ts prepareApply): the edits in the order
 * the batch makes them, the journal entries that undo them, and the capability SIDs the token
 * carries. Pure bookkeeping: nothing here touches the disk.
 */
import * as path from 'node:path';
import type { AclOp } from '../native';
import { randomCapabilitySid } from './win32-caps';
import type { JournalEntry } from './win32-journal';
import type { WindowsPlan } from './win32-plan';

export interface PlannedEdit {
  op: AclOp;
  path: string;
  sid: string;
  /** Counted in mechanisms.aclChanges (the per-run temporary grants are not). */
  counted: boolean;
}

export class EditList {
  readonly edits: PlannedEdit[] = [];
  /** Journalled in one write before any edit is made (write-ahead). */
  readonly entries: JournalEntry[] = [];
  /** One SID for this run's temporary grants; revoked when the run ends. */
  private runSid: string | null = null;

  constructor(readonly sids: string[]) {}

  /**
   * Persistent by design: one allow ACE per writable root and capability SID, reused by every
   * later run (the tree walk that propagates it happens once per root). Not journalled.
   */
  grantRoots(plan: WindowsPlan, rootSids: string[]): void {
    plan.writeRoots.forEach((root, i) => this.edits.push({ op: 'grant-write', path: root, sid: rootSids[i]!, counted: true }));
  }

  deny(op: 'deny-write' | 'deny-delete' | 'deny-delete-child', p: string, sid: string): void {
    this.entries.push({ kind: 'deny', path: p, sid });
    this.edits.push({ op, path: p, sid, counted: true });
  }

  /** The denies of protected paths and placeholders, for the SID of each writable root they are under. */
  denyAll(plan: WindowsPlan, rootSids: string[]): void {
    const sidOf = (root: string) => rootSids[plan.writeRoots.indexOf(root)]!;
    for (const p of [...plan.protectedPaths, ...plan.placeholders]) {
      for (const root of p.roots) {
        // deny-write also denies FILE_DELETE_CHILD on the parent: journal that path too.
        this.entries.push({ kind: 'deny', path: path.win32.dirname(p.path), sid: sidOf(root) });
        this.deny('deny-write', p.path, sidOf(root));
      }
    }
    for (const d of plan.denyDelete) for (const root of d.roots) this.deny('deny-delete', d.path, sidOf(root));
    for (const d of plan.denyDeleteChild) for (const root of d.roots) this.deny('deny-delete-child', d.path, sidOf(root));
  }

  temporaryGrant(p: string): void {
    if (this.runSid === null) {
      this.runSid = randomCapabilitySid();
      this.sids.push(this.runSid);
    }
    this.entries.push({ kind: 'grant', path: p, sid: this.runSid });
    this.edits.push({ op: 'grant-write', path: p, sid: this.runSid, counted: false });
  }
}
