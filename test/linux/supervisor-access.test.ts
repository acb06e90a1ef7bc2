/**
 * Landlock mode's supervisors under a container runtime's default seccomp profile (docs/hosts.md):
 * Docker's refuses process_vm_readv and pidfd_getfd with EPERM without CAP_SYS_PTRACE, and
 * unshare without CAP_SYS_ADMIN, for root too, and Landlock mode is what runs there. The supervisors then take their procfs way
 * (native/linux/supervisor/task_access.h: /proc/<pid>/mem, /proc/<pid>/fd/N). The honest way to test it:
 * the HOST, a node process starting sandboxes, runs under such a filter (test/fixtures/
 * ptrace_filter.c), as it would in the container. Checked from outside: the files the sandbox
 * changed (mode, contents), the carve-out byte-identical, the proxy's listener.
 *
 * The existing Landlock-mode suites run the same way:
 *   ptrace_filter npx vitest run test/linux/landlock-carveouts.test.ts test/linux/connect-supervisor.test.ts ...
 * (the path of the compiled filter is printed by this test).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { caps } from '../helpers/capabilities';
import { makeScene, snapshot, expectUnchanged, type Scene } from '../helpers/sandbox';
import { trySyscallPath } from '../helpers/try-syscall';
import { buildPtraceFilter } from '../helpers/ptrace-filter';

const ROOT = path.resolve(__dirname, '..', '..');

const skip = !caps.linux
  ? 'not Linux'
  : !caps.landlock
    ? 'Landlock mode needs Landlock (ABI >= 1) and seccomp'
    : !caps.metadataSupervisor
      ? 'this kernel has no seccomp user notification with ADDFD (5.9+): no supervisors to test'
      : undefined;
// eslint-disable-next-line no-console
if (skip) console.warn(`[supervisor-access] SKIPPING: ${skip}`);

const buildFilter = buildPtraceFilter;

// The host script: a probe, then one Landlock-mode run, its result as JSON on the last line.
const HOST = `
const psb = require(${JSON.stringify(path.join(ROOT, 'dist', 'index.js'))});
const [ws, portArg, script] = process.argv.slice(1);
const port = Number(portArg || 0);
// A host umask that narrows what the command asks for (the supervisor must not use it).
process.umask(0o077);
(async () => {
  const access = psb.probe().features.supervisorAccess;
  const policy = { mode: 'landlock', degraded: true, filesystem: { write: [ws] },
    ...(port ? { network: { mode: 'proxy', proxy: { port } } } : {}) };
  const r = await psb.run('/bin/sh', ['-c', script], { cwd: ws, env: { PATH: '/usr/bin:/bin' }, policy });
  console.log(JSON.stringify({ access, code: r.exitCode, out: r.stdout, err: r.stderr,
    meta: r.enforcement.mechanisms.metadataSupervisor, paths: r.enforcement.mechanisms.pathSupervisor }));
})().catch((e) => { console.log(JSON.stringify({ error: String(e && e.stack || e) })); });
`;

interface HostResult {
  access?: string;
  code?: number;
  out?: string;
  err?: string;
  meta?: string;
  paths?: string;
  error?: string;
}

function runHost(filter: string | null, ws: string, script: string, port = 0): HostResult {
  const args = ['-e', HOST, ws, String(port), script];
  const r = filter ? spawnSync(filter, [process.execPath, ...args], { encoding: 'utf8', timeout: 60_000 }) : spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 60_000 });
  const last = r.stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(last) as HostResult;
  } catch {
    throw new Error(`host printed no result (status ${r.status}): ${r.stdout}\n${r.stderr}`);
  }
}

// The workspace work the container broke: create, chmod, utime, mkdir, > /dev/null; then the
// carve-out (.git/config): no write, no chmod, no rename.
const WORK =
  'set -u; echo made > new.txt && echo write=ok || echo write=fail; chmod 0700 new.txt && echo chmod=ok || echo chmod=fail; ' +
  'touch -d @1000000000 new.txt && echo utime=ok || echo utime=fail; mkdir d && echo mkdir=ok || echo mkdir=fail; ' +
  'echo x > /dev/null && echo null=ok || echo null=fail; ' +
  'umask 022; : > u.txt && mkdir ud && echo umask=ok || echo umask=fail; ' +
  'echo evil >> .git/config 2>/dev/null && echo cfgwrite=ok || echo cfgwrite=denied; ' +
  'chmod 0777 .git/config 2>/dev/null && echo cfgchmod=ok || echo cfgchmod=denied; ' +
  'mv .git/config .git/moved 2>/dev/null && echo cfgmove=ok || echo cfgmove=denied';

describe.skipIf(skip)('supervisors under a seccomp profile that refuses process_vm_readv and pidfd_getfd', () => {
  let filter: string;
  let scene: Scene;
  let ws: string;

  beforeAll(() => {
    filter = buildFilter();
    // eslint-disable-next-line no-console
    console.log(`[supervisor-access] filter: ${filter}`);
  });
  beforeEach(() => {
    scene = makeScene('access');
    ws = scene.ws;
    fs.mkdirSync(path.join(ws, '.git'));
    fs.writeFileSync(path.join(ws, '.git', 'config'), '[core]\n', { mode: 0o644 });
  });
  afterEach(() => scene.cleanup());

  it('the filter refuses the two calls for the host and what it starts (control: without it they work)', () => {
    const tryIt = (pre: string[]) => {
      const [cmd, ...rest] = [...pre, trySyscallPath(), 'process_vm_readv'];
      return spawnSync(cmd!, rest, { encoding: 'utf8' }).stdout;
    };
    expect(tryIt([filter])).toMatch(/ERR EPERM/);
    // The test's own process may already be under such a profile (a container row): then both refuse.
    const own = tryIt([]);
    expect(own).toMatch(/RESULT process_vm_readv (OK|ERR EPERM)/);
  });

  it('the probe says which way the supervisors take', () => {
    const under = runHost(filter, ws, 'true');
    expect(under.error).toBeUndefined();
    expect(under.access).toBe('procfs');
    const plain = runHost(null, ws, 'true');
    // Control: unfiltered, the direct calls (unless this test runs under such a profile itself).
    const own = spawnSync(trySyscallPath(), ['process_vm_readv'], { encoding: 'utf8' }).stdout;
    expect(plain.access).toBe(/ERR EPERM/.test(own) ? 'procfs' : 'pidfd');
  });

  it('metadata calls, creates and writes in the workspace work; the carve-out stays unchanged', () => {
    const before = snapshot(path.join(ws, '.git'));
    const r = runHost(filter, ws, WORK);
    expect(r.error, r.error).toBeUndefined();
    expect(r.access).toBe('procfs');
    expect(r.meta).toBe('seccomp-user-notif');
    expect(r.paths).toBe('seccomp-user-notif');
    expect(r.out, r.err).toMatch(/write=ok\nchmod=ok\nutime=ok\nmkdir=ok\nnull=ok\numask=ok\ncfgwrite=denied\ncfgchmod=denied\ncfgmove=denied/);
    // From outside: the changes landed, the carve-out did not change.
    const st = fs.statSync(path.join(ws, 'new.txt'));
    expect(st.mode & 0o777).toBe(0o700);
    expect(st.mtimeMs).toBe(1_000_000_000_000);
    expect(fs.readFileSync(path.join(ws, 'new.txt'), 'utf8')).toBe('made\n');
    expect(fs.statSync(path.join(ws, 'd')).isDirectory()).toBe(true);
    // The command's umask (022), not the host's (077), even where the supervisor shares the host's.
    expect(fs.statSync(path.join(ws, 'u.txt')).mode & 0o777).toBe(0o644);
    expect(fs.statSync(path.join(ws, 'ud')).mode & 0o777).toBe(0o755);
    expectUnchanged(before, snapshot(path.join(ws, '.git')), '.git');
  });

  it('a chmod outside the writable roots is refused and leaves the file unchanged (control: inside it works)', () => {
    const outside = path.join(scene.out, 'ro.txt');
    const before = fs.statSync(outside).mode;
    const r = runHost(filter, ws, `chmod 0777 ${outside} && echo out=ok || echo out=denied; : > in && chmod 0600 in && echo in=ok`);
    expect(r.out, r.err).toMatch(/out=denied\nin=ok/);
    expect(fs.statSync(outside).mode).toBe(before);
    expect(fs.statSync(path.join(ws, 'in')).mode & 0o777).toBe(0o600);
  });

  // Runs one test file whole with the host under the filter: every test passes, none skips or
  // fails. Returns its output.
  const suiteUnderFilter = (file: string): string => {
    const vitest = path.join(ROOT, 'node_modules', 'vitest', 'vitest.mjs');
    const r = spawnSync(filter, [process.execPath, vitest, 'run', file], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, PSB_SKIP_BUILD: '1', PSB_TEST_WORKERS: '1', NO_COLOR: '1' },
      timeout: 300_000,
    });
    const out = `${r.stdout}\n${r.stderr}`;
    expect(r.status, out.slice(-4000)).toBe(0);
    expect(out).toMatch(/Tests\s+\d+ passed/);
    expect(out).not.toMatch(/skipped|failed/);
    return out;
  };

  // The connect supervisor's procfs way (a socket cannot be reopened through /proc: its
  // protocol, state and flags are read from outside) runs its whole suite under the filter:
  // 127.0.0.2 on the proxy port gets nothing, racing threads, swapped sockets, EISCONN, a flood.
  it('the connect supervisor suite passes with the host under the filter', () => {
    if (!caps.connectSupervisor) return expect.fail('connect supervisor missing although metadata supervision works');
    suiteUnderFilter('test/linux/connect-supervisor.test.ts');
  }, 320_000);

  // procPrivacy (supervise_reads.cc) in the procfs way: the whole suite, listings of /proc
  // filtered there too (a reopen of the command's directory: supervise_metadata.cc).
  it('the procPrivacy suite passes with the host under the filter', () => {
    suiteUnderFilter('test/linux/landlock-proc.test.ts');
  }, 320_000);

  // Isolated mode's placeholders left out of listings in the procfs way (a reopen of the
  // command's directory at its position, put in place of its fd: supervise_metadata.cc).
  it('the placeholder listing suite passes with the host under the filter', () => {
    if (!caps.userns) return expect.fail('isolated mode is missing here; the suite would skip it');
    suiteUnderFilter('test/linux/protected-names-content.test.ts');
  }, 320_000);
});

// Neither way works (a profile refusing the calls where /proc/<pid>/mem is not readable either):
// the probe says connectSupervisor -EPERM and supervisorAccess 'none'; the supervisors are off,
// the gaps say why (the calls, CAP_SYS_PTRACE) and `degraded` is needed. Control: 'procfs'.
describe.skipIf(process.platform !== 'linux')('Landlock-mode plan when the supervisors cannot reach the command', () => {
  const plan = async (connectSupervisor: number, supervisorAccess: 'pidfd' | 'procfs' | 'none', degraded: boolean) => {
    const { planLinux } = await import('../../lib/platform/linux/plan');
    const probe = { landlockAbi: 7, seccomp: 0, userns: -1, euid: 1000, connectSupervisor, supervisorAccess };
    const rules = {
      readAll: true, readRoots: [], writeRoots: ['/tmp/psb-none-ws'], readOnly: ['/tmp/psb-none-ws/.git'], denyRead: [], tmp: 'private',
      network: { kind: 'proxy' }, mode: 'landlock', degraded, limits: {},
    } as unknown as Parameters<typeof planLinux>[0]['rules'];
    return planLinux({ rules, mode: 'landlock', file: '/bin/true', argv: ['true'], env: {}, cwd: '/', probe, proxyPort: 4321 });
  };

  it("'none': no supervisor, gaps name the refused calls and CAP_SYS_PTRACE, degraded needed", async () => {
    await expect(plan(-1, 'none', false)).rejects.toThrow(/process_vm_readv and pidfd_getfd are refused.*CAP_SYS_PTRACE/);
    const p = await plan(-1, 'none', true);
    expect(p.native.seccomp!.metadataSupervisor).toBeUndefined();
    expect(p.native.seccomp!.pathSupervisor).toBeUndefined();
    expect(p.native.seccomp!.connectSupervisor).toBeUndefined();
    const gaps = p.enforcement.gaps.join('\n');
    expect(gaps).toMatch(/read-only carve-outs inside writable roots are not enforced.*CAP_SYS_PTRACE/);
    expect(gaps).toMatch(/chmod, chown, utime and xattr.*process_vm_readv and pidfd_getfd are refused/);
    expect(p.enforcement.guarantees.filesystemWrite).not.toBe('enforced');
  });

  it("control: 'procfs' plans every supervisor, with no such gap", async () => {
    const p = await plan(0, 'procfs', true);
    expect(p.native.seccomp!.metadataSupervisor).toBeDefined();
    expect(p.native.seccomp!.pathSupervisor).toBeDefined();
    expect(p.native.seccomp!.connectSupervisor).toBe(4321);
    expect(p.enforcement.gaps.join('\n')).not.toMatch(/CAP_SYS_PTRACE|carve-outs inside writable roots are not enforced|chmod, chown/);
  });
});
