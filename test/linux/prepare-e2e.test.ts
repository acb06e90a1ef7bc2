/**
 * End to end: a Codex-shaped ExecParams carrying Codex's `workspace_write` profile goes through
 * prepareExecRequest and spawnPrepared, and the rules are enforced on Linux.
 *
 * The probe is one shell command that tries to create a file and reports the outcome in its exit
 * code (0 = created, 3 = refused). Positive control: the same probe through a native (unsandboxed)
 * request must create the file outside the workspace. Sandboxed: creating a file outside the
 * workspace is refused and the file really is absent afterwards; creating one in the workspace
 * root succeeds.
 *
 * The "outside" directory lives under $HOME, not /tmp, because workspace_write makes /tmp and
 * $TMPDIR writable.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { spawnPrepared } from '../../lib/index';
import { pathToFileUri, permissionProfileToJson, workspaceWriteProfile } from '../../lib/permissions';
import { prepareExecRequest, type ExecParams, type PreparedExecRequest } from '../../lib/prepare';

const isLinux = process.platform === 'linux';

const PROBE = 'if (printf x > "$1") 2>/dev/null; then exit 0; else exit 3; fi';

interface Outcome {
  code: number | null;
  signal: string | null;
}

/** Run a prepared request to completion, whatever shape spawnPrepared's handle has. */
async function runToExit(prepared: PreparedExecRequest): Promise<Outcome> {
  const handle = (spawnPrepared as (p: PreparedExecRequest, o?: unknown) => unknown)(prepared);
  const h = (await Promise.resolve(handle)) as Record<string, unknown>;
  if (h && typeof h.code !== 'undefined' && !('exited' in h)) return { code: h.code as number | null, signal: (h.signal as string | null) ?? null };
  if (h && h.exited && typeof (h.exited as Promise<unknown>).then === 'function') {
    const info = (await h.exited) as Outcome;
    return { code: info.code, signal: info.signal ?? null };
  }
  if (h && typeof (h as { on?: unknown }).on === 'function') {
    return await new Promise<Outcome>((resolve, reject) => {
      (h as unknown as NodeJS.EventEmitter).once('error', reject);
      (h as unknown as NodeJS.EventEmitter).once('exit', (code: number | null, signal: string | null) => resolve({ code, signal }));
    });
  }
  throw new Error(`spawnPrepared returned an unexpected handle: ${Object.keys(h ?? {}).join(', ')}`);
}

let workspace: string;
let outside: string;

beforeAll(() => {
  workspace = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'ps-e2e-ws-')));
  outside = fs.realpathSync(fs.mkdtempSync(path.join(os.homedir(), '.ps-e2e-outside-')));
});
afterAll(() => {
  fs.rmSync(workspace, { recursive: true, force: true });
  fs.rmSync(outside, { recursive: true, force: true });
});

function params(target: string, sandboxed: boolean): ExecParams {
  return {
    processId: `e2e-${path.basename(target)}`,
    argv: ['/bin/sh', '-c', PROBE, 'probe', target],
    cwd: pathToFileUri(workspace),
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    pipeStdin: false,
    enforceManagedNetwork: false,
    ...(sandboxed
      ? {
          sandbox: {
            permissions: permissionProfileToJson(workspaceWriteProfile(), { uriPaths: true }),
            cwd: pathToFileUri(workspace),
            workspaceRoots: [pathToFileUri(workspace)],
            windowsSandboxLevel: 'disabled' as const,
            useLegacyLandlock: false,
          },
        }
      : {}),
  };
}

describe.runIf(isLinux)('prepareExecRequest → spawnPrepared enforces workspace_write (Linux)', () => {
  it('positive control: unsandboxed, the probe creates a file outside the workspace', async () => {
    const target = path.join(outside, 'control.txt');
    const prepared = await prepareExecRequest(params(target, false));
    expect(prepared.sandboxType).toBe('none');
    expect(await runToExit(prepared)).toEqual({ code: 0, signal: null });
    expect(fs.existsSync(target)).toBe(true);
  });

  it('sandboxed: a write outside the workspace is refused and the file is absent', async () => {
    const target = path.join(outside, 'escaped.txt');
    const prepared = await prepareExecRequest(params(target, true));
    expect(prepared.sandboxType).toBe('linuxSeccomp');
    expect(prepared.rules?.writeRoots.some((w) => outside.startsWith(w + path.sep) || outside === w)).toBe(false);
    expect(await runToExit(prepared)).toEqual({ code: 3, signal: null });
    expect(fs.existsSync(target)).toBe(false);
  });

  it('sandboxed: a write in the workspace root is allowed', async () => {
    const target = path.join(workspace, 'inside.txt');
    const prepared = await prepareExecRequest(params(target, true));
    expect(await runToExit(prepared)).toEqual({ code: 0, signal: null });
    expect(fs.existsSync(target)).toBe(true);
  });
});

describe.skipIf(isLinux)('prepare e2e', () => {
  it.skip('needs Linux: the enforcement under test is the Linux isolation engine', () => {});
});
