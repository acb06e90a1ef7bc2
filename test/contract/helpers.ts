/**
 * Shared pieces of the process-API contract suites. Each contract is written once as a function of
 * the run mode and instantiated twice: plainly (`policy: null`) and sandboxed with the default
 * policy (`policy` omitted), each in its own test file so a crash takes down one file only.
 *
 * Everything here observes real processes through /proc: pids found by a unique argv marker,
 * states and parents read from /proc/<pid>/stat, fd counts from /proc/self/fd.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import { inject } from 'vitest';
import { probe, type SandboxPolicy } from '../../lib/index';

declare module 'vitest' {
  // Filled by test/helpers/global-setup.ts: build failures of the addon and dist/.
  export interface ProvidedContext {
    buildErrors: { addon?: string; dist?: string };
  }
}

export interface RunMode {
  name: 'plain' | 'sandboxed' | 'landlock-degraded';
  /** null = explicitly unsandboxed; undefined = the default policy. */
  policy: SandboxPolicy | null | undefined;
  /** Why this mode cannot run here, or null when it can. */
  unavailable: string | null;
  /** The default mode is isolated: a pid namespace, so even setsid() grandchildren die with the tree. */
  isolatedTree: boolean;
}

function sandboxUnavailable(): string | null {
  if (process.platform !== 'linux') return `the contract suites drive the Linux backend; this is ${process.platform}`;
  const p = probe();
  if (!p.addonLoaded) return `the addon did not load: ${p.addonError}`;
  if (p.defaultMode === null) return `probe() says nothing can be enforced here: ${JSON.stringify(p.features)}`;
  return null;
}

/**
 * The default policy (private /tmp, full teardown) needs isolated mode; a host that only has
 * Landlock refuses it unless degraded is accepted, which spawn-landlock.test.ts covers.
 */
function defaultPolicyUnavailable(): string | null {
  const base = sandboxUnavailable();
  if (base) return base;
  const mode = probe().defaultMode;
  return mode === 'isolated' ? null : `the default policy needs isolated mode, this host's default is ${mode} (see the landlock-degraded suite)`;
}

export const PLAIN: RunMode = {
  name: 'plain',
  policy: null,
  unavailable: process.platform === 'linux' ? null : `the contract suites drive the Linux backend; this is ${process.platform}`,
  isolatedTree: false,
};

let sandboxedMode: RunMode | undefined;
export function sandboxed(): RunMode {
  if (!sandboxedMode) {
    const unavailable = defaultPolicyUnavailable();
    const isolatedTree = unavailable === null;
    sandboxedMode = { name: 'sandboxed', policy: undefined, unavailable, isolatedTree };
    if (unavailable) console.warn(`SKIPPING sandboxed contract: ${unavailable}`);
  }
  return sandboxedMode;
}

let landlockMode: RunMode | undefined;
/** Landlock mode, forced, with degraded enforcement accepted: the fallback path of hosts without user namespaces. */
export function landlockDegraded(): RunMode {
  if (!landlockMode) {
    let unavailable = sandboxUnavailable();
    if (unavailable === null && probe().features.landlockMode !== true) unavailable = `Landlock mode is not available here: ${JSON.stringify(probe().features)}`;
    landlockMode = { name: 'landlock-degraded', policy: { mode: 'landlock', degraded: true }, unavailable, isolatedTree: false };
    if (unavailable) console.warn(`SKIPPING landlock contract: ${unavailable}`);
  }
  return landlockMode;
}

/** The options object carrying the mode's policy (omitting the key entirely for the default). */
export function withPolicy<T extends object>(mode: RunMode, opts: T = {} as T): T & { policy?: SandboxPolicy | null } {
  return mode.policy === undefined ? { ...opts } : { ...opts, policy: mode.policy };
}

/** Fails the calling test when global-setup could not build what it needs. */
export function requireBuilt(what: 'addon' | 'dist'): void {
  const errors = inject('buildErrors') ?? {};
  if (errors[what]) throw new Error(`global-setup could not build the ${what}:\n${errors[what]}`);
}

/**
 * A scratch directory the sandboxed child can see. The default policy gives the child a private
 * /tmp, so fixtures live under /var/tmp (or $HOME when /var/tmp is not writable).
 */
export function fixtureDir(prefix = 'psb-contract-'): string {
  for (const base of ['/var/tmp', os.homedir()]) {
    try {
      fs.accessSync(base, fs.constants.W_OK);
      return fs.realpathSync(fs.mkdtempSync(path.join(base, prefix)));
    } catch {
      /* try the next one */
    }
  }
  throw new Error('no writable directory outside /tmp for test fixtures (tried /var/tmp and $HOME)');
}

export interface ProcStat {
  pid: number;
  comm: string;
  state: string;
  ppid: number;
  pgrp: number;
  starttime: number;
}

export function procStat(pid: number): ProcStat | null {
  let s: string;
  try {
    s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const close = s.lastIndexOf(')');
  const rest = s.slice(close + 2).split(' ');
  return {
    pid,
    comm: s.slice(s.indexOf('(') + 1, close),
    state: rest[0],
    ppid: Number(rest[1]),
    pgrp: Number(rest[2]),
    starttime: Number(rest[19]),
  };
}

/** True while the process exists and is not a zombie (a zombie is dead, just not yet reaped). */
export function isRunning(p: ProcStat): boolean {
  const now = procStat(p.pid);
  return now !== null && now.starttime === p.starttime && now.state !== 'Z' && now.state !== 'X';
}

function allPids(): number[] {
  return fs
    .readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .map(Number);
}

/** Host pids of processes whose argv contains `marker` as one whole argument. */
export function pidsWithArg(marker: string): ProcStat[] {
  const out: ProcStat[] = [];
  for (const pid of allPids()) {
    let cmdline: string;
    try {
      cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (cmdline.split('\0').includes(marker)) {
      const st = procStat(pid);
      if (st && st.state !== 'Z') out.push(st);
    }
  }
  return out;
}

/** Zombies whose parent is this test process. */
export function childZombies(): ProcStat[] {
  return allPids()
    .map(procStat)
    .filter((s): s is ProcStat => s !== null && s.ppid === process.pid && s.state === 'Z');
}

export function openFdCount(): number {
  return fs.readdirSync('/proc/self/fd').length;
}

/** A summary of this process's open fds by kind ("12 x anon_inode:[pidfd], 3 x pipe, ..."). */
export function describeFds(): string {
  const kinds = new Map<string, number>();
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    let target = '?';
    try {
      target = fs.readlinkSync(`/proc/self/fd/${fd}`).replace(/:\[\d+\]$/, '');
    } catch {
      /* closed meanwhile */
    }
    kinds.set(target, (kinds.get(target) ?? 0) + 1);
  }
  return [...kinds].map(([k, n]) => `${n} x ${k}`).join(', ');
}

/** Polls until `cond` holds; throws with `what` when it does not within `ms` (a deadline, not a timing assertion). */
export async function waitFor(cond: () => boolean, what: string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A sleep duration argument that no other process on the machine has: `sleep 3600.<random>`. */
export function uniqueSleepArg(): string {
  return `3600.${crypto.randomInt(1, 2 ** 31)}${crypto.randomInt(1, 2 ** 31)}`;
}

/** Kills leftovers a failing test may leave behind, so one failure does not poison the run. */
export function killAll(stats: ProcStat[]): void {
  for (const s of stats) {
    if (isRunning(s)) {
      try {
        process.kill(s.pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  }
}

export async function readAll(stream: Readable | null): Promise<Buffer> {
  if (!stream) throw new Error('expected a stream');
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export function sha256(b: Buffer | string): string {
  return crypto.createHash('sha256').update(b).digest('hex');
}
