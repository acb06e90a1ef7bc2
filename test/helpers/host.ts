/**
 * Host-side pieces shared by the tests that run real clients outside the sandbox: whether a
 * tool is installed, another uid to act as, running a host command (as that uid) and collecting
 * its output, and why a Landlock-mode proxy cannot be tested here.
 */
import { execFileSync, spawn } from 'node:child_process';

import { caps } from './capabilities';

/** True when `cmd args` runs and exits 0 (a tool's presence check, e.g. `curl --version`). */
export function runsOk(cmd: string, args: string[] = ['--version']): boolean {
  try {
    execFileSync(cmd, args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export interface OtherUser {
  name: string;
  uid: number;
  gid: number;
}

/** Another uid to act as: psbtest's (or nobody's) when the test runs as root; else null. */
export function otherUser(): OtherUser | null {
  if (!caps.root) return null;
  for (const name of ['psbtest', 'nobody']) {
    try {
      const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
      if (uid !== 0) return { name, uid, gid };
    } catch {
      /* no such user */
    }
  }
  return null;
}

/** Runs `cmd args` on the host (as `as`, when given); resolves with its exit code and output (stdout and stderr together). */
export function runHost(cmd: string, args: string[], as?: { uid: number; gid: number }): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const c = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(as ? { uid: as.uid, gid: as.gid } : {}) });
    let out = '';
    c.stdout.on('data', (d: Buffer) => (out += d));
    c.stderr.on('data', (d: Buffer) => (out += d));
    c.on('close', (code) => resolve({ code, out }));
  });
}

/** Why Landlock mode cannot run a proxy-only network on this host (Landlock, seccomp, ABI 4 for the port rule), or undefined. */
export function landlockProxyMissing(): string | undefined {
  if (!caps.landlock) return 'Landlock mode needs Landlock and seccomp';
  if (caps.landlockAbi < 4) return `a proxy in Landlock mode needs Landlock ABI 4 (this kernel: ${caps.landlockAbi})`;
  return undefined;
}
