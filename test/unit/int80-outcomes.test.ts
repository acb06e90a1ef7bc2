/**
 * What the suites expect of a sandboxed int 0x80, from what the same call does unsandboxed on
 * the host (test/helpers/try-syscall.ts). A kernel without IA32 emulation cannot be booted here,
 * so its branch is checked on the outcome it produces (SIGSEGV unsandboxed).
 */
import { describe, expect, it } from 'vitest';

import { int80Outcomes } from '../helpers/try-syscall';

describe('int 0x80 expectations', () => {
  it('where the i386 gate runs unsandboxed, only the filter\'s SIGSYS is accepted', () => {
    expect(int80Outcomes(null).signals).toEqual(['SIGSYS']);
  });

  it('where the kernel has no i386 entry (SIGSEGV unsandboxed), SIGSEGV or SIGSYS, and the reason says so', () => {
    const o = int80Outcomes('SIGSEGV');
    expect(o.signals).toEqual(['SIGSEGV', 'SIGSYS']);
    expect(o.why).toMatch(/IA32 emulation/);
    // Never "it ran": a run that ended without a signal is not among the outcomes.
    expect(o.signals).not.toContain(null);
  });

  it('any other unsandboxed outcome is not guessed at', () => {
    expect(() => int80Outcomes('SIGILL')).toThrow(/SIGILL/);
  });
});
