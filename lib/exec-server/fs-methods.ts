/**
 * The exec-server's one-shot fs/* methods (readFile, writeFile, createDirectory, getMetadata,
 * readDirectory, remove, copy, canonicalize, walk): params decoded as the reference decodes them,
 * then one operation from fs-ops.ts, inside the request's sandbox when it carries one.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { FileSystemSandboxContext } from '../prepare';
import { fileUriToPath } from '../permissions/uri';
import type { ExecServerOptions, MethodContext } from './types';
import { decodeBase64, decodeSandbox, decodeStruct, foreignHostMessage, INVALID_REQUEST, RpcError } from './decode';
import { checkPreparedFloor, checkSandboxGiven, defaultSandboxFor } from './sandbox-floor';
import { MAX_READ_FILE_BYTES, runFs, WALK_MAX, type FsOp, type FsRunner } from './fs-ops';

export const FS_ONE_SHOT_METHODS = new Set([
  'fs/readFile',
  'fs/writeFile',
  'fs/createDirectory',
  'fs/getMetadata',
  'fs/readDirectory',
  'fs/remove',
  'fs/copy',
  'fs/canonicalize',
  'fs/walk',
]);

/** A PathUri to this host's native path, refused as the reference refuses it (-32600). */
export function nativePath(u: string): string {
  const foreign = foreignHostMessage(u, process.platform);
  if (foreign) throw new RpcError(INVALID_REQUEST, foreign);
  try {
    return fileUriToPath(u);
  } catch (e) {
    throw new RpcError(INVALID_REQUEST, (e as Error).message);
  }
}

/**
 * The request's `sandbox` context; without one, the server's default sandbox over `cwd` (a file
 * URI; the server's working directory when null), or null for an unsandboxed call (`none`).
 */
export function sandboxOf(p: Record<string, unknown>, options: ExecServerOptions, cwd: string | null = null): FileSystemSandboxContext | null {
  return p.sandbox !== undefined && p.sandbox !== null ? decodeSandbox(p.sandbox) : defaultSandboxFor(options, cwd);
}

export function fsRunner(ctx: MethodContext, method: string): FsRunner {
  return {
    runtime: ctx.options.runtime ?? {},
    spawnPrepared: ctx.options.spawnPrepared,
    // The largest answer is a readFile at the cap, in base64, in JSON.
    maxOutputBytes: Math.ceil((MAX_READ_FILE_BYTES * 4) / 3) + 1024 * 1024,
    floor: (prepared) => checkPreparedFloor(ctx.options, method, prepared),
    reserve: () => ctx.reserveProcess(),
  };
}

export async function fsCall(ctx: MethodContext, method: string, params: unknown): Promise<unknown> {
  const sandboxField = { name: 'sandbox', kind: 'sandbox' as const };
  let op: FsOp;
  let uris: string[];
  let p: Record<string, unknown>;
  const one = (name: string, extra: Parameters<typeof decodeStruct>[2] = []) => {
    p = decodeStruct(params, name, [{ name: 'path', kind: 'uri', required: true }, ...extra, sandboxField]);
    uris = [p.path as string];
    return p;
  };
  switch (method) {
    case 'fs/readFile':
      one('FsReadFileParams');
      op = { op: 'readFile', path: '', limit: MAX_READ_FILE_BYTES };
      break;
    case 'fs/writeFile': {
      one('FsWriteFileParams', [{ name: 'dataBase64', kind: 'string', required: true }]);
      let data: Buffer;
      try {
        data = decodeBase64(p!.dataBase64 as string);
      } catch (e) {
        throw new RpcError(INVALID_REQUEST, `fs/writeFile requires valid base64 dataBase64: ${(e as Error).message}`);
      }
      op = { op: 'writeFile', path: '', data: data.toString('base64') };
      break;
    }
    case 'fs/createDirectory':
      one('FsCreateDirectoryParams', [{ name: 'recursive', kind: 'bool' }]);
      op = { op: 'createDirectory', path: '', recursive: (p!.recursive as boolean | null | undefined) ?? true };
      break;
    case 'fs/getMetadata':
      one('FsGetMetadataParams');
      op = { op: 'getMetadata', path: '' };
      break;
    case 'fs/readDirectory':
      one('FsReadDirectoryParams');
      op = { op: 'readDirectory', path: '' };
      break;
    case 'fs/remove':
      one('FsRemoveParams', [
        { name: 'recursive', kind: 'bool' },
        { name: 'force', kind: 'bool' },
      ]);
      op = { op: 'remove', path: '', recursive: (p!.recursive as boolean | null | undefined) ?? true, force: (p!.force as boolean | null | undefined) ?? true };
      break;
    case 'fs/copy':
      p = decodeStruct(params, 'FsCopyParams', [
        { name: 'sourcePath', kind: 'uri', required: true },
        { name: 'destinationPath', kind: 'uri', required: true },
        { name: 'recursive', kind: 'bool', required: true },
        sandboxField,
      ]);
      uris = [p.sourcePath as string, p.destinationPath as string];
      op = { op: 'copy', source: '', destination: '', recursive: p.recursive as boolean };
      break;
    case 'fs/walk': {
      one('FsWalkParams', [{ name: 'options', kind: 'object', required: true }]);
      const o = decodeStruct(p!.options, 'WalkOptions', [
        { name: 'maxDepth', kind: 'u64', required: true },
        { name: 'maxDirectories', kind: 'u64', required: true },
        { name: 'maxEntries', kind: 'u64', required: true },
        { name: 'followDirectorySymlinks', kind: 'bool', required: true },
      ]);
      const [maxDepth, maxDirectories, maxEntries] = [o.maxDepth, o.maxDirectories, o.maxEntries] as number[];
      // The reference's caps: they bound the answer (and the memory to build it) per call.
      if (maxDirectories === 0 || maxEntries === 0) throw new RpcError(INVALID_REQUEST, 'filesystem walk limits must be greater than zero');
      if (maxDepth! > WALK_MAX.depth || maxDirectories! > WALK_MAX.directories || maxEntries! > WALK_MAX.entries) {
        throw new RpcError(INVALID_REQUEST, `filesystem walk limits exceed maximums: depth=${WALK_MAX.depth}, directories=${WALK_MAX.directories}, entries=${WALK_MAX.entries}`);
      }
      op = { op: 'walk', path: '', maxDepth: maxDepth!, maxDirectories: maxDirectories!, maxEntries: maxEntries!, follow: o.followDirectorySymlinks as boolean };
      break;
    }
    default:
      one('FsCanonicalizeParams');
      op = { op: 'canonicalize', path: '' };
  }
  const sandbox = sandboxOf(p!, ctx.options);
  ctx.gate('filesystem');
  checkSandboxGiven(ctx.options, method, sandbox);
  const paths = uris!.map(nativePath);
  if (op.op === 'copy') {
    op.source = paths[0]!;
    op.destination = paths[1]!;
  } else {
    (op as { path: string }).path = paths[0]!;
  }
  const result = await runFs(op, sandbox, fsRunner(ctx, method));
  return sandbox === null ? result : withoutSandboxArtifacts(op, result);
}

/**
 * A sandbox mounts placeholders over protected names that do not exist (`.git`, `.codex`, ...),
 * so a listing made inside it shows them; they are not files of the host and are left out.
 */
function withoutSandboxArtifacts(op: FsOp, result: unknown): unknown {
  const onHost = (p: string) => {
    try {
      fs.lstatSync(p);
      return true;
    } catch {
      return false;
    }
  };
  if (op.op === 'walk') {
    const w = result as { entries: Array<{ path: string }> };
    return { ...w, entries: w.entries.filter((e) => onHost(fileUriToPath(e.path))) };
  }
  if (op.op === 'readDirectory') {
    const r = result as { entries: Array<{ fileName: string }> };
    return { entries: r.entries.filter((e) => onHost(path.join(op.path, e.fileName))) };
  }
  return result;
}
