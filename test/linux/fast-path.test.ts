/**
 * The spawn fast path keeps state between spawns (the env scrub's verdicts, placeholders claimed
 * before the plan, the shared empty network namespace). Nothing a spawn decides from the
 * filesystem may carry over to the next one: each case below runs the same policy object twice
 * with the filesystem changed in between, and checks the second run against the change (plus a
 * positive control that the same run works once the change is undone).
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { run } from '../../lib/index';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, makeScene, sh, type Scene } from '../helpers/sandbox';

describe.runIf(caps.linux)('spawn after spawn: nothing decided from the filesystem carries over', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    beforeEach(() => {
      if (!skip) scene = makeScene(`fast-${mode}`);
    });
    afterEach(() => scene?.cleanup());

    it.skipIf(skip || mode !== 'isolated')('a protected path made a symlink between two spawns refuses the second', async () => {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      const first = await sh('echo ok > a; echo a=$?', { cwd: scene.ws, policy });
      expect(first.stdout).toBe('a=0\n');
      expect(fs.existsSync(`${scene.ws}/.agents`), 'the first run left no placeholder').toBe(false);
      // Between the runs: .agents (protected by default) becomes a link the command could re-point.
      fs.mkdirSync(`${scene.ws}/realagents`);
      fs.symlinkSync('realagents', `${scene.ws}/.agents`);
      const second = await sh('mkdir -p .agents; echo pwned > .agents/skills.md', { cwd: scene.ws, policy }).catch((e: unknown) => e);
      expect(second, 'refused before anything ran').toMatchObject({ name: 'SandboxError', code: 'EUNSUPPORTED_POLICY' });
      expect(fs.lstatSync(`${scene.ws}/.agents`).isSymbolicLink()).toBe(true);
      expect(fs.readdirSync(`${scene.ws}/realagents`)).toEqual([]);
      // Control: the link gone again, the same policy object runs.
      fs.unlinkSync(`${scene.ws}/.agents`);
      const third = await sh('echo ok > b; echo b=$?', { cwd: scene.ws, policy });
      expect(third.stdout).toBe('b=0\n');
    });

    it.skipIf(skip)('a protected path created between two spawns is neither writable nor removed as a placeholder', async () => {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      // First run: .codex is missing (isolated mode holds it with a placeholder for the run).
      const first = await sh('mkdir .codex 2>/dev/null; echo mk=$?', { cwd: scene.ws, policy });
      if (mode === 'isolated') expect(first.stdout).not.toBe('mk=0\n');
      fs.rmSync(`${scene.ws}/.codex`, { recursive: true, force: true }); // Landlock mode: carve-outs are a gap
      // Between the runs the user creates it for real.
      fs.mkdirSync(`${scene.ws}/.codex`);
      fs.writeFileSync(`${scene.ws}/.codex/config.toml`, 'model = "x"\n');
      const second = await sh('cat .codex/config.toml; echo evil >> .codex/config.toml 2>/dev/null; echo w=$?; echo ok > other; echo o=$?', { cwd: scene.ws, policy });
      expect(second.stdout).toMatch(/^model = "x"\n/);
      if (mode === 'isolated') expect(second.stdout).toMatch(/\nw=[1-9]\d*\n/);
      expect(second.stdout).toMatch(/\no=0\n$/); // positive control: the workspace is writable
      if (mode === 'isolated') expect(fs.readFileSync(`${scene.ws}/.codex/config.toml`, 'utf8')).toBe('model = "x"\n');
      // Outside: the real directory survived the run's cleanup (it is no placeholder).
      expect(fs.existsSync(`${scene.ws}/.codex/config.toml`)).toBe(true);
    });

    it.skipIf(skip)('a workspace removed between two spawns fails the second; a new one at the same path is used', async () => {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      expect((await sh('echo one > f; echo $?', { cwd: scene.ws, policy })).stdout).toBe('0\n');
      fs.rmSync(scene.ws, { recursive: true, force: true });
      const second = await sh('echo two > f', { cwd: scene.ws, policy }).catch((e: unknown) => e);
      expect(second).toMatchObject({ name: 'SandboxError', code: 'EINVALID_ARGUMENT' });
      expect(fs.existsSync(scene.ws), 'nothing recreated it').toBe(false);
      // Control: a fresh directory at the same path is the new workspace, written for real.
      fs.mkdirSync(scene.ws);
      const third = await sh('echo three > f; echo $?', { cwd: scene.ws, policy });
      expect(third.stdout).toBe('0\n');
      expect(fs.readFileSync(path.join(scene.ws, 'f'), 'utf8')).toBe('three\n');
      // And the old workspace's contents are nowhere: the new one holds only what this run wrote.
      expect(fs.readdirSync(scene.ws).filter((n) => !n.startsWith('.'))).toEqual(['f']);
    });

    it.skipIf(skip)('back-to-back spawns in one workspace leave nothing behind', async () => {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      for (let i = 0; i < 5; i++) {
        const r = await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy });
        expect(r.code).toBe(0);
        expect(fs.readdirSync(scene.ws), `after run ${i}`).toEqual([]);
      }
    });
  });
});
