/**
 * Landlock mode's supervision cannot touch the host's per-process state (native/linux/
 * supervisor.cc, Confinement). Its supervisors are threads of the host process; a POSIX record lock
 * belongs to the process's fd table and is dropped when that table closes ANY fd of the file. A
 * supervisor that opens or copies a file for the command and closes it would drop the host's own
 * fcntl locks (a host in an SQLite write transaction would see another writer commit). Each
 * supervisor works on an fd table of its own, so the host keeps its locks through every class of
 * supervised call. Isolated mode (no supervisor in the host) answers the same.
 *
 * The host (this test process) takes the locks with the addon's test hook (Node has no fcntl);
 * an outside process (python3's lockf, non-blocking) says whether they are still held.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

// Below ABI 6 the signal class is supervised too (Landlock's signal scope is ABI 6): every class
// of supervised call then runs. Read once by the addon, before the first probe.
vi.hoisted(() => {
  process.env.PSB_LANDLOCK_ABI_MAX ??= '5';
});

import { loadLinuxNative } from '../../lib/native';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { makeScene, PYTHON, sh, type Scene } from '../helpers/sandbox';

const landlockSkip = caps.metadataSupervisor ? undefined : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode has no supervisors';
const pythonSkip = caps.python ? undefined : 'no /usr/bin/python3 (the outside lock checker)';
// eslint-disable-next-line no-console
for (const r of [landlockSkip, pythonSkip]) if (r) console.warn(`[supervisor-confined] SKIPPING cases: ${r}`);

// 'held' when another process cannot take a write lock on the file (EAGAIN/EACCES), 'free' when it can.
const CHECK = `import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print('free')
except OSError as e:
    print('held' if e.errno in (11, 13) else 'errno %d' % e.errno)`;

function lockState(file: string): string {
  return execFileSync(PYTHON, ['-c', CHECK, file], { encoding: 'utf8' }).trim();
}

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

describe.runIf(caps.linux)("the host's POSIX locks outlive its sandboxes' supervised calls", () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const s = skip ?? pythonSkip ?? (mode === 'landlock' ? landlockSkip : undefined);
    let scene: Scene;
    let policy: SandboxPolicy;
    let outFile: string;
    let inFile: string;
    const fds: number[] = [];

    beforeAll(() => {
      scene = makeScene(`confined-${mode}`);
      outFile = path.join(scene.out, 'held.txt');
      inFile = path.join(scene.ws, 'held.txt');
      fs.writeFileSync(outFile, 'outside');
      fs.writeFileSync(inFile, 'inside');
      fs.mkdirSync(path.join(scene.ws, '.git', 'hooks'), { recursive: true });
      fs.mkdirSync(path.join(scene.ws, 'deny'));
      fs.writeFileSync(path.join(scene.ws, 'deny', 'secret'), 's');
      // Beside a deny-read directory the workspace's entries are granted one by one (Landlock
      // mode's complement rules): what the commands make and read again goes in here.
      fs.mkdirSync(path.join(scene.ws, 'sub'));
      policy = modePolicy(mode, {
        filesystem: { write: [scene.ws], denyRead: [path.join(scene.ws, 'deny')] },
        network: { proxy: { allow: ['*.test'] } },
        ...(mode === 'landlock' ? { procPrivacy: true } : {}),
      });
    });
    afterAll(() => {
      for (const fd of fds) fs.closeSync(fd);
      scene?.cleanup();
    });

    const steps: Array<[string, string]> = [
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

    it.skipIf(s)('every class of call leaves both locks held; unlocking frees them (the checker sees locks)', async () => {
      const native = loadLinuxNative();
      for (const f of [outFile, inFile]) {
        const fd = fs.openSync(f, 'r+');
        fds.push(fd);
        expect(native.testPosixLock(fd, true)).toBe(0);
        expect(lockState(f)).toBe('held');
      }
      // The host's own fds stay its own: nothing the supervision does closes one of them (a
      // registry fd closed on the proxy's thread once closed the host's fd 2).
      const hostFds = (): string[] => [0, 1, 2, ...fds].map((fd) => `${fd} ${fs.readlinkSync(`/proc/self/fd/${fd}`)}`);
      const fdsBefore = hostFds();
      const lost: Record<string, string> = {};
      const outputs: Record<string, string> = {};
      for (const [what, script] of steps) {
        const r = await sh(script, {
          cwd: scene.ws,
          policy,
          env: { PATH: '/usr/bin:/bin', PY_FD, PY_CONNECT, OUT: outFile, IN: inFile },
          timeout: 30_000,
        });
        outputs[what] = `${r.code} ${r.stdout}${r.stderr}`.trim();
        for (const f of [outFile, inFile]) {
          const st = lockState(f);
          if (st !== 'held') lost[`${what}: ${path.basename(path.dirname(f))}`] = st;
          // Taken again, so that each step is judged on its own.
          expect(native.testPosixLock(fds[f === outFile ? 0 : 1], true)).toBe(0);
        }
      }
      expect(lost, JSON.stringify(outputs, null, 1)).toEqual({});
      expect(hostFds()).toEqual(fdsBefore);
      // The commands did run their calls (the refusals outside, the writes inside).
      expect(outputs['reads']).toMatch(/read$/);
      expect(outputs['write-opens and creates']).toMatch(/wrote$/);
      expect(outputs['renames and removals']).toMatch(/moved$/);
      expect(outputs['a FIFO pipeline']).toMatch(/^0 hi\nfifo$/);
      expect(fs.readFileSync(inFile, 'utf8')).toBe('insidemore\n');
      expect(fs.readFileSync(outFile, 'utf8')).toBe('outside');
      // Positive control: released by the host, the checker takes them.
      for (const [i, f] of [outFile, inFile].entries()) {
        expect(native.testPosixLock(fds[i], false)).toBe(0);
        expect(lockState(f)).toBe('free');
      }
    }, 240_000);
  });
});
