/**
 * Where `run --json` puts its result: stderr, an fd the caller opened (--json-fd), or a file opened
 * before the command starts (--json-file).
 */
import * as fs from 'node:fs';
import { UsageError } from './args';
import type { RunArgs } from './run-args';

/** The --json-file name no longer refers to the file the CLI opened (exit 125). */
export class JsonFileReplaced extends Error {}

/**
 * Why fd `n` cannot take the JSON result, or null when it can. Node itself holds fds above 2
 * (libuv's epoll, eventfds and signal pipes); writing JSON into one of those crashes the process,
 * so only an fd the caller opened qualifies: a file, a terminal, a socket, or a pipe whose other
 * end is not also held here (every one of Node's internal pipes has both ends in this process).
 */
function jsonFdProblem(n: number): string | null {
  let st: fs.Stats;
  try {
    st = fs.fstatSync(n);
  } catch {
    return 'that file descriptor is not open';
  }
  if (n <= 2 || st.isFile() || st.isCharacterDevice() || st.isSocket()) return null;
  if (process.platform !== 'linux') return 'only a file, a terminal or a socket can take the result here';
  let target: string;
  try {
    target = fs.readlinkSync(`/proc/self/fd/${n}`);
  } catch {
    return 'cannot tell what that file descriptor is';
  }
  if (!target.startsWith('pipe:')) return `that file descriptor is ${target}, not a file, pipe or socket the caller opened`;
  // O_ACCMODE from fdinfo's octal flags: 0 read-only, 1 write-only, 2 read-write.
  const accmode = (fd: string | number): number | null => {
    try {
      const m = /^flags:\s*([0-7]+)/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'));
      return m ? parseInt(m[1], 8) & 3 : null;
    } catch {
      return null;
    }
  };
  if (accmode(n) === 0) return 'that pipe end is open for reading only';
  for (const other of fs.readdirSync('/proc/self/fd')) {
    if (Number(other) === n) continue;
    try {
      if (fs.readlinkSync(`/proc/self/fd/${other}`) === target && accmode(other) === 0) return 'that pipe belongs to the CLI itself (its read end is open here too)';
    } catch {
      /* closed meanwhile */
    }
  }
  return null;
}

/**
 * Where the --json result goes. The file is opened before the command starts: the command may
 * be able to write the directory it lives in, and must not get to swap the name for a symlink
 * the CLI would then write through.
 */
export function openJsonSink(a: RunArgs): (obj: unknown) => void {
  if (!a.json) return () => {};
  let fd = 2;
  if (a.jsonFd !== undefined) {
    const why = jsonFdProblem(a.jsonFd);
    if (why) throw new UsageError(`--json-fd ${a.jsonFd}: ${why} (open it for the CLI, e.g. ${a.jsonFd}>result.json)`);
    fd = a.jsonFd;
  } else if (a.jsonFile !== undefined) {
    try {
      fd = fs.openSync(a.jsonFile, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | (fs.constants.O_NOFOLLOW ?? 0), 0o600);
    } catch (e) {
      throw new UsageError(`--json-file ${a.jsonFile}: ${(e as Error).message}`);
    }
  }
  return (obj) => {
    if (a.jsonFile !== undefined) {
      // The command may have written into the file meanwhile, or put another file in its place
      // (it can when the path is inside a writable root). A replaced name is refused: the reader
      // would find the command's file there, not ours.
      const ours = fs.fstatSync(fd);
      let now: fs.Stats | undefined;
      try {
        now = fs.lstatSync(a.jsonFile);
      } catch {
        now = undefined;
      }
      if (!now || now.ino !== ours.ino || now.dev !== ours.dev) {
        fs.closeSync(fd);
        throw new JsonFileReplaced(`--json-file ${a.jsonFile} was replaced while the command ran; no result was written (keep it outside the writable roots)`);
      }
      // What the command wrote into it must not survive beside the result.
      fs.ftruncateSync(fd, 0);
      fs.writeSync(fd, JSON.stringify(obj) + '\n', 0);
      fs.closeSync(fd);
      return;
    }
    fs.writeSync(fd, JSON.stringify(obj) + '\n');
  };
}
