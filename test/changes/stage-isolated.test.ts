/**
 * changes: 'stage' and 'record' in isolated mode (an overlay over each writable root, its upper
 * layer in a host directory the command cannot reach). A command that creates, modifies,
 * deletes, renames, chmods and symlinks (and writes a large file) leaves the real workspace
 * unchanged while it runs and after; list() names its changes exactly; apply() makes the tree
 * what an unsandboxed run of the same command makes; apply(subset) and discard() do what they
 * say; a change made outside during the run is refused, naming it, and kept; carve-outs stay
 * read-only; record applies at the end and revert() restores the tree identical.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { BackendProcess } from '../../lib/backend';
import { prepareStageLayer } from '../../lib/changes/overlay-layer';
import type { ChangesOptions } from '../../lib/changes/types';
import { SandboxError } from '../../lib/errors';
import { run as runSandboxed } from '../../lib/index';
import { loadLinuxNative, type LinuxNative } from '../../lib/native';
import { overlayAvailable } from '../../lib/platform/linux/caches';
import { resolvePolicy } from '../../lib/permissions';
import { createLinuxBackend } from '../../lib/platform/linux';
import type { SandboxPolicy } from '../../lib/policy-types';
import { treeHash, treeListing } from '../helpers/tree-hash';

const native: LinuxNative = loadLinuxNative();
const backend = createLinuxBackend(native);
const ENV = { PATH: '/usr/local/bin:/usr/bin:/bin', LANG: 'C.UTF-8', HOME: '/nonexistent' };

/** Starts `script` (sh -c) sandboxed in isolated mode with `changes`; stdin stays open until end(). */
function start(ws: string, script: string, changes: ChangesOptions, policy: Partial<SandboxPolicy> = {}) {
  const rules = resolvePolicy({ mode: 'isolated', filesystem: { write: [ws] }, ...policy } as SandboxPolicy, ws);
  const p: BackendProcess = backend.spawn({ file: '/bin/sh', argv: ['sh', '-c', script], env: ENV, cwd: ws, stdio: ['pipe', 'pipe', 'pipe'], rules, changes });
  if (p.changes) made.push(p.changes.dir);
  let out = '';
  (p.stdio[1] as Readable).on('data', (d) => (out += d));
  (p.stdio[2] as Readable).on('data', (d) => (out += d));
  const until = (mark: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => (out.includes(mark) ? resolve() : undefined);
      (p.stdio[1] as Readable).on('data', check);
      p.exited.then(() => (out.includes(mark) ? resolve() : reject(new Error(`exited before "${mark}": ${out}`))), reject);
      check();
    });
  // The output streams end once everything the command wrote was read (the exit can come first).
  const drained = Promise.all([1, 2].map((i) => new Promise((resolve) => (p.stdio[i] as Readable).once('close', resolve))));
  const end = async () => {
    (p.stdio[0] as Writable).end();
    const e = await p.exited;
    await drained;
    await p.changes!.settled;
    return { ...e, out };
  };
  return { p, until, end, output: () => out };
}

/** The workload: every kind of change, then "ready", then it waits for stdin to close. */
const WORK = [
  'echo new > edit.txt',
  'rm gone.txt',
  'echo created > new.txt',
  'mv move.txt moved.txt',
  'chmod 755 script.sh',
  'ln -s keep.txt newlink',
  'rm -rf sub && mkdir sub && echo again > sub/other.txt',
  'mkdir -p deep/er && echo d > deep/er/f',
  'rm -rf nest && mkdir -p nest/inner && echo z > nest/inner/z',
  'mv tree tree2',
  'yes abcdefgh | head -c 3000000 > big.bin',
  'rmdir emptydir',
].join(' && ');
const SCRIPT = `${WORK} && echo ready && cat >/dev/null`;

function fill(ws: string) {
  fs.writeFileSync(path.join(ws, 'keep.txt'), 'keep');
  fs.writeFileSync(path.join(ws, 'edit.txt'), 'old contents');
  fs.writeFileSync(path.join(ws, 'gone.txt'), 'to be deleted');
  fs.writeFileSync(path.join(ws, 'move.txt'), 'to be renamed');
  fs.writeFileSync(path.join(ws, 'script.sh'), '#!/bin/sh\n', { mode: 0o644 });
  fs.chmodSync(path.join(ws, 'script.sh'), 0o644);
  fs.mkdirSync(path.join(ws, 'sub'));
  fs.writeFileSync(path.join(ws, 'sub', 'inner.txt'), 'inner');
  fs.mkdirSync(path.join(ws, 'tree'));
  fs.writeFileSync(path.join(ws, 'tree', 'leaf.txt'), 'leaf');
  fs.mkdirSync(path.join(ws, 'emptydir'));
  fs.mkdirSync(path.join(ws, 'nest', 'inner'), { recursive: true });
  fs.writeFileSync(path.join(ws, 'nest', 'inner', 'x'), 'x');
  fs.symlinkSync('keep.txt', path.join(ws, 'link'));
}

/** What the workload changes, relative to the workspace (renames: deleted + created). */
const EXPECTED = [
  ['big.bin', 'created', 'file'],
  ['deep', 'created', 'directory'],
  ['deep/er', 'created', 'directory'],
  ['deep/er/f', 'created', 'file'],
  ['edit.txt', 'modified', 'file'],
  ['emptydir', 'deleted', 'directory'],
  ['gone.txt', 'deleted', 'file'],
  ['move.txt', 'deleted', 'file'],
  ['moved.txt', 'created', 'file'],
  ['nest/inner/x', 'deleted', 'file'],
  ['nest/inner/z', 'created', 'file'],
  ['new.txt', 'created', 'file'],
  ['newlink', 'created', 'symlink'],
  ['script.sh', 'modified', 'file'],
  ['sub/inner.txt', 'deleted', 'file'],
  ['sub/other.txt', 'created', 'file'],
  ['tree', 'deleted', 'directory'],
  ['tree/leaf.txt', 'deleted', 'file'],
  ['tree2', 'created', 'directory'],
  ['tree2/leaf.txt', 'created', 'file'],
];

let base: string;
let ws: string;

/** Why this host cannot stage in isolated mode (then every test here is skipped, loudly), or ''. */
let skip = '';
beforeAll(() => {
  const [maj, min] = os.release().split('.').map(Number) as [number, number];
  if (!backend.probe().features.isolatedMode) skip = 'isolated mode is unavailable on this host';
  else if (maj < 5 || (maj === 5 && min < 11)) skip = `overlayfs in a user namespace needs Linux 5.11+, this is ${os.release()}`;
  else if (!overlayAvailable()) skip = 'this kernel has no overlayfs';
  if (skip) console.warn(`[stage-isolated] SKIPPING as ${os.userInfo().username}: ${skip}`);
});

beforeEach(() => {
  base = fs.mkdtempSync('/var/tmp/psb-stage-');
  fs.chmodSync(base, 0o755);
  ws = path.join(base, 'ws');
  fs.mkdirSync(ws);
  fill(ws);
});
/** The layers (and journals) the runs of a test made, wherever they are: removed after it. */
const made: string[] = [];
afterEach(() => {
  for (const d of [base, ...made.splice(0)]) fs.rmSync(d, { recursive: true, force: true });
});

const rel = (entries: Array<{ path: string; kind: string; type: string }>) => entries.map((e) => [path.relative(ws, e.path), e.kind, e.type]);

/** The same script, unsandboxed, in a copy of the original workspace: what apply() must produce. */
function unsandboxedResult(): string[] {
  const copy = path.join(base, 'copy');
  fs.cpSync(ws, copy, { recursive: true, verbatimSymlinks: true });
  execFileSync('/bin/sh', ['-c', WORK], { cwd: copy, env: ENV });
  return treeListing(copy);
}

describe('changes in isolated mode', () => {
  it('stage: the real tree is unchanged while it runs and after; list() is exact; apply() gives the unsandboxed result', async (ctx) => {
    if (skip) ctx.skip();
    const before = treeHash(ws);
    const want = unsandboxedResult();
    const run = start(ws, SCRIPT, { mode: 'stage' });
    await run.until('ready');
    expect(treeHash(ws)).toBe(before); // while it runs
    const r = await run.end();
    expect(r.code, r.out).toBe(0);
    expect(treeHash(ws)).toBe(before); // after
    expect(rel(await run.p.changes!.list())).toEqual(EXPECTED);
    await run.p.changes!.apply!();
    expect(treeListing(ws)).toEqual(want);
    expect(await run.p.changes!.list()).toEqual([]);
    await run.p.changes!.discard!();
  });

  it('stage: apply(subset) applies those (and the directories they need), list() keeps the rest; discard() leaves the tree identical', async (ctx) => {
    if (skip) ctx.skip();
    const before = treeListing(ws);
    const run = start(ws, SCRIPT, { mode: 'stage' });
    expect((await run.end()).code).toBe(0);
    const c = run.p.changes!;
    // A path chooses the changes at or below it (`deep`: the directories and the file in them).
    await c.apply!([path.join(ws, 'new.txt'), path.join(ws, 'deep'), path.join(ws, 'gone.txt')]);
    expect(fs.readFileSync(path.join(ws, 'new.txt'), 'utf8')).toBe('created\n');
    expect(fs.readFileSync(path.join(ws, 'deep/er/f'), 'utf8')).toBe('d\n');
    expect(fs.existsSync(path.join(ws, 'gone.txt'))).toBe(false);
    expect(fs.readFileSync(path.join(ws, 'edit.txt'), 'utf8')).toBe('old contents');
    const applied = ['deep', 'deep/er', 'deep/er/f', 'gone.txt', 'new.txt'];
    expect(rel(await c.list())).toEqual(EXPECTED.filter((e) => !applied.includes(e[0]!)));
    // An unknown path is refused, and nothing of it is applied.
    await expect(c.apply!([path.join(ws, 'nope')])).rejects.toMatchObject({ code: 'EINVALID_ARGUMENT' });
    // The apply is journaled: reverting it restores the original tree exactly.
    const mid = treeListing(ws);
    await c.revert!();
    expect(treeListing(ws)).toEqual(before);
    await c.apply!([path.join(ws, 'new.txt')]);
    const after = treeListing(ws);
    await c.discard!();
    expect(treeListing(ws)).toEqual(after);
    expect(mid).not.toEqual(after);
    expect(fs.existsSync(c.dir)).toBe(false);
  });

  it('stage: discard() leaves the tree identical and removes the staged layer', async (ctx) => {
    if (skip) ctx.skip();
    const before = treeHash(ws);
    const run = start(ws, SCRIPT, { mode: 'stage' });
    expect((await run.end()).code).toBe(0);
    const dir = run.p.changes!.dir;
    expect(fs.existsSync(path.join(dir, 'upper'))).toBe(true);
    await run.p.changes!.discard!();
    expect(treeHash(ws)).toBe(before);
    expect(fs.existsSync(dir)).toBe(false);
  });

  it('stage: a hostile command cannot read or write the layer; the workspace stays writable (control)', async (ctx) => {
    if (skip) ctx.skip();
    const layer = path.join(base, 'layer');
    const tries = [
      `ls ${layer} >/dev/null 2>&1 && echo LISTED`,
      `cat ${layer}/upper/0/edit.txt 2>/dev/null && echo READ`,
      `echo evil > ${layer}/upper/0/evil.txt 2>/dev/null && echo WROTE`,
      `echo evil > ${layer}/upper/0/edit.txt 2>/dev/null && echo WROTE2`,
      `mkdir ${layer}/upper/0/x 2>/dev/null && echo MADE`,
      `ls /proc/1/root/${layer} >/dev/null 2>&1 && echo VIAPROC`,
    ].join('; ');
    fs.writeFileSync(path.join(base, 'outside.txt'), 'readable outside\n');
    const run = start(ws, `echo mine > edit.txt && cat ${base}/outside.txt && ${tries}; echo done`, { mode: 'stage', dir: layer });
    const r = await run.end();
    expect(r.out).toContain('readable outside'); // control: reads outside the layer work
    expect(r.out).toContain('done');
    for (const word of ['LISTED', 'READ', 'WROTE', 'MADE', 'VIAPROC']) expect(r.out).not.toContain(word);
    // Outside: the layer holds only the command's own change, untouched.
    const upper = fs.readdirSync(path.join(layer, 'upper', '0'));
    expect(upper).toContain('edit.txt');
    expect(upper).not.toContain('evil.txt');
    expect(upper).not.toContain('x');
    expect(fs.readFileSync(path.join(layer, 'upper', '0', 'edit.txt'), 'utf8')).toBe('mine\n');
    expect(rel(await run.p.changes!.list())).toEqual([['edit.txt', 'modified', 'file']]);
    await run.p.changes!.discard!();
  });

  it('stage: a path changed outside during the run is refused by name, nothing is applied, and the outside change is kept', async (ctx) => {
    if (skip) ctx.skip();
    const run = start(ws, `echo inside > edit.txt && echo inside > keep.txt && echo x > new.txt && echo ready && cat >/dev/null`, { mode: 'stage' });
    await run.until('ready');
    fs.writeFileSync(path.join(ws, 'edit.txt'), 'outside');
    fs.unlinkSync(path.join(ws, 'keep.txt'));
    expect((await run.end()).code).toBe(0);
    const mid = treeListing(ws);
    const err = await run.p.changes!.apply!().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('ECHANGED_OUTSIDE');
    expect((err as SandboxError).detail?.paths).toEqual([path.join(ws, 'edit.txt'), path.join(ws, 'keep.txt')]);
    expect((err as SandboxError).message).toContain(path.join(ws, 'edit.txt'));
    expect(treeListing(ws)).toEqual(mid); // nothing applied
    expect(fs.readFileSync(path.join(ws, 'edit.txt'), 'utf8')).toBe('outside');
    // The paths nobody else changed can still be applied.
    await run.p.changes!.apply!([path.join(ws, 'new.txt')]);
    expect(fs.readFileSync(path.join(ws, 'new.txt'), 'utf8')).toBe('x\n');
    expect(fs.readFileSync(path.join(ws, 'edit.txt'), 'utf8')).toBe('outside');
    await run.p.changes!.discard!();
  });

  it('stage: carve-outs inside the root stay read-only, and placeholders are not listed as changes', async (ctx) => {
    if (skip) ctx.skip();
    fs.mkdirSync(path.join(ws, '.git', 'hooks'), { recursive: true });
    fs.writeFileSync(path.join(ws, '.git', 'config'), '[core]\n');
    fs.writeFileSync(path.join(ws, '.git', 'hooks', 'pre-commit'), '#!/bin/sh\n');
    const before = treeListing(ws);
    const run = start(ws, `(echo evil > .git/hooks/pre-commit) 2>/dev/null && echo HOOK; (echo evil > .git/config) 2>/dev/null && echo CONFIG; echo ok > ok.txt; echo done`, { mode: 'stage' });
    const r = await run.end();
    expect(r.out).toContain('done');
    expect(r.out).not.toContain('HOOK');
    expect(r.out).not.toContain('CONFIG');
    expect(treeListing(ws)).toEqual(before);
    expect(rel(await run.p.changes!.list())).toEqual([['ok.txt', 'created', 'file']]); // control: the root is writable
    await run.p.changes!.apply!();
    expect(fs.readFileSync(path.join(ws, '.git', 'hooks', 'pre-commit'), 'utf8')).toBe('#!/bin/sh\n');
    await run.p.changes!.discard!();
  });

  it('stage: deny-read paths inside the root stay unreadable on top of the overlay (control: a sibling is read)', async (ctx) => {
    if (skip) ctx.skip();
    fs.writeFileSync(path.join(ws, 'secret.txt'), 'top secret\n');
    fs.mkdirSync(path.join(ws, 'private'));
    fs.writeFileSync(path.join(ws, 'private', 'key'), 'k\n');
    const before = treeListing(ws);
    const script = `cat keep.txt; echo; cat secret.txt 2>/dev/null && echo SECRET; ls private 2>/dev/null && echo LISTED; (echo x > secret.txt) 2>/dev/null && echo WROTE; echo done`;
    const filesystem = { write: [ws], denyRead: [path.join(ws, 'secret.txt'), path.join(ws, 'private')] };
    const run = start(ws, script, { mode: 'stage' }, { filesystem } as Partial<SandboxPolicy>);
    const r = await run.end();
    expect(r.out).toContain('keep'); // control
    expect(r.out).toContain('done');
    for (const word of ['SECRET', 'LISTED', 'WROTE']) expect(r.out).not.toContain(word);
    expect(await run.p.changes!.list()).toEqual([]);
    expect(treeListing(ws)).toEqual(before);
    await run.p.changes!.discard!();
  });

  it('record: the writes reach the tree when the command ends; list() is exact; revert() restores it identical', async (ctx) => {
    if (skip) ctx.skip();
    const before = treeListing(ws);
    const want = unsandboxedResult();
    const jdir = path.join(base, 'journal');
    const run = start(ws, SCRIPT, { mode: 'record', dir: jdir });
    await run.until('ready');
    expect(treeListing(ws)).toEqual(before); // staged while it runs
    expect((await run.end()).code).toBe(0);
    expect(treeListing(ws)).toEqual(want);
    expect(run.p.changes!.dir).toBe(jdir);
    expect(rel(await run.p.changes!.list())).toEqual(EXPECTED);
    // The layer beside the journal goes (removed on the thread pool); the journal stays for a later revert.
    const layers = () => fs.readdirSync(base).filter((n) => n.startsWith('journal.layer-'));
    for (let i = 0; i < 200 && layers().length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(layers()).toEqual([]);
    await run.p.changes!.revert!();
    expect(treeListing(ws)).toEqual(before);
  });

  it('record: a path changed outside during the run stops the apply at the end, naming it; nothing reaches the roots', async (ctx) => {
    if (skip) ctx.skip();
    const run = start(ws, `echo inside > edit.txt && echo x > new.txt && echo ready && cat >/dev/null`, { mode: 'record', dir: path.join(base, 'journal') });
    await run.until('ready');
    fs.writeFileSync(path.join(ws, 'edit.txt'), 'outside');
    const mid = treeListing(ws);
    (run.p.stdio[0] as Writable).end();
    await run.p.exited;
    const err = await run.p.changes!.settled.then(
      () => null,
      (e: unknown) => e,
    );
    expect((err as SandboxError).code).toBe('ECHANGED_OUTSIDE');
    expect((err as SandboxError).detail?.paths).toEqual([path.join(ws, 'edit.txt')]);
    expect((err as SandboxError).message).toMatch(/stay staged in/);
    expect(treeListing(ws)).toEqual(mid);
  });

  it('stage: a name that is not UTF-8 is refused by name, nothing is applied, and discard() still works', async (ctx) => {
    if (skip) ctx.skip();
    const before = treeHash(ws);
    const run = start(ws, `echo x > new.txt && touch "$(printf 'bad\\377')"`, { mode: 'stage' });
    expect((await run.end()).code).toBe(0);
    await expect(run.p.changes!.list()).rejects.toMatchObject({ code: 'EUNSUPPORTED_POLICY', message: expect.stringMatching(/not UTF-8.*626164ff/) });
    await expect(run.p.changes!.apply!()).rejects.toMatchObject({ code: 'EUNSUPPORTED_POLICY' });
    expect(treeHash(ws)).toBe(before);
    await run.p.changes!.discard!();
    expect(fs.existsSync(run.p.changes!.dir)).toBe(false);
  });

  it('through run(): result.changes stages, lists and applies', async (ctx) => {
    if (skip) ctx.skip();
    const before = treeHash(ws);
    const want = unsandboxedResult();
    const r = await runSandboxed('/bin/sh', ['-c', WORK], { cwd: ws, env: ENV, policy: { mode: 'isolated', filesystem: { write: [ws] } }, changes: 'stage' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.enforcement.changes).toBe('stage');
    expect(treeHash(ws)).toBe(before);
    expect(rel(await r.changes!.list())).toEqual(EXPECTED);
    await r.changes!.apply();
    expect(treeListing(ws)).toEqual(want);
    await r.changes!.discard();
  });

  it('maxBytes with isolated-mode changes is refused, naming why, and nothing runs', async (ctx) => {
    if (skip) ctx.skip();
    for (const mode of ['stage', 'record'] as const) {
      let err: unknown;
      try {
        start(ws, 'echo ran > ran.txt', { mode, maxBytes: 1 << 20 });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(SandboxError);
      expect((err as SandboxError).code).toBe('EUNSUPPORTED_POLICY');
      expect((err as SandboxError).message).toMatch(/maxBytes cannot be held/);
    }
    expect(fs.existsSync(path.join(ws, 'ran.txt'))).toBe(false);
  });
});

describe('the staging layer refuses what the host cannot hold', () => {
  it('a layer dir on a file system without user xattrs', () => {
    const fake = { ...native, xattr: () => -95 } as LinuxNative;
    const layer = path.join(base, 'layer');
    expect(() => prepareStageLayer(fake, { mode: 'stage', dir: layer }, [ws])).toThrow(/without user xattrs \(errno 95\)/);
  });

  it('a layer dir inside a writable root, and a writable root that is a file', () => {
    expect(() => prepareStageLayer(native, { mode: 'stage', dir: path.join(ws, 'layer') }, [ws])).toThrow(/overlaps the writable root/);
    expect(() => prepareStageLayer(native, { mode: 'stage', dir: path.join(base, 'l2') }, [path.join(ws, 'keep.txt')])).toThrow(/is not a directory/);
  });
});
