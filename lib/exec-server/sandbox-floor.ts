/**
 * The server-side sandbox floor: `--require-sandbox` (ExecServerOptions.requireSandbox), always
 * on for a WebSocket listener without authentication.
 *
 * Codex runs a request that carries no `sandbox` plainly, as the server's user (a process/start,
 * an fs/* call), so by default so do we: real Codex clients that send none keep working. Under the
 * floor nothing runs or touches the file system outside a sandbox; a request that would is refused
 * here, after its params decoded and the handshake gate (so those errors stay the reference's),
 * before anything is started, opened or read:
 * - process/start, fs/* one-shot calls, fs/open, capabilities/discoverV2: without a `sandbox`, or
 *   with permissions Codex itself would run unsandboxed (`disabled`, `external`, an unrestricted
 *   file system with the network on: Codex's should_require_platform_sandbox is false), -32602;
 * - fs/watchMissing, environmentConfig/read, capabilityRoots/discoverV1: they take no sandbox in
 *   Codex's protocol and read the server's own file system, so they are refused outright (-32600),
 *   and environment/info stops advertising fsWatchMissing and environmentConfigRead.
 * http/request takes no sandbox either; it never leaves the server's own http policy (the managed
 * proxy of http-request.ts, every host denied unless --http-allow-domain), with or without the floor.
 * fs/readBlock, writeBlock, close and process/read, write, signal, terminate act on what a floored
 * start or open made.
 */
import { parsePermissionProfile } from '../permissions/profile';
import { flavorOf } from '../permissions/uri';
import type { FileSystemSandboxContext } from '../prepare';
import { INVALID_PARAMS } from '../prepare/rpc';
import { shouldRequirePlatformSandbox } from '../prepare/sandbox-manager';
import { INVALID_REQUEST, RpcError } from './decode';
import type { ExecServerOptions } from './types';

const FLOOR = 'this exec-server requires a sandbox on every request (--require-sandbox, always on for a WebSocket listener without authentication)';

/** Whether the floor is on for these options. */
export const sandboxRequired = (o: ExecServerOptions): boolean => o.requireSandbox === true;

/**
 * Refuses `method` when the floor is on and the request has no sandbox, or one whose permissions
 * ask for none. A profile that does not parse is left to the method, which reports it as usual.
 */
export function checkSandboxFloor(
  o: ExecServerOptions,
  method: string,
  sandbox: FileSystemSandboxContext | null | undefined,
  enforceManagedNetwork = false,
): void {
  if (!sandboxRequired(o)) return;
  if (sandbox === null || sandbox === undefined) {
    throw new RpcError(
      INVALID_PARAMS,
      `${method} without a \`sandbox\` is refused: ${FLOOR}; send a \`sandbox\` (FileSystemSandboxContext: permissions, windowsSandboxLevel, cwd) with the request`,
    );
  }
  let needs: boolean;
  try {
    needs = shouldRequirePlatformSandbox(parsePermissionProfile(sandbox.permissions, { flavor: flavorOf(process.platform) }), enforceManagedNetwork);
  } catch {
    return;
  }
  if (!needs) {
    throw new RpcError(
      INVALID_PARAMS,
      `${method} with \`sandbox.permissions\` that confine nothing (disabled, external, or an unrestricted file system with the network on) is refused: ${FLOOR}; send a managed profile with a restricted file system or a restricted network`,
    );
  }
}

/** Refuses a method that cannot carry a sandbox, when the floor is on; `instead` says what to use. */
export function refuseWithoutSandboxField(o: ExecServerOptions, method: string, instead: string): void {
  if (!sandboxRequired(o)) return;
  throw new RpcError(INVALID_REQUEST, `${method} reads this server's file system outside any sandbox and is refused: ${FLOOR}; ${instead}`);
}
