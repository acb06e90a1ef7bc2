/**
 * options.changes is validated like every other option: bad input throws a SandboxError before
 * anything runs (the marker the command would make stays absent), each paired with the accepted
 * form. Also the CLI's parsing of --changes, --changes-dir and --changes-max-bytes.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { parseRunArgs } from '../../lib/cli/run-args';
import { tmpBase } from '../../lib/platform/linux/tmpdir';
import { SandboxError, spawn, type SpawnOptions } from '../../lib/index';
import { caps, MODES, modePolicy } from '../helpers/capabilities';

let dir: string;
let ws: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join('/var/tmp', 'psb-changes-opts-'));
  ws = path.join(dir, 'ws');
  fs.mkdirSync(ws);
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const policy = () => modePolicy('landlock', { filesystem: { write: [ws] } });

function refused(opts: SpawnOptions, name: string): SandboxError {
  const marker = path.join(ws, name);
  let err: unknown;
  try {
    spawn('/usr/bin/touch', [marker], { cwd: ws, ...opts }).kill('SIGKILL');
  } catch (e) {
    err = e;
  }
  expect(err, name).toBeInstanceOf(SandboxError);
  expect(fs.existsSync(marker), `${name}: nothing may run`).toBe(false);
  return err as SandboxError;
}

describe.runIf(caps.linux)('options.changes is validated before anything runs', () => {
  it.each([
    ['unknown-field', { mode: 'record', where: '/x' }, /unknown option: changes\.where/],
    ['bad-mode', { mode: 'snapshot' }, /changes\.mode must be 'record' or 'stage'/],
    ['bad-string', 'rewind', /changes\.mode must be 'record' or 'stage'/],
    ['not-object', 42, /options\.changes must be 'record', 'stage' or an object/],
    ['relative-dir', { mode: 'record', dir: 'journal' }, /changes\.dir must be an absolute path/],
    ['zero-max', { mode: 'record', maxBytes: 0 }, /maxBytes must be a positive integer/],
    ['negative-max', { mode: 'record', maxBytes: -5 }, /maxBytes must be a positive integer/],
    ['fraction-max', { mode: 'record', maxBytes: 1.5 }, /maxBytes must be a positive integer/],
  ])('%s', (name, changes, message) => {
    const e = refused({ policy: policy(), changes: changes as SpawnOptions['changes'] }, name);
    expect(e.code).toBe('EINVALID_ARGUMENT');
    expect(e.message).toMatch(message);
  });

  it('refuses a journal directory inside a writable root, or holding one', () => {
    expect(refused({ policy: policy(), changes: { mode: 'record', dir: path.join(ws, 'journal') } }, 'in-root').message).toMatch(/lies in the writable root/);
    expect(refused({ policy: policy(), changes: { mode: 'record', dir: ws } }, 'is-root').message).toMatch(/lies in the writable root/);
    expect(refused({ policy: policy(), changes: { mode: 'record', dir } }, 'holds-root').message).toMatch(/holds .*a root of the policy/);
  });

  it('refuses changes without a sandbox (policy: null)', () => {
    const e = refused({ policy: null, changes: 'record' }, 'no-policy');
    expect(e.code).toBe('EINVALID_ARGUMENT');
    expect(e.message).toMatch(/needs a sandbox/);
  });

  it('refuses a journal directory that is not empty', () => {
    const full = path.join(dir, 'full');
    fs.mkdirSync(full);
    fs.writeFileSync(path.join(full, 'something'), 'x');
    const landlock = MODES.find((m) => m.name === 'landlock')!;
    if (landlock.skip || !caps.metadataSupervisor) {
      console.warn(`[changes options] SKIPPING the non-empty directory check: ${landlock.skip ?? 'no path supervisor'}`);
      return;
    }
    expect(refused({ policy: policy(), changes: { mode: 'record', dir: full } }, 'full-dir').message).toMatch(/must be new or an empty directory/);
    expect(fs.readdirSync(full)).toEqual(['something']);
  });

  it.skipIf(MODES.find((m) => m.name === 'landlock')!.skip ?? (caps.metadataSupervisor ? undefined : 'no path supervisor'))(
    'refuses the default journal directory when a writable root holds it (the temp dir it is made in writable)',
    () => {
      const tmpRoot = modePolicy('landlock', { filesystem: { write: [ws, tmpBase()] } });
      expect(refused({ policy: tmpRoot, changes: 'record' }, 'default-in-root').message).toMatch(/default journal directory .* lies in the writable root/);
    },
  );

  it.skipIf(MODES.find((m) => m.name === 'isolated')!.skip)('isolated mode with changes and maxBytes is refused, naming why', () => {
    const e = refused({ policy: { mode: 'isolated', filesystem: { write: [ws] } }, changes: { mode: 'record', maxBytes: 1 << 20 } }, 'isolated');
    expect(e.code).toBe('EUNSUPPORTED_POLICY');
    expect(e.message).toMatch(/isolated mode: maxBytes cannot be held/);
  });
});

describe('CLI --changes options', () => {
  it('parses them and refuses bad ones', () => {
    const a = parseRunArgs(['--changes', 'record', '--changes-dir', '/var/tmp/j', '--changes-max-bytes=1000', '--', 'true']);
    expect([a.changes, a.changesDir, a.changesMaxBytes]).toEqual(['record', '/var/tmp/j', '1000']);
    expect(() => parseRunArgs(['--changes', 'rewind', '--', 'true'])).toThrow(/--changes must be one of record, stage/);
    expect(() => parseRunArgs(['--changes-dir', '/var/tmp/j', '--', 'true'])).toThrow(/--changes-dir needs --changes/);
    expect(() => parseRunArgs(['--changes', 'record', '--changes-max-bytes', '0', '--', 'true'])).toThrow(/positive number of bytes/);
    expect(() => parseRunArgs(['--no-sandbox', '--changes', 'record', '--', 'true'])).toThrow(/--no-sandbox/);
  });
});
