// Which repository's info/exclude a run's placeholders are added to, and how their names are
// written there (lib/platform/linux/git-view.ts). Real repositories in a scratch directory.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { gitExcludeViews } from '../../lib/platform/linux/git-view';
import { git as gitAt } from '../helpers/git';

const KIND = 19;
let dir: string;
const git = (cwd: string, ...args: string[]) => gitAt({ cwd, home: dir }, ...args);
const lines = (data: string | undefined) => (data ?? '').split('\n').filter((l) => l !== '' && !l.startsWith('#'));

beforeEach(() => {
  dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'psb-gitview-')));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('gitExcludeViews', () => {
  it("adds the worktree's placeholders, anchored, after the repository's own patterns", () => {
    const ws = path.join(dir, 'ws');
    fs.mkdirSync(ws);
    git(ws, 'init', '-q');
    fs.appendFileSync(`${ws}/.git/info/exclude`, 'mine.log');
    const ghosts = [`${ws}/.mcp.json`, `${ws}/.codex`, `${ws}/sub/.bashrc`, `${ws}/.git/hooks`, `${ws}/#odd*[x] `];
    const ops = gitExcludeViews(ghosts, [], KIND);
    expect(ops).toHaveLength(1);
    expect(ops[0]).toMatchObject({ kind: KIND, path: `${ws}/.git/info/exclude` });
    const own = fs.readFileSync(`${ws}/.git/info/exclude`, 'utf8');
    expect(ops[0]!.data!.startsWith(`${own}\n`)).toBe(true);
    // Inside .git nothing is listed by git: no line for .git/hooks.
    expect(lines(ops[0]!.data).slice(-4)).toEqual(['/.mcp.json', '/.codex', '/sub/.bashrc', '/\\#odd\\*\\[x\\]\\ ']);
    // git itself reads the patterns as the names they are.
    fs.writeFileSync(`${ws}/.git/info/exclude`, ops[0]!.data!);
    fs.mkdirSync(`${ws}/sub`);
    for (const f of ['.mcp.json', 'sub/.bashrc', '#odd*[x] ', '#oddA[x] ', 'mine.log', 'keep.txt']) fs.writeFileSync(`${ws}/${f}`, '');
    expect(git(ws, 'status', '--porcelain', '--untracked-files=all')).toBe('?? "#oddA[x] "\n?? keep.txt\n');
  });

  it("a linked worktree's placeholders go to the common exclude; a held .git is no repository", () => {
    const main = path.join(dir, 'main');
    fs.mkdirSync(main);
    git(main, 'init', '-q');
    git(main, 'commit', '-q', '--allow-empty', '-m', 'x');
    git(main, 'worktree', 'add', '-q', path.join(dir, 'wt'));
    const ops = gitExcludeViews([`${dir}/wt/.mcp.json`, `${main}/inner/.git`, `${main}/inner/.zshrc`], [], KIND);
    expect(ops.map((o) => o.path)).toEqual([`${main}/.git/info/exclude`]);
    expect(lines(ops[0]!.data).slice(-2)).toEqual(['/.mcp.json', '/inner/.zshrc']);
  });

  it('no view without a repository, without an exclude file, or with the exclude file denied', () => {
    const ws = path.join(dir, 'ws');
    fs.mkdirSync(ws);
    expect(gitExcludeViews([`${ws}/.mcp.json`], [], KIND)).toEqual([]);
    git(ws, 'init', '-q');
    expect(gitExcludeViews([`${ws}/.mcp.json`], [`${ws}/.git/info`], KIND)).toEqual([]);
    fs.rmSync(`${ws}/.git/info/exclude`);
    expect(gitExcludeViews([`${ws}/.mcp.json`], [], KIND)).toEqual([]);
  });
});
