/**
 * Landlock mode's supervision cannot touch the host's per-process state (native/linux/
 * supervisor.cc, Confinement). Its supervisors are threads of the host process; a POSIX record
 * lock belongs to the process's fd table and is dropped when that table closes ANY fd of the
 * file. A supervisor that opens or copies a file for the command and closes it would drop the
 * host's own fcntl locks (a host in an SQLite write transaction would see another writer commit).
 * Each supervisor works on an fd table of its own, so the host keeps its locks through every
 * class of supervised call, also where a container runtime's seccomp profile refuses unshare.
 * Isolated mode (no supervisor in the host) answers the same.
 *
 * The host is a node process of its own on the built package (it runs under the container
 * profile's filter in one case); it takes the locks with the addon's test hook (Node has no
 * fcntl), and an outside process (python3's lockf, non-blocking) says whether they are held.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { caps, MODES } from '../helpers/capabilities';
import { LOCK_HOSTS, lockHostSkip, ptraceFilterSkip, runLockHost, usePtraceFilter } from '../helpers/ptrace-filter';
import { DIST_INDEX, hostScript, makeScene, PYTHON, type Scene } from '../helpers/sandbox';

const landlockSkip = caps.metadataSupervisor ? undefined : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode has no supervisors';
const pythonSkip = caps.python ? undefined : 'no /usr/bin/python3 (the outside lock checker)';
// eslint-disable-next-line no-console
for (const r of [landlockSkip, pythonSkip, ptraceFilterSkip]) if (r) console.warn(`[supervisor-confined] SKIPPING cases: ${r}`);

// 'held' when another process cannot take a write lock on the file (EAGAIN/EACCES), 'free' when it can.
const CHECK = `import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print('free')
except OSError as e:
    print('held' if e.errno in (11, 13) else 'errno %d' % e.errno)`;

// The command's side of each class of supervised call, on the locked files and others.
const PY_FD = `import os, sys
for p, mode in ((sys.argv[1], os.O_RDONLY), (sys.argv[2], os.O_RDWR)):
    fd = os.open(p, mode)
    for name, f in (('fchmod', lambda: os.fchmod(fd, 0o644)), ('futimens', lambda: os.utime(fd))):
        try:
            f(); print(name, 'ok')
        except OSError as e:
            print(name, e.errno)
    os.close(fd)`;
const PY_CONNECT = `import os, socket, urllib.parse
u = urllib.parse.urlparse(os.environ.get('HTTP_PROXY', 'http://127.0.0.1:9'))
try:
    socket.create_connection((u.hostname, u.port), timeout=5).close(); print('connect ok')
except OSError as e:
    print('connect', e.errno)`;
const STEPS: Array<[string, string]> = [
  ['fchmod and futimens on an fd (refused outside, done inside)', `${PYTHON} -c "$PY_FD" "$OUT" "$IN"`],
  ['chmod and touch by name', 'chmod 600 "$OUT"; touch "$OUT"; chmod 644 "$IN"; touch "$IN"; echo done'],
  ['reads', 'cat "$OUT" "$IN" >/dev/null && echo read'],
  ['write-opens and creates', 'echo more >> "$IN" && : > new.txt && echo wrote'],
  ['renames and removals', 'mv "$IN" moved.txt && mv moved.txt "$IN" && rm new.txt && echo moved'],
  ['listings (a deny-read directory refused)', 'ls deny; ls . >/dev/null && echo listed'],
  ['a FIFO pipeline', 'mkfifo sub/p && (echo hi > sub/p &) && cat sub/p && rm sub/p && echo fifo'],
  ['signals', 'sleep 30 & kill $!; wait $!; kill -0 $$ && echo signalled'],
  ['a connect to the proxy', `${PYTHON} -c "$PY_CONNECT"`],
];

// The host: locks both files, runs each step (the locks taken again after each, so that each
// step is judged on its own), and reports what the checker saw.
const HOST = `
const fs = require('fs');
const { execFileSync } = require('child_process');
const native = require(${JSON.stringify(path.join(path.dirname(DIST_INDEX), 'native.js'))}).loadLinuxNative();
const [mode, ws, outFile, inFile] = process.argv.slice(2);
const { STEPS, CHECK, PY_FD, PY_CONNECT, PYTHON } = JSON.parse(process.env.CASE);
const policy = { mode, ...(mode === 'landlock' ? { degraded: true, procPrivacy: true } : {}),
  filesystem: { write: [ws], denyRead: [ws + '/deny'] }, network: { proxy: { allow: ['*.test'] } } };
const state = (f) => execFileSync(PYTHON, ['-c', CHECK, f], { encoding: 'utf8' }).trim();
const fds = [outFile, inFile].map((f) => fs.openSync(f, 'r+'));
const lock = (on) => fds.map((fd) => native.testPosixLock(fd, on));
// The host's own fds stay its own: nothing the supervision does closes one of them.
const hostFds = () => [0, 1, 2, ...fds].map((fd) => { try { return fd + ' ' + fs.readlinkSync('/proc/self/fd/' + fd); } catch (e) { return fd + ' ' + e.code; } });
(async () => {
  const out = { taken: lock(true), first: [outFile, inFile].map(state), lost: {}, outputs: {} };
  const fdsBefore = hostFds();
  for (const [what, script] of STEPS) {
    const r = await lib.run('/bin/sh', ['-c', script], { cwd: ws, policy, timeout: 30000,
      env: { PATH: '/usr/bin:/bin', PY_FD, PY_CONNECT, OUT: outFile, IN: inFile } });
    out.outputs[what] = (r.code + ' ' + r.stdout + r.stderr).trim();
    [outFile, inFile].forEach((f, i) => { const s = state(f); if (s !== 'held') out.lost[what + ': ' + (i ? 'inside' : 'outside')] = s; });
    lock(true);
  }
  out.fdsKept = JSON.stringify(hostFds()) === JSON.stringify(fdsBefore) || [fdsBefore, hostFds()];
  out.mechanisms = (await lib.run('/bin/true', [], { policy, env: { PATH: '/usr/bin:/bin' } })).enforcement.mechanisms;
  // Positive control: released by the host, the checker takes them.
  out.released = lock(false);
  out.after = [outFile, inFile].map(state);
  console.log(JSON.stringify(out));
})().catch((e) => console.log(JSON.stringify({ error: String(e && e.stack) })));
`;

describe.runIf(caps.linux)("the host's POSIX locks outlive its sandboxes' supervised calls", () => {
  const filterPath = usePtraceFilter();

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    beforeAll(() => {
      scene = makeScene(`confined-${mode}`);
      fs.writeFileSync(path.join(scene.out, 'held.txt'), 'outside');
      fs.writeFileSync(path.join(scene.ws, 'held.txt'), 'inside');
      fs.mkdirSync(path.join(scene.ws, '.git', 'hooks'), { recursive: true });
      fs.mkdirSync(path.join(scene.ws, 'deny'));
      fs.writeFileSync(path.join(scene.ws, 'deny', 'secret'), 's');
      // Beside a deny-read directory the workspace's entries are granted one by one (Landlock
      // mode's complement rules): what the commands make and read again goes in here.
      fs.mkdirSync(path.join(scene.ws, 'sub'));
    });
    afterAll(() => scene?.cleanup());

    const whyNot = (filtered: boolean, inProcess: boolean) =>
      skip ?? pythonSkip ?? (mode === 'landlock' ? landlockSkip : undefined) ?? lockHostSkip(mode, { filtered, inProcess });
    for (const { host, filtered, inProcess } of LOCK_HOSTS) {
     it.skipIf(whyNot(filtered, inProcess))(`${host}: every class of call leaves both locks held; unlocking frees them`, () => {
      const inFile = path.join(scene.ws, 'held.txt');
      const outFile = path.join(scene.out, 'held.txt');
      fs.writeFileSync(inFile, 'inside');
      const script = hostScript(scene.root, `locks-${filtered}-${inProcess}.js`, HOST);
      const out = runLockHost({ filtered, inProcess }, filterPath(), script, [mode, scene.ws, outFile, inFile], {
        CASE: JSON.stringify({ STEPS, CHECK, PY_FD, PY_CONNECT, PYTHON }),
      });
      expect(out.taken).toEqual([0, 0]);
      expect(out.first).toEqual(['held', 'held']);
      expect(out.lost, JSON.stringify(out.outputs, null, 1)).toEqual({});
      expect(out.fdsKept).toBe(true);
      // The commands did run their calls (the refusals outside, the writes inside).
      expect(out.outputs['reads']).toMatch(/read$/);
      expect(out.outputs['write-opens and creates']).toMatch(/wrote$/);
      expect(out.outputs['renames and removals']).toMatch(/moved$/);
      expect(out.outputs['a FIFO pipeline']).toMatch(/^0 hi\nfifo$/);
      expect(fs.readFileSync(inFile, 'utf8')).toBe('insidemore\n');
      expect(fs.readFileSync(outFile, 'utf8')).toBe('outside');
      if (mode === 'landlock') expect(out.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
      // Positive control: released by the host, the checker takes them.
      expect(out.released).toEqual([0, 0]);
      expect(out.after).toEqual(['free', 'free']);
     }, 240_000);
    }
  });
});
