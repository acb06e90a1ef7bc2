/**
 * The deferred start of a SandboxedProcess (BackendProcess.started; Windows sandboxed runs) with a
 * fake backend process, so the event semantics are checked on every platform: pid and 'spawn' at
 * the start, stdin queued before it, kill() before it, a failed start. The Windows backend itself
 * is checked under wine (test/win32/deferred.wine.js).
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
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

  it("a failed start seen from a microtask (an ES module's top level, code after an await): 'error' before exited rejects", async () => {
    await Promise.resolve(); // from here on this test runs in a microtask, as an ES module does
    const f = fakeDeferred();
    const child = new SandboxedProcess(f.proc);
    const order: string[] = [];
    child.on('error', () => order.push('error'));
    const watched = child.exited.catch(() => order.push('exited'));
    f.fail(new SandboxError('EACL_EDIT', 'denied'));
    await watched;
    expect(order).toEqual(['error', 'exited']);
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

describe('a command that could not be started: the order of what the caller sees', () => {
  const report: EnforcementReport = unsandboxedReport('linux');
  it("'error', then 'close', then exited rejects, also when the caller runs in a microtask", async () => {
    await Promise.resolve(); // a microtask from here on, as an ES module's top level
    const err = new SandboxError('ENOT_FOUND', 'command not found: nope');
    const child = SandboxedProcess.failed(err, ['pipe', 'pipe', 'pipe'], report);
    const order: string[] = [];
    child.on('error', (e) => order.push(`error:${e === err}`));
    child.on('close', () => order.push('close'));
    await child.exited.catch((e: unknown) => order.push(`exited:${e === err}`));
    expect(order).toEqual(['error:true', 'close', 'exited:true']);
  });

  // The same through the built package, as an ES module and as CommonJS imports it.
  const DIST = path.resolve(__dirname, '..', '..', 'dist');
  const built = fs.existsSync(path.join(DIST, 'index.mjs'));
  // eslint-disable-next-line no-console
  if (!built) console.warn(`SKIPPING the built-package order cases: ${DIST}/index.mjs is missing (npm run build:ts)`);
  const BODY = `
const order = [];
const c = spawn('no-such-command-psb', [], { policy: null });
c.on('error', (e) => order.push('error:' + e.code));
c.exited.catch((e) => order.push('exited:' + e.code)).then(() => console.log(order.join(' ')));`;
  it.skipIf(!built).each([
    ['ES module', ['--input-type=module', '-e', `import { spawn } from ${JSON.stringify(path.join(DIST, 'index.mjs'))};${BODY}`]],
    ['CommonJS', ['-e', `const { spawn } = require(${JSON.stringify(path.join(DIST, 'index.js'))});${BODY}`]],
  ])('%s', (_name, args) => {
    const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 30_000 });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('error:ENOT_FOUND exited:ENOT_FOUND\n');
  });
});
