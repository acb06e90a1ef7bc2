/**
 * Named FIFOs opened for writing in a writable root. Landlock mode with read-only carve-outs
 * emulates every write-open (native/linux/supervisor/supervise_paths.cc); a FIFO's write-open must keep the
 * kernel's meaning: it waits for a reader (the writer's data reaches the reader, whichever came
 * first), an O_NONBLOCK one without a reader fails with ENXIO, and a writer still waiting when the
 * run is killed leaves nothing behind in the host. Isolated mode (the kernel's own open) is the
 * control: every case must answer the same there. A FIFO inside a carve-out stays refused.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { spawn } from '../../lib/index';
import { loadLinuxNative } from '../../lib/native';
import { clearSpares, sparesSettled } from '../../lib/platform/linux/spare';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, makeScene, PYTHON, py, sh, type Scene } from '../helpers/sandbox';

const landlockSkip = caps.metadataSupervisor
  ? undefined
  : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode has no path supervisor';
// eslint-disable-next-line no-console
if (landlockSkip) console.warn(`[landlock-fifo] SKIPPING the Landlock-mode cases: ${landlockSkip}`);

// A hard bound on every run: a FIFO that loses its data leaves the reader waiting forever.
const HANG = 20_000;

// Waits until process $1 sleeps (S: blocked in its open) or has exited (Z), never on a clock.
const WAIT_BLOCKED = 'until s=$(cut -d" " -f3 /proc/$1/stat 2>/dev/null); [ "$s" = S ] || [ "$s" = Z ] || [ -z "$s" ]; do :; done';

/**
 * The threads of the supervision: the host's own, and (by default) the
 * supervision process's too (where the waiters then run).
 */
function hostThreads(): string[] {
  const pid = caps.linux ? loadLinuxNative().supervisionProcess() : 0;
  return ['self', ...(pid > 0 ? [String(pid)] : [])].flatMap((p) => {
    let tasks: string[] = [];
    try {
      tasks = fs.readdirSync(`/proc/${p}/task`);
    } catch {
      return [];
    }
    return tasks.map((t) => {
      try {
        return fs.readFileSync(`/proc/${p}/task/${t}/comm`, 'utf8').trim();
      } catch {
        return '';
      }
    });
  });
}

describe.runIf(caps.linux)('named FIFOs opened for writing', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const s = skip ?? (mode === 'landlock' ? landlockSkip : undefined);
    let scene: Scene;
    let ws: string;
    let policy: SandboxPolicy;

    beforeEach(() => {
      scene = makeScene(`fifo-${mode}`);
      ws = scene.ws;
      fs.mkdirSync(`${ws}/.git/hooks`, { recursive: true });
      execFileSync('mkfifo', [`${ws}/f`]);
      execFileSync('mkfifo', [`${ws}/.git/hooks/pre-commit`]);
      // .git/hooks is a carve-out: Landlock mode supervises every write-open.
      policy = modePolicy(mode, { filesystem: { write: [ws] } });
    });
    afterEach(() => scene.cleanup());

    it.skipIf(s)('the path supervisor is in use (Landlock mode)', async () => {
      const r = await sh('true', { cwd: ws, policy });
      expect(r.enforcement.guarantees.protectedPaths).toBe('enforced');
      if (mode === 'landlock') expect(r.enforcement.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
    });

    it.skipIf(s)('writer first: the reader gets the data and end-of-file', async () => {
      const r = await sh(`(echo x > f) & w=$!; set -- $w; ${WAIT_BLOCKED}; cat f; wait $w; echo "writer=$?"`, { cwd: ws, policy, timeout: HANG });
      expect(r.timedOut, `the reader hung: ${r.stderr}`).toBe(false);
      expect(r.stdout).toBe('x\nwriter=0\n');
    });

    it.skipIf(s || mode !== 'landlock')('with procPrivacy too (both ends supervised), either order', async () => {
      // The read supervisor's waiter holds the reader's end; the path supervisor's the writer's.
      const pp = { ...policy, procPrivacy: true };
      const w = await sh(`(echo x > f) & w=$!; set -- $w; ${WAIT_BLOCKED}; cat f; wait $w; echo "writer=$?"`, { cwd: ws, policy: pp, timeout: HANG });
      expect(w.timedOut, w.stderr).toBe(false);
      expect(w.stdout).toBe('x\nwriter=0\n');
      const r = await sh(`(cat f > got) & rd=$!; set -- $rd; ${WAIT_BLOCKED}; echo y > f; wait $rd; cat got`, { cwd: ws, policy: pp, timeout: HANG });
      expect(r.timedOut, r.stderr).toBe(false);
      expect(r.stdout).toBe('y\n');
    });

    it.skipIf(s)('reader first: the writer finds the reader waiting', async () => {
      const r = await sh(`(cat f > got) & rd=$!; set -- $rd; ${WAIT_BLOCKED}; echo y > f; wait $rd; cat got`, { cwd: ws, policy, timeout: HANG });
      expect(r.timedOut, r.stderr).toBe(false);
      expect(r.stdout).toBe('y\n');
    });

    it.skipIf(s)('a writer whose reader leaves gets EPIPE (no read-write description stands in)', async () => {
      // The reader opens, reads one line and closes; the writer's next write has no reader.
      const code = [
        'import os, signal, sys',
        'signal.signal(signal.SIGPIPE, signal.SIG_IGN)',
        'pid = os.fork()',
        'if pid == 0:',
        '    fd = os.open("f", os.O_RDONLY); os.read(fd, 2); os.close(fd); os._exit(0)',
        'fd = os.open("f", os.O_WRONLY)',
        'os.write(fd, b"a\\n")',
        'os.waitpid(pid, 0)',
        'try:',
        '    os.write(fd, b"b\\n"); print("wrote")',
        'except OSError as e:',
        '    print(os.strerror(e.errno))',
      ].join('\n');
      const r = await py(code, [], { cwd: ws, policy, timeout: HANG });
      expect(r.timedOut, r.stderr).toBe(false);
      expect(r.stdout).toBe('Broken pipe\n');
    });

    it.skipIf(s)('O_NONBLOCK without a reader: ENXIO; O_RDWR never waits', async () => {
      const code = [
        'import os',
        'try:',
        '    os.open("f", os.O_WRONLY | os.O_NONBLOCK); print("opened")',
        'except OSError as e:',
        '    print(os.strerror(e.errno))',
        'fd = os.open("f", os.O_RDWR); os.write(fd, b"z"); print(os.read(fd, 1).decode())',
      ].join('\n');
      const r = await py(code, [], { cwd: ws, policy, timeout: HANG });
      expect(r.timedOut, r.stderr).toBe(false);
      expect(r.stdout).toBe('No such device or address\nz\n');
    });

    it.skipIf(s)('a writer still waiting when the run is killed leaves the host clean', async () => {
      await sh('true', { cwd: ws, policy }); // the host's own threads (libuv) are up before counting
      // A sandbox prepared ahead holds a thread of its own while it waits: none is kept while
      // this test counts, so every thread the killed run made must be gone.
      const noSpares = async (): Promise<void> => {
        await expect.poll(sparesSettled, { timeout: 10_000 }).toBe(true);
        clearSpares();
        await expect.poll(() => hostThreads().filter((t) => t === 'psb-sup-parked'), { timeout: 5_000 }).toEqual([]);
      };
      await noSpares();
      const before = hostThreads();
      const r = await sh('echo lost > f; echo after-open', { cwd: ws, policy, timeout: 1_500 });
      expect(r.timedOut).toBe(true);
      expect(r.stdout).toBe('');
      // The waiter notices the call is gone and ends (it polls, so allow it a moment).
      await expect.poll(() => hostThreads().filter((t) => t.startsWith('psb-fifo')), { timeout: 5_000 }).toEqual([]);
      await noSpares();
      await expect.poll(() => hostThreads().length, { timeout: 5_000 }).toBeLessThanOrEqual(before.length);
      const later = await sh('echo alive', { cwd: ws, policy, timeout: HANG });
      expect(later.stdout).toBe('alive\n');
    });

    it.skipIf(s || mode !== 'landlock')("one sandbox's parked writers take its own share of waiters, never another's (Landlock mode)", async () => {
      // The first sandbox parks writers on FIFOs nobody reads (one thread each, blocked in its
      // open) until an open fails: its share of the host's waiters is used up. It holds them
      // while the second runs the everyday pipeline, which needs a waiter of its own.
      const park = [
        'import errno, os, sys, threading',
        'failed = []; done = threading.Event()',
        'def writer(p):',
        '    try:',
        '        os.open(p, os.O_WRONLY)',
        '    except OSError as e:',
        '        failed.append(e.errno); done.set()',
        'for i in range(1000):',
        '    if done.is_set(): break',
        '    os.mkfifo(f"p{i}"); threading.Thread(target=writer, args=(f"p{i}",), daemon=True).start()',
        'done.wait()',
        'print("FULL", errno.errorcode[failed[0]], flush=True)',
        'sys.stdin.read()',
      ].join('\n');
      fs.mkdirSync(`${ws}/a`);
      fs.mkdirSync(`${ws}/b`);
      const a = spawn(PYTHON, ['-c', park], { cwd: `${ws}/a`, env: BASE_ENV, policy, stdio: ['pipe', 'pipe', 'pipe'] });
      let stderr = '';
      a.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
      try {
        const full = await new Promise<string>((resolve, reject) => {
          let out = '';
          a.stdout!.on('data', (b: Buffer) => {
            out += b.toString();
            if (out.includes('\n')) resolve(out);
          });
          a.once('close', () => reject(new Error(`the first sandbox ended before it was full: ${out} ${stderr}`)));
        });
        expect(full).toBe('FULL EAGAIN\n');
        // Checked from outside: the first sandbox holds its share (kMaxWaitersPerSandbox), no more.
        // Counted before the second runs (its own waiters end just after they answer), and polled:
        // a waiter names its thread as it starts, which may come just after its open was taken.
        await expect.poll(() => hostThreads().filter((t) => t === 'psb-fifo-write').length, { timeout: 5_000 }).toBe(64);
        const pp = { ...policy, procPrivacy: true }; // the read side's waiter too
        const b = await sh('mkfifo f; (echo x > f &); cat f; echo done', { cwd: `${ws}/b`, policy: pp, timeout: HANG });
        expect(b.timedOut, b.stderr).toBe(false);
        expect(b.stdout).toBe('x\ndone\n');
        expect(b.code).toBe(0);
      } finally {
        a.kill('SIGKILL');
        await a.exited.catch(() => undefined);
      }
      // The first sandbox's waiters notice their calls are gone and end.
      await expect.poll(() => hostThreads().filter((t) => t.startsWith('psb-fifo')), { timeout: 5_000 }).toEqual([]);
    });

    it.skipIf(s || mode !== 'landlock')('a FIFO inside a carve-out is refused before any wait (Landlock mode)', async () => {
      // A reader on the host holds the carve-out's FIFO open, so a write would not wait.
      const rd = fs.openSync(`${ws}/.git/hooks/pre-commit`, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      try {
        const code = [
          'import os, sys',
          'for fl in (os.O_WRONLY, os.O_WRONLY | os.O_NONBLOCK, os.O_RDWR):',
          '    try:',
          '        fd = os.open(sys.argv[1], fl); os.write(fd, b"pwned"); print("opened")',
          '    except OSError as e:',
          '        print(os.strerror(e.errno))',
        ].join('\n');
        const r = await py(code, [`${ws}/.git/hooks/pre-commit`], { cwd: ws, policy, timeout: HANG });
        expect(r.timedOut, r.stderr).toBe(false);
        expect(r.stdout).toBe('Permission denied\n'.repeat(3));
        // Checked from outside: nothing reached the FIFO.
        const buf = Buffer.alloc(64);
        expect(fs.readSync(rd, buf)).toBe(0); // no writer ever came: end-of-file, no data
        expect(fs.statSync(`${ws}/.git/hooks/pre-commit`).isFIFO()).toBe(true);
        // Control: the same writes into a FIFO outside the carve-out reach a reader on the host.
        const rd2 = fs.openSync(`${ws}/f`, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
        try {
          const ok = await py(code, [`${ws}/f`], { cwd: ws, policy, timeout: HANG });
          expect(ok.stdout).toBe('opened\n'.repeat(3));
          const n = fs.readSync(rd2, buf);
          expect(buf.subarray(0, n).toString()).toBe('pwned'.repeat(3));
        } finally {
          fs.closeSync(rd2);
        }
      } finally {
        fs.closeSync(rd);
      }
    });
  });
});
