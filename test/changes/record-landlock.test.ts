/**
 * changes: 'record' in Landlock mode. The path and metadata supervisors journal every write call
 * on a name inside the writable roots before carrying it out; the host lists the net changes and
 * reverts them, restoring the roots identical (names, types, modes, contents, symlink targets,
 * checked from outside). The journal is out of the command's reach, a change made by someone else
 * after the run is detected and kept, maxBytes makes the command's write fail with ENOSPC (the file
 * unchanged), and carve-outs stay read-only.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { SandboxError, type RunResult } from '../../lib/index';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { DIST_INDEX, makeScene, NODE, sh, type Scene } from '../helpers/sandbox';
import { treeHash, treeListing } from '../helpers/tree-hash';

const scenes: Scene[] = [];
afterAll(() => {
  for (const s of scenes) s.cleanup();
});

const landlockSkip = MODES.find((m) => m.name === 'landlock')!.skip;
const skip = landlockSkip ?? (caps.metadataSupervisor ? undefined : 'changes: record needs the path supervisor (seccomp user notification)');
if (skip) console.warn(`[record-landlock] SKIPPING: ${skip}`);

/** A workspace with a bit of everything. */
function workspace(tag: string): Scene {
  const s = makeScene(tag);
  scenes.push(s);
  const w = (p: string, data: string | Buffer, mode = 0o644) => {
    fs.writeFileSync(path.join(s.ws, p), data);
    fs.chmodSync(path.join(s.ws, p), mode);
  };
  fs.mkdirSync(path.join(s.ws, 'src'));
  fs.mkdirSync(path.join(s.ws, 'olddir'));
  w('src/main.c', 'int main() { return 0; }\n');
  w('edit.txt', 'old contents\n');
  w('gone.txt', 'to be deleted\n');
  w('move.txt', 'to be renamed\n');
  w('over.txt', 'to be replaced by a rename\n');
  w('script.sh', '#!/bin/sh\necho hi\n');
  w('olddir/inner.txt', 'inner\n');
  w('big.bin', Buffer.alloc(6 << 20, 0x5a));
  fs.symlinkSync('edit.txt', path.join(s.ws, 'link'));
  return s;
}

const GIT_ENV = {
  PATH: '/usr/bin:/bin',
  HOME: '/nonexistent',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_AUTHOR_NAME: 'a',
  GIT_AUTHOR_EMAIL: 'a@example.com',
  GIT_COMMITTER_NAME: 'a',
  GIT_COMMITTER_EMAIL: 'a@example.com',
};

const policyFor = (s: Scene) => modePolicy('landlock', { filesystem: { write: [s.ws] } });

const COMMAND = [
  'set -e',
  'echo "new contents" > edit.txt',
  'echo created > created.txt',
  'rm gone.txt',
  'mv move.txt moved.txt',
  'echo replacement > tmp.new && mv tmp.new over.txt',
  'chmod 755 script.sh',
  'ln -s src/main.c newlink',
  'rm link && ln -s created.txt link',
  'mkdir -p newdir/sub && echo deep > newdir/sub/f.txt',
  'mv olddir renamed-dir && echo changed > renamed-dir/inner.txt',
  'head -c 5000000 /dev/zero | tr "\\0" "b" > big.bin',
  'head -c 3000000 /dev/zero > large-new.bin',
].join('\n');

describe.skipIf(skip)('changes: record in Landlock mode', () => {
  it('lists exactly what the command changed, and revert restores the tree identical', async () => {
    const s = workspace('rec-list');
    const before = treeListing(s.ws);
    const dir = path.join(s.root, 'journal');
    const r = await sh(COMMAND, { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir } });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.enforcement.changes).toBe('record');
    const at = (p: string) => path.join(s.ws, p);
    expect(await r.changes!.list()).toEqual([
      { path: at('big.bin'), kind: 'modified', type: 'file' },
      { path: at('created.txt'), kind: 'created', type: 'file' },
      { path: at('edit.txt'), kind: 'modified', type: 'file' },
      { path: at('gone.txt'), kind: 'deleted', type: 'file' },
      { path: at('large-new.bin'), kind: 'created', type: 'file' },
      { path: at('link'), kind: 'modified', type: 'symlink' },
      { path: at('moved.txt'), kind: 'renamed', from: at('move.txt'), type: 'file' },
      { path: at('newdir'), kind: 'created', type: 'directory' },
      { path: at('newdir/sub'), kind: 'created', type: 'directory' },
      { path: at('newdir/sub/f.txt'), kind: 'created', type: 'file' },
      { path: at('newlink'), kind: 'created', type: 'symlink' },
      { path: at('over.txt'), kind: 'modified', type: 'file' },
      { path: at('renamed-dir'), kind: 'renamed', from: at('olddir'), type: 'directory' },
      { path: at('renamed-dir/inner.txt'), kind: 'renamed', from: at('olddir/inner.txt'), type: 'file' },
      { path: at('script.sh'), kind: 'modified', type: 'file' },
    ]);
    expect(treeListing(s.ws)).not.toEqual(before);
    await r.changes!.revert();
    expect(treeListing(s.ws)).toEqual(before);
  });

  it('reverts from another process, through the library and through the CLI', async () => {
    const s = workspace('rec-cli');
    const before = treeHash(s.ws);
    const dirA = path.join(s.root, 'journal-a');
    const a = await sh(COMMAND, { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir: dirA } });
    expect(a.code).toBe(0);
    await a.changes!.settled;
    const lib = spawnSync(NODE, ['-e', `require(${JSON.stringify(DIST_INDEX)}).revertChanges(process.argv[1]).then(() => console.log('reverted'), (e) => console.log('error', e.code, e.message))`, dirA], { encoding: 'utf8' });
    expect(lib.stdout.trim()).toBe('reverted');
    expect(treeHash(s.ws)).toBe(before);

    const dirB = path.join(s.root, 'journal-b');
    const b = await sh(COMMAND, { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir: dirB } });
    expect(b.code).toBe(0);
    await b.changes!.settled;
    const cli = path.resolve(DIST_INDEX, '..', 'cli.js');
    const listed = spawnSync(NODE, [cli, 'changes', '--json', dirB], { encoding: 'utf8' });
    expect(listed.status, listed.stderr).toBe(0);
    expect((JSON.parse(listed.stdout) as unknown[]).length).toBe(15);
    const reverted = spawnSync(NODE, [cli, 'revert', dirB], { encoding: 'utf8' });
    expect(reverted.status, reverted.stderr).toBe(0);
    expect(treeHash(s.ws)).toBe(before);
    // A second revert does nothing; a directory that is no journal is refused (125).
    expect(spawnSync(NODE, [cli, 'revert', dirB], { encoding: 'utf8' }).status).toBe(0);
    expect(treeHash(s.ws)).toBe(before);
    const notJournal = spawnSync(NODE, [cli, 'revert', s.ws], { encoding: 'utf8' });
    expect(notJournal.status).toBe(125);
    expect(notJournal.stderr).toMatch(/not a changes journal/);
  });

  it('run --changes record --json lists the changes, and the journal reverts', () => {
    const s = workspace('rec-cli-run');
    const before = treeHash(s.ws);
    const dir = path.join(s.root, 'journal');
    const cli = path.resolve(DIST_INDEX, '..', 'cli.js');
    const args = [cli, 'run', '--mode', 'landlock', '--degraded', '--write', s.ws, '--cwd', s.ws, '--changes', 'record', '--changes-dir', dir, '--json-fd', '1', '--', '/bin/sh', '-c', 'echo new > edit.txt >&2; echo x > created.txt'];
    const r = spawnSync(NODE, args, { encoding: 'utf8', env: { PATH: '/usr/bin:/bin' } });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { changes: { mode: string; dir: string; list: unknown[] }; enforcement: { changes: string } };
    expect(out.enforcement.changes).toBe('record');
    expect(out.changes.mode).toBe('record');
    expect(out.changes.dir).toBe(fs.realpathSync(dir));
    expect(out.changes.list).toEqual([
      { path: path.join(s.ws, 'created.txt'), kind: 'created', type: 'file' },
      { path: path.join(s.ws, 'edit.txt'), kind: 'modified', type: 'file' },
    ]);
    expect(r.stderr).toContain(`process-sandbox revert ${fs.realpathSync(dir)}`);
    expect(spawnSync(NODE, [cli, 'revert', dir], { encoding: 'utf8' }).status).toBe(0);
    expect(treeHash(s.ws)).toBe(before);
  });

  it('keeps the journal out of reach of a hostile command; the journal and the revert are unaffected', async () => {
    const s = workspace('rec-hostile');
    const dir = path.join(s.root, 'journal');
    const probe = (p: string) =>
      [
        `cat ${p}/journal >/dev/null 2>&1 && echo read-journal || echo no-read-journal`,
        `ls ${p} >/dev/null 2>&1 && echo list-dir || echo no-list-dir`,
        `cat ${p}/files/0 >/dev/null 2>&1 && echo read-copy || echo no-read-copy`,
        `echo "save 00 0 644" >> ${p}/journal 2>/dev/null && echo append-journal || echo no-append-journal`,
        `echo poisoned > ${p}/files/0 2>/dev/null && echo write-copy || echo no-write-copy`,
        `rm ${p}/journal 2>/dev/null && echo removed || echo not-removed`,
        `ln -s /etc ${p}/files/evil 2>/dev/null && echo linked || echo no-link`,
        `mv ${p} ${p}.moved 2>/dev/null && echo moved-dir || echo no-move-dir`,
      ].join('\n');
    // The same probes on a directory of the workspace succeed: the positive control.
    fs.mkdirSync(path.join(s.ws, 'ctl', 'files'), { recursive: true });
    fs.writeFileSync(path.join(s.ws, 'ctl', 'journal'), 'x\n');
    fs.writeFileSync(path.join(s.ws, 'ctl', 'files', '0'), 'x\n');
    const before = treeHash(s.ws);
    const script = `echo "new contents" > edit.txt\n${probe(dir)}\n${probe(path.join(s.ws, 'ctl'))}`;
    const r = await sh(script, { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir } });
    expect(r.stdout.trim().split('\n')).toEqual([
      'no-read-journal',
      'no-list-dir',
      'no-read-copy',
      'no-append-journal',
      'no-write-copy',
      'not-removed',
      'no-link',
      'no-move-dir',
      'read-journal',
      'list-dir',
      'read-copy',
      'append-journal',
      'write-copy',
      'removed',
      'linked',
      'moved-dir',
    ]);
    // From outside: the journal holds the command's one real change, with the original bytes.
    await r.changes!.settled;
    expect(fs.readFileSync(path.join(dir, 'files', '0'), 'utf8')).toBe('old contents\n');
    for (const f of fs.readdirSync(path.join(dir, 'files'))) expect(fs.readFileSync(path.join(dir, 'files', f), 'utf8')).not.toContain('poisoned');
    expect(fs.readFileSync(path.join(dir, 'journal'), 'utf8')).not.toContain('save 00 ');
    const list = await r.changes!.list();
    expect(list.find((e) => e.path === path.join(s.ws, 'edit.txt'))).toEqual({ path: path.join(s.ws, 'edit.txt'), kind: 'modified', type: 'file' });
    await r.changes!.revert();
    expect(treeHash(s.ws)).toBe(before);
  });

  it('keeps the default journal directory unreadable to the command too', async () => {
    const s = workspace('rec-default');
    const first = await sh('echo x > edit.txt', { cwd: s.ws, policy: policyFor(s), changes: 'record' });
    const dir = first.changes!.dir;
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    expect(fs.readFileSync(path.join(dir, 'journal'), 'utf8')).toMatch(/^save /);
    // A later run (the same uid, the same kind of sandbox) cannot read or list it.
    const probe = 'cat "$J"/journal >/dev/null 2>&1 && echo readable || echo unreadable; ls "$J" >/dev/null 2>&1 && echo listable || echo unlistable; cat edit.txt';
    const r = await sh(probe, { cwd: s.ws, policy: policyFor(s), changes: 'record', env: { PATH: '/usr/bin:/bin', J: dir } });
    expect(r.stdout.trim().split('\n')).toEqual(['unreadable', 'unlistable', 'x']);
    await first.changes!.revert();
    expect(fs.readFileSync(path.join(s.ws, 'edit.txt'), 'utf8')).toBe('old contents\n');
  });

  it('refuses to revert, naming the path and changing nothing, when the host changed a recorded path after the run', async () => {
    const s = workspace('rec-outside');
    const dir = path.join(s.root, 'journal');
    const r = await sh('echo by-command > edit.txt; echo new > created.txt; rm gone.txt', { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir } });
    expect(r.code).toBe(0);
    await r.changes!.settled;
    fs.writeFileSync(path.join(s.ws, 'created.txt'), 'the user edited this after the run\n');
    const after = treeListing(s.ws);
    const err = await r.changes!.revert().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('ECHANGED_OUTSIDE');
    expect((err as SandboxError).message).toContain(path.join(s.ws, 'created.txt'));
    expect(treeListing(s.ws)).toEqual(after);
    expect(fs.readFileSync(path.join(s.ws, 'created.txt'), 'utf8')).toBe('the user edited this after the run\n');
  });

  it('fails the write past maxBytes with ENOSPC and leaves the file unchanged; smaller saves still work', async () => {
    const s = workspace('rec-max');
    const dir = path.join(s.root, 'journal');
    const script = [
      'echo small > edit.txt && echo small-ok || echo small-failed',
      '(echo x >> big.bin) 2>&1 && echo big-ok || echo big-failed',
      'echo new > created.txt && echo create-ok || echo create-failed',
    ].join('\n');
    const r = await sh(script, { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir, maxBytes: 4096 } });
    expect(r.stdout).toContain('small-ok');
    expect(r.stdout).toMatch(/No space left on device/);
    expect(r.stdout).toContain('big-failed');
    expect(r.stdout).toContain('create-ok');
    expect(fs.readFileSync(path.join(s.ws, 'big.bin')).equals(Buffer.alloc(6 << 20, 0x5a))).toBe(true);
    await r.changes!.revert();
    expect(fs.readFileSync(path.join(s.ws, 'edit.txt'), 'utf8')).toBe('old contents\n');
    expect(fs.existsSync(path.join(s.ws, 'created.txt'))).toBe(false);
  });

  it('keeps carve-outs read-only (.git/hooks) with record; the rest of the workspace is writable', async () => {
    const s = workspace('rec-carve');
    fs.mkdirSync(path.join(s.ws, '.git', 'hooks'), { recursive: true });
    fs.writeFileSync(path.join(s.ws, '.git', 'HEAD'), 'ref: refs/heads/main\n');
    const hooksBefore = treeListing(path.join(s.ws, '.git', 'hooks'));
    const dir = path.join(s.root, 'journal');
    const r = await sh(
      'echo evil > .git/hooks/pre-commit 2>/dev/null && echo hook-written || echo hook-refused; echo ok > fine.txt && echo fine-written',
      { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir } },
    );
    expect(r.stdout.trim().split('\n')).toEqual(['hook-refused', 'fine-written']);
    expect(treeListing(path.join(s.ws, '.git', 'hooks'))).toEqual(hooksBefore);
    expect(await r.changes!.list()).toEqual([{ path: path.join(s.ws, 'fine.txt'), kind: 'created', type: 'file' }]);
  });

  it.skipIf(!fs.existsSync('/usr/bin/git'))('reverts a git workflow (branch, commit, merge, gc) to the identical tree, .git included', async () => {
    const s = workspace('rec-git');
    const git = (...a: string[]) => spawnSync('/usr/bin/git', a, { cwd: s.ws, env: GIT_ENV, encoding: 'utf8' });
    git('init', '-q');
    git('add', '-A');
    git('commit', '-qm', 'init');
    const before = treeListing(s.ws);
    const script = [
      'set -e',
      'git checkout -q -b feature',
      'echo more >> edit.txt; rm gone.txt; git mv move.txt moved.txt; mkdir -p new/deep; echo n > new/deep/n.txt',
      'git add -A; git commit -qm change',
      'git checkout -q -',
      'git merge -q --no-edit feature',
      'git gc -q',
    ].join('\n');
    const r = await sh(script, { cwd: s.ws, env: GIT_ENV, policy: policyFor(s), changes: { mode: 'record', dir: path.join(s.root, 'journal') } });
    expect(r.code, r.stderr).toBe(0);
    expect(await r.changes!.list()).toContainEqual({ path: path.join(s.ws, 'moved.txt'), kind: 'renamed', from: path.join(s.ws, 'move.txt'), type: 'file' });
    expect(treeListing(s.ws)).not.toEqual(before);
    await r.changes!.revert();
    expect(treeListing(s.ws)).toEqual(before);
  });

  it('keeps the journals of sandboxes running at the same time apart', async () => {
    const a = workspace('rec-par-a');
    const b = workspace('rec-par-b');
    const beforeA = treeListing(a.ws);
    const beforeB = treeListing(b.ws);
    const [ra, rb] = await Promise.all([
      sh('for i in 1 2 3 4 5 6 7 8; do echo a$i > a$i.txt; done; echo A > edit.txt', { cwd: a.ws, policy: policyFor(a), changes: { mode: 'record', dir: path.join(a.root, 'journal') } }),
      sh('for i in 1 2 3; do echo b$i > b$i.txt; done; rm gone.txt', { cwd: b.ws, policy: policyFor(b), changes: { mode: 'record', dir: path.join(b.root, 'journal') } }),
    ]);
    expect((await ra.changes!.list()).map((e) => path.basename(e.path))).toEqual(['a1.txt', 'a2.txt', 'a3.txt', 'a4.txt', 'a5.txt', 'a6.txt', 'a7.txt', 'a8.txt', 'edit.txt']);
    expect((await rb.changes!.list()).map((e) => path.basename(e.path))).toEqual(['b1.txt', 'b2.txt', 'b3.txt', 'gone.txt']);
    await rb.changes!.revert();
    expect(treeListing(b.ws)).toEqual(beforeB);
    expect(fs.readFileSync(path.join(a.ws, 'edit.txt'), 'utf8')).toBe('A\n'); // a's run untouched by b's revert
    await ra.changes!.revert();
    expect(treeListing(a.ws)).toEqual(beforeA);
  });

  it('restores a file written through a hard link the command made, in place', async () => {
    const s = workspace('rec-link');
    const before = treeListing(s.ws);
    const r = await sh('ln edit.txt hard && echo through-the-link > hard && chmod 600 hard', { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir: path.join(s.root, 'journal') } });
    expect(r.code, r.stderr).toBe(0);
    expect(fs.readFileSync(path.join(s.ws, 'edit.txt'), 'utf8')).toBe('through-the-link\n');
    expect(await r.changes!.list()).toContainEqual({ path: path.join(s.ws, 'hard'), kind: 'created', type: 'file' });
    await r.changes!.revert();
    expect(treeListing(s.ws)).toEqual(before);
  });

  it.skipIf(!caps.python)('puts back a FIFO it removed; a socket file made before the run is not removed (one made during it is)', async () => {
    const s = workspace('rec-special');
    spawnSync('mkfifo', [path.join(s.ws, 'pipe')]);
    spawnSync(caps.python!, ['-c', `import socket; socket.socket(socket.AF_UNIX).bind(${JSON.stringify(path.join(s.ws, 'old.sock'))})`]);
    const before = treeListing(s.ws);
    const script = [
      'rm pipe && echo fifo-removed',
      'rm old.sock 2>/dev/null && echo old-sock-removed || echo old-sock-kept',
      // (mknod makes a socket file without a socket: the default policy has no AF_UNIX.)
      `${caps.python} -c "import os, stat; os.mknod('new.sock', 0o600 | stat.S_IFSOCK)" && rm new.sock && echo new-sock-removed`,
    ].join('\n');
    const r = await sh(script, { cwd: s.ws, policy: policyFor(s), changes: { mode: 'record', dir: path.join(s.root, 'journal') } });
    expect(r.stdout.trim().split('\n')).toEqual(['fifo-removed', 'old-sock-kept', 'new-sock-removed']);
    expect(fs.lstatSync(path.join(s.ws, 'old.sock')).isSocket()).toBe(true);
    expect(await r.changes!.list()).toEqual([{ path: path.join(s.ws, 'pipe'), kind: 'deleted', type: 'other' }]);
    await r.changes!.revert();
    expect(treeListing(s.ws)).toEqual(before);
  });

  it('refuses what it cannot do: stage in Landlock mode, the wrong method for the mode', async () => {
    const s = workspace('rec-refuse');
    const marker = path.join(s.ws, 'ran');
    await expect(sh(`touch ${marker}`, { cwd: s.ws, policy: policyFor(s), changes: 'stage' })).rejects.toMatchObject({ code: 'EUNSUPPORTED_POLICY', message: expect.stringMatching(/mount namespace/) });
    expect(fs.existsSync(marker)).toBe(false);
    const r: RunResult = await sh(`touch ${marker}`, { cwd: s.ws, policy: policyFor(s), changes: 'record' });
    expect(fs.existsSync(marker)).toBe(true); // the control: record runs
    await expect(r.changes!.apply()).rejects.toMatchObject({ code: 'EINVALID_ARGUMENT' });
    await expect(r.changes!.discard()).rejects.toMatchObject({ code: 'EINVALID_ARGUMENT' });
  });
});
