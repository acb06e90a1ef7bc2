/**
 * test/fixtures/ptrace_filter.c compiled into a private directory (one per call, never shared): a
 * wrapper that runs a command under a seccomp filter refusing what a container runtime's default
 * profile refuses the supervisors (pidfd_getfd, process_vm_*, ptrace, kcmp, unshare).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';

import { caps } from './capabilities';
import { NODE } from './sandbox';

const SOURCE = path.resolve(__dirname, '..', 'fixtures', 'ptrace_filter.c');

export function buildPtraceFilter(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-ptrace-filter-'));
  fs.chmodSync(dir, 0o755);
  const bin = path.join(dir, 'ptrace_filter');
  execFileSync('cc', ['-O2', '-o', bin, SOURCE], { stdio: 'pipe' });
  fs.chmodSync(bin, 0o755);
  return bin;
}

/** Why the container-profile rows cannot run here (no C compiler for the filter), or undefined. */
export const ptraceFilterSkip = caps.cc ? undefined : 'no C compiler for the container-profile filter (test/fixtures/ptrace_filter.c)';

/**
 * The filter for the current describe block: built before its tests (where a compiler exists),
 * removed after. The getter gives its path (undefined before, or without a compiler).
 */
export function usePtraceFilter(): () => string | undefined {
  let filter: string | undefined;
  beforeAll(() => {
    if (!ptraceFilterSkip) filter = buildPtraceFilter();
  });
  afterAll(() => {
    if (filter) fs.rmSync(path.dirname(filter), { recursive: true, force: true });
  });
  return () => filter;
}

/**
 * The hosts the lock tests run a host script on: a plain one and one under a container runtime's
 * seccomp profile (through the filter), each with Landlock mode's supervision in a process of its
 * own (the default) and as threads of the host (PSB_SUPERVISION=thread).
 */
const FILTERED = "a host under a container runtime's seccomp profile (unshare and pidfd_getfd refused)";
export const LOCK_HOSTS = [
  { host: 'a plain host (the supervision in a process of its own, the default)', filtered: false, inProcess: true },
  { host: 'a plain host, the supervision as threads of it (PSB_SUPERVISION=thread)', filtered: false, inProcess: false },
  { host: `${FILTERED}, the supervision in a process of its own`, filtered: true, inProcess: true },
  { host: `${FILTERED}, the supervision as threads of it`, filtered: true, inProcess: false },
];

/** Why a lock-test host row cannot run in this mode, or undefined. */
export function lockHostSkip(mode: string, row: { filtered: boolean; inProcess: boolean }): string | undefined {
  if (row.filtered) return ptraceFilterSkip ?? (mode === 'isolated' ? 'isolated mode needs unshare: no case' : undefined);
  return row.inProcess && mode === 'isolated' ? 'isolated mode has no supervision process' : undefined;
}

/** What a lock test's host script prints last: its findings, and the report of one run. */
export type LockHostResult = Record<string, unknown> & { outputs: Record<string, string>; mechanisms: Record<string, unknown> };

/**
 * Runs a lock test's host script (`script args...`) on one LOCK_HOSTS row: under the filter when
 * the row is filtered, with the row's PSB_SUPERVISION, Landlock's ABI held below 6 (so that the
 * signal class is supervised too: Landlock's signal scope is ABI 6) and `env` added. Checks that
 * the host lived and printed its result without an error, and returns that result.
 */
export function runLockHost(
  row: { filtered: boolean; inProcess: boolean },
  filter: string | undefined,
  script: string,
  args: string[],
  env: Record<string, string | undefined>,
): LockHostResult {
  const argv = [NODE, script, ...args];
  const r = spawnSync(row.filtered ? filter! : argv[0], row.filtered ? argv : argv.slice(1), {
    encoding: 'utf8',
    timeout: 200_000,
    env: { ...process.env, PSB_LANDLOCK_ABI_MAX: '5', PSB_SUPERVISION: row.inProcess ? 'process' : 'thread', ...env },
  });
  const last = r.stdout.trim().split('\n').pop() ?? '';
  expect(r.signal, `host died: ${r.stderr}`).toBeNull();
  expect(last.startsWith('{'), `host printed no result (code ${r.status}): ${r.stdout}\n${r.stderr}`).toBe(true);
  const out = JSON.parse(last) as LockHostResult;
  expect(out.error, out.error as string).toBeUndefined();
  // Where the supervision ran is the row's.
  expect(String(out.mechanisms.supervision ?? '')).toMatch(row.inProcess ? /in a process of its own/ : /^(?![\s\S]*process of its own)/);
  return out;
}
