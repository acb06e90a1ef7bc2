/**
 * The spawn()/run() contract, written once and instantiated per run mode by
 * spawn.test.ts (policy: null) and spawn-sandboxed.test.ts (the default policy).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run, spawn, SandboxError, SandboxedProcess, type StdioSpec } from '../../lib/index';
import {
  fixtureDir,
  requireBuilt,
  isRunning,
  killAll,
  pidsWithArg,
  readAll,
  sha256,
  uniqueSleepArg,
  waitFor,
  withPolicy,
  type ProcStat,
  type RunMode,
} from './helpers';

const MiB = 1024 * 1024;

/** Starts `sh -c` with two background sleeps (grandchildren) and returns their host pids. */
async function startTree(start: (script: string) => SandboxedProcess | Promise<unknown>, opts: { setsid?: boolean } = {}) {
  const a = uniqueSleepArg();
  const b = uniqueSleepArg();
  const first = opts.setsid ? `setsid sleep ${a} &` : `sleep ${a} &`;
  const handle = start(`${first} sleep ${b} & wait`);
  // A run() that fails to start must fail the test with its own error, not as an unhandled rejection.
  let startError: unknown;
  if (handle instanceof Promise) handle.catch((e) => (startError = e ?? new Error('start failed')));
  let found: ProcStat[] = [];
  await waitFor(() => {
    if (startError) throw startError;
    found = [...pidsWithArg(a), ...pidsWithArg(b)];
    return found.length === 2;
  }, 'both grandchildren to show up in /proc');
  return { handle, grandchildren: found };
}

async function expectAllGone(stats: ProcStat[]): Promise<void> {
  try {
    await waitFor(() => stats.every((s) => !isRunning(s)), `pids ${stats.map((s) => s.pid).join(', ')} to be gone`);
  } finally {
    killAll(stats);
  }
}

async function expectSandboxError(p: Promise<unknown> | (() => unknown), code: string, message?: string | RegExp) {
  let err: unknown;
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    err = e;
  }
  expect(err, `expected a SandboxError ${code}`).toBeInstanceOf(SandboxError);
  expect((err as SandboxError).code).toBe(code);
  if (typeof message === 'string') expect((err as Error).message).toBe(message);
  else if (message) expect((err as Error).message).toMatch(message);
  return err as SandboxError;
}

/** Variables the sandbox itself sets, as its report names them (TMPDIR in Landlock mode, moved caches). */
function sandboxAddedEnv(report: { mode?: string; mechanisms: Record<string, unknown> }, got: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  if (report.mode === 'landlock' && got.TMPDIR !== undefined) out.TMPDIR = got.TMPDIR;
  for (const line of Object.values((report.mechanisms.caches ?? {}) as Record<string, string>)) {
    const m = /^env ([A-Za-z_][A-Za-z0-9_]*)=(\S+)/.exec(line);
    if (m) out[m[1]!] = m[2]!.replace(/^\$TMPDIR(?=\/)/, got.TMPDIR ?? '$TMPDIR');
  }
  return out;
}

export function defineSpawnContract(mode: RunMode): void {
  const opts = <T extends object>(o: T = {} as T) => withPolicy(mode, o);

  describe.skipIf(mode.unavailable !== null)(`spawn/run contract (${mode.name})`, () => {
    let dir: string;
    beforeAll(() => {
      requireBuilt('addon');
      dir = fixtureDir();
    });
    afterAll(() => {
      if (dir) fs.rmSync(dir, { recursive: true, force: true });
    });

    describe('stdio', () => {
      it('round-trips stdin to stdout through cat (spawn streams)', async () => {
        const child = spawn('cat', [], opts());
        const data = crypto.randomBytes(4 * MiB);
        child.stdin!.end(data);
        const out = await readAll(child.stdout);
        expect(sha256(out)).toBe(sha256(data));
        expect((await child.exited).code).toBe(0);
      });

      it('round-trips run({ input }) as a string and as a Buffer', async () => {
        expect((await run('cat', [], opts({ input: 'hello\nworld' }))).stdout).toBe('hello\nworld');
        const bin = Buffer.from([0, 255, 1, 254, 10]);
        expect((await run('cat', [], opts({ input: bin, encoding: 'buffer' as const }))).stdout.equals(bin)).toBe(true);
      });

      it('keeps stdout and stderr apart', async () => {
        const r = await run('sh', ['-c', 'echo out; echo err >&2'], opts());
        expect(r.stdout).toBe('out\n');
        expect(r.stderr).toBe('err\n');
      });

      it('gives null streams for ignore and inherit', async () => {
        const child = spawn('sh', ['-c', 'echo gone; echo gone >&2'], opts({ stdio: ['ignore', 'pipe', 'ignore'] as StdioSpec[] }));
        expect(child.stdin).toBeNull();
        expect(child.stderr).toBeNull();
        expect((await readAll(child.stdout)).toString()).toBe('gone\n');
        expect((await child.exited).code).toBe(0);
      });

      it('delivers 100 MB of stdout with no loss (sha256)', async () => {
        // seq output is deterministic and not uniform; the host's own seq | sha256sum is the oracle.
        const n = '13000000';
        const expected = execFileSync('sh', ['-c', `seq 1 ${n} | sha256sum`], { encoding: 'utf8' }).split(' ')[0];
        const child = spawn('seq', ['1', n], opts());
        const hash = crypto.createHash('sha256');
        let bytes = 0;
        child.stdout!.on('data', (b: Buffer) => {
          bytes += b.length;
          hash.update(b);
        });
        await new Promise((r) => child.once('close', r));
        expect(bytes).toBeGreaterThan(100 * 1000 * 1000);
        expect(hash.digest('hex')).toBe(expected);
      });

      it('pipes 100 MB stdin -> cat -> stdout with no loss (sha256)', async () => {
        const child = spawn('cat', [], opts());
        const sent = crypto.createHash('sha256');
        const got = crypto.createHash('sha256');
        let received = 0;
        child.stdout!.on('data', (b: Buffer) => {
          received += b.length;
          got.update(b);
        });
        const closed = new Promise((r) => child.once('close', r));
        const block = crypto.randomBytes(MiB);
        for (let i = 0; i < 100; i++) {
          // A different block each time so reordering would change the hash.
          const chunk = Buffer.from(block);
          chunk.writeUInt32LE(i, 0);
          sent.update(chunk);
          if (!child.stdin!.write(chunk)) await new Promise((r) => child.stdin!.once('drain', r));
        }
        child.stdin!.end();
        await closed;
        expect(received).toBe(100 * MiB);
        expect(got.digest('hex')).toBe(sent.digest('hex'));
      });
    });

    describe('exit codes and signals', () => {
      it.each([0, 1, 42, 255])('reports exit code %i', async (n) => {
        const r = await run('sh', ['-c', `exit ${n}`], opts());
        expect(r.code).toBe(n);
        expect(r.signal).toBeNull();
      });

      it.each(['SIGTERM', 'SIGKILL', 'SIGUSR1', 'SIGHUP'] as const)('reports death by %s with its name', async (sig) => {
        const r = await run('sh', ['-c', `kill -${sig.slice(3)} $$; sleep 5`], opts());
        expect(r.code).toBeNull();
        expect(r.signal).toBe(sig);
        const child = spawn('sh', ['-c', `kill -${sig.slice(3)} $$; sleep 5`], opts());
        expect(await child.exited).toMatchObject({ code: null, signal: sig });
        expect(child.signalCode).toBe(sig);
        expect(child.exitCode).toBeNull();
      });

      it('kill(signal) by name and by number reaches the command', async () => {
        const a = spawn('sleep', ['30'], opts());
        expect(a.kill('SIGINT')).toBe(true);
        expect(await a.exited).toMatchObject({ code: null, signal: 'SIGINT' });
        expect(a.killed).toBe(true);
        const b = spawn('sleep', ['30'], opts());
        expect(b.kill(os.constants.signals.SIGUSR2)).toBe(true);
        expect(await b.exited).toMatchObject({ code: null, signal: 'SIGUSR2' });
        const c = spawn('sleep', ['30'], opts());
        expect(c.kill()).toBe(true);
        expect(await c.exited).toMatchObject({ code: null, signal: 'SIGTERM' });
      });

      it('kill() after exit returns false; an unknown signal name is refused', async () => {
        const child = spawn('true', [], opts());
        await child.exited;
        expect(child.kill('SIGKILL')).toBe(false);
        const live = spawn('sleep', ['30'], opts());
        try {
          await expectSandboxError(() => live.kill('SIGNOPE' as NodeJS.Signals), 'EINVALID_ARGUMENT');
        } finally {
          live.kill('SIGKILL');
        }
        await live.exited;
      });
    });

    describe('exec errors', () => {
      it('ENOT_FOUND "command not found: X" for a name not on PATH', async () => {
        await expectSandboxError(run('no-such-command-psb', [], opts()), 'ENOT_FOUND', 'command not found: no-such-command-psb');
      });

      it('spawn() reports a command it cannot start as child_process does: an error event and a rejected exited', async () => {
        const child = spawn('no-such-command-psb', [], opts());
        expect(child.pid).toBeUndefined();
        const events: string[] = [];
        const closed = new Promise<unknown[]>((r) => child.once('close', (...a) => r(a)));
        child.on('spawn', () => events.push('spawn'));
        child.on('exit', () => events.push('exit'));
        const err = await new Promise<SandboxError>((resolve) => {
          child.on('error', (e) => {
            events.push('error');
            resolve(e);
          });
        });
        expect(err).toBeInstanceOf(SandboxError);
        expect(err.code).toBe('ENOT_FOUND');
        await expectSandboxError(child.exited, 'ENOT_FOUND', 'command not found: no-such-command-psb');
        expect(await closed).toEqual([null, null]);
        expect(events).toEqual(['error']);
        // Piped streams exist and are simply empty, so stream code needs no special case.
        expect((await readAll(child.stdout)).length).toBe(0);
        child.stdin!.end('ignored');
        expect(child.kill()).toBe(false);
        // Not executable: the same shape.
        const f = path.join(dir, 'not-exec-spawn.sh');
        fs.writeFileSync(f, '#!/bin/sh\necho no\n', { mode: 0o644 });
        const c2 = spawn(f, [], opts());
        const e2 = await new Promise<SandboxError>((resolve) => c2.once('error', resolve));
        expect(e2.code).toBe('ENOT_EXECUTABLE');
        // Nobody listening to exited must not surface as an unhandled rejection (vitest fails on those).
        spawn('no-such-command-psb', [], opts()).on('error', () => {});
      });

      it('bad input stays synchronous: spawn() throws and starts nothing', () => {
        expect(() => spawn('', [], opts())).toThrow(SandboxError);
        expect(() => spawn('true', [], opts({ cwd: 'relative' }))).toThrow(/absolute/);
      });

      it('ENOT_FOUND for a missing absolute path', async () => {
        const p = path.join(dir, 'missing-binary');
        await expectSandboxError(run(p, [], opts()), 'ENOT_FOUND', `command not found: ${p}`);
      });

      it('ENOT_FOUND uses the child PATH, not the parent one', async () => {
        const bin = path.join(dir, 'pathbin');
        fs.mkdirSync(bin, { recursive: true });
        fs.writeFileSync(path.join(bin, 'psb-only-here'), '#!/bin/sh\necho found-in-child-path\n', { mode: 0o755 });
        await expectSandboxError(run('psb-only-here', [], opts()), 'ENOT_FOUND', 'command not found: psb-only-here');
        const r = await run('psb-only-here', [], opts({ env: { PATH: `${bin}:/usr/bin:/bin` } }));
        expect(r.stdout).toBe('found-in-child-path\n');
      });

      it('ENOT_EXECUTABLE "not executable: X" for a file without the execute bit', async () => {
        const f = path.join(dir, 'not-exec.sh');
        fs.writeFileSync(f, '#!/bin/sh\necho should-not-run\n', { mode: 0o644 });
        // Positive control: the same file runs once it is executable.
        const ctl = path.join(dir, 'exec.sh');
        fs.writeFileSync(ctl, '#!/bin/sh\necho ran\n', { mode: 0o755 });
        expect((await run(ctl, [], opts())).stdout).toBe('ran\n');
        const err = await expectSandboxError(run(f, [], opts()), 'ENOT_EXECUTABLE', new RegExp(`^not executable: ${f}\\b`));
        expect(err.message).not.toContain('should-not-run');
      });

      it('ENOT_EXECUTABLE for a directory', async () => {
        await expectSandboxError(run(dir, [], opts()), 'ENOT_EXECUTABLE', new RegExp(`^not executable: ${dir}\\b`));
      });
    });

    describe('cwd, env and arg0', () => {
      it('runs in the given cwd, and in process.cwd() by default', async () => {
        expect((await run('pwd', [], opts({ cwd: dir }))).stdout).toBe(`${dir}\n`);
        expect((await run('pwd', [], opts({ cwd: '/' }))).stdout).toBe('/\n');
        expect((await run('sh', ['-c', 'pwd -P'], opts())).stdout).toBe(`${fs.realpathSync(process.cwd())}\n`);
      });

      it('gives the child exactly the env it was given', async () => {
        const env = { A: '1', WITH_SPACE: 'x y', MULTI: 'line1\nline2', EMPTY: '', 'odd.name': 'v', DROPPED: undefined };
        const child = spawn('/usr/bin/env', ['-0'], opts({ env }));
        const out = (await readAll(child.stdout)).toString();
        const got = Object.fromEntries(
          out
            .split('\0')
            .filter(Boolean)
            .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
        );
        const expected: Record<string, string> = { A: '1', WITH_SPACE: 'x y', MULTI: 'line1\nline2', EMPTY: '', 'odd.name': 'v' };
        // The documented additions, each named by the report: Landlock mode can only give a
        // private /tmp by pointing TMPDIR at one, and a private tool cache the sandbox could not
        // overlay is moved by its tool's variable. Nothing else; isolated mode's private /tmp is
        // real and needs no variable.
        for (const [k, v] of Object.entries(sandboxAddedEnv(child.enforcement, got))) expected[k] = v;
        expect(got).toEqual(expected);
      });

      it('an empty env gives an empty environment (but for the additions the report names)', async () => {
        const r = await run('/usr/bin/env', [], opts({ env: {} }));
        const lines = r.stdout.split('\n').filter(Boolean);
        const got = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
        const added = sandboxAddedEnv(r.enforcement, got);
        expect(lines.filter((l) => added[l.slice(0, l.indexOf('='))] !== l.slice(l.indexOf('=') + 1))).toEqual([]);
        // And with the host's caches read-only, isolated mode has nothing of its own to add.
        if (r.enforcement.mode === 'isolated' && mode.policy !== null) {
          const base = mode.policy ?? {};
          const ro = await run('/usr/bin/env', [], { env: {}, policy: { ...base, filesystem: { ...(base.filesystem ?? {}), caches: 'host-readonly' } } });
          expect(ro.stdout).toBe('');
        }
      });

      it('inherits process.env when env is omitted', async () => {
        const key = `PSB_CONTRACT_${process.pid}`;
        process.env[key] = 'inherited-value';
        try {
          const r = await run('/usr/bin/env', [], opts());
          expect(r.stdout.split('\n')).toContain(`${key}=inherited-value`);
        } finally {
          delete process.env[key];
        }
      });

      it('env omitted drops secret-looking variables; an explicit env is passed exactly', async () => {
        const vars: Record<string, string> = {
          [`PSB_${process.pid}_TOKEN`]: 'tok',
          [`PSB_${process.pid}_DSN`]: 'dsn',
          [`PSB_${process.pid}_URL`]: 'postgres://u:pw@db/x',
          [`psb_${process.pid}_auth`]: 'lower',
          [`PSB_${process.pid}_PLAIN_URL`]: 'https://example.com/x',
        };
        Object.assign(process.env, vars);
        try {
          const names = (out: string) => out.split('\n').map((l) => l.slice(0, l.indexOf('='))).filter((k) => k.toUpperCase().startsWith(`PSB_${process.pid}_`));
          const dflt = names((await run('/usr/bin/env', [], opts())).stdout);
          expect(dflt).toEqual([`PSB_${process.pid}_PLAIN_URL`]);
          // Positive control: the same variables, passed explicitly, all arrive.
          const exact = names((await run('/usr/bin/env', [], opts({ env: process.env }))).stdout);
          expect(exact.sort()).toEqual(Object.keys(vars).sort());
        } finally {
          for (const k of Object.keys(vars)) delete process.env[k];
        }
      });

      it('arg0 is what the child sees as argv[0] / $0', async () => {
        expect((await run('sh', ['-c', 'echo "$0"'], opts({ arg0: 'my-shell-name' }))).stdout).toBe('my-shell-name\n');
        const r = await run('cat', ['/proc/self/cmdline'], opts({ arg0: 'renamed-cat' }));
        expect(r.stdout.split('\0')).toEqual(['renamed-cat', '/proc/self/cmdline', '']);
        // Default: the command as given.
        expect((await run('sh', ['-c', 'echo "$0"'], opts())).stdout).toBe('sh\n');
      });

      it('passes args verbatim (spaces, quotes, empty strings, unicode)', async () => {
        const args = ['a b', '', '"q"', "'s'", '$HOME', 'ünï✓', '--', '-n'];
        const r = await run('sh', ['-c', 'for a in "$@"; do printf "[%s]" "$a"; done', 'sh', ...args], opts());
        expect(r.stdout).toBe(args.map((a) => `[${a}]`).join(''));
      });
    });

    describe('file descriptors', () => {
      it('the child sees only fds 0, 1, 2 (+ the one ls opens)', async () => {
        // Extra fds in this process must not reach the child, and neither may the spawner's own
        // pipes. (A parent fd without close-on-exec cannot be made from JS: Node marks inherited
        // fds close-on-exec at startup and libuv opens everything with O_CLOEXEC; the spawner's
        // close_range covers fds native code may leave behind.)
        const extra = [fs.openSync('/etc/hostname', 'r'), fs.openSync(dir, 'r')];
        try {
          const r = await run('ls', ['/proc/self/fd'], opts());
          expect(r.stdout.split('\n').filter(Boolean).map(Number).sort((x, y) => x - y)).toEqual([0, 1, 2, 3]);
        } finally {
          extra.forEach((fd) => fs.closeSync(fd));
        }
      });

      it('an explicitly passed extra fd survives at its slot', async () => {
        const f = path.join(dir, 'extra-fd.txt');
        fs.writeFileSync(f, 'through fd 3\n');
        const fd = fs.openSync(f, 'r');
        try {
          const r = await run('sh', ['-c', 'cat <&3; ls /proc/self/fd'], opts({ stdio: ['pipe', 'pipe', 'pipe', fd] as Array<'pipe' | number> }));
          const [first, ...fds] = r.stdout.split('\n').filter(Boolean);
          expect(first).toBe('through fd 3');
          // 0-2, 3 (ours), and the one ls opens.
          expect(fds.map(Number).sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4]);
        } finally {
          fs.closeSync(fd);
        }
      });
    });

    describe('events and exited', () => {
      it('emits spawn, then exit, then close (after the streams ended)', async () => {
        const child = spawn('sh', ['-c', 'echo hi; exit 3'], opts());
        const events: string[] = [];
        child.on('spawn', () => events.push('spawn'));
        child.on('exit', (code, sig) => events.push(`exit:${code}:${sig}`));
        child.stdout!.on('end', () => events.push('stdout-end'));
        child.stdout!.resume();
        child.stderr!.resume();
        const closeArgs = await new Promise<unknown[]>((r) => child.on('close', (...a) => r(a)));
        events.push('close');
        expect(closeArgs).toEqual([3, null]);
        expect(events[0]).toBe('spawn');
        expect(events.indexOf('exit:3:null')).toBeGreaterThan(0);
        expect(events.indexOf('stdout-end')).toBeLessThan(events.indexOf('close'));
        expect(events.at(-1)).toBe('close');
        expect(child.exitCode).toBe(3);
      });

      it('exited resolves to { code, signal, durationMs } without any listener', async () => {
        const child = spawn('sh', ['-c', 'exit 5'], opts({ stdio: 'ignore' as const }));
        expect(typeof child.pid).toBe('number');
        expect(child.pid).toBeGreaterThan(0);
        const info = await child.exited;
        expect(Object.keys(info).sort()).toEqual(['code', 'durationMs', 'signal']);
        expect(info.code).toBe(5);
        expect(info.signal).toBeNull();
        expect(typeof info.durationMs).toBe('number');
        expect(info.durationMs).toBeGreaterThanOrEqual(0);
        // The same promise every time.
        expect(child.exited).toBe(child.exited);
      });

      it('run() resolves with stdout, stderr, code, signal, durationMs', async () => {
        const r = await run('sh', ['-c', 'printf o; printf e >&2; exit 2'], opts());
        expect(r).toMatchObject({ stdout: 'o', stderr: 'e', code: 2, signal: null, timedOut: false });
        expect(typeof r.durationMs).toBe('number');
        expect(r.enforcement.sandboxed).toBe(mode.name !== 'plain');
      });

      it('a child that never reads stdin does not break the host with EPIPE', async () => {
        const child = spawn('true', [], opts());
        await child.exited;
        child.stdin!.write(Buffer.alloc(1024 * 1024));
        child.stdin!.end();
        await new Promise((r) => child.once('close', r));
      });
    });

    describe('maxBuffer and encoding', () => {
      it('maxBuffer: resolves with maxBufferExceeded, output cut at maxBuffer, and the tree is killed', async () => {
        const marker = uniqueSleepArg();
        const r = await run('sh', ['-c', `sleep ${marker} & yes`], opts({ maxBuffer: 64 * 1024 }));
        expect(r).toMatchObject({ maxBufferExceeded: true, killed: true, timedOut: false, aborted: false, code: null, signal: 'SIGKILL' });
        expect(r.stdout.length).toBe(64 * 1024);
        expect(r.stdout.startsWith('y\ny\n')).toBe(true);
        await expectAllGone(pidsWithArg(marker));
      });

      it('maxBuffer counts stderr too; reject: true turns it into EMAXBUFFER with the partial result', async () => {
        const r = await run('sh', ['-c', 'yes >&2'], opts({ maxBuffer: 4096 }));
        expect(r.maxBufferExceeded).toBe(true);
        expect(r.stderr.length).toBe(4096);
        const e = await expectSandboxError(run('sh', ['-c', 'yes >&2'], opts({ maxBuffer: 4096, reject: true })), 'EMAXBUFFER');
        expect((e.detail!.result as { stderr: string }).stderr.length).toBe(4096);
      });

      it('output exactly at maxBuffer is fine', async () => {
        const r = await run('head', ['-c', '4096', '/dev/zero'], opts({ maxBuffer: 4096, encoding: 'buffer' as const }));
        expect(r.stdout.length).toBe(4096);
        expect(r).toMatchObject({ maxBufferExceeded: false, killed: false, code: 0 });
      });

      it('all: stdout and stderr interleaved in arrival order', async () => {
        // Each write waits for the previous one to be read back, so arrival order is the write order.
        const r = await run('sh', ['-c', 'echo 1; sleep 0.2; echo 2 >&2; sleep 0.2; echo 3'], opts({ all: true }));
        expect(r.all).toBe('1\n2\n3\n');
        expect(r.stdout).toBe('1\n3\n');
        expect(r.stderr).toBe('2\n');
        expect((await run('true', [], opts())).all).toBeUndefined();
      });

      it('encoding: utf8 by default, buffer keeps raw bytes, hex/base64/latin1 decode', async () => {
        const script = 'printf "\\303\\251\\377\\000x"';
        const raw = Buffer.from([0xc3, 0xa9, 0xff, 0x00, 0x78]);
        const asBuf = await run('sh', ['-c', script], opts({ encoding: 'buffer' as const }));
        expect(Buffer.isBuffer(asBuf.stdout)).toBe(true);
        expect(asBuf.stdout.equals(raw)).toBe(true);
        expect(Buffer.isBuffer(asBuf.stderr)).toBe(true);
        expect((await run('sh', ['-c', script], opts())).stdout).toBe(raw.toString('utf8'));
        expect((await run('sh', ['-c', script], opts({ encoding: 'hex' as const }))).stdout).toBe(raw.toString('hex'));
        expect((await run('sh', ['-c', script], opts({ encoding: 'base64' as const }))).stdout).toBe(raw.toString('base64'));
        expect((await run('sh', ['-c', script], opts({ encoding: 'latin1' as const }))).stdout).toBe(raw.toString('latin1'));
      });
    });

    describe('child_process parity: shell, stream stdio, enforcement fields', () => {
      it('shell: true runs the line through /bin/sh -c (args appended); a string names the shell', async () => {
        const r = await run('echo', ['"$PSB_X"', '|', 'tr', 'a-z', 'A-Z'], opts({ shell: true, env: { PATH: '/usr/bin:/bin', PSB_X: 'abc' } }));
        expect(r.stdout).toBe('ABC\n');
        // Positive control: without shell the same argv is passed literally.
        expect((await run('echo', ['"$PSB_X"', '|'], opts({ env: { PATH: '/usr/bin:/bin', PSB_X: 'abc' } }))).stdout).toBe('"$PSB_X" |\n');
        expect((await run('echo "$0"', [], opts({ shell: '/bin/sh' }))).stdout).toBe('/bin/sh\n');
        expect(() => spawn('true', [], opts({ shell: '' }))).toThrow(/options.shell must not be empty/);
      });

      it('a stream with a file descriptor is accepted as a stdio entry; one without is refused up front', async () => {
        const f = path.join(dir, `stream-out-${crypto.randomUUID()}.txt`);
        const ws = fs.createWriteStream(f);
        await new Promise((r) => ws.once('open', r));
        try {
          const r = await run('sh', ['-c', 'echo via-stream'], opts({ stdio: ['pipe', ws, 'pipe'] }));
          expect(r.code).toBe(0);
          expect(r.stdout).toBe('');
        } finally {
          await new Promise((r) => ws.end(r));
        }
        expect(fs.readFileSync(f, 'utf8')).toBe('via-stream\n');
        const { PassThrough } = await import('node:stream');
        expect(() => spawn('true', [], opts({ stdio: ['pipe', new PassThrough(), 'pipe'] }))).toThrow(/no underlying file descriptor/);
      });

      it('unref() lets the host exit while the command runs, and the command dies with its host; ref() undoes it', async () => {
        const dist = JSON.stringify(path.resolve(__dirname, '..', '..', 'dist', 'index.js'));
        const o = JSON.stringify(opts({ stdio: 'pipe' as const }));
        const host = (body: string) => spawnSync(process.execPath, ['-e', `const p = require(${dist}); ${body}`], { encoding: 'utf8', timeout: 120_000 });
        const marker = uniqueSleepArg();
        // Without unref() this host would wait an hour for its sleep; the spawnSync timeout would kill it.
        const r = host(`const c = p.spawn('sleep', [${JSON.stringify(marker)}], ${o}); c.on('exit', () => console.log('exit-seen')); c.unref(); console.log('started', typeof c.pid);`);
        expect(r.signal, r.stderr).toBeNull();
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout).toBe('started number\n');
        await expectAllGone(pidsWithArg(marker));
        // Positive control: unref() then ref() keeps the host alive until the command's exit arrives.
        const c = host(`const c = p.spawn('sleep', ['0.3'], ${o}); c.on('exit', (code) => console.log('exit-seen', code)); c.unref(); c.ref();`);
        expect(c.status, c.stderr).toBe(0);
        expect(c.stdout).toBe('exit-seen 0\n');
      });

      it("enforcement: filesystemRead is 'all' when reads are unrestricted; limits are listed", async () => {
        const r = await run('true', [], opts());
        expect(r.enforcement.limits).toBeDefined();
        expect(Object.keys(r.enforcement.limits!).sort()).toEqual(['maxProcesses', 'memoryBytes', 'openFiles']);
        if (r.enforcement.sandboxed) {
          expect(r.enforcement.guarantees.filesystemRead).toBe('all');
          // A limit asked for is applied and reported: the command sees it (positive control: the host's own).
          const host = execFileSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).trim();
          expect(host).not.toBe('123');
          const lim = await run('sh', ['-c', 'ulimit -n'], { ...opts(), policy: { limits: { openFiles: 123 }, ...(r.enforcement.mode === 'landlock' ? { mode: 'landlock' as const, degraded: true } : {}) } });
          expect(lim.stdout.trim()).toBe('123');
          expect(lim.enforcement.limits!.openFiles).toBe(123);
          const ro = await run('true', [], { ...opts(), policy: { filesystem: { read: ['/usr', '/bin', '/lib', '/lib64', '/etc'] }, ...(r.enforcement.mode === 'landlock' ? { mode: 'landlock' as const, degraded: true } : {}) } });
          expect(ro.enforcement.guarantees.filesystemRead).not.toBe('all');
        } else {
          expect(r.enforcement.guarantees.filesystemRead).toBe('not-requested');
          expect(r.enforcement.limits).toEqual({ maxProcesses: null, memoryBytes: null, openFiles: null });
        }
      });
    });

    describe('kill, timeout and AbortSignal take down the whole tree', () => {
      it('kill() ends the command and its grandchildren (checked by host pid)', async () => {
        const { handle, grandchildren } = await startTree((s) => spawn('sh', ['-c', s], opts({ stdio: 'ignore' as const })));
        const child = handle as SandboxedProcess;
        expect(child.kill()).toBe(true);
        expect((await child.exited).signal).toBe('SIGTERM');
        await expectAllGone(grandchildren);
      });

      it('timeout kills the tree and resolves with timedOut and the output so far', async () => {
        let result: Promise<Awaited<ReturnType<typeof run>>> | undefined;
        const { grandchildren } = await startTree((s) => (result = run('sh', ['-c', `echo early; ${s}`], opts({ timeout: 3000 }))));
        const r = await result!;
        expect(r).toMatchObject({ timedOut: true, killed: true, aborted: false, maxBufferExceeded: false, stdout: 'early\n' });
        expect(r.signal).toBe('SIGKILL');
        expect(r.code).toBeNull();
        await expectAllGone(grandchildren);
      });

      it('killSignal: SIGTERM goes first; a command ignoring it gets SIGKILL after forceKillAfter', async () => {
        const polite = await run('sh', ['-c', 'echo ready; exec sleep 30'], opts({ timeout: 300, killSignal: 'SIGTERM' as const }));
        expect(polite).toMatchObject({ timedOut: true, signal: 'SIGTERM', stdout: 'ready\n' });
        const marker = uniqueSleepArg();
        const stubborn = await run('sh', ['-c', `trap '' TERM; echo ready; sleep ${marker}; echo survived`], opts({ timeout: 300, killSignal: 'SIGTERM' as const, forceKillAfter: 500 }));
        expect(stubborn).toMatchObject({ timedOut: true, signal: 'SIGKILL', stdout: 'ready\n' });
        await expectAllGone(pidsWithArg(marker));
      });

      it('reject: true rejects ETIMEDOUT / ECOMMAND_FAILED with the result; exit 0 resolves', async () => {
        const e = await expectSandboxError(run('sh', ['-c', 'echo partial; exec sleep 30'], opts({ timeout: 300, reject: true })), 'ETIMEDOUT');
        expect((e.detail!.result as { stdout: string; timedOut: boolean })).toMatchObject({ stdout: 'partial\n', timedOut: true });
        const f = await expectSandboxError(run('sh', ['-c', 'exit 3'], opts({ reject: true })), 'ECOMMAND_FAILED', /exited with code 3/);
        expect((f.detail!.result as { code: number }).code).toBe(3);
        expect((await run('true', [], opts({ reject: true }))).code).toBe(0);
        // Without reject, the same non-zero exit resolves.
        expect((await run('sh', ['-c', 'exit 3'], opts())).code).toBe(3);
      });

      it('AbortSignal stops the tree and resolves with aborted; reject: true makes it EABORTED', async () => {
        const ac = new AbortController();
        let result: Promise<Awaited<ReturnType<typeof run>>> | undefined;
        const { grandchildren } = await startTree((s) => (result = run('sh', ['-c', s], opts({ signal: ac.signal }))));
        ac.abort();
        const r = await result!;
        expect(r).toMatchObject({ aborted: true, killed: true, timedOut: false, signal: 'SIGKILL' });
        await expectAllGone(grandchildren);
        const ac2 = new AbortController();
        let p2: Promise<unknown> | undefined;
        const t2 = await startTree((s) => (p2 = run('sh', ['-c', s], opts({ signal: ac2.signal, reject: true }))));
        ac2.abort();
        await expectSandboxError(p2!, 'EABORTED');
        await expectAllGone(t2.grandchildren);
      });

      it('an already-aborted signal rejects with EABORTED and starts nothing', async () => {
        const marker = path.join(dir, `aborted-${process.pid}`);
        await expectSandboxError(run('touch', [marker], opts({ signal: AbortSignal.abort() })), 'EABORTED');
        expect(fs.existsSync(marker)).toBe(false);
      });

      it.skipIf(!mode.isolatedTree)('setsid() grandchildren die too when the mode has a pid namespace', async () => {
        const { handle, grandchildren } = await startTree((s) => spawn('sh', ['-c', s], opts({ stdio: 'ignore' as const })), { setsid: true });
        const child = handle as SandboxedProcess;
        child.kill('SIGKILL');
        await child.exited;
        await expectAllGone(grandchildren);
      });
    });
  });
}
