/**
 * Landlock mode's /proc privacy (policy.procPrivacy). Landlock mode shares the
 * host's /proc; with the option every read-only open goes to the supervisor
 * (native/linux/supervisor/supervise_reads.cc), which refuses other processes' /proc/<pid> entries (ENOENT)
 * and the network tables (EACCES), and opens everything else through a thread confined by the
 * command's own Landlock rules.
 *
 * Oracle: a host process started here holds a secret in its argv, and a host listener's port is
 * in the host's /proc/net/tcp (both checked from outside, and readable inside WITHOUT the option:
 * the positive control that the probe can see them); with the option neither reaches the
 * command by any spelling; the command's own /proc entries, ps, node, python, git, bash process
 * substitution and /etc/mtab still work; Landlock's own denials (deny-read under the workspace,
 * files outside the readable roots) still hold, with a readable file beside each as control.
 */
import { execFileSync, spawn as spawnHost, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { run } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, makeScene, NODE, PYTHON, type Scene } from '../helpers/sandbox';

const landlock = MODES.find((m) => m.name === 'landlock')!;
const skip =
  landlock.skip ??
  (!caps.metadataSupervisor ? 'this kernel has no seccomp user notification with ADDFD: procPrivacy is refused here (tested below)' : undefined) ??
  (caps.python ? undefined : 'no /usr/bin/python3');
// eslint-disable-next-line no-console
if (skip) console.warn(`[landlock-proc] SKIPPING: ${skip}`);

// Opens and reads each path; prints one JSON object {path: "ok:<text>" | errno name}.
const READ_PY = String.raw`
import errno, json, sys
res = {}
for p in sys.argv[1:]:
    try:
        with open(p, 'rb') as f:
            res[p] = 'ok:' + f.read(65536).decode('latin1')
    except OSError as e:
        res[p] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(res))
`;

const SECRET = `psb-argv-secret-${process.pid}-${Date.now()}`;

let scene: Scene;
let host: ChildProcess;
let server: net.Server;
let portHex: string;

function policy(extra: SandboxPolicy = {}, on = true): SandboxPolicy {
  return modePolicy('landlock', { filesystem: { write: [scene.ws] }, ...extra, ...(on ? { procPrivacy: true } : {}) });
}

async function reads(paths: string[], p: SandboxPolicy = policy()): Promise<Record<string, string>> {
  const r = await run(PYTHON, ['-c', READ_PY, ...paths], { cwd: scene.ws, env: BASE_ENV, policy: p, timeout: 60_000 });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Record<string, string>;
}

describe.skipIf(skip)('Landlock mode, procPrivacy', () => {
  beforeAll(async () => {
    host = spawnHost(NODE, ['-e', 'setInterval(() => {}, 1e6)', SECRET], { stdio: 'ignore' });
    server = net.createServer((s) => s.destroy());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as net.AddressInfo).port;
    portHex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
    // Outside: the secret and the listener are really there to be read.
    for (let i = 0; i < 100 && !fs.readFileSync(`/proc/${host.pid}/cmdline`, 'latin1').includes(SECRET); i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(fs.readFileSync(`/proc/${host.pid}/cmdline`, 'latin1')).toContain(SECRET);
    expect(fs.readFileSync('/proc/net/tcp', 'latin1')).toContain(portHex);
  });
  afterAll(async () => {
    host?.kill('SIGKILL');
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });
  beforeEach(() => {
    scene = makeScene('proc');
  });
  afterEach(() => scene.cleanup());

  it("another process's /proc entries are not readable by any spelling (ENOENT); without the option they are", async () => {
    const pid = host.pid!;
    fs.symlinkSync(`/proc/${pid}/cmdline`, path.join(scene.ws, 'link-file'));
    fs.symlinkSync(`/proc/${pid}`, path.join(scene.ws, 'link-dir'));
    const paths = [
      `/proc/${pid}/cmdline`,
      `/proc/${pid}/status`,
      `/proc/${pid}/environ`,
      `/proc/${pid}/task/${pid}/cmdline`,
      `/proc/${pid}/./cmdline`,
      `/proc/self/../${pid}/cmdline`,
      path.join(scene.ws, 'link-file'),
      path.join(scene.ws, 'link-dir', 'cmdline'),
    ];
    // Control: without the option the same probe reads the secret (the gap this closes).
    const open = await reads(paths.slice(0, 1), policy({}, false));
    expect(open[paths[0]]).toContain(SECRET);
    const r = await reads(paths);
    for (const p of paths) expect(r[p], p).toBe('ENOENT');
    expect(JSON.stringify(r)).not.toContain(SECRET);
    // Relative to a cwd inside the host process's directory (chdir itself is not stopped).
    const rel = await run('/bin/sh', ['-c', `cd /proc/${pid} && cat cmdline; cat ./status; echo rc=$?`], {
      cwd: scene.ws,
      env: BASE_ENV,
      policy: policy(),
    });
    expect(rel.stdout).not.toContain(SECRET);
    expect(rel.stdout).not.toContain('Name:');
    expect(rel.stderr).toMatch(/No such file or directory/);
    // O_PATH opens stay the kernel's (they read nothing): every read through one comes back to
    // the supervisor, by /proc/self/fd/N and by openat on it.
    const opath = await run(
      PYTHON,
      [
        '-c',
        `import os\nres=[]\nfd=os.open('/proc/${pid}', os.O_PATH)\nfor how in (lambda: os.open('/proc/self/fd/%d/cmdline' % fd, os.O_RDONLY), lambda: os.open('cmdline', os.O_RDONLY, dir_fd=fd)):\n  try:\n    f=how(); res.append(os.read(f, 4096).decode('latin1'))\n  except OSError as e:\n    res.append(e.errno)\nprint(res)`,
      ],
      { cwd: scene.ws, env: BASE_ENV, policy: policy() },
    );
    expect(opath.stdout.trim()).toBe('[2, 2]');
    // The host process is untouched and still holds its secret.
    expect(fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1')).toContain(SECRET);
  });

  it("the host's network tables are not readable (EACCES), by /proc/net, /proc/self/net or a pid's net", async () => {
    const paths = ['/proc/net/tcp', '/proc/net/tcp6', '/proc/net/unix', '/proc/self/net/tcp', '/proc/thread-self/net/tcp'];
    const open = await reads(['/proc/net/tcp'], policy({}, false));
    expect(open['/proc/net/tcp']).toContain(portHex);
    const r = await reads(paths);
    for (const p of paths) expect(r[p], p).toBe('EACCES');
    // The command's own pid directory's net too.
    const own = await run('/bin/sh', ['-c', 'cat /proc/$$/net/tcp; echo rc=$?'], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
    expect(own.stdout).not.toContain(portHex);
    expect(own.stdout).toContain('rc=1');
    expect(fs.readFileSync('/proc/net/tcp', 'latin1')).toContain(portHex);
    // With the network full, netlink's socket diagnostics (what `ss` reads) are refused too.
    const diag = 'import socket\ntry:\n  socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4).close(); print("diag=ok")\nexcept OSError as e:\n  print("diag=%d" % e.errno)\nsocket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close(); print("route=ok")';
    for (const on of [false, true]) {
      const r = await run(PYTHON, ['-c', diag], { cwd: scene.ws, env: BASE_ENV, policy: policy({ network: 'full' }, on) });
      expect(r.stdout, r.stderr).toBe(on ? 'diag=1\nroute=ok\n' : 'diag=ok\nroute=ok\n');
    }
  });

  it("the sandbox's own processes stay readable: /proc/self, a child's entries, ps shows the own tree only", async () => {
    const r = await run(
      '/bin/bash',
      ['-c', 'sleep 30 & c=$!; grep ^Name: /proc/self/status; tr "\\0" " " < /proc/$c/cmdline; echo; head -1 /proc/self/maps | cut -c1-3; ls /proc/self/fd | head -1; kill $c'],
      { cwd: scene.ws, env: BASE_ENV, policy: policy() },
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('Name:\tgrep');
    expect(r.stdout).toContain('sleep 30');
    expect(r.stdout.split('\n')[2]).toMatch(/^[0-9a-f]{3}$/);
    // Listing /proc: the sandbox's own pids only, where the supervisor carries listings out.
    const ls = await run('/bin/sh', ['-c', 'echo self=$$; ls /proc'], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
    const names = ls.stdout.split('\n');
    const self = names[0].replace('self=', '');
    expect(names).toContain(self);
    expect(names).toContain('cpuinfo');
    // Where pidfd_getfd is refused (a container's profile) too: a reopen of the command's directory.
    expect(names).not.toContain(String(host.pid));
    expect(names).not.toContain(String(process.pid));
    expect(ls.enforcement.mechanisms.procListing).toBe('sandbox pids only');
    const lsAll = await run('/bin/sh', ['-c', 'ls /proc'], { cwd: scene.ws, env: BASE_ENV, policy: policy({}, false) });
    expect(lsAll.stdout.split('\n')).toContain(String(host.pid));
    // A thread that is not its process's leader: /proc/thread-self and /proc/<its tid>.
    const th = await run(
      PYTHON,
      [
        '-c',
        'import threading\nout = []\ndef t():\n  tid = threading.get_native_id()\n  out.append(open("/proc/thread-self/stat").read().split(" ")[0] == str(tid))\n  out.append(open("/proc/%d/comm" % tid).read().strip())\n  out.append(open("/proc/self/task/%d/comm" % tid).read().strip())\nth = threading.Thread(target=t); th.start(); th.join()\nprint(out)',
      ],
      { cwd: scene.ws, env: BASE_ENV, policy: policy() },
    );
    expect(th.code, th.stderr).toBe(0);
    expect(th.stdout.trim()).toMatch(/^\[True, '[^']+', '[^']+'\]$/);
    const ps = fs.existsSync('/usr/bin/ps') || fs.existsSync('/bin/ps');
    if (!ps) {
      // eslint-disable-next-line no-console
      console.warn('[landlock-proc] SKIPPING the ps check: no ps on this host');
      return;
    }
    const list = await run('/bin/sh', ['-c', 'ps -eo pid=,args='], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toContain('ps -eo');
    expect(list.stdout).not.toContain(SECRET);
    expect(list.stdout.split('\n').map((l) => l.trim().split(' ')[0])).not.toContain(String(host.pid));
    // Control: without the option ps lists the host process with its secret.
    const all = await run('/bin/sh', ['-c', 'ps -eo pid=,args='], { cwd: scene.ws, env: BASE_ENV, policy: policy({}, false) });
    expect(all.stdout).toContain(SECRET);
  });

  it("an O_PATH fd's /proc/self/fd/N still works for the command (glibc's fchmodat, tar)", async () => {
    fs.mkdirSync(path.join(scene.ws, 'd'), { mode: 0o700 });
    const code = "import os\nfd=os.open('d', os.O_PATH|os.O_NOFOLLOW)\nos.chmod('/proc/self/fd/%d' % fd, 0o751)\nprint('ok')";
    const r = await run(PYTHON, ['-c', code], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
    expect(r.code, r.stderr).toBe(0);
    expect(fs.statSync(path.join(scene.ws, 'd')).mode & 0o777).toBe(0o751);
  });

  it('node, python, git, bash process substitution and /etc/mtab work', async () => {
    const n = await run(NODE, ['-e', 'console.log(require("fs").readFileSync("/proc/self/status","utf8").split("\\n")[0], 6*7)'], {
      cwd: scene.ws,
      env: BASE_ENV,
      policy: policy(),
    });
    expect(n.code, n.stderr).toBe(0);
    expect(n.stdout).toMatch(/Name:.*\n?.* 42/);
    const p = await run(PYTHON, ['-c', 'import os; print(len(os.listdir("/proc/self/fd")) > 0, 6*7)'], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
    expect(p.stdout.trim()).toBe('True 42');
    const b = await run('/bin/bash', ['-c', 'cat <(echo hi-from-substitution); cat /dev/stdin <<< here; head -1 /etc/mtab | cut -d" " -f3'], {
      cwd: scene.ws,
      env: BASE_ENV,
      policy: policy(),
    });
    expect(b.code, b.stderr).toBe(0);
    expect(b.stdout).toContain('hi-from-substitution');
    expect(b.stdout).toContain('here');
    expect(b.stdout.trim().split('\n').pop()).toMatch(/\S+/);
    if (!caps.git) {
      // eslint-disable-next-line no-console
      console.warn('[landlock-proc] SKIPPING the git check: no git on this host');
      return;
    }
    execFileSync('git', ['init', '-q', scene.ws]);
    fs.writeFileSync(path.join(scene.ws, 'tracked.txt'), 'x');
    const g = await run(caps.git, ['status', '--porcelain'], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
    expect(g.code, g.stderr).toBe(0);
    expect(g.stdout).toContain('tracked.txt');
  });

  it("opens answer as the kernel's own: the same results with and without the option over tricky paths", async () => {
    const ws = scene.ws;
    fs.writeFileSync(path.join(ws, 'file'), 'F');
    fs.mkdirSync(path.join(ws, 'dir'));
    fs.writeFileSync(path.join(ws, 'dir', 'inner'), 'I');
    fs.writeFileSync(path.join(ws, 'closed'), 'C', { mode: 0o000 });
    fs.mkdirSync(path.join(ws, 'shut'), { mode: 0o000 });
    fs.symlinkSync('file', path.join(ws, 'to-file'));
    fs.symlinkSync('dir', path.join(ws, 'to-dir'));
    fs.symlinkSync(path.join(ws, 'dir'), path.join(ws, 'abs-to-dir'));
    fs.symlinkSync('nowhere', path.join(ws, 'dangling'));
    fs.symlinkSync('loop', path.join(ws, 'loop'));
    fs.symlinkSync('/', path.join(ws, 'to-root'));
    // A chain of 40 links resolves; one of 41 is ELOOP (the kernel's limit).
    fs.symlinkSync('file', path.join(ws, 'c0'));
    for (let i = 1; i <= 40; i++) fs.symlinkSync(`c${i - 1}`, path.join(ws, `c${i}`));
    execFileSync('mkfifo', [path.join(ws, 'fifo')]);
    const code = String.raw`
import errno, json, os, sys
ws = sys.argv[1]
N, D, NF, NB = os.O_RDONLY, os.O_RDONLY | os.O_DIRECTORY, os.O_RDONLY | os.O_NOFOLLOW, os.O_RDONLY | os.O_NONBLOCK
cases = [('file', N), ('file/', N), ('file', D), ('dir', D), ('dir/', N), ('nonexistent', N), ('', N), ('.', N), ('..', D),
         ('/', D), ('dir/../file', N), ('file/..', N), ('to-file', N), ('to-file', NF), ('to-dir/', NF), ('to-dir/inner', N),
         ('abs-to-dir/inner', N), ('dangling', N), ('loop', N), ('to-root/', D), ('c39', N), ('c40', N), ('closed', N),
         ('shut/x', N), ('fifo', NB), ('/dev/null', N), ('/dev/stdin', N), ('/proc/self/cwd/file', N), ('/dev/fd/0', N)]
res = {}
dfd = os.open(ws + '/dir', os.O_RDONLY)
for p, fl in cases:
    try:
        f = os.open(p, fl)
        st = os.fstat(f)
        res[p + ' %o' % fl] = 'ok %o' % (st.st_mode >> 12)
        os.close(f)
    except OSError as e:
        res[p + ' %o' % fl] = errno.errorcode.get(e.errno, str(e.errno))
for p in ('inner', '../file', '/proc/self/fd/%d/inner' % dfd):
    try:
        f = os.open(p, os.O_RDONLY, dir_fd=dfd); res['at ' + p.replace(str(dfd), 'N')] = os.read(f, 9).decode(); os.close(f)
    except OSError as e:
        res['at ' + p.replace(str(dfd), 'N')] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(res, sort_keys=True))
`;
    const go = async (on: boolean) => {
      const r = await run(PYTHON, ['-c', code, ws], { cwd: ws, env: BASE_ENV, policy: policy({}, on), stdio: ['ignore', 'pipe', 'pipe'] });
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as Record<string, string>;
    };
    const off = await go(false);
    const on = await go(true);
    expect(on).toEqual(off);
    // A few answers spelled out (both runs agree on them, above).
    expect(off['c40 0']).toBe('ELOOP');
    expect(off['c39 0']).toBe('ok 10');
    expect(off['file/ 0']).toBe('ENOTDIR');
    expect(off['to-file 400000']).toBe('ELOOP');
    expect(off['at ../file']).toBe('F');
    expect(off['at /proc/self/fd/N/inner']).toBe('I');
  });

  it('a FIFO opened for reading waits for its writer: the data, or end-of-file once the writer came and went', async () => {
    // The writer opens only once a reader is there (O_NONBLOCK: ENXIO until then), so the order
    // is fixed: the reader's open is under way first.
    const writer = (data: string) =>
      `import errno, os, time\nwhile True:\n  try:\n    f = os.open('f', os.O_WRONLY | os.O_NONBLOCK); break\n  except OSError as e:\n    assert e.errno == errno.ENXIO\n    time.sleep(0.01)\nos.write(f, b'${data}'); os.close(f)`;
    const script = `mkfifo f && { ${PYTHON} -c "${writer('late-writer')}" & cat f; wait; echo; ${PYTHON} -c "${writer('')}" & cat f; wait; echo eof-ok; }`;
    for (const on of [false, true]) {
      const r = await run('/bin/sh', ['-c', script], { cwd: scene.ws, env: BASE_ENV, policy: policy({}, on), timeout: 60_000 });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe('late-writer\neof-ok\n');
      fs.rmSync(path.join(scene.ws, 'f'));
    }
    // An anonymous pipe never waits: its open returns before any data (the writer writes only
    // once the reader has made the marker after opening).
    const pipe = await run(
      '/bin/bash',
      ['-c', `${PYTHON} -c "import os; f = os.open('/dev/fd/5', os.O_RDONLY); open('marker', 'w').close(); print(os.read(f, 9).decode().strip())" 5< <(until [ -e marker ]; do sleep 0.01; done; echo late)`],
      { cwd: scene.ws, env: BASE_ENV, policy: policy(), timeout: 60_000 },
    );
    expect(pipe.code, pipe.stderr).toBe(0);
    expect(pipe.stdout.trim()).toBe('late');
  });

  it("Landlock's denials still hold: a deny-read file in the workspace and a file outside the readable roots", async () => {
    const denied = path.join(scene.ws, 'denied.txt');
    fs.writeFileSync(denied, 'DENIED-SECRET');
    fs.writeFileSync(path.join(scene.ws, 'beside.txt'), 'beside');
    fs.symlinkSync(denied, path.join(scene.ws, 'to-denied'));
    const p = policy({ filesystem: { write: [scene.ws], denyRead: [denied] } });
    const r = await reads([denied, path.join(scene.ws, 'to-denied'), path.join(scene.ws, 'beside.txt')], p);
    expect(r[denied]).toBe('EACCES');
    expect(r[path.join(scene.ws, 'to-denied')]).toBe('EACCES');
    expect(r[path.join(scene.ws, 'beside.txt')]).toBe('ok:beside');
    // Through the command's own fd of the directory too (/proc/self/fd/N/denied.txt).
    const viaFd = await run(PYTHON, ['-c', `import os\nd=os.open(${JSON.stringify(scene.ws)}, os.O_RDONLY)\ntry:\n  print(open('/proc/self/fd/%d/denied.txt' % d).read())\nexcept OSError as e:\n  print('err', e.errno)`], {
      cwd: scene.ws,
      env: BASE_ENV,
      policy: p,
    });
    expect(viaFd.stdout.trim()).toBe('err 13');
    expect(fs.readFileSync(denied, 'utf8')).toBe('DENIED-SECRET');
    // Restricted reads: a file outside the readable roots stays unreadable, one inside is read.
    const outside = path.join(scene.out, 'secret.txt');
    const q = await reads([outside, path.join(scene.ws, 'beside.txt')], policy({ filesystem: { read: [scene.ws], write: [scene.ws] } }));
    expect(q[outside]).toBe('EACCES');
    expect(q[path.join(scene.ws, 'beside.txt')]).toBe('ok:beside');
  });

  it('the report: /proc private, the /proc gap gone; the default keeps the gap', async () => {
    const on = await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
    expect(on.enforcement.mechanisms.proc).toBe('host-private');
    expect(on.enforcement.mechanisms.readSupervisor).toBe('seccomp-user-notif');
    expect(on.enforcement.gaps.join('\n')).not.toMatch(/host processes stay visible in \/proc/);
    const off = await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy: policy({}, false) });
    expect(off.enforcement.mechanisms.proc).toBe('host');
    expect(off.enforcement.gaps).toContain('host processes stay visible in /proc (command lines, not memory or environment)');
  });

  it('a sandbox prepared ahead for the same shape without the option is never used for one with it', async () => {
    const p = `/proc/${host.pid}/cmdline`;
    // Spawns in a row of one shape make the next one's sandbox ahead of time.
    for (let i = 0; i < 3; i++) expect((await reads([p], policy({}, false)))[p]).toContain(SECRET);
    const r = await reads([p]);
    expect(r[p]).toBe('ENOENT');
  });

  it('a deny-read path under /proc is refused with the option, naming both', async () => {
    await expect(run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy: policy({ filesystem: { write: [scene.ws], denyRead: ['/proc/cpuinfo'] } }) })).rejects.toThrow(
      /procPrivacy cannot be combined with deny-read paths under \/proc/,
    );
  });
});

describe.skipIf(MODES.find((m) => m.name === 'isolated')!.skip)('isolated mode, procPrivacy', () => {
  it('is accepted and changes nothing: /proc is the sandbox\'s own already', async () => {
    const r = await run('/bin/sh', ['-c', 'cat /proc/1/cmdline | tr "\\0" " "'], { env: BASE_ENV, policy: { mode: 'isolated', procPrivacy: true } });
    expect(r.code, r.stderr).toBe(0);
    expect(r.enforcement.mechanisms.proc).toBe('fresh');
    expect(r.enforcement.mechanisms.readSupervisor).toBeUndefined();
  });
});

// The planner alone, with a made-up probe: where the supervisor cannot run (no seccomp user
// notification, or neither way to reach the command) the option is refused, even with
// `degraded`; the 'procfs' way (a container's seccomp profile) holds it. Control: without the
// option the same probes plan.
describe.skipIf(process.platform !== 'linux')('procPrivacy in the Landlock-mode plan', () => {
  const plan = async (connectSupervisor: number, supervisorAccess: 'pidfd' | 'procfs' | 'none', procPrivacy: boolean) => {
    const { planLinux } = await import('../../lib/platform/linux/plan');
    const probe = { landlockAbi: 7, seccomp: 0, userns: -1, euid: 1000, connectSupervisor, supervisorAccess };
    const rules = {
      readAll: true, readRoots: [], writeRoots: ['/tmp/psb-proc-ws'], readOnly: [], denyRead: [], tmp: 'private',
      network: { kind: 'none' }, mode: 'landlock', degraded: true, limits: {}, ...(procPrivacy ? { procPrivacy } : {}),
    } as unknown as Parameters<typeof planLinux>[0]['rules'];
    return planLinux({ rules, mode: 'landlock', file: '/bin/true', argv: ['true'], env: {}, cwd: '/', probe });
  };

  it('is refused without the supervisor (ENOSYS, or neither way to reach the command), degraded or not', async () => {
    for (const [errno, way] of [[-38, 'pidfd'], [-1, 'none']] as const) {
      const err = await plan(errno, way, true).then(
        () => null,
        (e: unknown) => e as { code?: string; message: string },
      );
      expect(err?.code).toBe('EUNSUPPORTED_POLICY');
      expect(err?.message).toMatch(/procPrivacy cannot be held in Landlock mode on this host/);
      const without = await plan(errno, way, false);
      expect(without.enforcement.gaps).toContain('host processes stay visible in /proc (command lines, not memory or environment)');
    }
  });

  it("is planned with the supervisor, by either way ('pidfd', 'procfs')", async () => {
    for (const way of ['pidfd', 'procfs'] as const) {
      const p = await plan(0, way, true);
      expect(p.native.seccomp!.readSupervisor).toBe(true);
      expect(p.native.seccomp!.metadataSupervisor).toBeDefined();
      expect(p.enforcement.mechanisms.proc).toBe('host-private');
      expect(p.enforcement.gaps.join('\n')).not.toMatch(/\/proc \(command lines/);
      const off = await plan(0, way, false);
      expect(off.native.seccomp!.readSupervisor).toBeUndefined();
    }
  });
});

describe('policy validation', () => {
  it('the CLI flag --proc-privacy sets policy.procPrivacy', async () => {
    const { parseRunArgs, policyFromArgs } = await import('../../lib/cli/run-args');
    expect(policyFromArgs(parseRunArgs(['--proc-privacy', '--', 'true'], '/'))?.procPrivacy).toBe(true);
    expect(policyFromArgs(parseRunArgs(['--', 'true'], '/'))?.procPrivacy).toBeUndefined();
    expect(() => parseRunArgs(['--proc-privacy=1', '--', 'true'], '/')).toThrow(/--proc-privacy/);
  });

  it('procPrivacy must be a boolean', async () => {
    await expect(run('/bin/true', [], { policy: { procPrivacy: 'yes' as unknown as boolean } })).rejects.toThrow(/policy\.procPrivacy/);
  });
});
