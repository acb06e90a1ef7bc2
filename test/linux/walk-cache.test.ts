/**
 * The planner's walk for nested repositories is cached between spawns and kept valid by
 * directory watches (lib/permissions/walk-cache.ts). What must hold: a change made between two
 * spawns, however it is made and however soon the next spawn follows, is seen by the next plan,
 * exactly as without the cache. Each case warms the cache first (and checks it is in use), makes
 * the change, then resolves and spawns at once.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { resolvePolicy } from '../../lib/permissions';
import { MAX_WATCHES, setWalkCacheBudget, walkCacheStats } from '../../lib/permissions/walk-cache';
import { caps, modePolicy } from '../helpers/capabilities';
import { makeScene, sh, type Scene } from '../helpers/sandbox';

function warm(ws: string): void {
  for (let i = 0; i < 3; i++) resolvePolicy({ filesystem: { write: [ws] } }, ws);
}

function protectedIn(ws: string, sub: string): string[] {
  return resolvePolicy({ filesystem: { write: [ws] } }, ws).readOnly.filter((p) => p.startsWith(path.join(ws, sub) + '/'));
}

/** A nested repository's hooks directory, made the way the case says. */
function makeRepo(dir: string): void {
  fs.mkdirSync(path.join(dir, '.git', 'hooks'), { recursive: true });
  fs.writeFileSync(path.join(dir, '.git', 'config'), '[core]\n');
}

describe.runIf(caps.linux)('the nested-repository walk, cached between spawns', () => {
  let scene: Scene;
  beforeEach(() => {
    scene = makeScene('walk');
    fs.mkdirSync(path.join(scene.ws, 'a', 'b', 'c'), { recursive: true });
    fs.mkdirSync(path.join(scene.ws, 'src', 'lib'), { recursive: true });
    fs.writeFileSync(path.join(scene.ws, 'src', 'lib', 'x.js'), '');
  });
  afterEach(() => {
    try {
      execFileSync('umount', ['-l', path.join(scene.ws, 'a', 'mnt')], { stdio: 'ignore' });
    } catch {
      // not mounted
    }
    scene.cleanup();
  });

  it('is cached and watched once the same workspace is planned again', () => {
    const before = walkCacheStats();
    warm(scene.ws);
    const after = walkCacheStats();
    expect(after.entries).toBeGreaterThan(before.entries);
    // The root, a, a/b, a/b/c, src, src/lib at least.
    expect(after.watches - before.watches).toBeGreaterThanOrEqual(6);
  });

  it('a repository made at the walk\'s deepest level right after a cached plan is protected by the next one', async () => {
    warm(scene.ws);
    expect(protectedIn(scene.ws, 'a')).toEqual([]); // control: nothing there yet
    makeRepo(path.join(scene.ws, 'a', 'b', 'c'));
    expect(protectedIn(scene.ws, 'a')).toEqual([path.join(scene.ws, 'a/b/c/.git/config'), path.join(scene.ws, 'a/b/c/.git/hooks')]);
  });

  it('a repository moved in by rename, and a directory swapped for another, are seen', () => {
    warm(scene.ws);
    const staging = path.join(scene.root, 'staging');
    makeRepo(staging);
    fs.renameSync(staging, path.join(scene.ws, 'src', 'lib', 'vendored'));
    expect(protectedIn(scene.ws, 'src')).toContain(path.join(scene.ws, 'src/lib/vendored/.git/hooks'));
    warm(scene.ws);
    // a/b swapped for a tree holding a repository one level down.
    const other = path.join(scene.root, 'other');
    makeRepo(path.join(other, 'c'));
    fs.renameSync(path.join(scene.ws, 'a', 'b'), path.join(scene.root, 'old-b'));
    fs.renameSync(other, path.join(scene.ws, 'a', 'b'));
    expect(protectedIn(scene.ws, 'a')).toContain(path.join(scene.ws, 'a/b/c/.git/hooks'));
    // And removed again: no longer listed (the cache does not keep what is gone).
    warm(scene.ws);
    fs.rmSync(path.join(scene.ws, 'a', 'b', 'c', '.git'), { recursive: true });
    expect(protectedIn(scene.ws, 'a')).toEqual([]);
  });

  it('a repository made in a node_modules package after a cached plan is protected by the next one', () => {
    fs.mkdirSync(path.join(scene.ws, 'node_modules', 'pkg'), { recursive: true });
    fs.mkdirSync(path.join(scene.ws, 'node_modules', '@scope'), { recursive: true });
    warm(scene.ws);
    const hits = walkCacheStats().hits;
    expect(protectedIn(scene.ws, 'node_modules')).toEqual([]); // control: nothing there yet, from the cache
    expect(walkCacheStats().hits).toBe(hits + 1);
    makeRepo(path.join(scene.ws, 'node_modules', 'pkg'));
    expect(protectedIn(scene.ws, 'node_modules')).toEqual([path.join(scene.ws, 'node_modules/pkg/.git/config'), path.join(scene.ws, 'node_modules/pkg/.git/hooks')]);
    warm(scene.ws);
    const staging = path.join(scene.root, 'scoped');
    makeRepo(staging);
    fs.renameSync(staging, path.join(scene.ws, 'node_modules', '@scope', 'scoped'));
    expect(protectedIn(scene.ws, 'node_modules')).toContain(path.join(scene.ws, 'node_modules/@scope/scoped/.git/hooks'));
  });

  // Root reads a mode-000 directory anyway (DAC override), so there the check is that the chmod
  // drops the cached walk; unprivileged, that the next plan protects the directory whole.
  it('a directory made unreadable after a cached plan is not served from the cache', () => {
    warm(scene.ws);
    const hits = walkCacheStats().hits;
    fs.chmodSync(path.join(scene.ws, 'a'), 0);
    const r = resolvePolicy({ filesystem: { write: [scene.ws] } }, scene.ws);
    fs.chmodSync(path.join(scene.ws, 'a'), 0o755);
    expect(walkCacheStats().hits, 'the walk after the chmod came from the cache').toBe(hits);
    if (!caps.root) {
      expect(r.readOnly).toContain(path.join(scene.ws, 'a'));
      expect(r.gaps?.join('\n')).toContain(`unreadable directories in ${scene.ws} are protected whole (read-only): ${path.join(scene.ws, 'a')}`);
    }
    // Control: readable again, nothing is protected there and no gap.
    const c = resolvePolicy({ filesystem: { write: [scene.ws] } }, scene.ws);
    expect(c.readOnly).not.toContain(path.join(scene.ws, 'a'));
    expect((c.gaps ?? []).join('\n')).not.toContain('unreadable directories');
  });

  it.skipIf(!caps.root)('a file system mounted inside the workspace is seen (root: mount)', () => {
    warm(scene.ws);
    const mnt = path.join(scene.ws, 'a', 'mnt');
    fs.mkdirSync(mnt);
    warm(scene.ws);
    execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', mnt]);
    // Made inside the new mount before the next plan; only the mount table says anything changed
    // for the directories the walk watched (the mkdir below is in the new file system).
    makeRepo(path.join(mnt, 'r'));
    expect(protectedIn(scene.ws, 'a')).toContain(path.join(scene.ws, 'a/mnt/r/.git/hooks'));
  });

  it.skipIf(!caps.userns)('spawns in one workspace reuse the walk: their own placeholders coming and going are not a change', async () => {
    // .codex, .agents and .aws are missing here: every isolated run holds them with placeholders
    // made and removed at the root, which the walk does not enter.
    const policy = modePolicy('isolated', { filesystem: { write: [scene.ws] } });
    const before = walkCacheStats().hits;
    for (let i = 0; i < 5; i++) expect((await sh('true', { cwd: scene.ws, policy })).code).toBe(0);
    expect(walkCacheStats().hits - before).toBeGreaterThanOrEqual(3);
    // Control: a real change at the root still drops it (the next plan walks again).
    fs.mkdirSync(path.join(scene.ws, 'newdir'));
    const mid = walkCacheStats().hits;
    expect((await sh('true', { cwd: scene.ws, policy })).code).toBe(0);
    expect(walkCacheStats().hits).toBe(mid);
  });

  it('a full watch budget makes room by dropping the walk used longest ago, which is then walked afresh', () => {
    const other = makeScene('walk-b');
    try {
      fs.mkdirSync(path.join(other.ws, 'x', 'y'), { recursive: true });
      warm(scene.ws);
      const w1 = walkCacheStats().watches;
      // Room for only two more watches: the other workspace's walk needs three (its root, x, x/y).
      setWalkCacheBudget(w1 + 2);
      warm(other.ws);
      expect(walkCacheStats().watches).toBeLessThanOrEqual(w1 + 2);
      // The new walk is cached (it hits)...
      const hits = walkCacheStats().hits;
      protectedIn(other.ws, 'x');
      expect(walkCacheStats().hits).toBe(hits + 1);
      // ...and the dropped one is still right: walked afresh, it sees a repository made since.
      makeRepo(path.join(scene.ws, 'a', 'b', 'c'));
      expect(protectedIn(scene.ws, 'a')).toEqual([path.join(scene.ws, 'a/b/c/.git/config'), path.join(scene.ws, 'a/b/c/.git/hooks')]);
    } finally {
      setWalkCacheBudget(MAX_WATCHES);
      other.cleanup();
    }
  });

  it.skipIf(!caps.userns)('end to end (isolated mode): hooks of a repository made between two spawns cannot be written', async () => {
    const policy = modePolicy('isolated', { filesystem: { write: [scene.ws] } });
    for (let i = 0; i < 3; i++) expect((await sh('true', { cwd: scene.ws, policy })).code).toBe(0);
    makeRepo(path.join(scene.ws, 'a', 'b', 'c'));
    const r = await sh('echo evil > a/b/c/.git/hooks/pre-commit; echo h=$?; echo ok > a/b/c/file; echo f=$?', { cwd: scene.ws, policy });
    expect(r.stdout).toMatch(/^h=[1-9]\d*\nf=0\n$/);
    expect(fs.existsSync(path.join(scene.ws, 'a/b/c/.git/hooks/pre-commit'))).toBe(false);
    expect(fs.readFileSync(path.join(scene.ws, 'a/b/c/file'), 'utf8')).toBe('ok\n'); // control
  });
});
