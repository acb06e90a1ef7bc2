/**
 * A plain POSIX launcher over Node's child_process, for platforms whose sandbox is itself a wrapper
 * executable (macOS: /usr/bin/sandbox-exec). The wrapper enforces; this only starts it in its own
 * process group so kill() reaches the whole tree.
 */
import * as cp from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { BackendProcess, ExitInfo } from '../backend';
import { SandboxError } from '../errors';
import type { PosixLaunchRequest } from './darwin';

export function launchWithChildProcess(req: PosixLaunchRequest): Omit<BackendProcess, 'enforcement'> {
  const child = cp.spawn(req.file, req.argv.slice(1), {
    argv0: req.argv[0],
    cwd: req.cwd,
    env: req.env,
    stdio: req.stdio,
    detached: true,
  });
  if (child.pid === undefined) {
    throw new SandboxError('ESPAWN', `could not start ${req.file}`);
  }
  const pid = child.pid;
  const exited = new Promise<ExitInfo>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return {
    pid,
    stdio: child.stdio.map((s) => (s ?? null) as Readable | Writable | null),
    kill: (signal) => {
      try {
        process.kill(-pid, signal);
        return true;
      } catch {
        return false;
      }
    },
    exited,
  };
}
