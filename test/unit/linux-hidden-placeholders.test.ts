// Which names an isolated-mode plan leaves out of listings (seccomp.hideNames: the placeholders
// init makes, and other runs' placeholders it binds), and the report where the kernel has no
// seccomp user notification (lib/platform/linux/plan.ts, planHiddenPlaceholders). A scratch
// workspace: the planner looks the protected paths up.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { planLinux } from '../../lib/platform/linux/plan';

let ws: string;
beforeEach(() => {
  ws = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'psb-hide-')));
  fs.writeFileSync(`${ws}/.bashrc`, 'real\n');
});
afterEach(() => fs.rmSync(ws, { recursive: true, force: true }));

const probeOf = (connectSupervisor: number) => ({ landlockAbi: 7, seccomp: 0, userns: 0, euid: 1000, connectSupervisor, supervisorAccess: connectSupervisor === 0 ? 'pidfd' : 'none' });
const baseRules = (mode: 'isolated' | 'landlock') => ({
  readAll: true, readRoots: [], writeRoots: [ws], readOnly: [`${ws}/.mcp.json`, `${ws}/.codex`, `${ws}/.bashrc`, `${ws}/.other`], denyRead: [],
  tmp: 'host', network: { kind: 'none' }, mode, degraded: true, limits: {},
});

function plan(mode: 'isolated' | 'landlock', connectSupervisor: number, placeholders?: string[]) {
  const rules = baseRules(mode) as unknown as Parameters<typeof planLinux>[0]['rules'];
  return planLinux({ rules, mode, file: '/bin/true', argv: ['true'], env: {}, cwd: ws, probe: probeOf(connectSupervisor) as never, placeholders });
}

describe('isolated mode: placeholders left out of listings', () => {
  it("names the missing protected paths (init's placeholders) and the other runs' it binds, never an existing file", () => {
    // .other exists as another run's placeholder: the plan binds it as an existing path.
    fs.writeFileSync(`${ws}/.other`, '');
    fs.chmodSync(`${ws}/.other`, 0o444);
    const p = plan('isolated', 0, [`${ws}/.other`]);
    expect(p.ghosts.sort()).toEqual([`${ws}/.codex`, `${ws}/.mcp.json`]);
    expect(p.native.seccomp?.hideNames).toEqual([`${ws}/.codex`, `${ws}/.mcp.json`, `${ws}/.other`]);
    expect(p.enforcement.mechanisms.placeholderListing).toBe('unlisted (seccomp-user-notif)');
    expect(p.enforcement.notes).toBeUndefined();
  });

  it("names another run's placeholder directory on the way to a protected path, not a real directory there", () => {
    // Another run holds a missing .claude for .claude/commands: an empty 0555 directory.
    fs.mkdirSync(`${ws}/.claude`, { mode: 0o555 });
    fs.chmodSync(`${ws}/.claude`, 0o555);
    fs.mkdirSync(`${ws}/.vscode`);
    const p = planLinux({
      rules: { ...baseRules('isolated'), readOnly: [`${ws}/.claude/commands`, `${ws}/.vscode/settings.json`] } as never,
      mode: 'isolated', file: '/bin/true', argv: ['true'], env: {}, cwd: ws, probe: probeOf(0) as never,
    });
    expect(p.native.seccomp?.hideNames).toEqual([`${ws}/.claude`, `${ws}/.claude/commands`, `${ws}/.vscode/settings.json`]);
    fs.chmodSync(`${ws}/.claude`, 0o755);
  });

  it('without seccomp user notification: listed, and the report says so in notes (not a gap)', () => {
    const p = plan('isolated', -38);
    expect(p.native.seccomp?.hideNames).toBeUndefined();
    expect(p.enforcement.mechanisms.placeholderListing).toBeUndefined();
    expect(p.enforcement.notes).toEqual([expect.stringMatching(/placeholders .* are listed inside the sandbox .*\.mcp\.json.*seccomp user notification/)]);
    expect(p.enforcement.gaps.join('\n')).not.toMatch(/placeholder/);
    expect(p.enforcement.guarantees.protectedPaths).toBe('enforced');
  });

  it('no placeholder, no supervision: a run whose protected paths all exist', () => {
    fs.writeFileSync(`${ws}/.mcp.json`, '{}');
    fs.mkdirSync(`${ws}/.codex`);
    fs.writeFileSync(`${ws}/.other`, 'x');
    const p = plan('isolated', 0);
    expect(p.ghosts).toEqual([]);
    expect(p.native.seccomp?.hideNames).toBeUndefined();
  });

  it('Landlock mode makes no placeholder and asks for no hiding', () => {
    const p = plan('landlock', 0);
    expect(p.native.seccomp?.hideNames).toBeUndefined();
    expect(p.enforcement.notes).toBeUndefined();
  });
});
