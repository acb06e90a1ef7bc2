/**
 * The names inside a deny-read directory cannot be learned by guessing them through the stat
 * family. Landlock (up to ABI 7) checks no lookup, stat, statfs, access, readlink or xattr
 * read, so in Landlock mode `stat
 * ~/.ssh/id_rsa` told that the name exists, its size and its times. With a deny-read path under
 * a readable root the supervisor answers those calls itself (native/linux/supervisor/supervise_stats.cc):
 * every name inside the denied directory, at any depth and by any spelling (.., //, a planted
 * link, a dirfd or a cwd inside or above it, /proc/self/cwd, /proc/self/fd/N), answers exactly as
 * a missing name does. Isolated mode masks the directory with a mount: the same property holds.
 *
 * Oracle: for each spelling and call, the answers for existing names (a file, a directory, a
 * symlink, a file in a subdirectory) equal the answer for missing ones. Positive controls: the
 * same probes on an ordinary directory of the same layout tell existing from missing names (and
 * their sizes, link texts, xattrs); the denied directory itself, fstat of open fds, `ls -l`,
 * `find` and `git status` in the workspace work as on the host; the secret is unchanged outside.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { planLinux } from '../../lib/platform/linux/plan';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { makeScene, py, PYTHON, sh, type Scene } from '../helpers/sandbox';

const SECRET = 'SSH-PRIVATE-KEY';
const EXISTING = ['id_rsa', 'sub', 'lnk', 'sub/deep', 'dangling'];
const MISSING = ['nope', 'nosub/deep'];

// For each spelling of DIR/NAME and each call, the answer: "ok:<what it told>" or the errno name.
// argv: home, the directory's name in it, the workspace, then the names.
const PROBE = String.raw`
import ctypes, errno, json, os, platform, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
home, dn, ws = sys.argv[1:4]
names = sys.argv[4:]
d = os.path.join(home, dn)
AT_FDCWD = -100
def err(e): return errno.errorcode.get(e, str(e))
def c_call(f, *a):
    r = f(*a)
    return 'ok:%d' % r if r >= 0 else err(ctypes.get_errno())
def res(f):
    try:
        r = f()
        return 'ok' if r is None else 'ok:' + str(r)
    except OSError as e:
        return err(e.errno)
def st(s): return '%o:%d:%d' % (stat.S_IFMT(s.st_mode), s.st_size, s.st_mtime_ns)
def statx(fd, p, flags):
    buf = ctypes.create_string_buffer(256)
    r = libc.statx(fd, p.encode(), flags, 0xfff, buf)
    if r != 0: return err(ctypes.get_errno())
    return 'ok:%d' % int.from_bytes(buf.raw[40:48], 'little')  # stx_size
x86 = platform.machine() == 'x86_64'
def raw(nr, p, *a):
    if not x86: return 'n/a'
    buf = ctypes.create_string_buffer(4096)
    args = [ctypes.c_long(nr), p.encode()] + [buf if x == 'buf' else ctypes.c_long(x) for x in a]
    r = libc.syscall(*args)
    if r < 0: return err(ctypes.get_errno())
    return 'ok:%d' % r
def ops(fd, p):
    # fd: a dirfd the path is relative to (AT_FDCWD: the cwd or an absolute path).
    full = p if fd == AT_FDCWD or p.startswith('/') else '/proc/self/fd/%d/%s' % (fd, p)
    kw = {} if fd == AT_FDCWD else {'dir_fd': fd}
    return {
        'stat': res(lambda: st(os.stat(p, **kw))),
        'lstat': res(lambda: st(os.stat(p, follow_symlinks=False, **kw))),
        'statx': statx(fd, p, 0),
        'statx_nofollow': statx(fd, p, 0x100),
        'faccessat': c_call(libc.faccessat, fd, p.encode(), 0, 0),
        'faccessat2': c_call(libc.faccessat, fd, p.encode(), 4, 0x300),
        'readlink': res(lambda: os.readlink(p, **kw)),
        'getxattr': res(lambda: os.getxattr(full, 'user.k')),
        'lgetxattr': res(lambda: os.getxattr(full, 'user.k', follow_symlinks=False)),
        'listxattr': res(lambda: sorted(os.listxattr(full))),
        'llistxattr': res(lambda: sorted(os.listxattr(full, follow_symlinks=False))),
        'statfs': res(lambda: os.statvfs(full).f_bsize > 0),
        'sys_stat': raw(4, full, 'buf'),
        'sys_lstat': raw(6, full, 'buf'),
        'sys_access': raw(21, full, 0),
        'sys_readlink': raw(89, full, 'buf', 4096),
    }
out = {}
fd_home = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
try:
    fd_d = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
except OSError:
    fd_d = None
for n in names:
    r = {}
    r['abs'] = ops(AT_FDCWD, d + '/' + n)
    r['dotdot'] = ops(AT_FDCWD, '%s/../%s/%s/%s' % (ws, os.path.basename(home), dn, n))
    r['slashes'] = ops(AT_FDCWD, '%s//%s///%s' % (home, dn, n))
    r['link'] = ops(AT_FDCWD, ws + '/keys/' + n)
    r['inner_dotdot'] = ops(AT_FDCWD, d + '/sub/../' + n)
    r['trailing'] = ops(AT_FDCWD, d + '/' + n + '/')
    r['dirfd_above'] = ops(fd_home, dn + '/' + n)
    if fd_d is not None:
        r['dirfd_inside'] = ops(fd_d, n)
        r['proc_fd'] = ops(AT_FDCWD, '/proc/self/fd/%d/%s' % (fd_d, n))
    os.chdir(home)
    r['cwd_above'] = ops(AT_FDCWD, dn + '/' + n)
    r['proc_cwd'] = ops(AT_FDCWD, '/proc/self/cwd/%s/%s' % (dn, n))
    r['thread_self'] = ops(AT_FDCWD, '/proc/thread-self/cwd/%s/%s' % (dn, n))
    try:
        os.chdir(d)
        r['cwd_inside'] = ops(AT_FDCWD, n)
    except OSError:
        pass
    os.chdir(ws)
    out[n] = r
# The directory itself, and fds already open (fstat, AT_EMPTY_PATH): the truth.
out['.'] = {'self': {'stat': res(lambda: stat.S_ISDIR(os.stat(d).st_mode)), 'fstat': res(lambda: stat.S_ISDIR(os.fstat(fd_home).st_mode)),
  'empty_path': statx(fd_home, '', 0x1000)[:3],
  'fstat_file': res(lambda: os.fstat(os.open(ws + '/tracked.txt', os.O_RDONLY)).st_size)}}
print('RES ' + json.dumps(out))
`;

type Answers = Record<string, Record<string, Record<string, string>>>;

function parse(stdout: string): Answers {
  const line = stdout.split('\n').find((l) => l.startsWith('RES '));
  if (!line) throw new Error(`the probe printed no result: ${stdout}`);
  return JSON.parse(line.slice(4)) as Answers;
}

function makeTree(dir: string): void {
  fs.mkdirSync(path.join(dir, 'sub'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'id_rsa'), SECRET);
  fs.writeFileSync(path.join(dir, 'sub', 'deep'), SECRET);
  fs.symlinkSync('id_rsa', path.join(dir, 'lnk'));
  fs.symlinkSync('nowhere', path.join(dir, 'dangling'));
}

/** Sets a user xattr where the file system takes one; false (said loudly) where it does not. */
function setXattr(file: string): boolean {
  try {
    execFileSync(PYTHON, ['-c', 'import os, sys; os.setxattr(sys.argv[1], "user.k", b"v")', file], { stdio: 'ignore' });
    return true;
  } catch {
    console.warn(`[landlock-denyread-stat] SKIPPING the xattr value checks: ${file}'s file system takes no user xattrs`);
    return false;
  }
}

const skipCommon = !fs.existsSync(PYTHON) ? `${PYTHON} is missing (the probes are written in Python)` : undefined;
if (skipCommon) console.warn(`[landlock-denyread-stat] SKIPPING: ${skipCommon}`);

describe.each(MODES)('names inside a deny-read directory cannot be guessed, $name mode', ({ name: mode, skip: modeSkip }) => {
  const landlock = mode === 'landlock';
  const skip =
    modeSkip ?? skipCommon ?? (landlock && !caps.metadataSupervisor ? 'no seccomp user notification with ADDFD (5.9+): no supervisor' : undefined);
  if (skip && !modeSkip) console.warn(`[landlock-denyread-stat] SKIPPING ${mode} mode: ${skip}`);
  let scene: Scene;
  let home: string;
  let xattrs = false;
  beforeEach(() => {
    if (skip) return;
    scene = makeScene(`stat-${mode}`);
    home = path.join(scene.root, 'home');
    makeTree(path.join(home, '.ssh'));
    makeTree(path.join(home, 'plain'));
    xattrs = setXattr(path.join(home, '.ssh', 'id_rsa')) && setXattr(path.join(home, 'plain', 'id_rsa'));
    fs.symlinkSync(path.join(home, '.ssh'), path.join(scene.ws, 'keys'));
    fs.writeFileSync(path.join(scene.ws, 'tracked.txt'), 'tracked\n');
    execFileSync('chmod', ['-R', 'a+rX', scene.root]);
  });
  afterEach(() => {
    if (!skip) scene.cleanup();
  });
  const policy = () => modePolicy(mode, { filesystem: { write: [scene.ws], denyRead: [path.join(home, '.ssh')] } });

  it.skipIf(skip)('every stat, access, readlink and xattr read answers alike for existing and missing names, by every spelling', async () => {
    const r = await py(PROBE, [home, '.ssh', scene.ws, ...EXISTING, ...MISSING], { cwd: scene.ws, policy: policy() });
    expect(r.code, r.stderr).toBe(0);
    const a = parse(r.stdout);
    const missing = a.nope;
    // The spellings through a dirfd or a cwd inside the denied directory exist in both modes
    // where the directory itself can be opened (Landlock mode); the rest everywhere.
    expect(Object.keys(missing)).toEqual(expect.arrayContaining(['abs', 'dotdot', 'slashes', 'link', 'dirfd_above', 'proc_cwd', 'thread_self']));
    if (landlock) expect(Object.keys(missing)).toEqual(expect.arrayContaining(['dirfd_inside', 'proc_fd', 'cwd_inside']));
    for (const n of [...EXISTING, 'nosub/deep']) {
      for (const [spelling, calls] of Object.entries(missing)) {
        expect(a[n][spelling], `${n} by ${spelling}`).toEqual(calls);
      }
    }
    if (landlock) {
      // Exactly the kernel's answer for a missing name: ENOENT from every call.
      for (const [spelling, calls] of Object.entries(missing)) {
        for (const [call, answer] of Object.entries(calls)) {
          if (answer !== 'n/a') expect(answer, `${call} of nope by ${spelling}`).toBe('ENOENT');
        }
      }
    }
    // The directory itself and fds already open tell the truth.
    expect(a['.'].self).toEqual({ stat: 'ok:True', fstat: 'ok:True', empty_path: 'ok:', fstat_file: 'ok:8' });
    // Outside: the secret is where it was, unchanged.
    expect(fs.readFileSync(path.join(home, '.ssh', 'id_rsa'), 'utf8')).toBe(SECRET);
  });

  it.skipIf(skip)('positive control: the same calls on an ordinary directory tell existing names from missing ones', async () => {
    const r = await py(PROBE, [home, 'plain', scene.ws, ...EXISTING, ...MISSING], { cwd: scene.ws, policy: policy() });
    expect(r.code, r.stderr).toBe(0);
    const a = parse(r.stdout);
    const size = SECRET.length;
    for (const spelling of ['abs', 'dotdot', 'slashes', 'dirfd_above', 'dirfd_inside', 'proc_fd', 'cwd_above', 'cwd_inside', 'proc_cwd', 'thread_self', 'inner_dotdot']) {
      const id = a.id_rsa[spelling];
      expect(id.stat, spelling).toMatch(new RegExp(`^ok:100000:${size}:`));
      expect(id.statx, spelling).toBe(`ok:${size}`);
      expect(id.faccessat, spelling).toBe('ok:0');
      expect(id.readlink, spelling).toBe('EINVAL');
      expect(id.statfs, spelling).toBe('ok:True');
      expect(a.lnk[spelling].readlink, spelling).toBe('ok:id_rsa');
      expect(a.lnk[spelling].lstat, spelling).toMatch(/^ok:120000:6:/);
      expect(a.sub[spelling].stat, spelling).toMatch(/^ok:40000:/);
      expect(a['sub/deep'][spelling].statx, spelling).toBe(`ok:${size}`);
      expect(a.dangling[spelling].stat, spelling).toBe('ENOENT');
      expect(a.dangling[spelling].lstat, spelling).toMatch(/^ok:120000:7:/);
      expect(a.nope[spelling].stat, spelling).toBe('ENOENT');
      if (xattrs) expect(id.getxattr, spelling).toBe("ok:b'v'");
      if (xattrs) expect(id.listxattr, spelling).toBe("ok:['user.k']");
      if (a.nope[spelling].sys_stat !== 'n/a') {
        expect(id.sys_stat, spelling).toBe('ok:0');
        expect(a.lnk[spelling].sys_readlink, spelling).toBe('ok:6');
        expect(id.sys_access, spelling).toBe('ok:0');
      }
    }
    expect(a.id_rsa.trailing.stat).toBe('ENOTDIR');
  });

  it.skipIf(skip)('with procPrivacy, read-only opens of names inside answer as missing too; ordinary ones open', async () => {
    const code = String.raw`
import errno, json, os, sys
home, ws = sys.argv[1:3]
def res(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def op(p, flags, dir_fd=None):
    return res(lambda: os.close(os.open(p, flags, dir_fd=dir_fd)))
out = {}
fd_home = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
for dn in ['.ssh', 'plain']:
    for n in sys.argv[3:]:
        d = home + '/' + dn
        out[dn + '/' + n] = [op(d + '/' + n, os.O_RDONLY), op(d + '/' + n, os.O_RDONLY | os.O_DIRECTORY),
            op(ws + '/../home/' + dn + '/' + n, os.O_RDONLY), op(dn + '/' + n, os.O_RDONLY, fd_home),
            op('/proc/self/fd/%d/%s/%s' % (fd_home, dn, n), os.O_RDONLY), op(d + '/sub/../' + n, os.O_RDONLY | os.O_NOFOLLOW)]
print('RES ' + json.dumps(out))
`;
    const pol = modePolicy(mode, { procPrivacy: true, filesystem: { write: [scene.ws], denyRead: [path.join(home, '.ssh')] } });
    const r = await py(code, [home, scene.ws, ...EXISTING, ...MISSING], { cwd: scene.ws, policy: pol });
    expect(r.code, r.stderr).toBe(0);
    const line = r.stdout.split('\n').find((l) => l.startsWith('RES ')) ?? '';
    const a = JSON.parse(line.slice(4)) as Record<string, string[]>;
    const missing = a['.ssh/nope'];
    if (landlock) expect(missing).toEqual(Array(6).fill('ENOENT'));
    for (const n of [...EXISTING, 'nosub/deep']) expect(a[`.ssh/${n}`], n).toEqual(missing);
    // Positive control: the same opens in an ordinary directory.
    expect(a['plain/id_rsa']).toEqual(['ok', 'ENOTDIR', 'ok', 'ok', 'ok', 'ok']);
    expect(a['plain/sub']).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
    expect(a['plain/lnk'].slice(0, 5)).toEqual(['ok', 'ENOTDIR', 'ok', 'ok', 'ok']);
    expect(a['plain/nope']).toEqual(Array(6).fill('ENOENT'));
  });

  it.skipIf(skip)('a path swapped while the call waits never reaches a denied name (the call is carried out on one copy)', async () => {
    // One thread flips the string between an ordinary file (3 bytes) and the denied id_rsa (15)
    // while the other stats it: whatever string each call caught, it never answers with the
    // denied one's size (a check of one copy and a kernel lookup of another would).
    fs.writeFileSync(path.join(home, 'plain', 'id_rsa'), 'abc');
    const code = String.raw`
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
a, b = (p.encode() for p in sys.argv[1:3])
n = max(len(a), len(b)) + 1
buf = ctypes.create_string_buffer(n)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, a.ljust(n, b'\0'), n)
        ctypes.memmove(buf, b.ljust(n, b'\0'), n)
seen = {}
st = ctypes.create_string_buffer(256)
# The control, before the race: the ordinary file's size.
ctypes.memmove(buf, a.ljust(n, b'\0'), n)
r = libc.statx(-100, buf, 0, 0x200, st)
print('CONTROL %d %d' % (r, int.from_bytes(st.raw[40:48], 'little')))
t = threading.Thread(target=flip)
t.start()
for i in range(5000):
    r = libc.statx(-100, buf, 0, 0x200, st)
    k = 'ok:%d' % int.from_bytes(st.raw[40:48], 'little') if r == 0 else 'errno:%d' % ctypes.get_errno()
    seen[k] = seen.get(k, 0) + 1
stop = True
t.join()
print('SEEN ' + ' '.join(sorted(seen)))
`;
    const r = await py(code, [path.join(home, 'plain', 'id_rsa'), path.join(home, '.ssh', 'id_rsa')], { cwd: scene.ws, policy: policy() });
    expect(r.code, r.stderr).toBe(0);
    const seen = (r.stdout.split('\n').find((l) => l.startsWith('SEEN ')) ?? '').slice(5).split(' ');
    expect(r.stdout).toContain('CONTROL 0 3\n');
    // Which strings the race caught varies with the machine's load; the secret's size never.
    expect(seen.length).toBeGreaterThan(0);
    expect(seen).not.toContain(`ok:${SECRET.length}`);
  });

  it.skipIf(skip)('a root nested in a denied directory stays reachable; /proc links are the caller\'s own', async () => {
    const denied = path.join(home, '.ssh');
    fs.mkdirSync(path.join(denied, 'pub', 'in'), { recursive: true });
    fs.writeFileSync(path.join(denied, 'pub', 'in', 'key.pub'), 'pub');
    execFileSync('chmod', ['-R', 'a+rX', denied]);
    const code = String.raw`
import os, sys
d = sys.argv[1]
def res(f):
    try:
        return 'ok:' + str(f())
    except OSError as e:
        return e.strerror
print('RES', res(lambda: os.stat(d + '/pub/in/key.pub').st_size), res(lambda: os.stat(d + '/pub/../id_rsa').st_size),
      res(lambda: os.stat(d + '/id_rsa').st_size), res(lambda: os.readlink('/proc/self') == str(os.getpid())),
      res(lambda: os.readlink('/proc/thread-self') == '%d/task/%d' % (os.getpid(), os.getpid())),
      res(lambda: os.path.basename(os.readlink('/proc/self/exe')).startswith('python')),
      res(lambda: os.stat('/proc/self/cwd/tracked.txt').st_size), res(lambda: os.readlink('/proc/%s/cwd' % sys.argv[2])))
`;
    const policy2 = modePolicy(mode, { filesystem: { write: [scene.ws, path.join(denied, 'pub')], denyRead: [denied] } });
    const r = await py(code, [denied, String(process.pid)], { cwd: scene.ws, policy: policy2 });
    expect(r.code, r.stderr).toBe(0);
    const line = r.stdout.split('\n').find((l) => l.startsWith('RES ')) ?? '';
    // The host's cwd link: Landlock's ptrace rule refuses it (EACCES); isolated mode's pid
    // namespace has no such process.
    const foreign = landlock ? 'Permission denied' : 'No such file or directory';
    expect(line).toBe(`RES ok:3 No such file or directory No such file or directory ok:True ok:True ok:True ok:8 ${foreign}`);
  });

  it.skipIf(skip || !caps.git)('ls -l, find and git status in the workspace work as on the host', async () => {
    const env = { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: scene.ws, GIT_CONFIG_NOSYSTEM: '1', LANG: 'C' };
    const git = (args: string[]) => execFileSync('git', args, { cwd: scene.ws, env });
    git(['init', '-q']);
    git(['-c', 'user.name=t', '-c', 'user.email=t@t', 'add', 'tracked.txt']);
    git(['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'one']);
    fs.writeFileSync(path.join(scene.ws, 'tracked.txt'), 'changed\n');
    fs.writeFileSync(path.join(scene.ws, 'new.txt'), 'new\n');
    const script = [
      'ls -l | sed 1d | awk "{print \\$1, \\$NF}"',
      "find . -path ./.git -prune -o \\( -name '*.txt' -o -name keys \\) -print | sort",
      'git status --porcelain',
      'ls -ld keys/ ../home/.ssh | wc -l',
    ].join('; ');
    const host = execFileSync('/bin/sh', ['-c', script], { cwd: scene.ws, env, encoding: 'utf8' });
    const r = await sh(script, { cwd: scene.ws, env, policy: policy() });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(host);
    expect(r.stdout).toContain(' M tracked.txt\n');
    expect(r.stdout).toContain('?? new.txt\n');
  });
});

it('planLinux: the stat class is on with the listing class (a deny-read path under a readable root), and reported', () => {
  const root = fs.mkdtempSync('/var/tmp/psb-stat-plan-');
  const ws = path.join(root, 'ws');
  const denied = path.join(root, 'home', '.ssh');
  fs.mkdirSync(ws);
  fs.mkdirSync(denied, { recursive: true });
  const plan = (denyRead: string[]) => {
    const probe = { landlockAbi: 7, seccomp: 0, userns: -1, euid: 1000, connectSupervisor: 0 };
    const rules = {
      readAll: true, readRoots: [], writeRoots: [ws], readOnly: [], denyRead,
      tmp: 'none', network: { kind: 'none' }, mode: 'landlock', degraded: true, limits: {},
    } as unknown as Parameters<typeof planLinux>[0]['rules'];
    return planLinux({ rules, mode: 'landlock', file: '/bin/true', argv: ['true'], env: {}, cwd: '/', probe: probe as Parameters<typeof planLinux>[0]['probe'] });
  };
  const p = plan([denied]);
  expect(p.native.seccomp!.metadataSupervisor).toMatchObject({ listDirs: true, statNames: true, denyRead: [denied] });
  expect(p.enforcement.mechanisms).toMatchObject({ denyReadNames: expect.stringContaining('stat') });
  // Without a deny-read path neither class is on: stats stay the kernel's, at no cost.
  const plain = plan([]);
  expect(plain.native.seccomp!.metadataSupervisor!.statNames).toBeUndefined();
  expect(plain.enforcement.mechanisms).not.toHaveProperty('denyReadNames');
  fs.rmSync(root, { recursive: true, force: true });
});
