/**
 * The addon as lib/native.ts loads it: its exports, the shape checks binding.cc makes on every
 * native call (TypeError, never a crash or a silent truncation), and native failures arriving as
 * SandboxError instances with their code, syscall and errno.
 *
 * The native calls here bypass lib/ validation on purpose: the addon must re-check types itself.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SandboxError } from '../../lib/errors';
import { loadLinuxNative, loadNative, loadWin32Native, tryLoadNative, type LinuxNative, type LinuxNativePlan } from '../../lib/native';
import { requireBuilt } from '../contract/helpers';

const isLinux = process.platform === 'linux';

describe('addon loading through lib/native.ts', () => {
  it('loads, and loadNative() returns the same binding every time', () => {
    requireBuilt('addon');
    const a = loadNative();
    expect(a).toBe(loadNative());
    expect(tryLoadNative()).toEqual({ binding: a });
  });

  it.runIf(isLinux)('loadLinuxNative() is the same binding; loadWin32Native() refuses the Linux addon with EPLATFORM_UNSUPPORTED', () => {
    expect(loadLinuxNative()).toBe(loadNative());
    let err: unknown;
    try {
      loadWin32Native();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('EPLATFORM_UNSUPPORTED');
    expect((err as Error).message).toMatch(/built for linux, not win32/);
  });

  it('exports the platform, the error code list and setErrorClass', () => {
    const n = loadNative();
    expect(n.platform).toBe(process.platform === 'darwin' ? 'darwin' : process.platform);
    expect(Array.isArray(n.errorCodes)).toBe(true);
    expect(n.errorCodes.length).toBeGreaterThan(0);
    expect(typeof n.setErrorClass).toBe('function');
  });

  it.runIf(isLinux)('exports spawn, kill and probe on Linux', () => {
    const n = loadLinuxNative();
    expect(typeof n.spawn).toBe('function');
    expect(typeof n.kill).toBe('function');
    expect(typeof n.probe).toBe('function');
  });

  it.runIf(isLinux)('every seccomp program the builder makes gives its rule table\'s verdict, for every syscall number', () => {
    // The builder lays the rules out as a binary search with shared returns and ranges
    // (native/linux/seccomp.cc); the check interprets each program and evaluates the table
    // directly. A pivot moved by one (tried while writing it) gave 238582 mismatches.
    const r = loadLinuxNative().seccompSelfCheck();
    expect(r.first).toBe('');
    expect(r.mismatches).toBe(0);
    // Isolated: 3 network modes x unix sockets on/off; Landlock: x metadata supervisor on/off,
    // plus the connect supervisor with the proxy; with the metadata supervisor, the path
    // supervisor on/off, listings supervised or not (deny-read carved out of readable roots), and
    // the signal supervisor on/off, and read-only opens supervised or not (procPrivacy): 150;
    // and every one again with task creation traced (the traced process cap): 150 more; and
    // every one with the metadata supervisor again with the stat class on (deny-read names): 556;
    // and the 12 isolated ones again with listings supervised (their placeholders' names): 568.
    expect(r.configs).toBe(568);
    expect(r.cases).toBeGreaterThan(1_000_000);
  });

  it.runIf(isLinux)('closeOnPool closes the fd (on the thread pool) and checks its argument', async () => {
    const n = loadLinuxNative();
    const file = path.join(os.tmpdir(), `psb-close-${process.pid}-${Date.now()}`);
    const fd = fs.openSync(file, 'w');
    const ino = fs.fstatSync(fd).ino;
    fs.unlinkSync(file);
    n.closeOnPool(fd);
    // Closed once fstat fails, or the number names another file (fd numbers are reused).
    const closed = () => {
      try {
        return fs.fstatSync(fd).ino !== ino;
      } catch {
        return true;
      }
    };
    for (let i = 0; i < 500 && !closed(); i++) await new Promise((r) => setTimeout(r, 10));
    expect(closed()).toBe(true);
    expect(() => (n.closeOnPool as (...a: unknown[]) => void)('3')).toThrow(new TypeError('Usage: native.closeOnPool(fd)'));
  });

  it.runIf(isLinux)('probe() reports this kernel and process', () => {
    const p = loadLinuxNative().probe();
    expect(typeof p.landlockAbi).toBe('number');
    expect(typeof p.seccomp).toBe('number');
    expect(typeof p.userns).toBe('number');
    expect(p.euid).toBe(process.geteuid!());
    expect(p.kernel).toBe(os.release());
    expect(p.machine).toBe(os.machine());
  });

  it('setErrorClass insists on a constructor', () => {
    const n = loadNative();
    expect(() => (n.setErrorClass as (...a: unknown[]) => void)()).toThrow(new TypeError('Usage: native.setErrorClass(SandboxError)'));
    expect(() => (n.setErrorClass as (...a: unknown[]) => void)({})).toThrow(TypeError);
    expect(() => (n.setErrorClass as (...a: unknown[]) => void)(SandboxError, 1)).toThrow(TypeError);
  });
});

describe.runIf(isLinux)('native.spawn / native.kill argument checks', () => {
  let n: LinuxNative;
  let dir: string;
  const base = (): LinuxNativePlan => ({ mode: 'plain', file: '/bin/true', argv: ['true'], envp: [], cwd: '/', stdio: [-1, -1, -1] });
  const started: Array<{ handle: object }> = [];

  /** Calls native.spawn and expects a TypeError; anything that did start is killed. */
  function expectTypeError(args: unknown[], message?: string | RegExp): void {
    let err: unknown;
    try {
      const r = (n.spawn as (...a: unknown[]) => { handle: object })(...args);
      started.push(r);
    } catch (e) {
      err = e;
    }
    expect(err, `native.spawn(${JSON.stringify(args[0])?.slice(0, 120)}) should throw a TypeError`).toBeInstanceOf(TypeError);
    if (typeof message === 'string') expect((err as Error).message).toBe(message);
    else if (message) expect((err as Error).message).toMatch(message);
  }

  beforeAll(() => {
    n = loadLinuxNative();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-native-'));
  });
  afterAll(() => {
    for (const s of started) n.kill(s.handle, 9);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('positive control: a well-formed plain plan runs and reports its exit', async () => {
    const exit = new Promise<[number | null, number | null]>((resolve) => {
      const r = n.spawn({ ...base(), file: '/bin/sh', argv: ['sh', '-c', 'exit 7'] }, (code, sig) => resolve([code, sig]));
      expect(r.pid).toBeGreaterThan(0);
      expect(r.fds).toEqual([null, null, null]);
    });
    expect(await exit).toEqual([7, null]);
  });

  it('wrong arity or argument types: Usage TypeError', () => {
    const usage = 'Usage: native.spawn(plan, onExit)';
    expectTypeError([], usage);
    expectTypeError([base()], usage);
    expectTypeError([base(), 'not a function'], usage);
    expectTypeError(['plan', () => {}], usage);
    expectTypeError([base(), () => {}, 'extra'], usage);
  });

  it('plan.mode must be a known mode', () => {
    expectTypeError([{ ...base(), mode: 1 }, () => {}], /plan\.mode/);
    expectTypeError([{ ...base(), mode: 'chroot' }, () => {}], /plan\.mode/);
  });

  it('plan.file and plan.cwd must be strings', () => {
    expectTypeError([{ ...base(), file: 1 }, () => {}], /plan\.file/);
    expectTypeError([{ ...base(), file: undefined }, () => {}], /plan\.file/);
    expectTypeError([{ ...base(), cwd: null }, () => {}], /plan\.cwd/);
  });

  it('plan.argv and plan.envp must be arrays of strings', () => {
    expectTypeError([{ ...base(), argv: 'true' }, () => {}], /plan\.argv/);
    expectTypeError([{ ...base(), argv: [1] }, () => {}], /plan\.argv/);
    expectTypeError([{ ...base(), envp: {} }, () => {}], /plan\.envp/);
    expectTypeError([{ ...base(), envp: [null] }, () => {}], /plan\.envp/);
  });

  it('an empty argv is refused (argc 0 is the pkexec CVE-2021-4034 shape)', () => {
    expectTypeError([{ ...base(), argv: [] }, () => {}], /plan\.argv/);
  });

  it('NUL bytes are refused in argv and envp', () => {
    expectTypeError([{ ...base(), argv: ['tr\0ue'] }, () => {}], /NUL/);
    expectTypeError([{ ...base(), envp: ['A=x\0y'] }, () => {}], /NUL/);
  });

  it('NUL bytes are refused in file and cwd (no silent truncation)', () => {
    expectTypeError([{ ...base(), file: '/bin/true\0/../sh' }, () => {}], /NUL/);
    expectTypeError([{ ...base(), cwd: '/\0tmp' }, () => {}], /NUL/);
  });

  it('plan.stdio must be an array of fd numbers or pipe directions', () => {
    expectTypeError([{ ...base(), stdio: undefined }, () => {}], /stdio/);
    expectTypeError([{ ...base(), stdio: 5 }, () => {}], /stdio/);
    expectTypeError([{ ...base(), stdio: [null, -1, -1] }, () => {}], /stdio/);
    expectTypeError([{ ...base(), stdio: ['sideways', -1, -1] }, () => {}], /stdio/);
  });

  it('numeric limits must be numbers', () => {
    expectTypeError([{ ...base(), rlimitNproc: 'many' }, () => {}], /rlimitNproc/);
    expectTypeError([{ ...base(), rlimitNofile: {} }, () => {}], /rlimitNofile/);
  });

  it('native.kill checks its arguments', () => {
    const usage = 'Usage: native.kill(handle, signal)';
    const kill = n.kill as (...a: unknown[]) => number;
    expect(() => kill()).toThrow(new TypeError(usage));
    expect(() => kill({}, 9)).toThrow(new TypeError(usage));
    expect(() => kill(1, 9)).toThrow(new TypeError(usage));
    const r = n.spawn({ ...base(), file: '/bin/sleep', argv: ['sleep', '30'] }, () => {});
    started.push(r);
    expect(() => kill(r.handle, 'SIGKILL')).toThrow(new TypeError(usage));
    expect(kill(r.handle, 9)).toBe(0);
  });

  it('native.kill after the exit was delivered returns -ESRCH', async () => {
    let handle!: object;
    await new Promise<void>((resolve) => {
      handle = n.spawn(base(), () => resolve()).handle;
    });
    expect(n.kill(handle, 9)).toBe(-os.constants.errno.ESRCH);
  });

  it('exec failures arrive as SandboxError with code, syscall and errno', () => {
    const missing = path.join(dir, 'missing');
    let err: unknown;
    try {
      started.push(n.spawn({ ...base(), file: missing, argv: ['missing'] }, () => {}));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect(err).toMatchObject({ code: 'ENOT_FOUND', syscall: 'execve', errno: os.constants.errno.ENOENT });

    const noexec = path.join(dir, 'noexec');
    fs.writeFileSync(noexec, '#!/bin/sh\n', { mode: 0o644 });
    err = undefined;
    try {
      started.push(n.spawn({ ...base(), file: noexec, argv: ['noexec'] }, () => {}));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect(err).toMatchObject({ code: 'ENOT_EXECUTABLE', syscall: 'execve', errno: os.constants.errno.EACCES });
    expect((err as Error).message).toMatch(new RegExp(`^not executable: ${noexec}`));
  });
});
