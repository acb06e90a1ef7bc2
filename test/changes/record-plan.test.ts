/**
 * changes: 'record' in the Landlock-mode plan: every write call must reach the path supervisor
 * (so each is journaled first), which without the option is switched on only where there are
 * carve-outs or Landlock lacks the truncate right. A policy with no carve-outs on ABI 7 plans no
 * path supervisor (the control); with `changes` it plans one that carries the journal. A host
 * without the supervisor is refused, never run unrecorded.
 */
import { describe, expect, it } from 'vitest';

describe.skipIf(process.platform !== 'linux')('changes: record in the Landlock-mode plan', () => {
  const plan = async (connectSupervisor: number, changes: boolean) => {
    const { planLinux } = await import('../../lib/platform/linux/plan');
    const probe = { landlockAbi: 7, seccomp: 0, userns: -1, euid: 1000, connectSupervisor, supervisorAccess: 'pidfd' as const };
    const rules = {
      readAll: true, readRoots: [], writeRoots: ['/tmp/psb-rec-ws'], readOnly: [], denyRead: changes ? ['/tmp/psb-rec-journal'] : [], tmp: 'none',
      network: { kind: 'none' }, mode: 'landlock', degraded: true, limits: {},
    } as unknown as Parameters<typeof planLinux>[0]['rules'];
    const rec = changes ? { changes: { dir: '/tmp/psb-rec-journal', roots: ['/tmp/psb-rec-ws'], maxBytes: 1000 } } : {};
    return planLinux({ rules, mode: 'landlock', file: '/bin/true', argv: ['true'], env: {}, cwd: '/', probe, ...rec });
  };

  it('switches on the path supervisor for every write call, with the journal', async () => {
    expect((await plan(0, false)).native.seccomp?.pathSupervisor).toBeUndefined();
    const ps = (await plan(0, true)).native.seccomp?.pathSupervisor;
    expect(ps?.changes).toEqual({ dir: '/tmp/psb-rec-journal', roots: ['/tmp/psb-rec-ws'], maxBytes: 1000 });
  });

  it('is refused where the supervisor cannot run', async () => {
    const err = await plan(-38, true).then(
      () => null,
      (e: unknown) => e as { code?: string; message: string },
    );
    expect(err?.code).toBe('EUNSUPPORTED_POLICY');
    expect(err?.message).toMatch(/changes: 'record' needs Landlock mode's path supervisor/);
    // Control: the same host plans a run without changes.
    await expect(plan(-38, false)).resolves.toBeDefined();
  });
});
