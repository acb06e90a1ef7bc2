/**
 * The `sandboxDenied` hint: a cheap heuristic (as Codex's `is_likely_sandbox_denied`) that tells a
 * caller a failing command probably hit the sandbox. It is a hint, never a verdict.
 */
import type { SandboxType } from './sandbox-type';

const DENIAL_KEYWORDS = [
  'operation not permitted',
  'permission denied',
  'read-only file system',
  'seccomp',
  'sandbox',
  'landlock',
  'failed to write file',
  // A protected file is a read-only mount point: replacing it by rename (git's config.lock
  // dance, editors' atomic saves) fails with EBUSY rather than EROFS.
  'device or resource busy',
];

/** SIGSYS on Linux (the seccomp kill signal on x86-64/arm64). */
const SIGSYS = 31;

export function isLikelySandboxDenied(
  sandboxType: SandboxType,
  exitCode: number | null,
  signal: NodeJS.Signals | string | null,
  output: string,
): boolean {
  if (sandboxType === 'none') return false;
  if (exitCode === 0) return false;
  // Usage errors and "not executable"/"not found" are the command's own problem.
  if (exitCode === 2 || exitCode === 126 || exitCode === 127) return false;
  if (sandboxType === 'linuxSeccomp' && (exitCode === 128 + SIGSYS || signal === 'SIGSYS')) return true;
  const lower = output.toLowerCase();
  return DENIAL_KEYWORDS.some((k) => lower.includes(k));
}
