/**
 * changes: 'stage' from the CLI and from later processes (isolated mode): `run --changes stage`
 * says on stderr where the layer is and how to apply or discard it, and its --json lists the
 * changes; another process lists the layer (`changes`, listChanges), applies a subset (`apply`,
 * openStagedChanges: only those paths change, as an unsandboxed run changes them; a path changed
 * outside is refused with nothing applied) and discards it (the layer gone, the tree unchanged).
 * A directory that is not a finished layer is refused.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { loadLinuxNative } from '../../lib/native';
import { overlayAvailable } from '../../lib/platform/linux/caches';
import { createLinuxBackend } from '../../lib/platform/linux';
import { DIST_INDEX, NODE } from '../helpers/sandbox';
import { treeHash, treeListing } from '../helpers/tree-hash';

const CLI = path.resolve(DIST_INDEX, '..', 'cli.js');
const ENV = { PATH: '/usr/local/bin:/usr/bin:/bin', LANG: 'C.UTF-8', HOME: '/nonexistent' };

/** Creates, modifies, deletes, renames, chmods and symlinks. */
const WORK = [
  'echo new > edit.txt',
  'rm gone.txt',
  'echo created > new.txt',
  'mv move.txt moved.txt',
  'chmod 755 script.sh',
  'ln -s keep.txt newlink',
  'mkdir -p deep/er && echo d > deep/er/f',
].join(' && ');

/** Why this host cannot stage in isolated mode (then every test here is skipped, loudly), or ''. */
let skip = '';
beforeAll(() => {
  const [maj, min] = os.release().split('.').map(Number) as [number, number];
  if (process.platform !== 'linux') skip = 'staging is Linux only';
  else if (!createLinuxBackend(loadLinuxNative()).probe().features.isolatedMode) skip = 'isolated mode is unavailable on this host';
  else if (maj < 5 || (maj === 5 && min < 11)) skip = `overlayfs in a user namespace needs Linux 5.11+, this is ${os.release()}`;
  else if (!overlayAvailable()) skip = 'this kernel has no overlayfs';
  if (skip) console.warn(`[stage-cli] SKIPPING as ${os.userInfo().username}: ${skip}`);
});

let base: string;
let ws: string;
beforeEach(() => {
  base = fs.mkdtempSync('/var/tmp/psb-stage-cli-');
  fs.chmodSync(base, 0o755);
  ws = path.join(base, 'ws');
  fs.mkdirSync(ws);
  fs.writeFileSync(path.join(ws, 'keep.txt'), 'keep');
  fs.writeFileSync(path.join(ws, 'edit.txt'), 'old contents');
  fs.writeFileSync(path.join(ws, 'gone.txt'), 'to be deleted');
  fs.writeFileSync(path.join(ws, 'move.txt'), 'to be renamed');
  fs.writeFileSync(path.join(ws, 'script.sh'), '#!/bin/sh\n');
  fs.chmodSync(path.join(ws, 'script.sh'), 0o644);
});
afterEach(() => {
  // (the native walk: a layer's overlay work dirs are 000 as an unprivileged user, which fs.rmSync cannot enter)
  loadLinuxNative().removeTree(path.dirname(base), path.basename(base));
  fs.rmSync(base, { recursive: true, force: true });
});

const cli = (...args: string[]) => spawnSync(NODE, [CLI, ...args], { encoding: 'utf8', env: ENV, cwd: base });
/** The library, from a process of its own: `body` gets `lib` and `dir`, prints JSON. */
const lib = (body: string, dir: string) =>
  spawnSync(NODE, ['-e', `const lib = require(${JSON.stringify(DIST_INDEX)}); const dir = process.argv[1]; (async () => { ${body} })().catch((e) => console.log(JSON.stringify({ code: e.code, message: e.message })))`, dir], {
    encoding: 'utf8',
    env: ENV,
  });

/** `run --changes stage` of WORK into the layer `dir`, through the CLI, with --json on fd 1. */
function stagedRun(dir: string) {
  const r = cli('run', '--mode', 'isolated', '--write', ws, '--cwd', ws, '--changes', 'stage', '--changes-dir', dir, '--json-fd', '1', '--', '/bin/sh', '-c', WORK);
  expect(r.status, r.stderr).toBe(0);
  return { r, report: JSON.parse(r.stdout.trim().split('\n').pop()!) as { enforcement: { changes: string }; changes: { mode: string; dir: string; list: Array<{ path: string; kind: string; type: string }> } } };
}

const rel = (list: Array<{ path: string; kind: string; type: string }>) => list.map((e) => [path.relative(ws, e.path), e.kind, e.type]);
const EXPECTED = [
  ['deep', 'created', 'directory'],
  ['deep/er', 'created', 'directory'],
  ['deep/er/f', 'created', 'file'],
  ['edit.txt', 'modified', 'file'],
  ['gone.txt', 'deleted', 'file'],
  ['move.txt', 'deleted', 'file'],
  ['moved.txt', 'created', 'file'],
  ['new.txt', 'created', 'file'],
  ['newlink', 'created', 'symlink'],
  ['script.sh', 'modified', 'file'],
];

/** WORK unsandboxed in a copy of the workspace: the listing apply must produce (for the paths it applies). */
function unsandboxed(): Map<string, string> {
  const copy = path.join(base, 'copy');
  fs.cpSync(ws, copy, { recursive: true, verbatimSymlinks: true });
  execFileSync('/bin/sh', ['-c', WORK], { cwd: copy, env: ENV });
  return byName(treeListing(copy));
}
/** A tree listing (treeListing) keyed by the relative name. */
const byName = (lines: string[]) => new Map(lines.map((l) => [l.split(' ')[0]!, l]));

describe('staged changes from the CLI and from a later process', () => {
  it('run --changes stage names the layer on stderr and lists it in --json; the tree is unchanged', (ctx) => {
    if (skip) ctx.skip();
    const before = treeHash(ws);
    const dir = path.join(base, 'layer');
    const { r, report } = stagedRun(dir);
    expect(treeHash(ws)).toBe(before);
    expect(report.enforcement.changes).toBe('stage');
    expect(report.changes.mode).toBe('stage');
    expect(report.changes.dir).toBe(dir);
    expect(rel(report.changes.list)).toEqual(EXPECTED);
    expect(r.stderr).toContain(`10 change(s) staged in ${dir}`);
    expect(r.stderr).toContain(`process-sandbox apply ${dir}`);
    expect(r.stderr).toContain(`process-sandbox discard ${dir}`);
    expect(fs.existsSync(dir)).toBe(true);
    expect(cli('discard', dir).status).toBe(0);
    expect(fs.existsSync(dir)).toBe(false);
    expect(treeHash(ws)).toBe(before);
  });

  it('another process lists the layer, applies a subset (only those paths change, as unsandboxed), then discards it', (ctx) => {
    if (skip) ctx.skip();
    const before = byName(treeListing(ws));
    const want = unsandboxed();
    const dir = path.join(base, 'layer');
    stagedRun(dir);
    // The list, from the CLI (text and JSON) and from the library.
    const text = cli('changes', dir);
    expect(text.status, text.stderr).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`^modified +file +${path.join(ws, 'edit.txt')}$`, 'm'));
    const json = cli('changes', '--json', dir);
    expect(json.status, json.stderr).toBe(0);
    expect(rel(JSON.parse(json.stdout) as Array<{ path: string; kind: string; type: string }>)).toEqual(EXPECTED);
    const listed = lib(`console.log(JSON.stringify(await lib.openStagedChanges(dir).list()))`, dir);
    expect(rel(JSON.parse(listed.stdout) as Array<{ path: string; kind: string; type: string }>)).toEqual(EXPECTED);
    expect(byName(treeListing(ws))).toEqual(before);

    // A subset through the CLI: a modified file, a deletion, and a directory with what is below it
    // (relative paths are taken from the current directory).
    const applied = cli('apply', dir, path.join(ws, 'edit.txt'), path.join(ws, 'gone.txt'), path.relative(base, path.join(ws, 'deep')));
    expect(applied.status, applied.stderr).toBe(0);
    const chosen = ['edit.txt', 'gone.txt', 'deep', 'deep/er', 'deep/er/f'];
    const now = byName(treeListing(ws));
    for (const name of new Set([...before.keys(), ...want.keys()])) {
      const expected = chosen.includes(name) ? want.get(name) : before.get(name);
      expect(now.get(name), name).toEqual(expected);
    }
    // Then the rename, through the library in yet another process. Its new name is a copy-up in
    // a directory the first apply changed: that apply (kept in the layer) is not taken for a
    // change made outside.
    const renamed = [path.join(ws, 'moved.txt'), path.join(ws, 'move.txt')];
    const second = lib(`await lib.openStagedChanges(dir).apply(${JSON.stringify(renamed)}); console.log(JSON.stringify(await lib.listChanges(dir)))`, dir);
    expect(second.stdout).not.toMatch(/"code"/);
    chosen.push('moved.txt', 'move.txt');
    expect(rel(JSON.parse(second.stdout) as Array<{ path: string; kind: string; type: string }>)).toEqual(EXPECTED.filter((e) => !chosen.includes(e[0]!)));
    expect(byName(treeListing(ws)).get('moved.txt')).toEqual(want.get('moved.txt'));
    expect(fs.existsSync(path.join(ws, 'move.txt'))).toBe(false);

    // Discard: the layer goes, the tree stays as it is.
    const mid = treeHash(ws);
    const discarded = cli('discard', dir);
    expect(discarded.status, discarded.stderr).toBe(0);
    expect(fs.existsSync(dir)).toBe(false);
    expect(treeHash(ws)).toBe(mid);
    expect(fs.existsSync(path.join(ws, 'new.txt'))).toBe(false); // never applied
  });

  it('apply from another process refuses a path changed outside during the run: nothing applied, the outside change kept', (ctx) => {
    if (skip) ctx.skip();
    const dir = path.join(base, 'layer');
    stagedRun(dir);
    fs.writeFileSync(path.join(ws, 'edit.txt'), 'outside');
    const mid = treeHash(ws);
    const r = cli('apply', dir);
    expect(r.status).toBe(125);
    expect(r.stderr).toContain('changed outside the sandbox');
    expect(r.stderr).toContain(path.join(ws, 'edit.txt'));
    expect(treeHash(ws)).toBe(mid);
    const viaLib = lib(`await lib.openStagedChanges(dir).apply(); console.log('applied')`, dir);
    expect(JSON.parse(viaLib.stdout)).toMatchObject({ code: 'ECHANGED_OUTSIDE' });
    expect(treeHash(ws)).toBe(mid);
    // Control: a path nobody else changed is applied.
    expect(cli('apply', dir, path.join(ws, 'new.txt')).status).toBe(0);
    expect(fs.readFileSync(path.join(ws, 'new.txt'), 'utf8')).toBe('created\n');
    expect(fs.readFileSync(path.join(ws, 'edit.txt'), 'utf8')).toBe('outside');
    expect(cli('discard', dir).status).toBe(0);
  });

  it('a directory that is not a finished staged layer is refused, and nothing changes', (ctx) => {
    if (skip) ctx.skip();
    const before = treeHash(ws);
    const journal = path.join(base, 'journal');
    const rec = cli('run', '--mode', 'isolated', '--write', ws, '--cwd', ws, '--changes', 'record', '--changes-dir', journal, '--', '/bin/sh', '-c', 'echo x > new.txt');
    expect(rec.status, rec.stderr).toBe(0);
    expect(cli('revert', journal).status).toBe(0);
    expect(treeHash(ws)).toBe(before);
    const unfinished = path.join(base, 'unfinished');
    fs.mkdirSync(unfinished, { mode: 0o700 });
    fs.mkdirSync(path.join(unfinished, 'upper', '0'), { recursive: true });
    fs.writeFileSync(path.join(unfinished, 'meta.json'), JSON.stringify({ version: 1, mode: 'stage', roots: [ws], startNs: '0', startTicked: true }));
    const cases: Array<[string, RegExp]> = [
      [ws, /not a finished staged layer: no readable meta\.json/],
      [path.join(base, 'nope'), /not a finished staged layer: no such directory/],
      [journal, /holds a 'record' journal/],
      [unfinished, /its run has not ended/],
    ];
    for (const [dir, why] of cases) {
      for (const sub of ['apply', 'discard']) {
        const r = cli(sub, dir);
        expect(r.status, `${sub} ${dir}`).toBe(125);
        expect(r.stderr).toMatch(why);
      }
      const viaLib = lib(`lib.openStagedChanges(dir); console.log('opened')`, dir);
      expect(JSON.parse(viaLib.stdout)).toMatchObject({ code: 'EINVALID_ARGUMENT', message: expect.stringMatching(why) });
    }
    // A layer someone else may write is no layer to apply from.
    const open = path.join(base, 'open');
    stagedRun(open);
    fs.chmodSync(open, 0o777);
    const r = cli('apply', open);
    expect(r.status).toBe(125);
    expect(r.stderr).toMatch(/no one else may write/);
    expect(treeHash(ws)).toBe(before);
    expect(fs.existsSync(path.join(unfinished, 'meta.json'))).toBe(true); // discard refused: left as it was
    // And revert refuses a staged layer, naming what to do with it.
    fs.chmodSync(open, 0o700);
    const rv = cli('revert', open);
    expect(rv.status).toBe(125);
    expect(rv.stderr).toMatch(/holds a staged layer, not a journal to revert: apply or discard it/);
    expect(cli('discard', open).status).toBe(0);
    expect(treeHash(ws)).toBe(before);
  });
});
