// planDarwinSpawn / darwinProbe / createDarwinBackend as pure logic (every OS; the host check for
// /usr/bin/sandbox-exec is overridden where the test is about something else).
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import {
  SANDBOX_EXEC_PATH,
  createDarwinBackend,
  darwinProbe,
  isNestedSandboxFailure,
  normaliseDarwinPath,
  planDarwinSpawn,
  seatbeltLaunchError,
  type PosixLaunchRequest,
} from '../../lib/platform/darwin';
import { SandboxError } from '../../lib/errors';
import type { BackendSpawnRequest } from '../../lib/backend';
import type { ResolvedRules } from '../../lib/rules';
import { makeRules } from '../helpers/rules';

const rules = (over: Partial<ResolvedRules> = {}): ResolvedRules => makeRules({ writeRoots: ['/Users/dev/proj'], readOnly: ['/Users/dev/proj/.git/hooks'], ...over });

function request(over: Partial<BackendSpawnRequest> = {}): BackendSpawnRequest {
  return {
    file: '/bin/echo',
    argv: ['echo', 'hello', '--', '-p'],
    env: { PATH: '/usr/bin:/bin', HOME: '/Users/dev' },
    cwd: '/Users/dev/proj',
    stdio: ['pipe', 'pipe', 'pipe'],
    rules: rules(),
    ...over,
  };
}

function thrown(fn: () => unknown): SandboxError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SandboxError);
    return err as SandboxError;
  }
  throw new Error('expected a SandboxError');
}

const available = { sandboxExecAvailable: true };

describe('planDarwinSpawn', () => {
  it('runs /usr/bin/sandbox-exec by absolute path with -p, -D params, --, then the program path and args', () => {
    const plan = planDarwinSpawn(request(), available);
    expect(plan.file).toBe('/usr/bin/sandbox-exec');
    expect(plan.argv[0]).toBe('/usr/bin/sandbox-exec');
    expect(plan.argv[1]).toBe('-p');
    expect(plan.argv[2].startsWith('(version 1)')).toBe(true);
    const dashdash = plan.argv.indexOf('--');
    expect(plan.argv.slice(3, dashdash).every((a) => a.startsWith('-D'))).toBe(true);
    expect(plan.argv.slice(3, dashdash)).toContain('-DWRITABLE_ROOT_0=/Users/dev/proj');
    expect(plan.argv.slice(dashdash + 1)).toEqual(['/bin/echo', 'hello', '--', '-p']);
    expect(plan.env).toEqual(request().env);
  });

  it('reports seatbelt enforcement and its gaps', () => {
    const { enforcement } = planDarwinSpawn(request(), available);
    expect(enforcement).toMatchObject({
      platform: 'darwin',
      sandboxed: true,
      mode: 'seatbelt',
      mechanisms: { seatbelt: SANDBOX_EXEC_PATH, network: 'none' },
      guarantees: {
        filesystemRead: 'not-requested',
        filesystemWrite: 'enforced',
        network: 'enforced',
        denyRead: 'not-requested',
        processIsolation: 'partial',
        treeTeardown: 'partial',
      },
    });
    expect(enforcement.gaps.some((g) => g.startsWith('processIsolation:'))).toBe(true);
    expect(enforcement.gaps.some((g) => g.startsWith('treeTeardown:'))).toBe(true);
  });

  it('full network is reported as not requested, proxy ports as a mechanism', () => {
    expect(planDarwinSpawn(request({ rules: rules({ network: { kind: 'full' } }) }), available).enforcement.guarantees.network).toBe(
      'not-requested',
    );
    const proxy = planDarwinSpawn(request({ rules: rules({ network: { kind: 'proxy', proxy: { allow: ['x.org'] } } }) }), {
      ...available,
      proxyPorts: [43128],
    });
    expect(proxy.enforcement.mechanisms.proxyPorts).toEqual([43128]);
    expect(proxy.argv[2]).toContain('(allow network-outbound (remote ip "localhost:43128"))');
  });

  it('a custom argv[0] is refused with EINVALID_ARGUMENT rather than dropped', () => {
    const err = thrown(() => planDarwinSpawn(request({ argv: ['my-name', 'x'] }), { ...available, arg0Customized: true }));
    expect(err.code).toBe('EINVALID_ARGUMENT');
    expect(err.message).toMatch(/custom argv\[0\].*sandbox-exec/);
  });

  it('without a custom argv[0] the same request is planned (positive control)', () => {
    expect(() => planDarwinSpawn(request({ argv: ['my-name', 'x'] }), { ...available, arg0Customized: false })).not.toThrow();
  });

  it('missing /usr/bin/sandbox-exec fails closed with ESEATBELT_UNAVAILABLE at plan time', () => {
    const err = thrown(() => planDarwinSpawn(request(), { sandboxExecAvailable: false }));
    expect(err.code).toBe('ESEATBELT_UNAVAILABLE');
    expect(err.message).toContain('/usr/bin/sandbox-exec');
  });

  it.runIf(process.platform !== 'darwin')('uses the real host check by default (this host has no sandbox-exec)', () => {
    expect(thrown(() => planDarwinSpawn(request())).code).toBe('ESEATBELT_UNAVAILABLE');
  });

  it.each(['isolated', 'landlock'] as const)('mode %s is Linux-only: EUNSUPPORTED_POLICY', (mode) => {
    expect(thrown(() => planDarwinSpawn(request({ rules: rules({ mode }) }), available)).code).toBe('EUNSUPPORTED_POLICY');
  });

  it('symlinked writable roots surface as ESYMLINK_ROOT', async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ps-darwin-plan-'));
    try {
      fs.mkdirSync(path.join(dir, 'real'));
      fs.symlinkSync('real', path.join(dir, 'link'));
      const req = request({ rules: rules({ writeRoots: [path.join(dir, 'link')], readOnly: [] }) });
      expect(thrown(() => planDarwinSpawn(req, available)).code).toBe('ESYMLINK_ROOT');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('policy: null plans a plain run of the program itself', () => {
    const plan = planDarwinSpawn(request({ rules: null, argv: ['custom0', 'a'] }), { sandboxExecAvailable: false });
    expect(plan.file).toBe('/bin/echo');
    expect(plan.argv).toEqual(['custom0', 'a']);
    expect(plan.enforcement).toMatchObject({ sandboxed: false, mode: 'none' });
  });

  it('tmp private with a directory: writable, TMPDIR points at it', () => {
    const plan = planDarwinSpawn(request({ rules: rules({ tmp: 'private' }) }), {
      ...available,
      privateTmpDir: '/private/var/folders/ab/T/ps-1',
    });
    expect(plan.env.TMPDIR).toBe('/private/var/folders/ab/T/ps-1');
    expect(plan.argv).toContain('-DWRITABLE_ROOT_1=/private/var/folders/ab/T/ps-1');
    expect(plan.enforcement.mechanisms.tmp).toBe('private-directory');
  });

  it('tmp host without an explicit directory uses the real path of the caller TMPDIR when it exists', () => {
    const plan = planDarwinSpawn(request({ rules: rules({ tmp: 'host' }), env: { TMPDIR: '/nonexistent-tmp-dir' } }), available);
    const writable = plan.argv.filter((a) => a.startsWith('-DWRITABLE_ROOT_'));
    expect(writable).toEqual([
      '-DWRITABLE_ROOT_0=/Users/dev/proj',
      '-DWRITABLE_ROOT_1=/private/tmp',
      '-DWRITABLE_ROOT_2=/private/var/tmp',
    ]);
  });

  it('protectedPaths is enforced when protected paths exist, and not-requested without any', () => {
    expect(planDarwinSpawn(request(), available).enforcement.guarantees.protectedPaths).toBe('enforced');
    expect(planDarwinSpawn(request({ rules: rules({ readOnly: [] }) }), available).enforcement.guarantees.protectedPaths).toBe(
      'not-requested',
    );
  });
});

describe('sandbox-exec failures after launch', () => {
  const nested = 'sandbox-exec: sandbox_apply: Operation not permitted\n';

  it('recognises the nested-sandbox failure', () => {
    expect(isNestedSandboxFailure(nested)).toBe(true);
    expect(isNestedSandboxFailure(Buffer.from(nested))).toBe(true);
    expect(isNestedSandboxFailure('bash: /x: Operation not permitted\n')).toBe(false);
  });

  it('maps it to ESEATBELT_UNAVAILABLE that says the host is already sandboxed', () => {
    const err = seatbeltLaunchError(nested)!;
    expect(err.code).toBe('ESEATBELT_UNAVAILABLE');
    expect(err.message).toMatch(/already runs inside a Seatbelt sandbox/);
    expect(err.syscall).toBe('sandbox_apply');
  });

  it('maps other sandbox-exec complaints, and leaves the command\'s own output alone', () => {
    expect(seatbeltLaunchError('sandbox-exec: unbound variable: foo\n')?.code).toBe('ESEATBELT_UNAVAILABLE');
    expect(seatbeltLaunchError('ls: /x: No such file or directory\n')).toBeNull();
  });
});

describe('darwinProbe', () => {
  it('reports the sandbox-exec facts and picks seatbelt only where it is usable', () => {
    const report = darwinProbe({ trial: false, addonLoaded: true });
    expect(report.features.sandboxExecPath).toBe('/usr/bin/sandbox-exec');
    expect(report.features.profiles).toBe('ok');
    expect(report.addonLoaded).toBe(true);
    if (process.platform === 'darwin' && report.features.sandboxExec === true) {
      expect(report.defaultMode).toBe('seatbelt');
    } else {
      expect(report.defaultMode).toBeNull();
    }
  });
});

describe('createDarwinBackend', () => {
  it('hands the plan to the launcher and attaches the enforcement report', () => {
    const seen: PosixLaunchRequest[] = [];
    class FakeProc {
      pid = 4242;
      stdio = [new PassThrough(), new PassThrough(), new PassThrough()];
      exited = Promise.resolve({ code: 0, signal: null });
      kill(): boolean {
        return true;
      }
    }
    const backend = createDarwinBackend(
      (launch) => {
        seen.push(launch);
        return new FakeProc();
      },
      () => ({ sandboxExecAvailable: true }),
    );
    const proc = backend.spawn(request());
    expect(seen).toHaveLength(1);
    expect(seen[0].file).toBe('/usr/bin/sandbox-exec');
    expect(seen[0].cwd).toBe('/Users/dev/proj');
    expect(proc.enforcement.mode).toBe('seatbelt');
    expect(proc.kill('SIGTERM')).toBe(true); // prototype methods survive
    expect(proc.pid).toBe(4242);
  });

  it('tmp private: creates a 0700 per-run directory, points TMPDIR at it, removes it after exit', async () => {
    const fs = await import('node:fs');
    let release!: () => void;
    const exited = new Promise<{ code: number; signal: null }>((resolve) => {
      release = () => resolve({ code: 0, signal: null });
    });
    let seen: PosixLaunchRequest | undefined;
    const backend = createDarwinBackend(
      (launch) => {
        seen = launch;
        return { pid: 1, stdio: [null, null, null], exited, kill: () => true };
      },
      () => ({ sandboxExecAvailable: true }),
    );
    backend.spawn(request({ rules: rules({ tmp: 'private' }) }));
    const dir = seen!.env.TMPDIR;
    expect(dir).toMatch(/process-sandbox-tmp-/);
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    expect(seen!.argv).toContain(`-DWRITABLE_ROOT_1=${normaliseDarwinPath(dir)}`); // same dir on macOS
    release();
    await exited;
    await new Promise((r) => setImmediate(r));
    expect(fs.existsSync(dir)).toBe(false);
  });

  it('tmp private: the directory is removed when planning fails', async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const parent = fs.realpathSync(os.tmpdir());
    // Only macOS-style names (process-sandbox-tmp-XXXXXX): Linux Landlock-mode runs of other test
    // files, running at the same time, make process-sandbox-tmp-<pid>-XXXXXX ones.
    const ours = (n: string) => n.startsWith('process-sandbox-tmp-') && !/^process-sandbox-tmp-\d+-/.test(n);
    const before = fs.readdirSync(parent).filter(ours).sort();
    const backend = createDarwinBackend(
      () => {
        throw new Error('must not be called');
      },
      () => ({ sandboxExecAvailable: true, arg0Customized: true }),
    );
    expect(thrown(() => backend.spawn(request({ rules: rules({ tmp: 'private' }) }))).code).toBe('EINVALID_ARGUMENT');
    const after = fs.readdirSync(parent).filter(ours).sort();
    expect(after.filter((n) => !before.includes(n)).map((n) => path.join(parent, n))).toEqual([]);
  });

  it('does not launch anything when planning fails', () => {
    let launched = 0;
    const backend = createDarwinBackend(
      () => {
        launched += 1;
        throw new Error('must not be called');
      },
      () => ({ sandboxExecAvailable: false }),
    );
    expect(thrown(() => backend.spawn(request())).code).toBe('ESEATBELT_UNAVAILABLE');
    expect(launched).toBe(0);
  });
});
