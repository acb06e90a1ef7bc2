/**
 * Landlock mode's supervision in a process of its own (native/linux/supervision_process.cc has the
 * design and why it is one process started once from a fresh image, not a fork per sandbox).
 *
 * The default. The host starts this file with its own executable (process.execPath; under
 * Electron with ELECTRON_RUN_AS_NODE=1), its end of a socketpair on fd 3, once, at the first
 * Landlock-mode spawn, and again after it died. Every Landlock-mode spawn goes to it: it confines
 * a thread of its own to the policy's envelope, spawns the sandbox from there and serves its
 * supervised calls; the host watches the sandbox as before. Sandboxes prepared ahead are
 * prepared there too (native.prepareSpare's last argument).
 *
 * The supervision stays in the host (as threads of it, each confined to its sandbox's envelope)
 * where the host's executable cannot be started as Node: under Electron (unless
 * PSB_SUPERVISION=process: it needs the RunAsNode fuse) and in a single-executable application;
 * in a host that runs one command and ends with it (the CLI: preferSupervisionInHost); and where
 * the host asks for it: PSB_SUPERVISION=thread. The report says which, and why.
 */
import { spawn as spawnChild } from 'node:child_process';
import path from 'node:path';

import { SandboxError } from '../../errors';
import { loadLinuxNative, type LinuxNative } from '../../native';

/**
 * Whether this host runs as a single-executable application (its executable runs its own code,
 * not a script). Asked once: where node:sea does not exist (Node 20 before 20.12 throws, and the
 * throw costs about a millisecond) the answer cannot change.
 */
let singleExecutable: boolean | undefined;
function isSingleExecutable(): boolean {
  if (singleExecutable === undefined) {
    try {
      singleExecutable = (require('node:sea') as { isSea(): boolean }).isSea();
    } catch {
      singleExecutable = false; // (No node:sea: no such application either.)
    }
  }
  return singleExecutable;
}

let oneCommandHost: string | undefined;

/**
 * For a host that runs one command and ends with it (the CLI's `run` and `srt`): the supervision
 * stays in it unless PSB_SUPERVISION says otherwise. A process of its own would cost its start
 * (about 50 ms, docs/performance.md) and protect nothing: such a host holds no state of its own
 * beyond the command's, and a crash of the supervision ends the command either way.
 */
export function preferSupervisionInHost(why: string): void {
  oneCommandHost = why;
}

/**
 * Why Landlock mode's supervision runs in the host process (as threads of it) for this spawn, or
 * undefined when it runs in a process of its own (the default). An unknown PSB_SUPERVISION is an
 * error: a host that asked for something gets it or is told.
 */
export function supervisionInHost(): string | undefined {
  const asked = process.env.PSB_SUPERVISION;
  if (asked !== undefined && asked !== '' && asked !== 'process' && asked !== 'thread') {
    throw new SandboxError('EINVALID_ARGUMENT', `PSB_SUPERVISION=${JSON.stringify(asked)}: expected 'process' (the default) or 'thread'`);
  }
  if (asked === 'thread') return 'PSB_SUPERVISION=thread';
  if (asked === 'process') return undefined;
  if (oneCommandHost) return oneCommandHost;
  if (process.versions.electron) return "under Electron (PSB_SUPERVISION=process moves it out; it needs the RunAsNode fuse)";
  if (isSingleExecutable()) return "a single-executable application (its executable cannot run the supervision's script)";
  return undefined;
}

/** Whether Landlock mode's supervision runs in a process of its own for this spawn. */
export function supervisionProcessWanted(): boolean {
  return supervisionInHost() === undefined;
}

const START_TIMEOUT_MS = 20_000;

/** This file as built (run from the sources, as the tests do, the build's copy). */
function processScript(): string {
  return __filename.endsWith('.js') ? __filename : path.join(__dirname, '..', '..', '..', 'dist', 'platform', 'linux', 'supervision-process.js');
}

/** The supervision process's pid, started (and waited for) if none runs. */
export function ensureSupervisionProcess(native: LinuxNative): number {
  const running = native.supervisionProcess();
  if (running > 0) return running;
  const [hostFd, processFd] = native.supervisionSocketpair();
  let child;
  try {
    child = spawnChild(process.execPath, [processScript()], {
      stdio: ['ignore', 'ignore', 'inherit', processFd],
      // A session of its own: a terminal's ^C or hang-up for the host's group never reaches it
      // (the sandboxes it serves end with the host, through the channel, not with the group).
      detached: true,
      cwd: '/',
      env: { ...process.env, ...(process.versions.electron ? { ELECTRON_RUN_AS_NODE: '1' } : {}) },
    });
  } catch (e) {
    native.closeOnPool(hostFd);
    throw new SandboxError('ESPAWN', `the supervision process could not be started (${process.execPath}): ${(e as Error).message}`);
  } finally {
    // (Not fs.closeSync: in a Worker, Node warns about closing an fd it did not open.) Once the
    // process has its copy, the host keeps only its own end: the process's death is then a hang-up.
    native.closeOnPool(processFd);
  }
  // It lives as long as the host does (it ends when the channel closes); it keeps no loop alive.
  // Any end the host sees once it was ready is unexpected (killed, crashed): its sandboxes were
  // stopped; said so.
  let started = false;
  child.on('error', () => {});
  child.once('exit', (code, signal) => {
    if (started) {
      process.emitWarning(
        `process-sandbox: the supervision process (pid ${child.pid}) ended (${signal ?? `exit ${code}`}); the Landlock-mode sandboxes it served were stopped`,
        { code: 'PSB_SUPERVISION_LOST' },
      );
    }
  });
  child.unref();
  try {
    const pid = native.supervisionAttach(hostFd, START_TIMEOUT_MS);
    started = true;
    return pid;
  } catch (e) {
    // Not ours to leave running: whatever started in its place (an Electron app whose RunAsNode
    // fuse is off starts as the app) is stopped.
    child.kill('SIGKILL');
    throw e;
  }
}

if (require.main === module) {
  // The supervision process: its JS thread serves the host's requests until the host is gone.
  loadLinuxNative().serveSupervision(3);
  process.exit(0);
}
