/**
 * The server-side sandbox floor (`--require-sandbox`, ExecServerOptions.requireSandbox; always on
 * for a WebSocket listener without authentication), and the server's default sandbox.
 *
 * Default sandbox (defaultSandbox, `--default-sandbox`): a process/start, fs/* call, fs/open or
 * capabilities/discoverV2 that carries no `sandbox` runs in one the server supplies: Codex's
 * workspace-write profile (default) or read-only, over the request's cwd (process/start,
 * capabilities/discoverV2) or, for fs/* and fs/open (they carry no cwd), the floor's write bound
 * under the floor and the server's working directory otherwise;
 * over the file system root, workspace-write would confine no write, so it is read-only there.
 * `none` is Codex's own behaviour (such a request runs unsandboxed, as the server's user); it
 * cannot be combined with the floor.
 *
 * The floor judges what a request's sandbox MATERIALISES to, not how it is spelled: after
 * prepareRequest resolved the profile (`:root`, a literal `/`, `..`, symlinks all end up as
 * canonical paths in rules.writeRoots / readRoots / readAll), checkPreparedFloor refuses, before
 * anything is started:
 * - any writable root outside the server's write bound (floorWrite: `--floor-write`, default the
 *   server's working directory). The request's own workspace roots are not a bound: the client
 *   names them;
 * - with a read bound (floorRead: `--floor-read`): a profile that reads the whole file system, or
 *   any readable root outside floorRead + floorWrite (the planner's fixed platform reads, listed
 *   in the README, stay readable: binaries, libraries, a short /etc list without shadow).
 * - the host network (network enabled) or host unix sockets, unless floorAllowNetwork
 *   (`--floor-allow-network`): they reach every service on the host, whatever the file bounds.
 * Before that, it refuses a request prepare found without a sandbox, or with permissions that
 * confine nothing (disabled, external, an unrestricted file system with the network on: prepare's
 * SandboxDecision), each with its own message. The profile is parsed and the sandbox picked once,
 * in prepareRequest; the floor only reads what prepare returned. fs/watchMissing,
 * environmentConfig/read and capabilityRoots/discoverV1 take no sandbox in Codex's protocol and
 * read the server's own file system: refused outright (-32600) under the floor, and
 * environment/info stops advertising fsWatchMissing and environmentConfigRead. http/request never
 * leaves the server's own http policy (http-request.ts), with or without the floor.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import { isWithin } from '../paths';
import { fileUriToPath, pathToFileUri } from '../permissions/uri';
import type { DecidedExecRequest, FileSystemSandboxContext } from '../prepare';
import { INVALID_PARAMS } from '../prepare/rpc';
import { INVALID_REQUEST, RpcError } from './decode';
import type { ExecServerOptions } from './types';

const FLOOR = 'this exec-server requires a sandbox on every request (--require-sandbox, always on for a WebSocket listener without authentication)';

export type DefaultSandbox = 'workspace-write' | 'read-only' | 'none';

/** Whether the floor is on for these options. */
export const sandboxRequired = (o: ExecServerOptions): boolean => o.requireSandbox === true;

/** The floor's bounds, canonical (symlinks resolved), as the resolved rules are. */
interface Bounds {
  write: string[];
  read: string[] | null;
}

function canonicalRoot(p: string, flag: string): string {
  if (typeof p !== 'string' || !path.isAbsolute(p)) throw new SandboxError('EINVALID_ARGUMENT', `${flag} must be an absolute path, got ${JSON.stringify(p)}`);
  try {
    return fs.realpathSync(p);
  } catch (e) {
    throw new SandboxError('EINVALID_ARGUMENT', `${flag} ${p}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; give an existing directory`);
  }
}

/**
 * The floor's bounds for these options. Throws (EINVALID_ARGUMENT) for a bound that bounds
 * nothing: a write root that is the file system root (the server's working directory when no
 * --floor-write is given), or a default sandbox of `none` together with the floor.
 */
export function floorBounds(o: ExecServerOptions): Bounds {
  const given = o.floorWrite !== undefined && o.floorWrite.length > 0;
  const write = (given ? o.floorWrite! : [process.cwd()]).map((p) => canonicalRoot(p, '--floor-write'));
  for (const w of write) {
    if (path.parse(w).root === w) {
      throw new SandboxError(
        'EINVALID_ARGUMENT',
        given
          ? `--floor-write ${w} is the file system root: the sandbox floor would not bound writes; give the directories requests may write`
          : `the sandbox floor bounds writes to this server's working directory, which is the file system root (${w}); start the server in the workspace directory or give --floor-write <dir>`,
      );
    }
  }
  const read = o.floorRead !== undefined && o.floorRead.length > 0 ? o.floorRead.map((p) => canonicalRoot(p, '--floor-read')) : null;
  return { write, read };
}

/**
 * Checks floor options at start-up (createExecServer, after the transport decided whether the
 * floor is on), so a misconfigured floor refuses to start instead of refusing every request.
 */
export function validateFloorOptions(o: ExecServerOptions): void {
  const d = o.defaultSandbox ?? 'workspace-write';
  if (!['workspace-write', 'read-only', 'none'].includes(d)) {
    throw new SandboxError('EINVALID_ARGUMENT', `--default-sandbox must be workspace-write, read-only or none, got ${JSON.stringify(d)}`);
  }
  if (!sandboxRequired(o)) {
    if (o.floorWrite?.length || o.floorRead?.length || o.floorAllowNetwork) {
      throw new SandboxError('EINVALID_ARGUMENT', '--floor-write, --floor-read and --floor-allow-network set the sandbox floor: give them with --require-sandbox (or an unauthenticated ws listener)');
    }
    return;
  }
  if (d === 'none') {
    throw new SandboxError('EINVALID_ARGUMENT', '--default-sandbox none runs requests without a sandbox unsandboxed, which the sandbox floor forbids: drop one of them');
  }
  floorBounds(o);
}

/**
 * The server's default sandbox for a request that carries none, or null (`--default-sandbox
 * none`: Codex's unsandboxed behaviour). `cwd` is a file URI: the request's cwd, or the server's.
 * Under a read bound the default reads only the platform minimum and the bound, so it fits it.
 */
export function defaultSandboxFor(o: ExecServerOptions, cwd: string | null): FileSystemSandboxContext | null {
  let kind = o.defaultSandbox ?? 'workspace-write';
  if (kind === 'none') return null;
  // No request cwd (fs/*): under the floor its write bound, else the server's working directory.
  const roots = cwd !== null ? [cwd] : sandboxRequired(o) ? floorBounds(o).write.map((p) => pathToFileUri(p)) : [pathToFileUri(process.cwd())];
  const root = roots[0]!;
  // Workspace-write over the file system root would make everything writable: read-only then.
  let native: string | null = null;
  try {
    native = fs.realpathSync(fileUriToPath(root));
  } catch {
    /* a cwd that does not exist: the spawn reports it */
  }
  if (native !== null && path.parse(native).root === native) kind = 'read-only';
  const special = (k: string) => ({ type: 'special', value: { kind: k } });
  const reads = o.floorRead?.length
    ? [{ path: special('minimal'), access: 'read' }, ...o.floorRead.map((p) => ({ path: { type: 'path', path: pathToFileUri(p) }, access: 'read' }))]
    : [{ path: special('root'), access: 'read' }];
  return {
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [...reads, ...(kind === 'workspace-write' ? [{ path: special('project_roots'), access: 'write' }] : [])],
      },
      network: 'restricted',
    },
    cwd: root,
    workspaceRoots: roots,
    windowsSandboxLevel: process.platform === 'win32' ? 'restricted-token' : 'disabled',
  };
}

const missingSandbox = (method: string): RpcError =>
  new RpcError(
    INVALID_PARAMS,
    `${method} without a \`sandbox\` is refused: ${FLOOR}; send a \`sandbox\` (FileSystemSandboxContext: permissions, windowsSandboxLevel, cwd) with the request`,
  );

/**
 * Refuses `method` when the floor is on and the request has no sandbox (only possible for an
 * ExecConnection built without the start-up checks), for the fs methods that would otherwise run
 * in this process, unsandboxed, without being prepared. What a sandbox asks for is judged once it
 * is prepared (checkPreparedFloor).
 */
export function checkSandboxGiven(o: ExecServerOptions, method: string, sandbox: FileSystemSandboxContext | null | undefined): void {
  if (sandboxRequired(o) && (sandbox === null || sandbox === undefined)) throw missingSandbox(method);
}

/**
 * The floor on a prepared request (see the file comment), called after prepareRequest and before
 * the spawn, for every method that starts something: first what prepare decided (no sandbox, or
 * permissions that confine nothing), then what the sandbox resolved to.
 */
export function checkPreparedFloor(o: ExecServerOptions, method: string, { prepared, decision }: DecidedExecRequest): void {
  if (!sandboxRequired(o)) return;
  if (!decision.requested) throw missingSandbox(method);
  if (!decision.confines) {
    throw new RpcError(
      INVALID_PARAMS,
      `${method} with \`sandbox.permissions\` that confine nothing (disabled, external, or an unrestricted file system with the network on) is refused: ${FLOOR}; send a managed profile with a restricted file system or a restricted network`,
    );
  }
  const refuse = (what: string, fix: string): never => {
    throw new RpcError(INVALID_PARAMS, `${method} is refused: its sandbox ${what}; ${FLOOR}, and the floor bounds ${fix}`);
  };
  const rules = prepared.rules;
  if (rules === null || prepared.sandboxType === 'none') refuse('is none', 'every request to a sandbox');
  const b = floorBounds(o);
  const writeFix = `writes to ${b.write.join(', ')} (--floor-write)`;
  for (const w of rules!.writeRoots) {
    if (!b.write.some((r) => isWithin(w, r))) refuse(`makes ${w} writable, outside the floor`, writeFix);
  }
  // The host /tmp is shared only when a writable root covers it (then it is in writeRoots); this
  // catches a planner that shares it some other way.
  if (rules!.tmp === 'host') {
    const tmp = fs.realpathSync('/tmp');
    if (!b.write.some((r) => isWithin(tmp, r))) refuse(`shares the host ${tmp}, outside the floor`, writeFix);
  }
  // The host network reaches every host daemon: loopback services and any visible unix socket
  // (a root server's docker.sock is the host). Only the server's flag lets it through.
  const net = rules!.network;
  if (o.floorAllowNetwork !== true) {
    const netFix = 'the network to none or the managed proxy (--floor-allow-network lifts this)';
    if (net.kind === 'full') refuse('has the host network, which reaches every host service and unix socket', netFix);
    if (net.kind !== 'full' && net.unixSockets !== undefined) refuse('may connect to host unix sockets', netFix);
  }
  if (b.read === null) return;
  const readable = [...b.read, ...b.write];
  const readFix = `reads to ${b.read.join(', ')} (--floor-read) and ${b.write.join(', ')} (--floor-write), besides the platform's fixed reads`;
  if (rules!.readAll && !readable.some((r) => path.parse(r).root === r)) refuse('reads the whole file system', readFix);
  for (const r of rules!.readRoots) {
    if (!readable.some((x) => isWithin(r, x))) refuse(`makes ${r} readable, outside the floor`, readFix);
  }
}

/** Refuses a method that cannot carry a sandbox, when the floor is on; `instead` says what to use. */
export function refuseWithoutSandboxField(o: ExecServerOptions, method: string, instead: string): void {
  if (!sandboxRequired(o)) return;
  throw new RpcError(INVALID_REQUEST, `${method} reads this server's file system outside any sandbox and is refused: ${FLOOR}; ${instead}`);
}
