/**
 * The deferred start of a SandboxedProcess (BackendProcess.started; Windows sandboxed runs) with a
 * fake backend process, so the event semantics are checked on every platform: pid and 'spawn' at
 * the start, stdin queued before it, kill() before it, a failed start. The Windows backend itself
 * is checked under wine (test/win32/deferred.wine.js).
 */
import { Readable, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { BackendProcess, EnforcementReport, ExitInfo } from '../../lib/backend';
import { unsandboxedReport } from '../../lib/backend';
import { SandboxedProcess } from '../../lib/child';
import { deferredStdio } from '../../lib/deferred-stdio';
import { SandboxError } from '../../lib/errors';

interface Fake {
  proc: BackendProcess;
  start(pid: number): { stdin: string[]; stdinEnded: () => boolean; out: Readable; err: Readable };
  fail(e: unknown): void;
  exit(info: ExitInfo): void;
  killedWith: Array<NodeJS.Signals | number>;
}

function fakeDeferred(): Fake {
  const io = deferredStdio([true, true, true]);
  let resolveStarted!: (pid: number | null) => void;
  let rejectStarted!: (e: unknown) => void;
  const started = new Promise<number | null>((res, rej) => {
    resolveStarted = res;
    rejectStarted = rej;
  });
  started.catch(() => {});
  let resolveExit!: (i: ExitInfo) => void;
  let rejectExit!: (e: unknown) => void;
  const exited = new Promise<ExitInfo>((res, rej) => {
    resolveExit = res;
    rejectExit = rej;
  });
  exited.catch(() => {});
  let pid: number | undefined;
  let state: 'starting' | 'running' | 'done' = 'starting';
  const killedWith: Array<NodeJS.Signals | number> = [];
  const report: EnforcementReport = unsandboxedReport('win32');
  let realOut: Readable | null = null;
  let realErr: Readable | null = null;
  const proc: BackendProcess = {
    get pid() {
      return pid;
    },
    started,
    stdio: io.streams,
    exited,
    enforcement: report,
    kill(signal) {
      if (state === 'done') return false;
      killedWith.push(signal);
      if (state === 'starting') {
        state = 'done';
        io.abandon();
        resolveStarted(null);
        resolveExit({ code: null, signal: typeof signal === 'string' ? signal : 'SIGKILL' });
        return true;
      }
      state = 'done';
      realOut?.push(null);
      realErr?.push(null);
      resolveExit({ code: null, signal: typeof signal === 'string' ? signal : 'SIGKILL' });
      return true;
    },
  };
  return {
    proc,
    killedWith,
    start(p) {
      const stdin: string[] = [];
      let ended = false;
      const w = new Writable({
        write(c, _e, cb) {
          stdin.push(String(c));
          cb();
        },
        final(cb) {
          ended = true;
          cb();
        },
      });
      realOut = new Readable({ read() {} });
      realErr = new Readable({ read() {} });
      pid = p;
      state = 'running';
      io.attach([w, realOut, realErr]);
      resolveStarted(p);
      return { stdin, stdinEnded: () => ended, out: realOut, err: realErr };
    },
    fail(e) {
      state = 'done';
      io.abandon();
      rejectStarted(e);
      rejectExit(e);
    },
    exit(info) {
      state = 'done';
      realOut?.push(null);
      realErr?.push(null);
      resolveExit(info);
    },
  };
}

const tick = () => new Promise<void>((r) => setImmediate(r));

function collect(s: Readable | null): Promise<string> {
  return new Promise((resolve) => {
    let t = '';
    s!.setEncoding('utf8');
    s!.on('data', (d: string) => (t += d));
    s!.on('end', () => resolve(t));
  });
}

describe('SandboxedProcess: deferred start', () => {
  it("pid is undefined until 'spawn'; stdin written before the start is delivered; output flows after it", async () => {
    const f = fakeDeferred();
    const child = new SandboxedProcess(f.proc);
    const events: string[] = [];
    child.on('spawn', () => events.push(`spawn:${child.pid}`));
    child.on('exit', (c, s) => events.push(`exit:${c}:${s}`));
    child.on('close', (c, s) => events.push(`close:${c}:${s}`));
    expect(child.pid).toBeUndefined();
    child.stdin!.write('early ');
    child.stdin!.end('bytes');
    const out = collect(child.stdout);
    await tick();
    expect(events).toEqual([]);
    const real = f.start(4242);
    await tick();
    expect(child.pid).toBe(4242);
    expect(events).toEqual(['spawn:4242']);
    expect(real.stdin.join('')).toBe('early bytes');
    expect(real.stdinEnded()).toBe(true);
    real.out.push('hello');
    f.exit({ code: 3, signal: null });
    expect(await out).toBe('hello');
    const r = await child.exited;
    expect([r.code, r.signal]).toEqual([3, null]);
    await tick();
    expect(events).toEqual(['spawn:4242', 'exit:3:null', 'close:3:null']);
  });

  it("kill() before the start: no 'spawn', exit and close with the signal, exited resolves, stdin writes fail quietly", async () => {
    const f = fakeDeferred();
    const child = new SandboxedProcess(f.proc);
    const events: string[] = [];
    child.on('spawn', () => events.push('spawn'));
    child.on('exit', (c, s) => events.push(`exit:${c}:${s}`));
    child.on('close', (c, s) => events.push(`close:${c}:${s}`));
    child.stdin!.write('never delivered');
    expect(child.kill('SIGTERM')).toBe(true);
    expect(child.killed).toBe(true);
    const r = await child.exited;
    expect([r.code, r.signal]).toEqual([null, 'SIGTERM']);
    await tick();
    await tick();
    expect(events).toEqual(['exit:null:SIGTERM', 'close:null:SIGTERM']);
    expect(child.pid).toBeUndefined();
    expect(child.exitCode).toBeNull();
    expect(child.signalCode).toBe('SIGTERM');
    expect(child.kill('SIGKILL')).toBe(false);
  });

  it("a failed start: 'error' then 'close' (null, null), exited rejects with the SandboxError", async () => {
    const f = fakeDeferred();
    const child = new SandboxedProcess(f.proc);
    const events: string[] = [];
    child.on('spawn', () => events.push('spawn'));
    child.on('exit', () => events.push('exit'));
    const err = new SandboxError('EACL_EDIT', 'SetNamedSecurityInfoW failed, error 5: C:\\work', { winError: 5 });
    const gotError = new Promise<SandboxError>((resolve) => child.once('error', resolve));
    const closed = new Promise<unknown[]>((resolve) => child.once('close', (...a) => resolve(a)));
    f.fail(err);
    expect(await gotError).toBe(err);
    expect(await closed).toEqual([null, null]);
    await expect(child.exited).rejects.toBe(err);
    expect(events).toEqual([]);
    expect(child.kill()).toBe(false);
  });

  it('an unconsumed, empty output stream still closes (as a socket at EOF does)', async () => {
    const f = fakeDeferred();
    const child = new SandboxedProcess(f.proc);
    const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
    f.start(1);
    f.exit({ code: 0, signal: null });
    await closed;
  });

  it('stdin keeps backpressure before the start and drains after it', async () => {
    const f = fakeDeferred();
    const child = new SandboxedProcess(f.proc);
    const big = 'x'.repeat(64 * 1024);
    const ok = child.stdin!.write(big);
    expect(ok).toBe(false);
    const drained = new Promise<void>((resolve) => child.stdin!.once('drain', () => resolve()));
    const real = f.start(7);
    await drained;
    expect(real.stdin.join('').length).toBe(big.length);
    f.exit({ code: 0, signal: null });
    await child.exited;
  });
});
