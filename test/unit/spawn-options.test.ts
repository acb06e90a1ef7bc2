/**
 * What spawn()/run() refuse before anything starts: invalid proxy patterns as policy
 * errors naming their field, an empty allow list with nothing to decide, `input` that could never
 * reach the command, and child_process option spellings, each with what to use instead. Every
 * refusal is checked from the outside (the marker file the command would create is absent) and
 * paired with the accepted form.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SandboxError, run, spawn, type SpawnOptions } from '../../lib/index';
import { compileNetwork } from '../../lib/permissions';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-spawn-opts-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** spawn() of `touch <marker>` must throw synchronously and leave no marker. */
function refused(opts: SpawnOptions, name: string): SandboxError {
  const marker = path.join(dir, name);
  let err: unknown;
  try {
    spawn('/usr/bin/touch', [marker], { cwd: dir, ...opts }).kill('SIGKILL');
  } catch (e) {
    err = e;
  }
  expect(err, name).toBeInstanceOf(SandboxError);
  expect(fs.existsSync(marker), `${name}: nothing may run`).toBe(false);
  return err as SandboxError;
}

const proxyPolicy = (allow: string[], deny?: string[]) => ({ network: { proxy: { allow, ...(deny ? { deny } : {}) } } });

describe('proxy patterns are policy errors naming the field', () => {
  it.each([
    ['http://localhost', /^policy\.network\.proxy\.allow\[1\] "http:\/\/localhost" is not a domain pattern: a URL; give the host alone/],
    ['127.0.0.0/8', /^policy\.network\.proxy\.allow\[1\] "127\.0\.0\.0\/8" is not a domain pattern: an address range \(CIDR\), which is not supported; list each address/],
    ['example.com:0', /allow\[1\] "example\.com:0" is not a domain pattern: its port "0" is not a number from 1 to 65535/],
    ['*.com', /allow\[1\] "\*\.com" is not a domain pattern: a wildcard over a public suffix/],
  ])('allow entry %j', (bad, message) => {
    const e = refused({ policy: proxyPolicy(['example.com', bad]) }, `allow-${bad.replace(/\W/g, '_')}`);
    expect(e).not.toBeInstanceOf(TypeError);
    expect(e.code).toBe('EINVALID_POLICY');
    expect(e.message).toMatch(message);
    expect(e.detail).toMatchObject({ field: 'policy.network.proxy.allow[1]', value: bad });
  });

  it('deny entries too', () => {
    const e = refused({ policy: proxyPolicy(['example.com'], ['ok.example.com', '*']) }, 'deny-star');
    expect(e).toMatchObject({ code: 'EINVALID_POLICY', detail: { field: 'policy.network.proxy.deny[1]' } });
    expect(e.message).toMatch(/^policy\.network\.proxy\.deny\[1\] "\*" is not a domain pattern: a deny-all "\*" is not supported/);
  });

  it('control: host, wildcard and IP patterns, with and without a port, compile', () => {
    const allow = ['example.com', 'api.example.com:443', '*.example.com:8443', '**.example.org', '10.1.2.3:22', '[::1]:8080', '*'];
    expect(compileNetwork({ proxy: { allow } })).toEqual({ kind: 'proxy', proxy: { allow } });
  });
});

describe('an empty allow list', () => {
  it('is refused when nothing else decides: say network none, or list hosts, or a decider', () => {
    const e = refused({ policy: proxyPolicy([]) }, 'empty-allow');
    expect(e.code).toBe('EINVALID_POLICY');
    expect(e.detail).toMatchObject({ field: 'policy.network.proxy.allow' });
    expect(e.message).toBe(
      "policy.network.proxy.allow is empty, so every destination would be refused: use network: 'none' for no network, list the hosts to allow, or pass options.proxy.decider to decide each request",
    );
    // With a deny list it is no less empty.
    expect(refused({ policy: proxyPolicy([], ['x.example.com']) }, 'empty-allow-deny').code).toBe('EINVALID_POLICY');
  });

  it('control: with a decider (asked on every miss) the policy passes validation', async () => {
    // A missing command gets past every policy check and fails to start: ENOT_FOUND, not EINVALID_POLICY.
    const child = spawn(path.join(dir, 'no-such-command'), [], {
      cwd: dir,
      policy: proxyPolicy([]),
      proxy: { decider: async () => ({ decision: 'deny' }) },
    });
    const errors: SandboxError[] = [];
    child.on('error', (e) => errors.push(e));
    await expect(child.exited).rejects.toMatchObject({ code: 'ENOT_FOUND' });
    await new Promise((r) => setImmediate(r));
    expect(errors.map((e) => e.code)).toEqual(['ENOT_FOUND']);
  });
});

describe('run({ input }) needs stdin to be a pipe', () => {
  it.each([
    [{ stdio: 'inherit' as const }, /options\.input is written to the command's stdin, but options\.stdio makes stdin 'inherit': drop input, or make stdin 'pipe'/],
    [{ stdio: ['ignore', 'pipe', 'pipe'] as SpawnOptions['stdio'] }, /makes stdin 'ignore'/],
    [{ stdio: [0, 'pipe', 'pipe'] as SpawnOptions['stdio'] }, /makes stdin fd 0/],
  ])('refused with %j', async (opts, message) => {
    const marker = path.join(dir, 'input-marker');
    await expect(run('/bin/sh', ['-c', `touch ${marker}`], { cwd: dir, policy: null, input: 'x', ...opts })).rejects.toMatchObject({
      code: 'EINVALID_ARGUMENT',
      // (A bare RegExp inside toMatchObject matches any string here; stringMatching does not.)
      message: expect.stringMatching(message),
    });
    expect(fs.existsSync(marker)).toBe(false);
  });

  it('control: with a stdin pipe (the default, or spelled out) the command reads it', async () => {
    for (const stdio of [undefined, 'pipe' as const, ['pipe', 'pipe', 'pipe'] as SpawnOptions['stdio']]) {
      const r = await run('/bin/cat', [], { cwd: dir, policy: null, input: 'hello', ...(stdio ? { stdio } : {}) });
      expect(r.stdout).toBe('hello');
    }
    // Without input, stdin may be anything.
    expect((await run('/bin/true', [], { cwd: dir, policy: null, stdio: ['ignore', 'pipe', 'pipe'] })).code).toBe(0);
  });
});

describe('child_process spellings get what to use instead', () => {
  it.each([
    ['argv0', 'x', /^unknown option: argv0; use arg0 \(the argv\[0\] the child sees\)$/],
    ['signal', new AbortController().signal, /^unknown option: signal; spawn\(\) takes no signal: run\(\) takes signal, or call kill\(\) on the returned process$/],
    ['timeout', 1000, /^unknown option: timeout; spawn\(\) takes no timeout: run\(\) takes timeout \(milliseconds\), or call kill\(\)/],
    ['windowsHide', true, /^unknown option: windowsHide; not needed: on Windows a sandboxed command always gets a hidden console/],
    ['maxBuffer', 10, /^unknown option: maxBuffer; spawn\(\) takes no maxBuffer: run\(\) takes maxBuffer$/],
    ['bogus', 1, /^unknown option: bogus$/],
  ])('spawn({ %s })', (key, value, message) => {
    const e = refused({ [key]: value } as SpawnOptions, `cp-${key}`);
    expect(e.code).toBe('EINVALID_ARGUMENT');
    expect(e.message).toMatch(message);
  });

  it('run() says the same for argv0 and windowsHide, and takes signal and timeout itself', async () => {
    await expect(run('/bin/true', [], { argv0: 'x' } as never)).rejects.toMatchObject({ message: expect.stringMatching(/^unknown option: argv0; use arg0/) });
    await expect(run('/bin/true', [], { windowsHide: true } as never)).rejects.toMatchObject({ message: expect.stringMatching(/^unknown option: windowsHide; not needed/) });
    const r = await run('/bin/sh', ['-c', 'echo "$0"'], { cwd: dir, policy: null, arg0: 'named', signal: new AbortController().signal, timeout: 30_000 });
    expect(r.stdout).toBe('named\n');
  });
});

describe("run()'s timers past Node's limit (2^31 - 1 ms) are refused before anything starts", () => {
  // setTimeout with more fires after 1 ms: the command would be killed as it starts.
  it.each([
    ['timeout', 2 ** 31, /^options\.timeout must be a positive number of milliseconds, at most 2147483647 \(about 24\.8 days: Node's timer limit\), got 2147483648$/],
    ['timeout', 2 ** 31 + 1000, /^options\.timeout must be .* got 2147484648$/],
    ['timeout', Infinity, /^options\.timeout must be .* got Infinity$/],
    ['forceKillAfter', 2 ** 31, /^options\.forceKillAfter must be a number of milliseconds, 0 to 2147483647 \(Node's timer limit\)$/],
  ])('run({ %s: %d })', async (key, value, message) => {
    const marker = path.join(dir, `timer-${key}-${value}`);
    const p = run('/bin/sh', ['-c', 'touch "$1"; sleep 1; touch "$1.late"', 'sh', marker], { cwd: dir, policy: null, [key]: value });
    await expect(p).rejects.toMatchObject({ code: 'EINVALID_ARGUMENT', message: expect.stringMatching(message) });
    expect(fs.existsSync(marker), 'nothing may run').toBe(false);
  });

  it('the limit itself is taken: the command runs to its end', async () => {
    const marker = path.join(dir, 'timer-max');
    const r = await run('/bin/sh', ['-c', 'sleep 1; touch "$1"; echo done', 'sh', marker], {
      cwd: dir,
      policy: null,
      timeout: 2 ** 31 - 1,
      killSignal: 'SIGTERM',
      forceKillAfter: 2 ** 31 - 1,
    });
    expect(r).toMatchObject({ code: 0, timedOut: false, stdout: 'done\n' });
    expect(fs.existsSync(marker)).toBe(true);
  });
});
