/**
 * One sandboxed run's resources on the host: its TMPDIR (Landlock mode), its proxy and the proxy's
 * host listener, the placeholders it holds, its cgroup, its share of the uid's kernel quotas, and
 * the sandbox prepared ahead it took. The backend (index.ts) acquires them while it prepares the
 * run; they are freed in one place: release() once the command has ended, abandon() when it never
 * started.
 */
import * as fs from 'node:fs';
import type { ExitInfo } from '../../backend';
import { dropLayer, type StageLayer } from '../../changes/overlay-layer';
import type { RecordRun } from '../../changes/record';
import type { LinuxNative } from '../../native';
import type { ManagedProxy } from '../../network';
import type { SandboxCgroup } from './cgroup';
import { DEFAULT_TMP_BYTES } from './limits';
import { type HeldPlaceholder, releasePlaceholders } from './placeholders';
import type { QuotaShare } from './quotas';
import type { Spare } from './spare';
import { removeTmpDir, removeTmpDirAfterRun, warnLeft } from './tmpdir';

export class LinuxRun {
  tmpDir?: string;
  tmpLimit = DEFAULT_TMP_BYTES;
  /** Stops the TMPDIR's size check (watchTmpDir). */
  stopTmpWatch?: () => void;
  proxy?: ManagedProxy;
  /** The proxy was made for this run (else it is the caller's, options.proxy.instance). */
  ownsProxy = false;
  /** The port the command reaches its proxy on (in its namespace in isolated mode). */
  proxyPort?: number;
  /** Landlock mode's proxy listener on the host's 127.0.0.1. */
  hostListenerFd?: number;
  attachment: Promise<{ detach(): Promise<void> } | null> = Promise.resolve(null);
  held: HeldPlaceholder[] = [];
  cgroup: SandboxCgroup | null = null;
  quota: QuotaShare | null = null;
  /** The sandbox prepared ahead this run took (its resources are the run's). */
  spare?: Spare;
  /** A limit the host enforced by stopping the command (the TMPDIR's size). */
  limitExceeded?: ExitInfo['limitExceeded'];
  /** changes in Landlock mode: the journal the supervisors write (lib/changes/record.ts). */
  record?: RecordRun;
  /** changes in isolated mode: the overlays' layer, and record's journal (lib/changes/overlay-layer.ts). */
  staged?: { layer: StageLayer; journalDir?: string };
  /** What the cleanup could not undo: in the exit info and a process warning. */
  readonly cleanupLeft: string[] = [];

  constructor(readonly native: LinuxNative) {}

  /** Takes over what a spare was prepared with. */
  adopt(spare: Spare): void {
    this.spare = spare;
    ({ cgroup: this.cgroup, quota: this.quota, hostListenerFd: this.hostListenerFd } = spare.resources);
  }

  /**
   * After the command has ended: every process of the sandbox is dead by now (init reported after
   * its teardown); the cgroup's remove() still kills anything found in it first. Never throws.
   */
  async release(): Promise<void> {
    this.cgroup?.remove();
    this.quota?.release();
    releasePlaceholders(this.native, this.held);
    this.held = [];
    if (this.tmpDir) {
      this.stopTmpWatch?.();
      const left = await removeTmpDirAfterRun(this.native, this.tmpDir);
      if (left) this.cleanupLeft.push(left);
    }
    if (this.proxy) {
      // The proxy closes with its last process: no listener, fd or timer outlives the run.
      await (await this.attachment)?.detach().catch(() => {});
      if (this.ownsProxy) await this.proxy.close().catch(() => {});
    }
  }

  /** Before the command started (its plan failed, or the spare it took cannot be used): all of it, now. */
  abandon(): void {
    this.dropChanges();
    releasePlaceholders(this.native, this.held);
    this.held = [];
    this.cgroup?.closeFds();
    this.cgroup?.remove();
    this.quota?.release();
    const left = this.tmpDir ? removeTmpDir(this.native, this.tmpDir) : null;
    if (left) warnLeft(left);
    if (this.hostListenerFd !== undefined) fs.closeSync(this.hostListenerFd);
    this.hostListenerFd = undefined;
    if (this.ownsProxy) void this.proxy?.close();
  }

  /** The command never ran: its journal or layer holds nothing of it. */
  dropChanges(): void {
    this.record?.abort();
    if (this.staged) dropLayer(this.native, this.staged.layer, this.staged.journalDir);
    this.record = this.staged = undefined;
  }
}
