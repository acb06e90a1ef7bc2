/**
 * The fast wrapped line: what `SandboxManager.wrapWithSandbox` returns on Linux. srt's documented
 * library path runs the line with `spawn(line, { shell: true })`; a line that started our CLI paid
 * a Node start and a load of the package for every command (about 3x srt's own line). Here the
 * line is a few shell builtins that ask the host (this process, already initialized) to run the
 * command, and wait for its status:
 *
 *   1. wrap: a token (128 random bits) and a FIFO of its own for the answer, in the manager's
 *      0700 state directory; the line names both.
 *   2. the line (a shell this host spawned) writes "<token> run <its pid>" to the state
 *      directory's request FIFO and reads its answer FIFO.
 *   3. the host takes the shell's stdio (the copies the line keeps on fds 3-5, with pidfd_getfd:
 *      the same pipes, sockets or terminal; native/linux/stdio_adopt.cc, only from a direct child
 *      of this process whose command line holds the token), its cwd and environment
 *      (/proc/<pid>/cwd, environ), and runs the command in-process (spawnMapped, as
 *      spawnSandboxed), with the settings fixed at wrap time.
 *   4. INT, TERM and HUP the shell receives are passed on (its traps write "<token> sig NAME"); a
 *      shell killed outright (SIGKILL) gets its command killed; the answer is srt's exit status.
 *
 * Anything else falls back to the old line (`exec node cli.js srt ...`), so the line always runs
 * sandboxed: another platform, no pidfd_getfd (Linux < 5.6, a container's seccomp profile), a line
 * run by a process other than this host's direct child, a line run after `reset()`. Before the
 * host answers "run", the line does nothing but talk to it; the command runs in exactly one of
 * the two ways, never both: the host answers "fallback" only when it did not start the command.
 *
 * A sandboxed command that learns a token (a Landlock-mode sandbox without procPrivacy can read
 * other processes' command lines) and can write the request FIFO (a writable root holding the
 * host's temp directory) gains nothing: the host adopts only the pid whose command line holds the
 * token, the line's own shell, so a forged "run" starts that line's command as the line would
 * have (once), a request naming any other pid sends the line to its CLI fallback, and a forged
 * "sig" reaches only that command. Tests: test/srt/wrap-attach.test.ts.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { loadLinuxNative, type LinuxNative } from '../native';
import { statusOf } from './runtime';
import type { SandboxedProcess as PsbProcess } from '../index';

/** What the host needs to start one wrapped command once its line asks. */
export interface PendingWrap {
  /** Starts the command with the line's stdio, cwd and environment. */
  start(stdio: Array<number | 'ignore'>, cwd: string, env: Record<string, string>): PsbProcess;
}

interface Entry {
  pending: PendingWrap;
  answerFd: number;
  answerPath: string;
  /** Set once the host has started the command (a second "run" is ignored). */
  running?: { child: PsbProcess; pidfd: number; forwarded?: NodeJS.Signals; poll: NodeJS.Timeout };
}

/**
 * Where the line keeps its own stdio while it talks to the host: a shell moves fds 0-2 around for
 * each redirected builtin (`printf ... >&9` makes fd 1 the request FIFO for a moment), so the
 * host takes these copies, made when the line's group starts, never fds 0-2 themselves.
 */
const SAVED_STDIO = [3, 4, 5];
const FORWARDED: ReadonlySet<string> = new Set(['INT', 'TERM', 'HUP']);
/** Lines wrapped and not yet run, at most: past it the oldest one's line falls back to the CLI. */
const MAX_PENDING = 256;
/** How often a running line's shell is checked for having been killed outright. */
const CLIENT_POLL_MS = 100;
/**
 * How long a line waits for the host to take it before it runs the CLI instead (seconds; the
 * host takes it as soon as its event loop turns). PSB_SRT_TAKE_TIMEOUT_S overrides it (0.1-60).
 */
function takeTimeoutS(): string {
  const v = Number(process.env.PSB_SRT_TAKE_TIMEOUT_S);
  return String(Number.isFinite(v) && v >= 0.1 && v <= 60 ? v : 1);
}

function nativeAttach(): LinuxNative | undefined {
  if (process.platform !== 'linux') return undefined;
  try {
    const n = loadLinuxNative();
    return typeof n.adoptChildStdio === 'function' && typeof n.makeFifo === 'function' ? n : undefined;
  } catch {
    return undefined;
  }
}

/** Single quotes for sh: everything literal. */
const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export class AttachServer {
  private readonly entries = new Map<string, Entry>();
  private readonly requestFd: number;
  private readonly requests: net.Socket;
  private buffered = '';

  private constructor(
    private readonly dir: string,
    private readonly native: LinuxNative,
  ) {
    const req = path.join(dir, 'req');
    native.makeFifo(req);
    // Read-write: the host is a writer too, so the FIFO never reads EOF between lines, and no
    // open of it ever blocks.
    this.requestFd = fs.openSync(req, fs.constants.O_RDWR | fs.constants.O_NONBLOCK);
    this.requests = new net.Socket({ fd: this.requestFd, readable: true, writable: false });
    this.requests.unref();
    this.requests.setEncoding('utf8');
    this.requests.on('data', (d: string) => this.onData(d));
    this.requests.on('error', () => {});
  }

  /** A server in `dir` (the manager's 0700 state directory), or undefined where lines cannot attach. */
  static create(dir: string): AttachServer | undefined {
    const n = nativeAttach();
    if (!n) return undefined;
    try {
      return new AttachServer(dir, n);
    } catch {
      return undefined;
    }
  }

  /**
   * The line for one command: attach to this host, or (when it cannot) `fallback`, the CLI line.
   * The host's pid is checked first, so a line run after this host died goes to the CLI at once.
   */
  wrap(pending: PendingWrap, fallback: string): string {
    if (this.entries.size >= MAX_PENDING) this.dropOldestPending();
    const token = randomBytes(16).toString('hex');
    const answerPath = path.join(this.dir, `a-${token}`);
    this.native.makeFifo(answerPath);
    const answerFd = fs.openSync(answerPath, fs.constants.O_RDWR | fs.constants.O_NONBLOCK);
    this.entries.set(token, { pending, answerFd, answerPath });
    const a = q(answerPath);
    const alive = `kill -0 ${process.pid} 2>/dev/null`;
    const say = (what: string) => `printf '%s\\n' ${q(`${token} ${what}`)} >&9`;
    // POSIX sh (dash, bash, busybox); `$$` is the shell the host spawned. The answer FIFO is held
    // open for reading (fd 8) before "run" is sent, so an answer written at any time is kept; its
    // open fails (the group is skipped: "fallback") once the host dropped it. A timer answers
    // "timeout" if the host has not taken the line by then (its event loop is blocked, e.g. in a
    // spawnSync of this very line): the line then claims the command for the CLI (an O_EXCL
    // create, as the host claims it before starting it), and whoever claims first runs it. A
    // trapped signal may end a blocked `read` early, hence the loop; EOF (no writer left: the host
    // died) ends it, empty. The timer's fd (7) is closed in the line, so EOF can come.
    return [
      `psb_status=fallback;`,
      `if [ -p ${a} ] && ${alive}; then {`,
      ...[...FORWARDED].map((sig) => `trap ${q(say(`sig ${sig}`))} ${sig};`),
      `(sleep ${takeTimeoutS()}; printf 'timeout\\n' >&7) </dev/null >/dev/null 2>&1 3<&- 4>&- 5>&- 8<&- 9>&- & psb_timer=$!; exec 7>&-;`,
      `printf '%s run %s\\n' ${q(token)} "$$" >&9;`,
      `while :; do`,
      `if IFS= read -r psb_status <&8; then [ "$psb_status" = timeout ] || break;`,
      `if (set -C; : > ${q(this.claimPath(token))}) 2>/dev/null; then psb_status=fallback; break; fi;`,
      `else ${alive} || { psb_status=; break; }; fi;`,
      `done;`,
      `kill -s PIPE "$psb_timer" 2>/dev/null; trap - INT TERM HUP;`,
      `} 3<&0 4>&1 5>&2 8<${a} 7<>${a} 9<>${q(path.join(this.dir, 'req'))}; fi;`,
      `case "$psb_status" in`,
      `fallback) ${fallback};;`,
      `[0-9]*) exit "$psb_status";;`,
      `*) echo 'process-sandbox srt: the host process went away' >&2; exit 1;;`,
      `esac`,
    ].join(' ');
  }

  private claimPath(token: string): string {
    return path.join(this.dir, `c-${token}`);
  }

  close(): void {
    for (const [token, e] of this.entries) this.finish(token, e, 'fallback');
    this.requests.destroy();
  }

  private dropOldestPending(): void {
    for (const [token, e] of this.entries) {
      if (e.running) continue;
      this.finish(token, e, 'fallback');
      return;
    }
  }

  private onData(d: string): void {
    this.buffered += d;
    if (this.buffered.length > 1 << 16) this.buffered = ''; // garbage: nothing valid is that long
    let nl: number;
    while ((nl = this.buffered.indexOf('\n')) >= 0) {
      const line = this.buffered.slice(0, nl);
      this.buffered = this.buffered.slice(nl + 1);
      const m = /^([0-9a-f]{32}) (run|sig) ([0-9A-Z]{1,10})$/.exec(line);
      if (!m) continue;
      const e = this.entries.get(m[1]!);
      if (!e) continue;
      if (m[2] === 'run') this.run(m[1]!, e, Number(m[3]));
      else if (e.running && FORWARDED.has(m[3]!)) {
        e.running.forwarded = `SIG${m[3]}` as NodeJS.Signals;
        e.running.child.kill(e.running.forwarded);
      }
    }
  }

  /** The line's own shell only: a direct child of ours whose command line holds the token. */
  private run(token: string, e: Entry, pid: number): void {
    if (e.running || !Number.isInteger(pid) || pid <= 1) return;
    let cmdline: string;
    try {
      cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1');
    } catch {
      return this.finish(token, e, 'fallback');
    }
    // Not that line's shell (a forged request, or the line run from a script file): the CLI.
    if (!cmdline.includes(token)) return this.finish(token, e, 'fallback', `process ${pid} is not the line's shell`);
    // The line claims the command for its CLI when the host was too slow; whoever is first wins.
    try {
      fs.closeSync(fs.openSync(this.claimPath(token), 'wx', 0o600));
    } catch {
      return this.finish(token, e, 'fallback', 'the line took it first (the host was slow to answer)');
    }
    let adopted: { pidfd: number; fds: number[] };
    try {
      adopted = this.native.adoptChildStdio(pid, SAVED_STDIO);
    } catch (err) {
      // Not our child (run through another program), or no pidfd_getfd here: the line's CLI.
      return this.finish(token, e, 'fallback', (err as Error).message);
    }
    let child: PsbProcess;
    try {
      const cwd = fs.readlinkSync(`/proc/${pid}/cwd`);
      const env = parseEnviron(fs.readFileSync(`/proc/${pid}/environ`, 'utf8'));
      if (!path.isAbsolute(cwd)) throw new Error('the shell has no cwd');
      child = e.pending.start(adopted.fds.map((fd) => (fd < 0 ? 'ignore' : fd)), cwd, env);
    } catch (err) {
      closeAll(adopted);
      return this.finish(token, e, 'fallback', (err as Error).message);
    }
    // Our copies go once the command has its own: a start may be deferred (the network proxy
    // comes up first), so not before it ran or failed.
    let closed = false;
    const closeCopies = () => {
      if (closed) return;
      closed = true;
      for (const fd of adopted.fds) if (fd >= 0) fs.closeSync(fd);
    };
    child.once('spawn', closeCopies);
    child.exited.then(closeCopies, closeCopies);
    const poll = setInterval(() => {
      // Killed outright (no trap ran): its command goes too, as srt's does with its wrapper.
      if (this.native.pidfdExit(adopted.pidfd) !== null) child.kill('SIGKILL');
    }, CLIENT_POLL_MS);
    poll.unref();
    e.running = { child, pidfd: adopted.pidfd, poll };
    child.exited.then(
      (r) => this.finish(token, e, String(e.running?.forwarded && r.signal === e.running.forwarded ? 0 : statusOf(r.code, r.signal))),
      () => this.finish(token, e, '1'),
    );
  }

  private finish(token: string, e: Entry, answer: string, why?: string): void {
    if (!this.entries.delete(token)) return;
    if (why && process.env.SRT_DEBUG) process.stderr.write(`[SandboxDebug] wrapped line ${token.slice(0, 8)}: ${why}; it runs through the CLI\n`);
    try {
      fs.writeSync(e.answerFd, `${answer}\n`);
    } catch {
      /* the line is gone */
    }
    fs.closeSync(e.answerFd);
    fs.rmSync(e.answerPath, { force: true });
    fs.rmSync(this.claimPath(token), { force: true });
    if (e.running) {
      clearInterval(e.running.poll);
      fs.closeSync(e.running.pidfd);
    }
  }
}

function closeAll(a: { pidfd: number; fds: number[] }): void {
  for (const fd of [...a.fds, a.pidfd]) if (fd >= 0) fs.closeSync(fd);
}

/** /proc/<pid>/environ: NUL-separated KEY=VALUE. */
function parseEnviron(raw: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const kv of raw.split('\0')) {
    const i = kv.indexOf('=');
    if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return env;
}
