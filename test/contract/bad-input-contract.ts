/**
 * Every bad-input case of the API contract throws a SandboxError (EINVALID_ARGUMENT, or
 * EINVALID_POLICY for the policy) and starts nothing. "Nothing started" is checked from outside:
 * the command would be `sleep <unique marker>`, and no process with that argument may appear.
 * The positive control runs the same command with valid input and does find it. Instantiated by
 * bad-input.test.ts and bad-input-sandboxed.test.ts.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run, spawn, SandboxError } from '../../lib/index';
import { fixtureDir, killAll, requireBuilt, pidsWithArg, uniqueSleepArg, waitFor, withPolicy, type RunMode } from './helpers';

type Call = { command?: unknown; args?: unknown; options?: Record<string, unknown> | unknown };

/** Asserts that both spawn() and run() refuse the call with `code` and that nothing started. */
async function expectRefused(call: (marker: string) => Call, code: string, message?: RegExp): Promise<void> {
  for (const api of ['spawn', 'run'] as const) {
    const marker = uniqueSleepArg();
    const c = call(marker);
    const command = 'command' in c ? c.command : 'sleep';
    const args = 'args' in c ? c.args : [marker];
    const options = c.options;
    let err: unknown;
    try {
      if (api === 'spawn') {
        const child = (spawn as (...a: unknown[]) => { kill(s: string): boolean })(command, args, options);
        child.kill('SIGKILL');
      } else {
        await (run as (...a: unknown[]) => Promise<unknown>)(command, args, options);
      }
    } catch (e) {
      err = e;
    }
    const started = pidsWithArg(marker);
    killAll(started);
    expect(err, `${api}() should refuse`).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code, `${api}(): ${(err as Error).message}`).toBe(code);
    if (message) expect((err as Error).message).toMatch(message);
    expect(started, `${api}() must not start anything`).toEqual([]);
  }
}

export function defineBadInputContract(mode: RunMode): void {
  const opts = (o: Record<string, unknown> = {}) => withPolicy(mode, o);

  describe.skipIf(mode.unavailable !== null)(`bad input starts nothing (${mode.name})`, () => {
    let dir: string;
    beforeAll(() => {
      requireBuilt('addon');
      dir = fixtureDir();
    });
    afterAll(() => {
      if (dir) fs.rmSync(dir, { recursive: true, force: true });
    });

    it('positive control: the same valid call does start the marker process', async () => {
      const marker = uniqueSleepArg();
      const child = spawn('sleep', [marker], opts({ stdio: 'ignore' }));
      try {
        await waitFor(() => pidsWithArg(marker).length === 1, 'the marker process to appear');
      } finally {
        child.kill('SIGKILL');
        await child.exited;
      }
    });

    describe('command and args', () => {
      it('empty command', () => expectRefused(() => ({ command: '', options: opts() }), 'EINVALID_ARGUMENT', /command/));
      it.each([[123], [null], [undefined], [['sleep']], [{}]])('non-string command %j', (command) =>
        expectRefused(() => ({ command, options: opts() }), 'EINVALID_ARGUMENT', /command/));
      it('NUL byte in the command', () => expectRefused(() => ({ command: 'sle\0ep', options: opts() }), 'EINVALID_ARGUMENT', /NUL/));
      it('args that is not an array', () => expectRefused((m) => ({ args: m, options: opts() }), 'EINVALID_ARGUMENT', /args/));
      it.each([[1], [null], [{}], [['x']], [true]])('non-string arg %j', (bad) =>
        expectRefused((m) => ({ args: [m, bad], options: opts() }), 'EINVALID_ARGUMENT', /args\[1\]/));
      it('NUL byte in an arg', () => expectRefused((m) => ({ args: [m, 'a\0b'], options: opts() }), 'EINVALID_ARGUMENT', /NUL/));
      it('NUL byte in arg0', () => expectRefused(() => ({ options: opts({ arg0: 'sl\0eep' }) }), 'EINVALID_ARGUMENT', /NUL/));
      it('empty arg0', () => expectRefused(() => ({ options: opts({ arg0: '' }) }), 'EINVALID_ARGUMENT', /arg0/));
    });

    describe('cwd', () => {
      it('relative cwd', () => expectRefused(() => ({ options: opts({ cwd: 'relative/dir' }) }), 'EINVALID_ARGUMENT', /absolute/));
      it('dot cwd', () => expectRefused(() => ({ options: opts({ cwd: '.' }) }), 'EINVALID_ARGUMENT', /absolute/));
      it('missing cwd', () => expectRefused(() => ({ options: opts({ cwd: path.join(dir, 'missing') }) }), 'EINVALID_ARGUMENT', /does not exist/));
      it('cwd that is a file', () => {
        const f = path.join(dir, 'a-file');
        fs.writeFileSync(f, '');
        return expectRefused(() => ({ options: opts({ cwd: f }) }), 'EINVALID_ARGUMENT', /not a directory/);
      });
      it('NUL byte in cwd', () => expectRefused(() => ({ options: opts({ cwd: `${dir}\0x` }) }), 'EINVALID_ARGUMENT', /NUL/));
      it('non-string cwd', () => expectRefused(() => ({ options: opts({ cwd: 42 }) }), 'EINVALID_ARGUMENT', /cwd/));
    });

    describe('env', () => {
      it('NUL byte in an env value', () => expectRefused(() => ({ options: opts({ env: { PATH: process.env.PATH, A: 'x\0y' } }) }), 'EINVALID_ARGUMENT', /NUL/));
      it('NUL byte in an env name', () => expectRefused(() => ({ options: opts({ env: { PATH: process.env.PATH, 'A\0B': 'x' } }) }), 'EINVALID_ARGUMENT'));
      it('= in an env name', () => expectRefused(() => ({ options: opts({ env: { PATH: process.env.PATH, 'A=B': 'x' } }) }), 'EINVALID_ARGUMENT'));
      it('empty env name', () => expectRefused(() => ({ options: opts({ env: { PATH: process.env.PATH, '': 'x' } }) }), 'EINVALID_ARGUMENT'));
      it('non-string env value', () => expectRefused(() => ({ options: opts({ env: { PATH: process.env.PATH, A: 1 } }) }), 'EINVALID_ARGUMENT', /env/));
      it('env that is not an object', () => expectRefused(() => ({ options: opts({ env: 'PATH=/bin' }) }), 'EINVALID_ARGUMENT', /env/));
      it('env: null', () => expectRefused(() => ({ options: opts({ env: null }) }), 'EINVALID_ARGUMENT', /env/));
    });

    describe('options', () => {
      it.each(['bogus', 'gid', 'detached', 'uid', 'windowsHide'])('unknown option name %s', (name) =>
        expectRefused(() => ({ options: opts({ [name]: true }) }), 'EINVALID_ARGUMENT', new RegExp(`unknown option: ${name}`)));
      it.each(['timeout', 'input', 'maxBuffer', 'encoding', 'signal', 'killSignal', 'forceKillAfter', 'all', 'reject'])('run-only option %s given to spawn', async (name) => {
        const marker = uniqueSleepArg();
        let err: unknown;
        try {
          spawn('sleep', [marker], opts({ [name]: name === 'signal' ? new AbortController().signal : 1 }) as never).kill('SIGKILL');
        } catch (e) {
          err = e;
        }
        expect(pidsWithArg(marker)).toEqual([]);
        expect(err).toBeInstanceOf(SandboxError);
        expect((err as SandboxError).code).toBe('EINVALID_ARGUMENT');
      });
      it('options that is not an object', () => expectRefused(() => ({ options: 'cwd' }), 'EINVALID_ARGUMENT', /options/));
      it.each([[''], [1], [{}], ['a\0b']])('bad shell %j', (shell) => expectRefused(() => ({ options: opts({ shell }) }), 'EINVALID_ARGUMENT', /options.shell/));
      it.each([
        ['killSignal', 'SIGNOPE'],
        ['killSignal', -1],
        ['forceKillAfter', -1],
        ['forceKillAfter', Number.NaN],
        ['all', 'yes'],
        ['reject', 1],
        ['signal', { aborted: false }],
      ])('run(): bad %s %j', async (name, value) => {
        const marker = uniqueSleepArg();
        await expect(run('sleep', [marker], opts({ [name]: value }) as never)).rejects.toMatchObject({ code: 'EINVALID_ARGUMENT', message: expect.stringContaining(`options.${name}`) });
        expect(pidsWithArg(marker)).toEqual([]);
      });
      it.each([['bogus'], [['pipe', 'pipe', 'nope']], [[-1]], [[1.5]], [{}]])('bad stdio %j', (stdio) =>
        expectRefused(() => ({ options: opts({ stdio }) }), 'EINVALID_ARGUMENT', /stdio/));
      it.each([[-1], [0], [Number.NaN], ['100']])('run(): bad timeout %j', async (timeout) => {
        const marker = uniqueSleepArg();
        await expect(run('sleep', [marker], opts({ timeout }) as never)).rejects.toMatchObject({ code: 'EINVALID_ARGUMENT' });
        expect(pidsWithArg(marker)).toEqual([]);
      });
      it.each([[0], [-5], [Number.NaN]])('run(): bad maxBuffer %j', async (maxBuffer) => {
        const marker = uniqueSleepArg();
        await expect(run('sleep', [marker], opts({ maxBuffer }) as never)).rejects.toMatchObject({ code: 'EINVALID_ARGUMENT' });
        expect(pidsWithArg(marker)).toEqual([]);
      });
    });
  });
}

/** Policy validation: unknown or malformed fields are EINVALID_POLICY and nothing starts. */
export function definePolicyValidation(mode: RunMode): void {
  describe.skipIf(mode.unavailable !== null)('bad policy starts nothing', () => {
    const cases: Array<[string, unknown]> = [
      ['unknown top-level field', { filesystem: {}, bogus: 1 }],
      ['unknown filesystem field', { filesystem: { writable: ['/var/tmp'] } }],
      ['unknown network mode', { network: 'open' }],
      ['unknown proxy field', { network: { proxy: { allow: ['example.com'], bogus: true } } }],
      ['unknown mode', { mode: 'chroot' }],
      ['unknown tmp mode', { filesystem: { tmp: 'shared' } }],
      ['read that is neither all nor a list', { filesystem: { read: 'some' } }],
      ['write that is not a list', { filesystem: { write: '/var/tmp' } }],
      ['non-string write entry', { filesystem: { write: [42] } }],
      ['relative write path', { filesystem: { write: ['relative/dir'] } }],
      ['NUL byte in a write path', { filesystem: { write: ['/var/tmp\0x'] } }],
      ['degraded that is not a boolean', { degraded: 'yes' }],
      ['policy that is not an object', 'none'],
    ];
    it.each(cases)('%s', (_name, policy) =>
      expectRefused(() => ({ options: { policy } }), 'EINVALID_POLICY'));
  });
}
