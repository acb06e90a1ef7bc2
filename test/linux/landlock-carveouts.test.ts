/**
 * Read-only carve-outs inside a writable root (a class outside testing found), attacked in
 * BOTH Linux modes: isolated mode holds them with read-only binds and placeholders, Landlock mode
 * with the path supervisor (native/linux/supervisor/supervise_paths.cc). Every attack checks the outside:
 * the carve-outs are byte-identical afterwards (snapshot: contents, modes, owners, times, links)
 * and nothing was planted. Every denial has a positive control in the same sandbox: ordinary
 * writes, renames and removals in the workspace work, and so does `git commit`.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { DENIED, expectDenied } from '../helpers/denied';
import { git, gitEnv } from '../helpers/git';
import { BASE_ENV, expectUnchanged, makeScene, probeOps, py, sh, snapshot, type Entry, type Scene } from '../helpers/sandbox';

// Moving, removing or replacing a carve-out may also fail on what stands in the way.
const CARVE_DENIED = [...DENIED, 'ENOTEMPTY', 'EISDIR', 'EEXIST', 'ELOOP'];

const GIT_ENV = gitEnv;

const landlockSkip = caps.metadataSupervisor
  ? undefined
  : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode lists carve-outs as a gap';
// eslint-disable-next-line no-console
if (landlockSkip) console.warn(`[landlock-carveouts] SKIPPING the Landlock-mode attacks: ${landlockSkip}`);

describe.runIf(caps.linux)('read-only carve-outs inside a writable root', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const attackSkip = skip ?? (mode === 'landlock' ? landlockSkip : undefined);
    let scene: Scene;
    let ws: string;
    let policy: SandboxPolicy;
    // The carve-outs and what they held at the start, as seen from outside.
    let protectedPaths: string[];
    let before: Map<string, Entry>[];

    const snap = () => protectedPaths.map((p) => snapshot(p));
    const expectCarveoutsUnchanged = (what: string) => {
      const after = snap();
      protectedPaths.forEach((p, i) => expectUnchanged(before[i]!, after[i]!, `${what}: ${p}`));
      // Missing carve-outs stay missing (isolated mode's placeholders are gone after the run).
      expect(fs.existsSync(`${ws}/.agents`), `${what}: .agents was created`).toBe(false);
      expect(fs.existsSync(`${ws}/.aws`), `${what}: .aws was created`).toBe(false);
    };

    beforeEach(() => {
      scene = makeScene(`carve-${mode}`);
      ws = scene.ws;
      git(ws, 'init', '-q');
      fs.writeFileSync(`${ws}/.git/hooks/pre-commit.sample`, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
      fs.mkdirSync(`${ws}/.codex`);
      fs.writeFileSync(`${ws}/.codex/config.toml`, 'model = "x"\n');
      fs.mkdirSync(`${ws}/sub`);
      git(`${ws}/sub`, 'init', '-q');
      fs.mkdirSync(`${ws}/notgit/hooks`, { recursive: true });
      fs.mkdirSync(`${ws}/xgit`);
      fs.writeFileSync(`${ws}/xgit/config`, 'free\n');
      fs.writeFileSync(`${ws}/a.txt`, 'a\n');
      fs.writeFileSync(`${ws}/evil-config`, '[core]\n\thooksPath = /var/tmp\n');
      protectedPaths = [`${ws}/.git/hooks`, `${ws}/.git/config`, `${ws}/.codex`, `${ws}/sub/.git/hooks`, `${ws}/sub/.git/config`];
      before = snap();
      policy = modePolicy(mode, { filesystem: { write: [ws] } });
    });
    afterEach(() => scene.cleanup());

    it.skipIf(skip)('the report says which mechanism holds the carve-outs', async () => {
      const r = await sh('true', { cwd: ws, policy });
      if (mode === 'landlock' && landlockSkip) {
        expect(r.enforcement.guarantees.protectedPaths).toBe('not-enforced');
        expect(r.enforcement.gaps.join('\n')).toMatch(/read-only carve-outs inside writable roots are not enforced:.*\.git\/hooks/);
        return;
      }
      expect(r.enforcement.guarantees.protectedPaths).toBe('enforced');
      expect(r.enforcement.gaps.join('\n')).not.toMatch(/carve-outs/);
      if (mode === 'landlock') expect(r.enforcement.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
    });

    it.skipIf(attackSkip)('.git cannot be moved aside, nor .git/hooks deleted, and recreated', async () => {
      const ops = [
        ['rename', `${ws}/.git`, `${ws}/git-old`],
        ['rename', `${ws}/.git/hooks`, `${ws}/.git/hooks-old`],
        ['rmrf', `${ws}/.git/hooks`],
        ['rmdir', `${ws}/.git/hooks`],
        ['rename', `${ws}/notgit/hooks`, `${ws}/.git/hooks`],
        ['rename', `${ws}/notgit`, `${ws}/.git`],
        ['rename', `${ws}/.codex`, `${ws}/codex-old`],
        ['rmrf', `${ws}/.codex`],
        ['rename', `${ws}/sub`, `${ws}/sub-old`],
        ['rename', `${ws}/sub/.git`, `${ws}/sub/git-old`],
      ];
      expectDenied(await probeOps(ops, { cwd: ws, policy }), 'moving or deleting a carve-out or a parent', CARVE_DENIED, ops);
      // The whole attack in one go, as a shell would run it.
      const r = await sh(
        'mv .git g2; mkdir -p .git/hooks; echo "#!/bin/sh" > .git/hooks/pre-commit; rm -rf .git/hooks; mkdir .git/hooks; ' +
          'echo pwned > .git/hooks/post-checkout; echo done',
        { cwd: ws, policy },
      );
      expect(r.stdout).toContain('done');
      expectCarveoutsUnchanged('move aside and recreate');
      expect(fs.existsSync(`${ws}/g2`)).toBe(false);
      expect(fs.existsSync(`${ws}/git-old`)).toBe(false);
      // Control: the same moves on an unprotected look-alike work in the same sandbox.
      const ctl = [
        ['rename', `${ws}/notgit/hooks`, `${ws}/notgit/hooks-old`],
        ['mkdir', `${ws}/notgit/hooks`],
        ['write', `${ws}/notgit/hooks/pre-commit`, 'x'],
        ['rmrf', `${ws}/notgit/hooks-old`],
        ['rename', `${ws}/notgit`, `${ws}/notgit2`],
      ];
      expect(await probeOps(ctl, { cwd: ws, policy })).toEqual(ctl.map(() => 'ok'));
      expect(fs.readFileSync(`${ws}/notgit2/hooks/pre-commit`, 'utf8')).toBe('x');
    });

    it.skipIf(attackSkip)('.git/config cannot be renamed over, moved, removed or edited, by git or by hand', async () => {
      const ops = [
        ['rename', `${ws}/evil-config`, `${ws}/.git/config`],
        ['rename', `${ws}/.git/config`, `${ws}/.git/config-old`],
        ['unlink', `${ws}/.git/config`],
        ['write', `${ws}/.git/config`, '[core]\n\tfsmonitor = /var/tmp/evil\n'],
        ['append', `${ws}/.git/config`, '\n[core]\n\thooksPath = /var/tmp\n'],
        ['truncate', `${ws}/.git/config`],
        ['open', `${ws}/.git/config`, 'r+'],
        ['append', `${ws}/sub/.git/config`, '\n[core]\n\tfsmonitor = /var/tmp/evil\n'],
        ['write', `${ws}/.codex/config.toml`, 'evil = 1'],
      ];
      expectDenied(await probeOps(ops, { cwd: ws, policy }), 'config tampering', CARVE_DENIED, ops);
      const r = await sh(
        'git config core.hooksPath /var/tmp; echo a=$?; git config --local core.fsmonitor /var/tmp/x; echo b=$?; ' +
          'git -C sub config core.hooksPath /var/tmp; echo c=$?',
        { cwd: ws, env: GIT_ENV(ws), policy },
      );
      expect(r.stdout).toMatch(/a=[1-9]/);
      expect(r.stdout).toMatch(/b=[1-9]/);
      expect(r.stdout).toMatch(/c=[1-9]/);
      expectCarveoutsUnchanged('config tampering');
      expect(fs.readdirSync(`${ws}/.git`).filter((n) => n.startsWith('config'))).toEqual(['config']);
    });

    it.skipIf(attackSkip)('hooks cannot be added or overwritten, by any spelling or link', async () => {
      fs.symlinkSync('.git', `${ws}/gl`);
      fs.symlinkSync('.git/config', `${ws}/cfg-link`);
      fs.symlinkSync('.git/hooks/post-merge', `${ws}/dangling-hook`);
      fs.symlinkSync('.agents', `${ws}/to-agents`);
      const ops = [
        ['write', `${ws}/.git/hooks/pre-commit`, '#!/bin/sh\necho pwned\n'],
        ['write', `${ws}/.git/hooks/pre-commit.sample`, '#!/bin/sh\necho pwned\n'],
        ['append', `${ws}/.git/hooks/pre-commit.sample`, 'echo pwned\n'],
        ['create', `${ws}/.git/hooks/pre-push`],
        ['write', `${ws}/sub/.git/hooks/pre-commit`, '#!/bin/sh\necho pwned\n'],
        ['write', `${ws}/./.git/../.git/hooks/pre-commit`, 'x'],
        ['write', `${ws}//.git///hooks/pre-commit`, 'x'],
        ['write', 'gl/hooks/pre-commit', 'x'],
        ['append', 'cfg-link', 'x'],
        ['write', 'dangling-hook', 'x'],
        ['write', 'to-agents', 'x'],
        ['mkdir', `${ws}/.agents`],
        ['mkdir', `${ws}/.aws`],
        ['symlink', '/var/tmp', `${ws}/.aws`],
        ['write', `${ws}/.codex/new.toml`, 'x'],
        ['copy', `${ws}/a.txt`, `${ws}/.git/hooks/pre-rebase`],
      ];
      expectDenied(await probeOps(ops, { cwd: ws, policy }), 'planting a hook', CARVE_DENIED, ops);
      expectCarveoutsUnchanged('hooks');
      expect(fs.existsSync(`${ws}/.git/hooks/post-merge`)).toBe(false);
    });

    it.skipIf(attackSkip)('mkdir, mknod, link, symlink and truncate under a carve-out fail; other spellings too', async () => {
      const ops = [
        ['mkdir', `${ws}/.git/hooks/d`],
        ['link', `${ws}/.git/config`, `${ws}/config-alias`],
        ['link', `${ws}/a.txt`, `${ws}/.git/hooks/pre-commit`],
        ['link', `${ws}/.git/hooks/pre-commit.sample`, `${ws}/hook-alias`],
        ['symlink', `${ws}/notgit`, `${ws}/.git/hooks/link`],
        ['symlink', '/var/tmp/evil', `${ws}/.git/hooks/pre-commit`],
        ['truncate', `${ws}/.git/hooks/pre-commit.sample`],
        ['chmod', `${ws}/.git/config`, '666'],
        ['chmod', `${ws}/.git/hooks`, '777'],
      ];
      expectDenied(await probeOps(ops, { cwd: ws, policy }), 'mkdir/link/symlink/truncate', CARVE_DENIED, ops);
      // Calls node does not make, and other spellings: python's dir_fd (openat on a dirfd),
      // mkfifo/mknod, os.truncate, a read-only fd reopened for writing through /dev/fd and
      // /proc/self/fd, and O_TMPFILE then linkat into the carve-out.
      const code = String.raw`
import errno, json, os, sys
res = {}
def tr(name, f):
    try:
        f(); res[name] = 'ok'
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
hooks = os.open('.git/hooks', os.O_RDONLY | os.O_DIRECTORY)
tr('openat-dirfd', lambda: os.close(os.open('pre-commit', os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=hooks)))
tr('mkdirat-dirfd', lambda: os.mkdir('x', dir_fd=hooks))
tr('mkfifo', lambda: os.mkfifo('.git/hooks/fifo'))
tr('mknod', lambda: os.mknod('.git/hooks/node', 0o600 | 0o100000))
tr('truncate', lambda: os.truncate('.git/config', 0))
tr('rename-dirfd', lambda: os.rename('a.txt', 'pre-commit', dst_dir_fd=hooks))
tr('unlink-dirfd', lambda: os.unlink('pre-commit.sample', dir_fd=hooks))
ro = os.open('.git/config', os.O_RDONLY)
tr('devfd', lambda: os.close(os.open('/dev/fd/%d' % ro, os.O_WRONLY)))
tr('procfd', lambda: os.close(os.open('/proc/self/fd/%d' % ro, os.O_RDWR)))
def tmpfile():
    fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o755)
    os.write(fd, b'#!/bin/sh\necho pwned\n')
    os.link('/proc/self/fd/%d' % fd, '.git/hooks/pre-commit', follow_symlinks=True)
tr('tmpfile-link', tmpfile)
print('RES ' + json.dumps(res))
`;
      const r = await py(code, [], { cwd: ws, policy });
      const line = r.stdout.split('\n').find((l) => l.startsWith('RES '));
      expect(line, r.stderr).toBeDefined();
      const res = JSON.parse(line!.slice(4)) as Record<string, string>;
      for (const [k, v] of Object.entries(res)) expect(CARVE_DENIED, `${k} got ${v}`).toContain(v);
      expect(Object.keys(res)).toHaveLength(10);
      expectCarveoutsUnchanged('other calls');
      expect(fs.existsSync(`${ws}/config-alias`)).toBe(false);
      expect(fs.existsSync(`${ws}/hook-alias`)).toBe(false);
    });

    it.skipIf(attackSkip || !caps.python)('a racing thread cannot turn a checked path into a carve-out (TOCTOU)', async () => {
      // One thread flips the path buffer between xgit/config (free) and .git/config (protected,
      // same length), another swaps the symlink `l` between xgit and .git, while the main thread
      // opens both for appending in a loop. Whatever wins, .git/config must stay unchanged.
      fs.symlinkSync('xgit', `${ws}/l`);
      const code = String.raw`
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
free, prot = b'xgit/config', b'.git/config'
buf = ctypes.create_string_buffer(free)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, prot, len(prot)); ctypes.memmove(buf, free, len(free))
def swap():
    n = 0
    while not stop:
        t = 'l.tmp%d' % (n % 2)
        try:
            os.symlink('.git' if n % 2 else 'xgit', t); os.rename(t, 'l')
        except OSError:
            pass
        n += 1
ts = [threading.Thread(target=flip), threading.Thread(target=swap)]
for t in ts: t.start()
ok = 0
# 1,500 rounds or 20 s of them, whichever ends first, and on until one free open has landed (a
# loaded host may starve the main thread of the rounds where the free name is in place; the
# control needs at least one). In Landlock mode every open is answered by the path supervisor:
# on a host with every CPU busy 1,500 rounds took longer than the test may.
import time
start, i = time.time(), 0
while (i < 1500 and time.time() < start + 20) or (ok == 0 and time.time() < start + 40):
    for p in (buf, b'l/config'):
        fd = libc.open(p, os.O_WRONLY | os.O_APPEND)
        if fd >= 0:
            os.write(fd, b'#'); os.close(fd); ok += 1
    i += 1
stop = True
for t in ts: t.join()
print('OK %d' % ok)
`;
      const r = await py(code, [], { cwd: ws, policy, timeout: 120_000 });
      expect(r.stdout, r.stderr).toMatch(/OK [1-9]\d*/);
      expectCarveoutsUnchanged('race');
      expect(fs.readFileSync(`${ws}/xgit/config`, 'utf8').length).toBeGreaterThan('free\n'.length);
    }, 180_000);

    // A carve-out that is a symlink (.codex -> real): isolated mode refuses it unless degraded and
    // then holds the target; Landlock mode holds the link and the target. Either way, with
    // degraded, neither the link nor what it leads to changes: contents, mode, entries.
    it.skipIf(attackSkip)('a symlinked carve-out: neither the link nor its target can be changed', async () => {
      fs.rmSync(`${ws}/.codex`, { recursive: true });
      fs.mkdirSync(`${ws}/real`);
      fs.writeFileSync(`${ws}/real/config.toml`, 'model = "x"\n', { mode: 0o644 });
      fs.symlinkSync('real', `${ws}/.codex`);
      const realBefore = snapshot(`${ws}/real`);
      const ops = [
        ['chmod', `${ws}/.codex/config.toml`, '666'],
        ['chmod', `${ws}/real/config.toml`, '600'],
        ['write', `${ws}/.codex/config.toml`, 'evil = 1'],
        ['write', `${ws}/real/new.toml`, 'x'],
        ['rename', `${ws}/real`, `${ws}/real2`],
        ['utimes', `${ws}/.codex/config.toml`],
      ];
      const degraded = { ...policy, degraded: true };
      expectDenied(await probeOps(ops, { cwd: ws, policy: degraded }), 'symlinked carve-out', CARVE_DENIED, ops);
      expectUnchanged(realBefore, snapshot(`${ws}/real`), 'the link target');
      if (mode === 'isolated') {
        // A mount cannot hold the link itself: that is the gap the report names.
        const r = await sh('true', { cwd: ws, policy: degraded });
        expect(r.enforcement.gaps.join('\n')).toContain(`the protected symlink ${ws}/.codex can be replaced`);
      } else {
        const link = [['unlink', `${ws}/.codex`], ['rename', `${ws}/a.txt`, `${ws}/.codex`]];
        expectDenied(await probeOps(link, { cwd: ws, policy: degraded }), 'replacing the link', CARVE_DENIED, link);
      }
      expect(fs.readlinkSync(`${ws}/.codex`)).toBe('real');
    });

    // Past PATH_MAX the kernel gives no path for a directory: Landlock mode then locates it by
    // walking up its parents. A deep tree made before the run inside .codex stays read-only at
    // the bottom; the same depth in the workspace is writable (and can be made in the run).
    it.skipIf(attackSkip || !caps.python)('a directory deeper than PATH_MAX inside a carve-out stays read-only', async () => {
      const deep = String.raw`
import errno, os, shutil, sys
os.chdir(sys.argv[1])
if sys.argv[2] == 'rm':
    shutil.rmtree('dddd'); sys.exit(0)
for i in range(900):
    if sys.argv[2] != 'walk':
        try: os.mkdir('dddd')
        except FileExistsError: pass
    os.chdir('dddd')
if sys.argv[2] == 'prep': sys.exit(0)
res = []
for f in (lambda: os.close(os.open('x', os.O_WRONLY | os.O_CREAT, 0o644)), lambda: os.mkdir('y'), lambda: os.rename('y', 'z')):
    try:
        f(); res.append('ok')
    except OSError as e:
        res.append(errno.errorcode[e.errno])
print(' '.join(res))
`;
      // Made from outside, before the run (900 levels of 5 bytes: 4,500 bytes, past PATH_MAX).
      execFileSync('python3', ['-c', deep, `${ws}/.codex`, 'prep']);
      try {
        const r = await py(deep, [`${ws}/.codex`, 'walk'], { cwd: ws, policy });
        const got = r.stdout.trim().split(' ');
        expect(got, r.stderr).toHaveLength(3);
        for (const g of got) expect(CARVE_DENIED.concat('ENOENT'), r.stdout).toContain(g);
        expect(got[0]).not.toBe('ENOENT');
        const ctl = await py(deep, [ws, 'make'], { cwd: ws, policy });
        expect(ctl.stdout.trim(), ctl.stderr).toBe('ok ok ok');
      } finally {
        for (const d of [`${ws}/.codex`, ws]) execFileSync('python3', ['-c', deep, d, 'rm']);
      }
      expect(fs.readdirSync(`${ws}/.codex`)).toEqual(['config.toml']);
    }, 180_000);

    // bind() of a unix socket makes a socket file: never in a carve-out (a socket named
    // .git/hooks/pre-commit breaks every commit outside). Network 'full' lets it bind at all.
    it.skipIf(attackSkip || !caps.python)('a unix socket cannot be bound inside a carve-out; in the workspace it can', async () => {
      const code = String.raw`
import errno, os, socket
os.umask(0o077)
def b(p):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(p); return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
print(b('.git/hooks/pre-commit'), b('.codex/sock'), b('sub/.git/hooks/post-checkout'), b('s1'), oct(os.stat('s1').st_mode & 0o777))
`;
      const r = await py(code, [], { cwd: ws, policy: { ...policy, network: 'full' } });
      const got = r.stdout.trim().split(' ');
      expect(got, r.stderr).toHaveLength(5);
      for (const g of got.slice(0, 3)) expect(CARVE_DENIED, r.stdout).toContain(g);
      expect(got.slice(3)).toEqual(['ok', '0o700']);
      expectCarveoutsUnchanged('unix sockets');
    });

    // The supervisor carries a call out itself: a signal that withdrew the call after that would
    // make the caller run it again (EINTR and a retry, or a restart), and a second mkdir or O_EXCL
    // create of the same name fails with EEXIST. A signal every 50 us while it creates 2,000
    // directories and files, each retried on EINTR: none may exist already.
    it.skipIf(attackSkip || !caps.python)('a signal storm never makes a create run twice', async () => {
      const code = String.raw`
import os, signal
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
twice = 0
def retry(f):
    global twice
    while True:
        try:
            return f()
        except InterruptedError:
            continue
        except FileExistsError:
            twice += 1
            return None
for i in range(2000):
    retry(lambda: os.mkdir('d%d' % i))
    fd = retry(lambda: os.open('n%d' % i, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    if fd is not None: os.close(fd)
signal.setitimer(signal.ITIMER_REAL, 0)
print('TWICE %d' % twice)
`;
      fs.mkdirSync(`${ws}/storm`);
      const r = await py(code, [], { cwd: `${ws}/storm`, policy, timeout: 120_000 });
      expect(r.stdout.trim(), r.stderr).toBe('TWICE 0');
      expect(fs.readdirSync(`${ws}/storm`)).toHaveLength(4000);
    }, 180_000);

    it.skipIf(attackSkip)('controls: the workspace, .git objects and git commit work; creates get the umask', async () => {
      const ops = [
        ['write', `${ws}/new.txt`, 'new'],
        ['append', `${ws}/a.txt`, 'b\n'],
        ['mkdirp', `${ws}/d/e/f`],
        ['rename', `${ws}/d`, `${ws}/d2`],
        ['link', `${ws}/a.txt`, `${ws}/a-link`],
        ['symlink', 'a.txt', `${ws}/a-sym`],
        ['write', `${ws}/a-sym`, 'via link'],
        ['truncate', `${ws}/new.txt`, '1'],
        ['unlink', `${ws}/a-link`],
        ['rmrf', `${ws}/d2`],
        ['write', `${ws}/.git/description`, 'ok'],
        ['write', '/dev/null', 'x'],
      ];
      expect(await probeOps(ops, { cwd: ws, policy })).toEqual(ops.map(() => 'ok'));
      expect(fs.readFileSync(`${ws}/a.txt`, 'utf8')).toBe('via link');
      expect(fs.readFileSync(`${ws}/new.txt`, 'utf8')).toBe('n');
      const r = await sh(
        'umask 027; echo x > u.txt; mkdir ud; mkfifo uf; stat -c "%a" u.txt ud uf; echo y | cat > /dev/stdout; ' +
          'git add a.txt u.txt && git commit -qm x && git log --oneline | wc -l; echo out > "$(mktemp -u -p .)"; echo rc=$?',
        { cwd: ws, env: GIT_ENV(ws), policy },
      );
      expect(r.stdout.split('\n').slice(0, 5), r.stderr).toEqual(['640', '750', '640', 'y', '1']);
      expect(r.stdout).toContain('rc=0');
      expect(fs.statSync(`${ws}/u.txt`).mode & 0o777).toBe(0o640);
      expect(git(ws, 'log', '--oneline').trim().split('\n')).toHaveLength(1);
      expectCarveoutsUnchanged('controls');
    });

    // The supervisor's thread keeps its effective capabilities cleared between calls and copies a
    // call's arguments without them, once more with them when refused (nargs::ReadWithCapsRetry).
    // A non-dumpable command can only be read with CAP_SYS_PTRACE: a root host has it and its
    // calls must work as before; an unprivileged host cannot read it (EACCES, docs/security.md).
    it.skipIf(attackSkip || mode !== 'landlock')('a non-dumpable command: a root host still carries its calls out; the carve-outs hold', async () => {
      const code = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE 0
assert libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE: 0 now
out = []
def t(name, f):
    try:
        f()
        out.append(name + '=ok')
    except OSError as e:
        out.append(name + '=' + errno.errorcode[e.errno])
t('create', lambda: open('nd.txt', 'w').write('x'))
t('chmod', lambda: os.chmod('nd.txt', 0o600))
t('rename', lambda: os.rename('nd.txt', 'nd2.txt'))
t('mkdir', lambda: os.mkdir('ndd'))
d = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
t('dirfd', lambda: os.close(os.open('ndd/x', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d)))
t('cfg', lambda: open('.git/config', 'a').write('evil'))
print(' '.join(out))
`;
      const r = await py(code, [], { cwd: ws, policy });
      const root = process.getuid?.() === 0;
      expect(r.stdout.trim(), r.stderr).toBe(
        root ? 'create=ok chmod=ok rename=ok mkdir=ok dirfd=ok cfg=EACCES' : 'create=EACCES chmod=EACCES rename=EACCES mkdir=EACCES dirfd=EACCES cfg=EACCES',
      );
      // The outside: what was made is there with its mode (root), or nothing was made.
      expect(fs.existsSync(`${ws}/nd2.txt`)).toBe(root);
      if (root) {
        expect(fs.statSync(`${ws}/nd2.txt`).mode & 0o777).toBe(0o600);
        expect(fs.existsSync(`${ws}/ndd/x`)).toBe(true);
      } else {
        expect(fs.existsSync(`${ws}/nd.txt`)).toBe(false);
        expect(fs.existsSync(`${ws}/ndd`)).toBe(false);
      }
      expectCarveoutsUnchanged('non-dumpable command');
    });
  });
});
