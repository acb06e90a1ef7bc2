/**
 * Landlock mode's deny-read listings where the supervisors take the procfs way (a container
 * runtime's default seccomp profile refuses pidfd_getfd and process_vm_readv/writev without
 * CAP_SYS_PTRACE). The supervisor cannot dup the command's open directory there: it reopens it
 * through /proc/<pid>/fd/N at the command's position, lists it, and puts the advanced reopen in
 * place of fd N (native/linux/supervisor/supervise_metadata.cc, ListReopened). The host, a node process
 * starting sandboxes, runs under test/fixtures/ptrace_filter.c as it would in such a container;
 * the same probes run unfiltered as the control (the pidfd way). Every denial has its positive
 * control: the same probe on a readable sibling directory lists every name.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { caps } from '../helpers/capabilities';
import { buildPtraceFilter } from '../helpers/ptrace-filter';
import { expectUnchanged, makeScene, snapshot, type Scene } from '../helpers/sandbox';

const ROOT = path.resolve(__dirname, '..', '..');
const PYTHON = '/usr/bin/python3';

// Already under such a profile (a container row): the test's own process is the host, no filter needed.
const underProfile = caps.supervisorAccess === 'procfs';
const skip = !caps.linux
  ? 'not Linux'
  : !caps.landlock
    ? 'Landlock mode needs Landlock (ABI >= 1) and seccomp'
    : !caps.metadataSupervisor
      ? 'this kernel has no seccomp user notification with ADDFD (5.9+): no supervisors to test'
      : !fs.existsSync(PYTHON)
        ? `${PYTHON} is missing (the raw getdents64 probes are written in Python)`
        : !underProfile && !caps.cc
          ? 'no C compiler to build test/fixtures/ptrace_filter.c'
          : undefined;
// eslint-disable-next-line no-console
if (skip) console.warn(`[landlock-denyread-procfs] SKIPPING: ${skip}`);

const buildFilter = buildPtraceFilter;

// The host: one Landlock-mode run of the default policy with a deny-read directory, no
// `degraded`; its result and report as JSON on the last line.
const HOST = `
const psb = require(${JSON.stringify(path.join(ROOT, 'dist', 'index.js'))});
const [ws, denied, file, args] = process.argv.slice(1);
(async () => {
  const access = psb.probe().features.supervisorAccess;
  const policy = { mode: 'landlock', filesystem: { write: [ws], denyRead: [denied] } };
  const r = await psb.run(file, JSON.parse(args), { cwd: ws, env: { PATH: '/usr/bin:/bin' }, policy });
  console.log(JSON.stringify({ access, code: r.code, out: r.stdout, err: r.stderr,
    denyRead: r.enforcement.guarantees.denyRead, gaps: r.enforcement.gaps, degradedBy: r.enforcement.degradedBy }));
})().catch((e) => { console.log(JSON.stringify({ error: String(e && e.stack || e), code: e && e.code })); });
`;

interface HostResult {
  access?: string;
  code?: number;
  out?: string;
  err?: string;
  denyRead?: string;
  gaps?: string[];
  degradedBy?: string[];
  error?: string;
}

function runHost(filter: string | null, ws: string, denied: string, file: string, args: string[]): HostResult {
  const argv = ['-e', HOST, ws, denied, file, JSON.stringify(args)];
  const r = filter
    ? spawnSync(filter, [process.execPath, ...argv], { encoding: 'utf8', timeout: 60_000 })
    : spawnSync(process.execPath, argv, { encoding: 'utf8', timeout: 60_000 });
  const last = r.stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(last) as HostResult;
  } catch {
    throw new Error(`host printed no result (status ${r.status}): ${r.stdout}\n${r.stderr}`);
  }
}

// Every way to list a directory the probes try, for each directory given; a name list or "ERR <errno>".
const PROBE = String.raw`
import ctypes, json, os, platform, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {'x86_64': 217, 'aarch64': 61}[platform.machine()]
def err(e): return 'ERR %s' % getattr(e, 'errno', e)
def raw(fd, size, limit=None):
    # getdents64 with a small buffer, call after call: (names, calls) or an error.
    buf = ctypes.create_string_buffer(size)
    names, calls = [], 0
    while limit is None or calls < limit:
        n = libc.syscall(NR, fd, buf, size)
        calls += 1
        if n < 0: return 'ERR %d' % ctypes.get_errno()
        if n == 0: break
        at = 0
        while at < n:
            reclen = struct.unpack_from('H', buf.raw, at + 16)[0]
            names.append(buf.raw[at + 19:at + reclen].split(b'\0')[0].decode())
            at += reclen
    return {'names': sorted(x for x in names if x not in ('.', '..')), 'calls': calls}
def attempt(f):
    try: return f()
    except OSError as e: return err(e)
def tiny(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try: return raw(fd, 64)
    finally: os.close(fd)
def seek(d):
    # One small call, back to the start, then the whole listing again.
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = raw(fd, 64, 1)
        if isinstance(first, str): return first
        os.lseek(fd, 0, os.SEEK_SET)
        return {'first': first, 'again': raw(fd, 64)}
    finally: os.close(fd)
def viafd(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try: return sorted(os.listdir('/proc/self/fd/%d' % fd))
    finally: os.close(fd)
def opath(d):
    # getdents64 on an O_PATH fd: the kernel's EBADF, never a listing of what it names.
    fd = os.open(d, os.O_PATH | os.O_DIRECTORY)
    try: return raw(fd, 4096)
    finally: os.close(fd)
def fdlist(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try: return sorted(os.listdir(fd))
    finally: os.close(fd)
out = {}
for d in sys.argv[1:]:
    out[d] = {
        'listdir': attempt(lambda: sorted(os.listdir(d))),
        'scandir': attempt(lambda: sorted(e.name for e in os.scandir(d))),
        'tiny': attempt(lambda: tiny(d)),
        'seek': attempt(lambda: seek(d)),
        'viafd': attempt(lambda: viafd(d)),
        'fdlist': attempt(lambda: fdlist(d)),
        'opath': attempt(lambda: opath(d)),
        'dotdot': attempt(lambda: sorted(os.listdir(os.path.join(d, '..', os.path.basename(d))))),
    }
print(json.dumps(out))
`;

const SECRET_NAMES = ['id_rsa', 'id_rsa.pub', 'known_hosts', 'config', 'authorized_keys'];
const SIBLING_NAMES = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel'];

describe.skipIf(skip)('deny-read listings in Landlock mode when pidfd_getfd is refused (the procfs way)', () => {
  let filter: string | null;
  let scene: Scene;
  let denied: string;
  let sibling: string;

  beforeAll(() => {
    filter = underProfile ? null : buildFilter();
  });
  beforeEach(() => {
    scene = makeScene('denyls');
    denied = path.join(scene.out, 'ssh');
    sibling = path.join(scene.out, 'open');
    fs.mkdirSync(denied, { mode: 0o700 });
    fs.mkdirSync(sibling);
    for (const n of SECRET_NAMES) fs.writeFileSync(path.join(denied, n), `secret ${n}\n`, { mode: 0o600 });
    for (const n of SIBLING_NAMES) fs.writeFileSync(path.join(sibling, n), `${n}\n`);
    fs.writeFileSync(path.join(scene.ws, 'probe.py'), PROBE);
  });
  afterEach(() => scene.cleanup());

  const expectHidden = (text: string) => {
    for (const n of SECRET_NAMES) expect(text, `${n} leaked`).not.toContain(n);
  };

  for (const way of ['procfs', 'control: pidfd'] as const) {
    const filtered = way === 'procfs';

    it(`${way}: runs without degraded; the report says deny-read is enforced, no listing gap`, () => {
      const r = runHost(filtered ? filter : null, scene.ws, denied, '/bin/true', []);
      expect(r.error, r.error).toBeUndefined();
      if (filtered) expect(r.access).toBe('procfs');
      else if (r.access === 'procfs') console.warn('[landlock-denyread-procfs] this test process is itself under such a profile');
      expect(r.code).toBe(0);
      expect(r.denyRead).toBe('enforced');
      expect((r.gaps ?? []).join('\n')).not.toMatch(/can be listed|pidfd_getfd/);
      expect(r.degradedBy ?? []).toEqual([]);
    });

    it(`${way}: no spelling lists the denied directory's names; the sibling's are all listed`, () => {
      const before = snapshot(denied);
      const r = runHost(filtered ? filter : null, scene.ws, denied, PYTHON, ['probe.py', denied, sibling]);
      expect(r.error, r.error).toBeUndefined();
      if (filtered) expect(r.access).toBe('procfs');
      expect(r.code, r.err).toBe(0);
      const res = JSON.parse(r.out!) as Record<string, Record<string, unknown>>;
      // Denied: every probe fails, no name reaches the command.
      for (const [probe, v] of Object.entries(res[denied]!)) {
        expect(JSON.stringify(v), `${probe} of the denied directory`).toMatch(probe === 'opath' ? /^"ERR (9|13)"$/ : /^"ERR (13|1)"$/);
      }
      expectHidden(r.out! + r.err!);
      // Control: every probe lists the sibling's names, the tiny buffer over several calls.
      const all = [...SIBLING_NAMES].sort();
      const open = res[sibling]!;
      expect(open.listdir).toEqual(all);
      expect(open.scandir).toEqual(all);
      expect(open.viafd).toEqual(all);
      expect(open.fdlist).toEqual(all);
      expect(open.opath).toBe('ERR 9');
      expect(open.dotdot).toEqual(all);
      const tiny = open.tiny as { names: string[]; calls: number };
      expect(tiny.names).toEqual(all);
      expect(tiny.calls).toBeGreaterThan(3);
      // After a seek back to the start the whole listing comes again, and the first call's names are in it.
      const seek = open.seek as { first: { names: string[] }; again: { names: string[] } };
      expect(seek.again.names).toEqual(all);
      for (const n of seek.first.names) expect(all).toContain(n);
      expectUnchanged(before, snapshot(denied), 'denied');
    });

    it(`${way}: ls, find and ls through /proc/self/fd show the sibling's names, never the denied ones`, () => {
      const script =
        `ls ${denied}; echo "ls=$?"; find ${denied}; echo "find=$?"; ` +
        `exec 3< ${denied} && ls /proc/self/fd/3/; echo "fd=$?"; exec 3<&-; ` +
        `ls ${sibling} | tr '\\n' ' '; echo; find ${sibling} -type f | sort | tr '\\n' ' '; echo; ` +
        `exec 4< ${sibling} && ls /proc/self/fd/4/ | tr '\\n' ' '; echo`;
      const r = runHost(filtered ? filter : null, scene.ws, denied, '/bin/sh', ['-c', script]);
      expect(r.error, r.error).toBeUndefined();
      expectHidden(r.out! + r.err!);
      expect(r.out).toMatch(/ls=[12]\n/);
      expect(r.out).toMatch(/find=1\n/);
      expect(r.out).toMatch(/fd=[12]\n/);
      const lines = r.out!.trim().split('\n');
      const sorted = [...SIBLING_NAMES].sort();
      expect(lines.at(-3)!.trim().split(' ')).toEqual(sorted);
      expect(lines.at(-2)!.trim().split(' ')).toEqual(sorted.map((n) => path.join(sibling, n)));
      expect(lines.at(-1)!.trim().split(' ')).toEqual(sorted);
    });

    // The command swaps fd N between a directory it may list and an O_PATH fd of the denied one
    // (which it could open without any check) while another thread lists fd N: the supervisor
    // judges the object it reopened, never the number, so no denied name ever comes back.
    it(`${way}: a thread swapping the listed fd for an O_PATH fd of the denied directory never gets its names`, () => {
      const race = String.raw`
import ctypes, os, platform, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {'x86_64': 217, 'aarch64': 61}[platform.machine()]
denied, sibling = sys.argv[1:3]
a = os.open(sibling, os.O_RDONLY | os.O_DIRECTORY)
b = os.open(denied, os.O_PATH | os.O_DIRECTORY)
N = 50
os.dup2(a, N)
stop = False
def swap():
    while not stop:
        os.dup2(b, N); os.dup2(a, N)
t = threading.Thread(target=swap); t.start()
buf = ctypes.create_string_buffer(4096)
seen, lists = set(), 0
for i in range(1500):
    try: os.lseek(N, 0, os.SEEK_SET)
    except OSError: pass
    n = libc.syscall(NR, N, buf, 4096)
    if n > 0:
        lists += 1
        at = 0
        while at < n:
            reclen = int.from_bytes(buf.raw[at + 16:at + 18], 'little')
            seen.add(buf.raw[at + 19:at + reclen].split(b'\0')[0].decode()); at += reclen
stop = True; t.join()
print('lists=%d' % lists)
print(' '.join(sorted(seen)))
`;
      fs.writeFileSync(path.join(scene.ws, 'race.py'), race);
      const r = runHost(filtered ? filter : null, scene.ws, denied, PYTHON, ['race.py', denied, sibling]);
      expect(r.error, r.error).toBeUndefined();
      expect(r.code, r.err).toBe(0);
      expectHidden(r.out! + r.err!);
      // Control: the listings that got through named the sibling's entries.
      expect(r.out).toMatch(/lists=[1-9]/);
      expect(r.out).toContain('alpha');
    });
  }
});

// The plan: listings are supervised in the procfs way too (no gap, no degraded); with no way to
// reach the command at all the gap and the refusal stay.
describe.skipIf(process.platform !== 'linux')('Landlock-mode deny-read listing plan by supervisor access', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-denyls-plan-'));
    fs.mkdirSync(path.join(dir, 'ssh'));
    fs.mkdirSync(path.join(dir, 'ws'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  const plan = async (connectSupervisor: number, supervisorAccess: 'pidfd' | 'procfs' | 'none', degraded: boolean) => {
    const { planLinux } = await import('../../lib/platform/linux/plan');
    const probe = { landlockAbi: 6, seccomp: 0, userns: -1, euid: 1000, connectSupervisor, supervisorAccess };
    const rules = {
      readAll: true, readRoots: [], writeRoots: [path.join(dir, 'ws')], readOnly: [], denyRead: [path.join(dir, 'ssh')], tmp: 'private',
      network: { kind: 'none' }, mode: 'landlock', degraded, limits: { maxProcesses: 64 },
    } as unknown as Parameters<typeof planLinux>[0]['rules'];
    return planLinux({ rules, mode: 'landlock', file: '/bin/true', argv: ['true'], env: {}, cwd: '/', probe });
  };

  it("'procfs': listings supervised, deny-read enforced, no listing gap", async () => {
    const p = await plan(0, 'procfs', false);
    expect(p.native.seccomp!.metadataSupervisor!.listDirs).toBe(true);
    expect(p.enforcement.guarantees.denyRead).toBe('enforced');
    expect(p.enforcement.gaps.join('\n')).not.toMatch(/can be listed/);
  });

  it("'none': the names can be listed, a gap naming the refused calls; refused unless degraded", async () => {
    await expect(plan(-1, 'none', false)).rejects.toThrow();
    const p = await plan(-1, 'none', true);
    expect(p.native.seccomp!.metadataSupervisor).toBeUndefined();
    expect(p.enforcement.guarantees.denyRead).toBe('partial');
    expect(p.enforcement.gaps.join('\n')).toMatch(/names inside deny-read directories can be listed.*pidfd_getfd are refused.*CAP_SYS_PTRACE/);
  });
});
