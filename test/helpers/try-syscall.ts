/**
 * Builds test/fixtures/try_syscall.c once and parses its output.
 *
 * The binary is cached by content hash in os.tmpdir()/process-sandbox-test-bin/, which is made
 * world-readable and executable so that a suite run as an unprivileged user (or a sandboxed child
 * whose uid differs) can execute it. A cache dir or binary that someone else could have planted
 * (not owned by us or root, or group/world-writable) is never trusted.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const SOURCE = path.resolve(__dirname, '..', 'fixtures', 'try_syscall.c');

/** Exit codes of try_syscall. */
export const TRY_SYSCALL_EXIT = { allowed: 0, denied: 1, otherError: 2, usage: 64 } as const;

export interface TrySyscallResult {
  probe: string;
  /** true for "OK": the call succeeded or reached the kernel past the filter. */
  ok: boolean;
  /** The errno name after ERR, or the errno behind "OK reached:EBADF". */
  errno: string | null;
  /** true when OK means "reached the kernel" (a deliberately bad argument was refused there). */
  reached: boolean;
}

let cached: string | undefined;

function trusted(p: string): boolean {
  const st = fs.lstatSync(p);
  const uid = process.getuid?.() ?? 0;
  return (st.uid === uid || st.uid === 0) && (st.mode & 0o022) === 0 && !st.isSymbolicLink();
}

function compile(dest: string): void {
  const tmp = `${dest}.${process.pid}.tmp`;
  execFileSync('cc', ['-O2', '-o', tmp, SOURCE], { stdio: 'pipe' });
  fs.chmodSync(tmp, 0o755);
  // Atomic, so concurrent test files never run a half-written binary.
  fs.renameSync(tmp, dest);
}

/** Absolute path of the compiled probe (compiled on first use). */
export function trySyscallPath(): string {
  if (cached !== undefined) return cached;
  const hash = createHash('sha256')
    .update(fs.readFileSync(SOURCE))
    .update(`${process.platform}-${process.arch}`)
    .digest('hex')
    .slice(0, 16);
  const uid = process.getuid?.() ?? 0;
  const shared = path.join(os.tmpdir(), 'process-sandbox-test-bin');
  try {
    fs.mkdirSync(shared, { mode: 0o755 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const name = `try_syscall-${hash}`;
  let bin = path.join(shared, name);
  if (trusted(shared)) {
    const mine = fs.lstatSync(shared).uid === uid;
    if (mine) fs.chmodSync(shared, 0o755); // mkdir's mode is cut by the umask
    if (fs.existsSync(bin) && trusted(bin)) {
      cached = bin;
      return bin;
    }
    if (mine) {
      fs.rmSync(bin, { force: true });
      compile(bin);
      cached = bin;
      return bin;
    }
  }
  // Not ours to write (another user's cache, or one we cannot trust): a private directory.
  const own = fs.mkdtempSync(path.join(os.tmpdir(), 'process-sandbox-test-bin-'));
  fs.chmodSync(own, 0o755);
  bin = path.join(own, name);
  compile(bin);
  cached = bin;
  return bin;
}

/** Parses the one RESULT line; null when there is none (e.g. the probe was killed). */
export function parseTrySyscall(stdout: string): TrySyscallResult | null {
  const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
  if (line === undefined) return null;
  const [, probe, status, detail] = line.trim().split(/\s+/);
  if (probe === undefined || (status !== 'OK' && status !== 'ERR')) return null;
  if (status === 'ERR') return { probe, ok: false, errno: detail ?? null, reached: false };
  const reached = detail?.startsWith('reached:') ?? false;
  return { probe, ok: true, errno: reached ? detail!.slice('reached:'.length) : null, reached };
}

/**
 * How a sandboxed `int 0x80` (the i386 syscall gate of an x86_64 kernel) may end, given how the
 * same call ended unsandboxed on this host: `hostSignal` is the signal that killed the
 * unsandboxed run (a name such as 'SIGSEGV'), null when the call ran there.
 *
 * Where the gate works, the sandbox's filter must kill the call by its arch check: SIGSYS only.
 * A kernel without IA32 emulation (built without CONFIG_IA32_EMULATION, or booted with
 * ia32_emulation=0) faults every int 0x80 with SIGSEGV before any syscall entry, sandboxed or
 * not; the filter never sees it. There the sandboxed call must still not run: SIGSEGV or SIGSYS
 * (callers also check that its effect did not happen). Any other unsandboxed outcome is
 * unexplained: it throws rather than guess what to expect.
 */
export function int80Outcomes(hostSignal: string | null): { signals: string[]; why: string } {
  if (hostSignal === null) return { signals: ['SIGSYS'], why: 'int 0x80 runs unsandboxed here: the filter kills it (SIGSYS)' };
  if (hostSignal === 'SIGSEGV') {
    return {
      signals: ['SIGSEGV', 'SIGSYS'],
      why: 'int 0x80 faults (SIGSEGV) even unsandboxed here: this kernel has no i386 entry (IA32 emulation off); sandboxed it must not run either',
    };
  }
  throw new Error(`int 0x80 unsandboxed ended with ${hostSignal}, neither running nor the SIGSEGV of a kernel without IA32 emulation`);
}
