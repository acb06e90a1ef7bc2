/**
 * test/fixtures/ptrace_filter.c compiled into a private directory (one per call, never shared): a
 * wrapper that runs a command under a seccomp filter refusing what a container runtime's default
 * profile refuses the supervisors (pidfd_getfd, process_vm_*, ptrace, kcmp, unshare).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const SOURCE = path.resolve(__dirname, '..', 'fixtures', 'ptrace_filter.c');

export function buildPtraceFilter(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-ptrace-filter-'));
  fs.chmodSync(dir, 0o755);
  const bin = path.join(dir, 'ptrace_filter');
  execFileSync('cc', ['-O2', '-o', bin, SOURCE], { stdio: 'pipe' });
  fs.chmodSync(bin, 0o755);
  return bin;
}
