/**
 * `file://` URIs (Codex's PathUri) to native absolute paths. Parsing is host independent: a URI is
 * first decoded into one of three shapes (POSIX path, Windows drive path, Windows UNC path) and
 * only then checked against the path rules of a given platform, using path.posix / path.win32
 * explicitly, so Windows forms are parsed and tested on Linux too.
 */
import * as path from 'node:path';

export type ParsedFileUri =
  | { kind: 'posix'; path: string }
  | { kind: 'drive'; drive: string; path: string }
  | { kind: 'unc'; host: string; share: string; path: string };

/** A URI that cannot be used on the requested host. The message is the `…` of the seed's text. */
export class FileUriError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FileUriError';
  }
}

function decodeSegment(raw: string): string {
  let out: string;
  try {
    out = decodeURIComponent(raw);
  } catch {
    throw new FileUriError('invalid percent-encoding');
  }
  if (out.includes('\0')) throw new FileUriError('path contains a NUL byte');
  return out;
}

/** Decode a `file://` URI into its shape, without looking at the host platform. */
export function parseFileUri(uri: string): ParsedFileUri {
  if (typeof uri !== 'string') throw new FileUriError('expected a string');
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):(.*)$/s.exec(uri);
  if (!m) throw new FileUriError('not an absolute URI');
  if (m[1]!.toLowerCase() !== 'file') throw new FileUriError(`unsupported URI scheme \`${m[1]}\`; expected \`file\``);
  const rest = m[2]!;
  if (!rest.startsWith('//')) throw new FileUriError('expected `file://` followed by an authority and an absolute path');
  if (/[?#]/.test(rest)) throw new FileUriError('file URIs must not have a query or fragment');
  const afterSlashes = rest.slice(2);
  const slash = afterSlashes.indexOf('/');
  const authority = slash === -1 ? afterSlashes : afterSlashes.slice(0, slash);
  const rawPath = slash === -1 ? '' : afterSlashes.slice(slash);
  if (authority.includes('@') || /:\d*$/.test(authority)) {
    throw new FileUriError('file URIs must not carry user info or a port');
  }
  const segments = rawPath.split('/').slice(1).map(decodeSegment);
  for (const s of segments) {
    if (s.includes('/') || s.includes('\\')) {
      // An encoded separator inside one segment would change the path's shape after decoding.
      throw new FileUriError('path segment contains an encoded path separator');
    }
  }
  const host = decodeSegment(authority);
  if (host !== '' && host.toLowerCase() !== 'localhost') {
    if (segments.length === 0 || segments[0] === '') throw new FileUriError(`UNC URI for host \`${host}\` has no share name`);
    const [share, ...tail] = segments;
    return { kind: 'unc', host, share: share!, path: '\\' + tail.join('\\') };
  }
  if (rawPath === '') throw new FileUriError('file URI has an empty path');
  const first = segments[0] ?? '';
  if (/^[A-Za-z]:$/.test(first) || /^[A-Za-z]\|$/.test(first)) {
    const drive = first[0]!.toUpperCase() + ':';
    return { kind: 'drive', drive, path: '\\' + segments.slice(1).join('\\') };
  }
  return { kind: 'posix', path: '/' + segments.join('/') };
}

export type PathFlavor = 'posix' | 'win32';

export function flavorOf(platform: NodeJS.Platform): PathFlavor {
  return platform === 'win32' ? 'win32' : 'posix';
}

/** The native absolute path a URI names on a host with the given path rules. */
export function fileUriToPath(uri: string, flavor: PathFlavor = flavorOf(process.platform)): string {
  const parsed = parseFileUri(uri);
  if (flavor === 'posix') {
    if (parsed.kind === 'drive') {
      throw new FileUriError(`Windows drive path \`${parsed.drive}\` is not an absolute path on this host`);
    }
    if (parsed.kind === 'unc') {
      throw new FileUriError(`UNC host \`${parsed.host}\` is not supported on this host`);
    }
    return path.posix.normalize(parsed.path);
  }
  if (parsed.kind === 'posix') {
    throw new FileUriError('path has no drive letter or UNC host, so it is not absolute on this host');
  }
  if (parsed.kind === 'drive') return path.win32.normalize(`${parsed.drive}${parsed.path}`);
  return path.win32.normalize(`\\\\${parsed.host}\\${parsed.share}${parsed.path}`);
}

/** The `file://` URI for a native absolute path (inverse of fileUriToPath). */
export function pathToFileUri(p: string, flavor: PathFlavor = flavorOf(process.platform)): string {
  const enc = (s: string): string =>
    encodeURIComponent(s).replace(/%3A/gi, ':').replace(/%40/g, '@').replace(/%2B/gi, '+').replace(/%2C/gi, ',');
  if (flavor === 'posix') {
    if (!path.posix.isAbsolute(p)) throw new FileUriError(`\`${p}\` is not an absolute path`);
    return 'file://' + path.posix.normalize(p).split('/').map(enc).join('/');
  }
  const n = path.win32.normalize(p);
  const unc = /^\\\\([^\\]+)\\([^\\]+)(\\.*)?$/.exec(n);
  if (unc) {
    const tail = (unc[3] ?? '').split('\\').slice(1).map(enc);
    return `file://${enc(unc[1]!)}/${enc(unc[2]!)}${tail.length ? '/' + tail.join('/') : ''}`;
  }
  const drive = /^([A-Za-z]):(\\.*)?$/.exec(n);
  if (!drive) throw new FileUriError(`\`${p}\` is not an absolute path`);
  const tail = (drive[2] ?? '\\').split('\\').slice(1).map(enc);
  return `file:///${drive[1]!.toUpperCase()}:/${tail.join('/')}`;
}

/** True when a string looks like a URI with a scheme (as opposed to a plain path). */
export function looksLikeUri(s: string): boolean {
  return /^[A-Za-z][A-Za-z0-9+.-]+:\/\//.test(s);
}
