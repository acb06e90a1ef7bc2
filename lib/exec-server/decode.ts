/**
 * Params decoding for the exec-server, worded as the reference (Rust serde) words it, so that a
 * Codex client sees the same -32602 texts from us: "missing field `tty`", "invalid type: string
 * \"x\", expected a boolean", "unknown variant `kill`, expected `interrupt`". Unknown fields are
 * ignored, as serde does by default. Only shapes are checked here; meaning (paths, policies) is
 * checked by prepareExecRequest and the fs layer.
 */
import type { FileSystemSandboxContext } from '../prepare';
import { INVALID_PARAMS } from '../prepare/rpc';

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
    this.name = 'RpcError';
  }
}

export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const NOT_FOUND = -32004;

export const invalidParams = (msg: string): RpcError => new RpcError(INVALID_PARAMS, msg);

/** serde's `Unexpected` wording for a JSON value. */
export function unexpected(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  if (typeof v === 'boolean') return `boolean \`${v}\``;
  if (typeof v === 'number') return Number.isInteger(v) ? `integer \`${v}\`` : `floating point \`${v}\``;
  if (Array.isArray(v)) return 'sequence';
  return 'map';
}

/**
 * `uri` is a PathUri and `sandbox` a FileSystemSandboxContext: both are checked where they stand
 * in the input, as serde does, so a bad cwd URI is reported before a field missing after it.
 */
type Kind = 'string' | 'bool' | 'seq<string>' | 'map<string>' | 'u64' | 'object' | 'any' | 'uri' | 'seq<uri>' | 'sandbox';

const EXPECTED: Record<Kind, string> = {
  string: 'a string',
  bool: 'a boolean',
  'seq<string>': 'a sequence',
  'map<string>': 'a map',
  u64: 'u64',
  object: 'a map',
  any: 'any value',
  uri: 'a string',
  'seq<uri>': 'a sequence',
  sandbox: 'struct FileSystemSandboxContext',
};

function checkKind(v: unknown, kind: Kind): void {
  const fail = (): never => {
    throw invalidParams(`invalid type: ${unexpected(v)}, expected ${EXPECTED[kind]}`);
  };
  switch (kind) {
    case 'string':
      if (typeof v !== 'string') fail();
      return;
    case 'bool':
      if (typeof v !== 'boolean') fail();
      return;
    case 'seq<string>':
      if (!Array.isArray(v)) fail();
      for (const e of v as unknown[]) if (typeof e !== 'string') throw invalidParams(`invalid type: ${unexpected(e)}, expected a string`);
      return;
    case 'map<string>':
      if (typeof v !== 'object' || v === null || Array.isArray(v)) fail();
      for (const e of Object.values(v as object)) if (typeof e !== 'string') throw invalidParams(`invalid type: ${unexpected(e)}, expected a string`);
      return;
    case 'u64':
      // serde_json says "invalid number" for a negative or fractional value where a u64 is due.
      if (typeof v !== 'number') fail();
      if (!Number.isInteger(v) || (v as number) < 0) throw invalidParams('invalid number');
      return;
    case 'object':
      if (typeof v !== 'object' || v === null || Array.isArray(v)) fail();
      return;
    case 'any':
      return;
    case 'uri':
      checkPathUri(v);
      return;
    case 'seq<uri>':
      if (!Array.isArray(v)) fail();
      for (const e of v as unknown[]) checkPathUri(e);
      return;
    case 'sandbox':
      // The reference reads this one through a JSON value first: a number is "number" there.
      if (typeof v !== 'object' || v === null || Array.isArray(v)) {
        throw invalidParams(`invalid type: ${typeof v === 'number' ? 'number' : unexpected(v)}, expected struct WireFileSystemSandboxContext`);
      }
      decodeSandbox(v);
      return;
  }
}

export interface FieldSpec {
  name: string;
  kind: Kind;
  required?: boolean;
  /** null is accepted as "absent" (serde Option). */
  nullable?: boolean;
}

/**
 * Decodes a struct: present fields are type-checked in input order (serde reports the first bad
 * value it meets), then missing required fields in declaration order.
 */
export function decodeStruct(params: unknown, structName: string, fields: FieldSpec[]): Record<string, unknown> {
  if (typeof params !== 'object' || params === null || Array.isArray(params)) {
    throw invalidParams(`invalid type: ${unexpected(params)}, expected struct ${structName}`);
  }
  const p = params as Record<string, unknown>;
  const byName = new Map(fields.map((f) => [f.name, f]));
  for (const [k, v] of Object.entries(p)) {
    const f = byName.get(k);
    if (!f) continue;
    if (v === null && (f.nullable || !f.required)) continue;
    checkKind(v, f.kind);
  }
  for (const f of fields) {
    if (f.required && (p[f.name] === undefined || (p[f.name] === null && !f.nullable))) {
      if (p[f.name] === null) throw invalidParams(`invalid type: null, expected ${EXPECTED[f.kind]}`);
      throw invalidParams(`missing field \`${f.name}\``);
    }
  }
  return p;
}

export function decodeVariant(v: unknown, allowed: string[]): string {
  if (typeof v !== 'string') throw invalidParams(`invalid type: ${unexpected(v)}, expected a string`);
  if (!allowed.includes(v)) {
    const list = allowed.map((a) => `\`${a}\``).join(allowed.length === 2 ? ' or ' : ', ');
    throw invalidParams(`unknown variant \`${v}\`, expected ${allowed.length <= 2 ? list : `one of ${list}`}`);
  }
  return v;
}

/**
 * Strict standard base64 with canonical padding, with the Rust `base64` crate's messages
 * ("Invalid symbol 33, offset 0."), because process/write and fs/writeFile report them as -32602.
 */
export function decodeBase64(s: string): Buffer {
  const ALPHA = /^[A-Za-z0-9+/]$/;
  let pad = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (c === '=') {
      pad++;
      continue;
    }
    if (pad > 0 || !ALPHA.test(c)) {
      if (c === '=' || pad > 0) throw invalidParams('Invalid padding');
      throw invalidParams(`Invalid symbol ${s.charCodeAt(i)}, offset ${i}.`);
    }
  }
  if (pad > 2 || s.length % 4 === 1 || (pad > 0 && s.length % 4 !== 0)) {
    throw invalidParams(s.length % 4 === 1 ? `Invalid input length: ${s.length - pad}` : 'Invalid padding');
  }
  if (pad === 0 && s.length % 4 !== 0) throw invalidParams('Invalid padding');
  const out = Buffer.from(s, 'base64');
  // Non-canonical trailing bits (e.g. "aGk=" vs "aGl="): Buffer ignores them, Rust refuses them.
  if (out.toString('base64') !== s) {
    const i = s.replace(/=+$/, '').length - 1;
    throw invalidParams(`Invalid last symbol ${s.charCodeAt(i)}, offset ${i}.`);
  }
  return out;
}

/**
 * The shape checks the reference makes while deserialising a PathUri: a relative string or a
 * non-file scheme is refused before anything else happens.
 */
export function checkPathUri(v: unknown): string {
  if (typeof v !== 'string') throw invalidParams(`invalid type: ${unexpected(v)}, expected a string`);
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw invalidParams('invalid URI: relative URL without a base');
  }
  const scheme = u.protocol.replace(/:$/, '');
  if (scheme !== 'file') throw invalidParams(`unsupported path URI scheme \`${scheme}\``);
  return v;
}

/** A file URI naming another host (not '' or localhost): the reference's "is invalid on" text. */
export function foreignHostMessage(uri: string, platform: NodeJS.Platform): string | null {
  const u = new URL(uri);
  if (u.hostname === '' || u.hostname.toLowerCase() === 'localhost') return null;
  if (platform === 'win32') return null; // UNC: valid on a Windows executor
  return `'${uri}' is invalid on '${platform}'`;
}

/** The `sandbox` object of a request (FileSystemSandboxContext), shape only. */
export function decodeSandbox(s: unknown): FileSystemSandboxContext {
  const d = decodeStruct(s, 'FileSystemSandboxContext', [
    { name: 'permissions', kind: 'object', required: true },
    { name: 'cwd', kind: 'uri' },
    { name: 'workspaceRoots', kind: 'seq<uri>' },
    { name: 'userHomeDir', kind: 'string' },
    { name: 'windowsSandboxLevel', kind: 'string', required: true },
    { name: 'windowsSandboxProxySettingsMode', kind: 'string' },
    { name: 'useLegacyLandlock', kind: 'bool' },
  ]);
  decodeVariant(d.windowsSandboxLevel, ['disabled', 'restricted-token', 'elevated', 'mxc']);
  return d as unknown as FileSystemSandboxContext;
}
