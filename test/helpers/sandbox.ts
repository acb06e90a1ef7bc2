/**
 * Shared helpers for the Linux acceptance suites: a scene (writable workspace + outside area),
 * outside-state snapshots, the probe fixture, host listeners and process/mount leak checks.
 *
 *   const scene = makeScene('fs');             // scene.ws (writable root), scene.out (outside)
 *   const before = snapshot(scene.out);
 *   const r = await probeOps([['write', `${scene.out}/f`]], { cwd: scene.ws, policy });
 *   expect(r).toEqual(['EROFS']);
 *   expectUnchanged(before, snapshot(scene.out));
 *
 * Scenes live under /var/tmp, never /tmp: the isolated mode hides the host /tmp (except writable
 * roots and the cwd), and an outside file must stay visible to be a real target.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';

import { run, spawn, type RunOptions, type RunResult, type SandboxedProcess } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { trySyscallPath } from './try-syscall';

export const NODE = process.execPath;
export const PROBE = path.resolve(__dirname, '..', 'fixtures', 'probe.mjs');
export const PYTHON = '/usr/bin/python3';
/** A PATH every tool lookup inside the sandbox can use. */
export const SYS_PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';
export const BASE_ENV: Record<string, string> = { PATH: SYS_PATH, LANG: 'C.UTF-8', HOME: '/nonexistent' };

const SCRATCH_ROOT = '/var/tmp';

export interface Scene {
  root: string;
  /** The writable workspace. */
  ws: string;
  /** Outside the writable roots, with a few files (see makeScene). */
  out: string;
  cleanup(): void;
}

/**
 * A fresh scene: root/ws (writable root for the tests) and root/out holding
 *   secret.txt ("top secret"), ro.txt ("read only"), dir/inner.txt, exec.sh (0755).
 */
export function makeScene(tag: string): Scene {
  const root = fs.mkdtempSync(path.join(SCRATCH_ROOT, `psb-${tag}-`));
  fs.chmodSync(root, 0o755);
  const ws = path.join(root, 'ws');
  const out = path.join(root, 'out');
  fs.mkdirSync(ws);
  fs.mkdirSync(out);
  fs.mkdirSync(path.join(out, 'dir'));
  fs.writeFileSync(path.join(out, 'secret.txt'), 'top secret');
  fs.writeFileSync(path.join(out, 'ro.txt'), 'read only');
  fs.writeFileSync(path.join(out, 'dir', 'inner.txt'), 'inner');
  fs.writeFileSync(path.join(out, 'exec.sh'), '#!/bin/sh\necho outside-script\n', { mode: 0o755 });
  return {
    root,
    ws,
    out,
    cleanup() {
      // Undo anything a test may have left read-only (directories the sandbox made 0555 or 000)
      // so that an unprivileged run can remove the tree too.
      const open = (p: string) => {
        let st: fs.Stats;
        try {
          st = fs.lstatSync(p);
        } catch {
          return;
        }
        if (!st.isDirectory()) return;
        try {
          fs.chmodSync(p, 0o755);
        } catch {
          /* not ours */
        }
        for (const n of fs.readdirSync(p)) open(path.join(p, n));
      };
      open(root);
      fs.rmSync(root, { recursive: true, force: true });
    },
  };
}

// ---- outside-state snapshots ----------------------------------------------------------------

export interface Entry {
  type: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtimeNs: string;
  nlink: number;
  hash?: string;
  target?: string;
  xattrs?: Record<string, string>;
}

function xattrsOf(paths: string[]): Record<string, Record<string, string>> {
  if (paths.length === 0 || !fs.existsSync(PYTHON)) return {};
  const code =
    'import os,sys,json\n' +
    'out={}\n' +
    'for p in sys.argv[1:]:\n' +
    '  try:\n' +
    '    out[p]={k:os.getxattr(p,k,follow_symlinks=False).hex() for k in os.listxattr(p,follow_symlinks=False)}\n' +
    '  except OSError as e:\n' +
    '    out[p]={"!err":str(e.errno)}\n' +
    'print(json.dumps(out))\n';
  return JSON.parse(execFileSync(PYTHON, ['-c', code, ...paths], { encoding: 'utf8' })) as Record<string, Record<string, string>>;
}

/** Every entry under `root` (itself included): type, mode, owner, size, mtime, content hash, xattrs. */
export function snapshot(root: string): Map<string, Entry> {
  const entries = new Map<string, Entry>();
  const walk = (p: string) => {
    let st: fs.BigIntStats;
    try {
      st = fs.lstatSync(p, { bigint: true });
    } catch {
      return;
    }
    const e: Entry = {
      type: st.isDirectory() ? 'dir' : st.isFile() ? 'file' : st.isSymbolicLink() ? 'symlink' : st.isFIFO() ? 'fifo' : 'other',
      mode: Number(st.mode),
      uid: Number(st.uid),
      gid: Number(st.gid),
      size: st.isDirectory() ? 0 : Number(st.size),
      mtimeNs: st.isDirectory() ? '' : String(st.mtimeNs),
      nlink: st.isDirectory() ? 0 : Number(st.nlink),
    };
    if (e.type === 'file') {
      try {
        e.hash = createHash('sha256').update(fs.readFileSync(p)).digest('hex');
      } catch (err) {
        e.hash = `unreadable:${(err as NodeJS.ErrnoException).code}`;
      }
    }
    if (e.type === 'symlink') e.target = fs.readlinkSync(p);
    entries.set(p, e);
    if (e.type === 'dir') for (const n of fs.readdirSync(p).sort()) walk(path.join(p, n));
  };
  walk(root);
  const xs = xattrsOf([...entries.keys()].filter((p) => entries.get(p)!.type !== 'symlink'));
  for (const [p, x] of Object.entries(xs)) {
    const e = entries.get(p);
    if (e && Object.keys(x).length > 0) e.xattrs = x;
  }
  return entries;
}

/** Directory mtimes change whenever a test legitimately adds files, so compare them explicitly. */
export function dirMtime(p: string): string {
  return String(fs.statSync(p, { bigint: true }).mtimeNs);
}

export function expectUnchanged(before: Map<string, Entry>, after: Map<string, Entry>, what = 'outside state'): void {
  expect(Object.fromEntries(after), what).toEqual(Object.fromEntries(before));
}

export { expectNoMountLeak, hostMounts, mountsOfOurs } from './mounts';

// ---- running things ---------------------------------------------------------------------------

export type Op = Array<string | number>;

export interface ProbeOptions extends Omit<RunOptions, 'encoding'> {}

/** Runs the probe fixture under node with the given options; returns the per-op results. */
export async function probeOps(ops: Op[], options: ProbeOptions): Promise<string[]> {
  const r = await run(NODE, [PROBE, JSON.stringify(ops)], { env: BASE_ENV, timeout: 30_000, ...options });
  const line = r.stdout.split('\n').find((l) => l.startsWith('PROBE '));
  if (line === undefined) {
    throw new Error(`probe printed no result (code ${r.code}, signal ${r.signal}): ${r.stdout}\n${r.stderr}`);
  }
  return JSON.parse(line.slice('PROBE '.length)) as string[];
}

/** sh -c SCRIPT, with the base env unless one is given. */
export function sh(script: string, options: Omit<RunOptions, 'encoding'>): Promise<RunResult<string>> {
  return run('/bin/sh', ['-c', script], { env: BASE_ENV, timeout: 60_000, ...options });
}

/** python3 -c CODE ARGS... */
export function py(code: string, args: string[], options: Omit<RunOptions, 'encoding'>): Promise<RunResult<string>> {
  return run(PYTHON, ['-c', code, ...args], { env: BASE_ENV, timeout: 60_000, ...options });
}

/** Errno name for a number, for python probes that print errno numbers. */
export function errnoName(n: number): string {
  const table = os.constants.errno as Record<string, number>;
  for (const [k, v] of Object.entries(table)) if (v === n) return k;
  return String(n);
}

let syscallCopy: string | undefined;

/**
 * The compiled try_syscall probe, copied to a world-readable place outside /tmp (the isolated
 * mode's private /tmp hides the host's): /var/tmp/process-sandbox-test-bin-<uid>/, reused across
 * runs. A directory or copy we do not own, or that others could write, is never trusted.
 */
export function syscallProbe(): string {
  if (syscallCopy) return syscallCopy;
  const src = trySyscallPath();
  const uid = process.getuid?.() ?? 0;
  const dir = path.join(SCRATCH_ROOT, `process-sandbox-test-bin-${uid}`);
  try {
    fs.mkdirSync(dir, { mode: 0o755 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const st = fs.lstatSync(dir);
  if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o022) !== 0) {
    throw new Error(`${dir} is not a directory owned by uid ${uid} and closed to others; remove it`);
  }
  fs.chmodSync(dir, 0o755);
  const dest = path.join(dir, path.basename(src));
  const ok = (() => {
    try {
      const d = fs.lstatSync(dest);
      return d.isFile() && d.uid === uid && (d.mode & 0o022) === 0 && d.size === fs.statSync(src).size;
    } catch {
      return false;
    }
  })();
  if (!ok) {
    const tmp = `${dest}.${process.pid}.tmp`;
    fs.copyFileSync(src, tmp);
    fs.chmodSync(tmp, 0o755);
    fs.renameSync(tmp, dest); // atomic: concurrent test files never run a half-written copy
  }
  syscallCopy = dest;
  return dest;
}

// ---- processes --------------------------------------------------------------------------------

/** A sleep duration no other process on the host uses: it marks our processes in /proc. */
export function uniqueSleep(): string {
  return `${86_000 + Math.floor(Math.random() * 300)}.${process.pid}${Math.floor(Math.random() * 1e6)}`;
}

/** Host pids whose command line contains `marker`. */
export function pidsWith(marker: string): number[] {
  const pids: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, 'utf8');
      if (cmd.includes(marker)) pids.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return pids;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Waits (up to `ms`) until `cond` holds; returns whether it did. Not a timing assertion. */
export async function eventually(cond: () => boolean, ms = 10_000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (cond()) return true;
    if (Date.now() > end) return false;
    await sleep(50);
  }
}

/** Host pids of `sleep <marker>` processes exactly (not the shells whose scripts mention it). */
export function sleepers(marker: string): number[] {
  return pidsWith(marker).filter((p) => {
    try {
      return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8') === `sleep\0${marker}\0`;
    } catch {
      return false;
    }
  });
}

/** Asserts no process carrying `marker` is left (waiting a little for reaping). */
export async function expectNoProcess(marker: string): Promise<void> {
  await eventually(() => pidsWith(marker).length === 0);
  const left = pidsWith(marker).map((p) => {
    try {
      return `${p}: ${fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').replace(/\0/g, ' ')}`;
    } catch {
      return String(p);
    }
  });
  expect(left, `processes carrying ${marker} survived`).toEqual([]);
}

/**
 * A bounded fork storm: python starts `attempts` `sleep <marker>` processes (not sh: dash exits
 * when a fork fails), prints "started N", then stays up until its stdin closes. Resolves once the
 * live count, taken from outside, has stopped changing (polled, never one look), with that peak
 * and the still-running child: the caller reads its report, then ends it (`child.stdin.end()`).
 */
export async function startForkStorm(
  attempts: number,
  marker: string,
  options: RunOptions,
  waitMs: { start: number; settle: number } = { start: 30_000, settle: 5_000 },
): Promise<{ child: SandboxedProcess; out: () => string; peak: number }> {
  const storm = `import subprocess, sys\nok = failed = 0\nfor i in range(${attempts}):\n  try:\n    subprocess.Popen(['sleep', sys.argv[1]], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); ok += 1\n  except OSError:\n    failed += 1\nprint('started', ok, 'failed', failed, flush=True)\nsys.stdin.read()`;
  const child = spawn(PYTHON, ['-c', storm, marker], options);
  let out = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  expect(await eventually(() => out.includes('started'), waitMs.start), 'the storm printed its count').toBe(true);
  let alive = -1;
  await eventually(() => {
    const n = sleepers(marker).length;
    const settled = n === alive && n > 0;
    alive = n;
    return settled;
  }, waitMs.settle);
  return { child, out: () => out, peak: sleepers(marker).length };
}

/** Kills leftovers by pid (used in afterEach so one failure does not poison the host). */
export function killAll(marker: string): void {
  for (const p of pidsWith(marker)) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}

/** A number that fits in a file name and is unique enough for one test run. */
export function uid(): string {
  return `${process.pid}-${Math.floor(Math.random() * 1e9)}`;
}

// ---- host scripts -----------------------------------------------------------------------------

/** The compiled public entry point (kept fresh by test/helpers/global-setup.ts). */
export const DIST_INDEX = path.resolve(__dirname, '..', '..', 'dist', 'index.js');

/**
 * Writes a plain node script that can `require(lib)` the built package; returns its path. Used for
 * "host" processes the tests kill or nest (parent death, a sandbox inside a sandbox).
 */
export function hostScript(dir: string, name: string, body: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `'use strict';\nconst lib = require(${JSON.stringify(DIST_INDEX)});\n${body}\n`, { mode: 0o644 });
  return file;
}

/**
 * Auto mode where isolated mode is out of reach (no user namespaces): without `degraded` it falls
 * back to Landlock mode exactly when every guarantee the policy asks for holds there (the report
 * with `degraded` lists none in `degradedBy`), and otherwise refuses naming exactly those. Runs
 * `script` both ways and checks that; returns what ran without degraded (null: refused, and then
 * nothing ran: `trace` was not made).
 */
export async function autoWithoutDegraded(script: string, policy: SandboxPolicy, trace: string): Promise<RunResult<string> | null> {
  const withDegraded = await run('/bin/true', [], { env: { PATH: '/usr/bin:/bin' }, policy: { ...policy, degraded: true } });
  expect(withDegraded.enforcement.mode).toBe('landlock');
  const needs = withDegraded.enforcement.degradedBy ?? [];
  const plain = await sh(script, { policy: { ...policy, degraded: false } }).catch((e: unknown) => e as Error);
  if (needs.length > 0) {
    expect(plain).toBeInstanceOf(Error);
    expect(plain).toMatchObject({ name: 'SandboxError', code: expect.stringMatching(/^(EUSERNS_UNAVAILABLE|ENOT_ENFORCED)$/) });
    expect((plain as Error).message).toMatch(/degraded/);
    for (const g of needs) expect((plain as Error).message).toContain(g);
    expect(fs.existsSync(trace)).toBe(false);
    return null;
  }
  expect(plain).not.toBeInstanceOf(Error);
  expect((plain as RunResult<string>).enforcement.mode).toBe('landlock');
  expect((plain as RunResult<string>).enforcement.degradedBy).toEqual([]);
  expect(fs.existsSync(trace)).toBe(true);
  return plain as RunResult<string>;
}

/** Tasks (threads included) of this process's uid that /proc shows here. */
export function visibleTasksOfUid(): number {
  const uid = process.getuid!();
  let n = 0;
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (fs.statSync(`/proc/${d}`).uid === uid) n += fs.readdirSync(`/proc/${d}/task`).length;
    } catch {
      /* gone */
    }
  }
  return n;
}
