/**
 * Terminals and other character devices a command puts on its own fds 0-2. Landlock mode grants
 * the terminals on the command's stdio by inode, as they were when it started; its path
 * supervisor (which carries out write-opens, unconfined) must judge by that same fixed set, never
 * by the caller's fd table now: an O_PATH fd of another terminal (or of /dev/kmsg) dup2'd onto
 * fd 0-2 must not turn a write-open of it into an allowed one.
 *
 * The outside: a pseudo-terminal made on the host by a helper process stands for the user's
 * other terminal, with a line "typed" into it. After the run the helper reads what the terminal
 * printed (everything up to a marker it writes itself after the run: the terminal keeps order) and
 * what is left of the typed line (up to a marker typed after the run). Controls: the same steps
 * unsandboxed reach the terminal; a command given a pty as its stdio still reopens it by name and
 * through /dev/tty. Isolated mode is the control where the host's terminals do not exist at all.
 */
import { spawn as spawnHost, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import readline from 'node:readline';
import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { spawn } from '../../lib/index';
import { loadLinuxNative } from '../../lib/native';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, makeScene, py, PYTHON } from '../helpers/sandbox';

const scene = makeScene('terminals');
fs.mkdirSync(`${scene.ws}/.git/hooks`, { recursive: true });
afterAll(() => scene.cleanup());

const landlockSkip = caps.metadataSupervisor
  ? undefined
  : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode has no path supervisor';
// eslint-disable-next-line no-console
if (landlockSkip) console.warn(`[landlock-terminals] SKIPPING the Landlock-mode cases: ${landlockSkip}`);

const TYPED = 'typed-secret\n';

// The user's other terminal: a pty pair held by a host process (raw: no echo, no line editing).
// Prints the slave's name; on a line from its stdin, prints JSON { out, in }: what the terminal
// printed, and what of the typed input is still unread.
const TERMINAL = `
import json, os, select, sys, tty
m, s = os.openpty()
tty.setraw(s)
print(os.ttyname(s), flush=True)
os.write(m, ${JSON.stringify(TYPED)}.encode())
sys.stdin.readline()
def drain(fd, end):
    got = b''
    while end not in got:
        r, _, _ = select.select([fd], [], [], 30)
        if not r:
            break
        got += os.read(fd, 4096)
    return got.decode('latin1')
os.write(s, b'END-OUT')
out = drain(m, b'END-OUT')
os.write(m, b'END-IN')
inp = drain(s, b'END-IN')
print(json.dumps({'out': out, 'in': inp}), flush=True)
`;

class HostTerminal {
  private readonly proc: ChildProcessWithoutNullStreams;
  private readonly lines: AsyncIterator<string>;
  path = '';
  constructor() {
    this.proc = spawnHost(PYTHON, ['-c', TERMINAL]);
    this.lines = readline.createInterface({ input: this.proc.stdout })[Symbol.asyncIterator]();
  }
  async open(): Promise<string> {
    this.path = (await this.lines.next()).value as string;
    expect(this.path).toMatch(/^\/dev\/pts\/\d+$/);
    return this.path;
  }
  /** What the terminal printed since it was made, and what of the typed line is left unread. */
  async finish(): Promise<{ out: string; in: string }> {
    this.proc.stdin.write('check\n');
    const r = JSON.parse((await this.lines.next()).value as string) as { out: string; in: string };
    this.proc.stdin.end();
    return r;
  }
}

// The attack: an O_PATH fd of `path` onto fd `onto` (no right needed for O_PATH), then a
// read-write open of it, by name or through /dev/std*; on success it writes `marker` and reads.
// Then a read-only open by name. Prints one line per step.
const ATTACK = `
import os, sys
path, onto, via, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
res = os.fdopen(os.dup(1), 'w')
try:
    p = os.open(path, os.O_PATH)
except OSError as e:
    print('path-errno', e.errno, file=res, flush=True)
    os._exit(0)
os.dup2(p, onto)
target = path if via == 'name' else ['/dev/stdin', '/dev/stdout', '/dev/stderr'][onto]
try:
    fd = os.open(target, (os.O_WRONLY if via == 'wo' else os.O_RDWR) | os.O_NOCTTY)
except OSError as e:
    print('rw-errno', e.errno, file=res, flush=True)
else:
    os.write(fd, marker.encode())
    got = os.read(fd, 64) if via != 'wo' else b''
    print('rw-open', got.decode('latin1'), file=res, flush=True)
try:
    os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    print('ro-open', file=res, flush=True)
except OSError as e:
    print('ro-errno', e.errno, file=res, flush=True)
os._exit(0)
`;

function marker(): string {
  return `INJECTED-${randomBytes(6).toString('hex')}`;
}

function policyFor(mode: 'isolated' | 'landlock'): SandboxPolicy {
  return modePolicy(mode, { filesystem: { write: [scene.ws] } });
}

describe.runIf(caps.linux)('a terminal put on fds 0-2 by the command', () => {
  it.skipIf(!caps.python)('control: unsandboxed, the same steps read the typed line and write into the other terminal', async () => {
    const t = new HostTerminal();
    const path = await t.open();
    const m = marker();
    const r = await py(ATTACK, [path, '0', 'name', m], { cwd: scene.ws, policy: null });
    const seen = await t.finish();
    expect(r.stdout).toMatch(/^rw-open t/m);
    expect(TYPED.startsWith(r.stdout.split('\n')[0]!.slice('rw-open '.length))).toBe(true);
    expect(seen.out).toBe(`${m}END-OUT`);
  });

  for (const { name: mode, skip } of MODES) {
    const s = skip ?? (mode === 'landlock' ? landlockSkip : undefined) ?? (caps.python ? undefined : 'no system python3');
    for (const [onto, via] of [
      [0, 'name'],
      [1, 'name'],
      [2, 'wo'],
      [0, 'std'],
      [2, 'std'],
    ] as const) {
      it.skipIf(s)(`${mode} mode: O_PATH onto fd ${onto}, then a write-open ${via === 'std' ? 'through /dev/std*' : 'by name'} is refused${s ? ` (skipped: ${s})` : ''}`, async () => {
        const t = new HostTerminal();
        const path = await t.open();
        const m = marker();
        const r = await py(ATTACK, [path, String(onto), via, m], { cwd: scene.ws, policy: policyFor(mode) });
        const seen = await t.finish();
        if (mode === 'landlock') {
          expect(r.enforcement.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
          expect(r.stdout).toBe('rw-errno 13\nro-errno 13\n');
        } else {
          // The host's terminals do not exist in the sandbox's own devpts.
          expect(r.stdout).toBe('path-errno 2\n');
        }
        // The outside: nothing was printed on the other terminal, the typed line is unread.
        expect(seen.out).toBe('END-OUT');
        expect(seen.in).toBe(`${TYPED}END-IN`);
      });
    }
  }
});

describe.runIf(caps.linux)('the command\'s own pty stays usable (Landlock mode)', () => {
  const s = MODES.find((m) => m.name === 'landlock')!.skip ?? landlockSkip ?? (caps.python ? undefined : 'no system python3');
  it.skipIf(s)(`it reopens its terminal by name and as /dev/tty and writes; another terminal stays refused${s ? ` (skipped: ${s})` : ''}`, async () => {
    const other = new HostTerminal();
    const otherPath = await other.open();
    const m = marker();
    const script = `
import os, sys
for name in (os.ttyname(0), '/dev/tty'):
    fd = os.open(name, os.O_RDWR | os.O_NOCTTY)
    os.write(fd, ('wrote-via:' + name + '\\n').encode())
    os.close(fd)
sys.stdout.flush()
${ATTACK.replace('path, onto, via, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]', `path, onto, via, marker = ${JSON.stringify(otherPath)}, 2, 'name', ${JSON.stringify(m)}`)}
`;
    const p = spawn(PYTHON, ['-c', script], { pty: { cols: 100, rows: 30 }, policy: policyFor('landlock'), cwd: scene.ws, env: BASE_ENV });
    let out = '';
    p.onData((d) => (out += d));
    const closed = await new Promise<[number | null, string | null]>((r) => p.on('close', (c, sig) => r([c, sig])));
    const seen = await other.finish();
    expect(p.enforcement.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
    expect(closed, out).toEqual([0, null]);
    expect(out).toMatch(/wrote-via:\/dev\/pts\/\d+\r\n/);
    expect(out).toContain('wrote-via:/dev/tty\r\n');
    expect(out).toContain('rw-errno 13\r\nro-errno 13\r\n');
    expect(seen.out).toBe('END-OUT');
    expect(seen.in).toBe(`${TYPED}END-IN`);
  });
});

// The kernel's backstop: Landlock mode's supervision is confined to the policy's outer envelope
// (native/linux/supervisor/supervision_envelope.h), which grants the terminals on the command's
// stdio by inode and no other. With the path supervisor's held-terminal check switched off (a
// test hook standing for a judging bug), the attack is still refused, by the kernel (EACCES),
// and the command's own terminal still opens.
describe.runIf(caps.linux)('the held-terminal check switched off (test hook, Landlock mode)', () => {
  const s = MODES.find((m) => m.name === 'landlock')!.skip ?? landlockSkip ?? (caps.python ? undefined : 'no system python3');
  const skipChecks = (skips: number) => {
    process.env.PSB_TEST_HOOKS = '1';
    loadLinuxNative().testSkipPathChecks(skips);
  };
  afterEach(() => skipChecks(0));

  for (const [onto, via] of [
    [0, 'name'],
    [2, 'wo'],
    [0, 'std'],
  ] as const) {
    it.skipIf(s)(`O_PATH onto fd ${onto}, then a write-open ${via === 'std' ? 'through /dev/std*' : 'by name'}: the kernel refuses it${s ? ` (skipped: ${s})` : ''}`, async () => {
      const t = new HostTerminal();
      const path = await t.open();
      const m = marker();
      skipChecks(1);
      const r = await py(ATTACK, [path, String(onto), via, m], { cwd: scene.ws, policy: policyFor('landlock') });
      const seen = await t.finish();
      expect(r.enforcement.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
      expect(r.enforcement.mechanisms.supervision).toMatch(/^confined by Landlock/);
      expect(r.stdout).toBe('rw-errno 13\nro-errno 13\n');
      // The outside: nothing was printed on the other terminal, the typed line is unread.
      expect(seen.out).toBe('END-OUT');
      expect(seen.in).toBe(`${TYPED}END-IN`);
    });
  }

  it.skipIf(s)(`control: the command's own terminal still opens by name and is written${s ? ` (skipped: ${s})` : ''}`, async () => {
    skipChecks(1);
    const script = `
import os
fd = os.open(os.ttyname(0), os.O_RDWR | os.O_NOCTTY)
os.write(fd, b'wrote-own\\n')
`;
    const p = spawn(PYTHON, ['-c', script], { pty: { cols: 100, rows: 30 }, policy: policyFor('landlock'), cwd: scene.ws, env: BASE_ENV });
    let out = '';
    p.onData((d) => (out += d));
    const closed = await new Promise<[number | null, string | null]>((r) => p.on('close', (c, sig) => r([c, sig])));
    expect(p.enforcement.mechanisms.supervision).toMatch(/^confined by Landlock/);
    expect(closed, out).toEqual([0, null]);
    expect(out).toContain('wrote-own\r\n');
  });
});

// /dev/kmsg: writable by root outside the sandbox (a line in the kernel log), never inside it.
const KMSG_READ = `
import os
fd = os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK)
out = b''
while True:
    try:
        out += os.read(fd, 8192)
    except BlockingIOError:
        break
    except BrokenPipeError:
        continue
print(out.decode('utf-8', 'replace'))
`;

describe.runIf(caps.linux)('/dev/kmsg put on fd 2 by the command', () => {
  const kmsgWritable = (() => {
    try {
      fs.closeSync(fs.openSync('/dev/kmsg', 'w'));
      return true;
    } catch {
      return false;
    }
  })();
  const base = !caps.root ? 'not root: /dev/kmsg is not writable anyway' : !kmsgWritable ? 'this host has no /dev/kmsg writable by root' : !caps.python ? 'no system python3' : undefined;
  // eslint-disable-next-line no-console
  if (base) console.warn(`[landlock-terminals] SKIPPING the /dev/kmsg cases: ${base}`);
  const s = base ?? MODES.find((m) => m.name === 'landlock')!.skip ?? landlockSkip;

  it.skipIf(base)(`control: unsandboxed, root writes a line into the kernel log this way${base ? ` (skipped: ${base})` : ''}`, async () => {
    const m = marker();
    const r = await py(ATTACK, ['/dev/kmsg', '2', 'wo', `<5>${m}\n`], { cwd: scene.ws, policy: null });
    expect(r.stdout).toBe('rw-open \nro-open\n');
    expect((await py(KMSG_READ, [], { cwd: scene.ws, policy: null })).stdout).toContain(m);
  });

  it.skipIf(s)(`landlock mode: the write-open is refused and the kernel log does not get the line${s ? ` (skipped: ${s})` : ''}`, async () => {
    const m = marker();
    const r = await py(ATTACK, ['/dev/kmsg', '2', 'wo', `<5>${m}\n`], { cwd: scene.ws, policy: policyFor('landlock') });
    expect(r.enforcement.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
    expect(r.stdout).toBe('rw-errno 13\nro-errno 13\n');
    expect((await py(KMSG_READ, [], { cwd: scene.ws, policy: null })).stdout).not.toContain(m);
  });
});

// A terminal index freed while the sandbox runs goes to the next terminal made (the user's next
// tab), with the same device and inode numbers: the terminal the command was spawned with must
// not stand for that one.
const PTY_AGAIN = `
import os, sys
want = sys.argv[1]
for _ in range(64):
    m, s = os.openpty()
    if os.ttyname(s) == want:
        break
    os.close(m); os.close(s)
else:
    print('busy', flush=True)
    sys.exit(0)
print('got', flush=True)
sys.stdin.readline()
os.write(s, b'END-OUT')
out = b''
while b'END-OUT' not in out:
    out += os.read(m, 4096)
print(out.decode('latin1'), flush=True)
`;

describe.runIf(caps.linux)('a terminal index given to another terminal during the run (Landlock mode)', () => {
  const s = MODES.find((m) => m.name === 'landlock')!.skip ?? landlockSkip ?? (caps.python ? undefined : 'no system python3');
  it.skipIf(s)(`the command spawned with it cannot open the new terminal by that name${s ? ` (skipped: ${s})` : ''}`, async (ctx) => {
    const first = new HostTerminal();
    const path = await first.open();
    const m = marker();
    const ready = `${scene.ws}/ready-${m}`;
    const go = `${scene.ws}/go-${m}`;
    // The command lets go of its terminal, waits for the host, then opens the name again.
    const script = `
import os, sys
os.closerange(0, 3)
open(${JSON.stringify(ready)}, 'w').close()
while not os.path.exists(${JSON.stringify(go)}):
    os.sched_yield()
try:
    fd = os.open(${JSON.stringify(path)}, os.O_RDWR | os.O_NOCTTY)
    os.write(fd, b${JSON.stringify(m)})
    r = 'rw-open'
except OSError as e:
    r = 'rw-errno %d' % e.errno
with open(${JSON.stringify(go)}, 'w') as f:
    f.write(r)
`;
    const slave = fs.openSync(path, 'r+');
    const p = spawn(PYTHON, ['-c', script], { stdio: [slave, slave, slave], policy: policyFor('landlock'), cwd: scene.ws, env: BASE_ENV });
    const closed = new Promise<[number | null, string | null]>((r) => p.on('close', (c, sig) => r([c, sig])));
    fs.closeSync(slave);
    while (!fs.existsSync(ready)) await new Promise((r) => setTimeout(r, 20));
    await first.finish(); // the helper exits: the terminal is gone, its index free
    const again = spawnHost(PYTHON, ['-c', PTY_AGAIN, path]);
    const lines = readline.createInterface({ input: again.stdout })[Symbol.asyncIterator]();
    const got = (await lines.next()).value as string;
    if (got !== 'got') {
      fs.writeFileSync(go, '');
      await closed;
      again.kill();
      ctx.skip(`another process took ${path} before the test could make a terminal there again`);
    }
    fs.writeFileSync(go, '');
    const exit = await closed;
    again.stdin.write('\n');
    const out = (await lines.next()).value as string;
    expect(exit).toEqual([0, null]);
    expect(p.enforcement.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
    expect(fs.readFileSync(go, 'utf8')).toMatch(/^rw-errno \d+$/);
    expect(out).toBe('END-OUT');
  });
});
