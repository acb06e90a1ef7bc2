/**
 * WebSocket authentication for the exec-server: Codex 0.171's two modes with its flags, checks
 * and refusal texts, plus what we add on top because an exec-server runs commands as its user.
 *
 *   capability-token     `Authorization: Bearer <token>`; the server knows the token's SHA-256
 *                        (read from --ws-token-file, or given as --ws-token-sha256).
 *   signed-bearer-token  `Authorization: Bearer <JWT>`, HS256 over the secret in
 *                        --ws-shared-secret-file; exp required; nbf, iss, aud checked as Codex
 *                        does, with --ws-max-clock-skew-seconds (default 30) either way.
 *
 * Ours, beyond Codex: a token or secret file that group or others can access, or that another
 * user owns, is refused (someone else could read or replace the credential), as is anything but a
 * regular file, and a file in a directory (or below one) that another user could rename or write
 * into unless it is sticky; a symlink is followed (a Kubernetes Secret is a directory of them)
 * only when each link is this user's or root's and sits in a directory passing the same checks; a token file needs at least 16
 * characters (a short token can be guessed through the 401s).
 *
 * Credentials are read once, at start; the upgrade check only compares digests or verifies a
 * signature. The check runs before the upgrade, so a refused client never gets a connection.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import * as path from 'node:path';
import { SandboxError } from '../errors';

export type WsAuth =
  | { mode: 'capability-token'; tokenFile: string }
  | { mode: 'capability-token'; tokenSha256: string }
  | { mode: 'signed-bearer-token'; sharedSecretFile: string; issuer?: string; audience?: string; maxClockSkewSeconds?: number };

/** A refusal: the HTTP status and the plain-text body (Codex's wording). */
export interface AuthRefusal {
  status: 401;
  message: string;
}

/** Checks an upgrade request's headers; null means authorized. */
export type WsAuthCheck = (headers: IncomingHttpHeaders) => AuthRefusal | null;

const DEFAULT_MAX_CLOCK_SKEW_SECONDS = 30;
const MIN_SIGNED_BEARER_SECRET_BYTES = 32;
const MIN_TOKEN_CHARS = 16;
const INVALID_HEADER = 'invalid authorization header';

const bad = (msg: string): never => {
  throw new SandboxError('EINVALID_ARGUMENT', msg);
};
const sha256 = (b: string | Buffer): Buffer => crypto.createHash('sha256').update(b).digest();

/**
 * Reads a credential file, refusing one that others could read or replace. The mode and owner
 * come from fstat of the opened file, so a swap between the check and the read cannot slip by.
 *
 * Symlinks: Kubernetes mounts a Secret as a directory of links (`token -> ..data/token`,
 * `..data -> ..2026_12_04_21_00_00.123456789`, a timestamped directory holding the files), so
 * the flag may name a link. The chain is resolved here, one link at a time (resolveSecretPath),
 * and every link on it must be this user's or root's, in directories that pass the same checks
 * as the file's own: whoever can point a link elsewhere picks the credential (they could aim it
 * at another file of this user's whose text they know). Then the resolved path is opened without
 * following anything more at its end (O_NOFOLLOW) and what was opened is checked, not the path.
 * Nobody else can change the path in between: each directory on it and each directory holding a
 * link is checked to be root's or this user's and closed to others (or sticky, where the entries
 * on the path, root's or ours, cannot be renamed by others).
 *
 * The open never blocks (O_NONBLOCK: a FIFO in the file's place would otherwise hang the server's
 * start; fstat then refuses it as not a regular file).
 */
export function readSecretFile(file: string): string {
  const posix = process.platform !== 'win32';
  const me = process.geteuid?.() ?? -1;
  let target = file;
  let linkDirs: string[] = [];
  if (posix) {
    const r = resolveSecretPath(file, me);
    target = r.target;
    linkDirs = r.linkDirs;
  }
  const via = target === file ? '' : ` (through symbolic links: ${target})`;
  let fd: number;
  try {
    const flags = posix ? fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK : 'r';
    fd = fs.openSync(target, flags);
  } catch (e) {
    // ELOOP here: the resolved path's end became a link after resolution (only root or this
    // user could do that: the directories were checked), so refuse rather than follow it.
    return bad(`failed to read websocket auth secret ${file}${via}: ${(e as Error).message}`);
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) bad(`websocket auth secret ${file}${via} is not a regular file`);
    // Windows has no POSIX mode bits (Node reports 0o666 for every file); its ACLs are not
    // checked here.
    if (posix) {
      if ((st.mode & 0o077) !== 0) {
        // Kubernetes writes Secret files 0644 unless the volume says otherwise; nothing here
        // tells a pod from a shared host, so the rule stays and the message names the fix.
        const k8s = via ? ' (a Kubernetes Secret volume: set defaultMode: 0400)' : '';
        bad(`websocket auth secret ${file}${via} is accessible by group or others (mode ${(st.mode & 0o777).toString(8)}); run chmod 600 ${target}${k8s}`);
      }
      if (st.uid !== me && st.uid !== 0) bad(`websocket auth secret ${file}${via} is owned by uid ${st.uid}, not by this server's user (uid ${me}) or root`);
      checkSecretDirs(file, path.dirname(target), me);
      for (const d of linkDirs) checkSecretDirs(file, d, me, 'a symbolic link on the way to ');
    }
    const text = fs.readFileSync(fd, 'utf8').trim();
    if (text === '') bad(`websocket auth secret ${file} must not be empty`);
    return text;
  } finally {
    fs.closeSync(fd);
  }
}

const MAX_LINKS = 40; // the kernel's own limit on links followed in one lookup

/**
 * Resolves `file` (absolute) one component at a time, as the kernel would, and returns the
 * resolved path and the directory holding each link followed (each already resolved). Every link
 * must be this user's or root's: a link another user made (in a sticky directory such as /tmp)
 * would let them choose the target, which is why the kernel's protected_symlinks refuses to
 * follow one there too; readlink does not ask the kernel to follow, so the rule is kept here.
 */
function resolveSecretPath(file: string, me: number): { target: string; linkDirs: string[] } {
  const rest = path.resolve(file).split('/').filter((c) => c !== '' && c !== '.');
  const linkDirs = new Set<string>();
  let cur = '/';
  let links = 0;
  while (rest.length > 0) {
    const name = rest.shift()!;
    if (name === '..') {
      cur = path.dirname(cur); // cur is already resolved, so its parent is the physical one
      continue;
    }
    if (name === '.') continue;
    const next = path.join(cur, name);
    let st: fs.Stats;
    try {
      st = fs.lstatSync(next);
    } catch (e) {
      return bad(`failed to read websocket auth secret ${file}: ${(e as Error).message}`);
    }
    if (!st.isSymbolicLink()) {
      cur = next;
      continue;
    }
    if (++links > MAX_LINKS) bad(`failed to read websocket auth secret ${file}: more than ${MAX_LINKS} symbolic links on the way (a loop?)`);
    if (st.uid !== me && st.uid !== 0) {
      bad(`websocket auth secret ${file}: the symbolic link ${next} on the way to it is owned by uid ${st.uid}, not by this server's user (uid ${me}) or root; point the flag at the file itself`);
    }
    linkDirs.add(cur);
    let to: string;
    try {
      to = fs.readlinkSync(next);
    } catch (e) {
      return bad(`failed to read websocket auth secret ${file}: ${(e as Error).message}`);
    }
    if (to.startsWith('/')) cur = '/';
    rest.unshift(...to.split('/').filter((c) => c !== '' && c !== '.'));
  }
  return { target: cur, linkDirs: [...linkDirs] };
}

/**
 * The directories holding a credential (or a link on the way to it) must not let another user
 * replace it: `dir` (resolved) and each above it (renaming any of them swaps the whole path),
 * each owned by this user or root and not writable by group or others unless sticky (as /tmp
 * is: there only an entry's owner may rename or remove it, and the file itself, or the link,
 * was checked to be this user's or root's).
 */
function checkSecretDirs(file: string, dir: string, me: number, what = ''): void {
  for (;;) {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(dir);
    } catch (e) {
      return bad(`failed to check the directory of websocket auth secret ${file}: ${(e as Error).message}`);
    }
    // dir is a resolved path, so a link here means one was made since: refuse, do not follow.
    if (!st.isDirectory()) bad(`the directory ${dir} holding websocket auth secret ${file} changed while it was checked (now not a directory)`);
    if (st.uid !== me && st.uid !== 0) bad(`the directory ${dir} holding ${what}websocket auth secret ${file} is owned by uid ${st.uid}, not by this server's user (uid ${me}) or root`);
    if ((st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0) {
      bad(`the directory ${dir} holding ${what}websocket auth secret ${file} is writable by group or others (mode ${(st.mode & 0o777).toString(8)}), so its file can be replaced; run chmod go-w ${dir} or move the secret`);
    }
    const up = path.dirname(dir);
    if (up === dir) return;
    dir = up;
  }
}

/** Loads the credentials once and returns the upgrade check. */
export function loadWsAuth(auth: WsAuth): WsAuthCheck {
  if (auth.mode === 'capability-token') {
    let digest: Buffer;
    if ('tokenSha256' in auth) {
      digest = parseSha256Hex('--ws-token-sha256', auth.tokenSha256);
    } else {
      const file = path.resolve(auth.tokenFile);
      const token = readSecretFile(file);
      if (token.length < MIN_TOKEN_CHARS) bad(`the capability token in ${file} is too short (at least ${MIN_TOKEN_CHARS} characters)`);
      digest = sha256(token);
    }
    return (headers) => {
      const t = bearerToken(headers);
      if (typeof t !== 'string') return t;
      // Digests have the same length whatever the token's, so the comparison is constant-time.
      return crypto.timingSafeEqual(sha256(t), digest) ? null : { status: 401, message: 'invalid websocket bearer token' };
    };
  }
  if (auth.mode === 'signed-bearer-token') {
    const file = path.resolve(auth.sharedSecretFile);
    const secret = Buffer.from(readSecretFile(file), 'utf8');
    if (secret.length < MIN_SIGNED_BEARER_SECRET_BYTES) bad(`signed websocket bearer secret ${file} must be at least ${MIN_SIGNED_BEARER_SECRET_BYTES} bytes`);
    const skew = auth.maxClockSkewSeconds ?? DEFAULT_MAX_CLOCK_SKEW_SECONDS;
    if (!Number.isSafeInteger(skew) || skew < 0) bad('--ws-max-clock-skew-seconds must be a whole number of seconds, 0 or more');
    const issuer = auth.issuer?.trim() || undefined;
    const audience = auth.audience?.trim() || undefined;
    return (headers) => {
      const t = bearerToken(headers);
      if (typeof t !== 'string') return t;
      const why = verifyJwt(t, secret, { issuer, audience, skew, now: Math.floor(Date.now() / 1000) });
      return why === null ? null : { status: 401, message: why };
    };
  }
  return bad(`unknown websocket auth mode ${String((auth as { mode: unknown }).mode)}`);
}

function bearerToken(headers: IncomingHttpHeaders): string | AuthRefusal {
  const h = headers.authorization;
  if (h === undefined) return { status: 401, message: 'missing websocket bearer token' };
  // Codex takes the header only as visible ASCII, split at the first space, scheme in any case.
  if (/[^\x20-\x7e\t]/.test(h)) return { status: 401, message: INVALID_HEADER };
  const sp = h.indexOf(' ');
  if (sp < 0 || h.slice(0, sp).toLowerCase() !== 'bearer') return { status: 401, message: INVALID_HEADER };
  const token = h.slice(sp + 1).trim();
  return token === '' ? { status: 401, message: INVALID_HEADER } : token;
}

const B64URL = /^[A-Za-z0-9_-]*$/;
const isI64 = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v);

/**
 * HS256 JWT check, as Codex's (jsonwebtoken with HS256 only, then its own claim checks): any
 * malformed, wrongly signed or wrongly typed token is "invalid websocket jwt"; then expiry,
 * not-before, issuer and audience, each with its own text. Returns null when the token is good.
 */
export function verifyJwt(
  token: string,
  secret: Buffer,
  o: { issuer?: string; audience?: string; skew: number; now: number },
): string | null {
  const INVALID = 'invalid websocket jwt';
  const parts = token.split('.');
  if (parts.length !== 3 || !parts.every((p) => B64URL.test(p))) return INVALID;
  const [h, p, s] = parts as [string, string, string];
  let header: unknown;
  let claims: Record<string, unknown>;
  try {
    header = JSON.parse(Buffer.from(h, 'base64url').toString('utf8'));
    claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return INVALID;
  }
  // Only HS256: "none" or another algorithm is refused, never downgraded to.
  if (typeof header !== 'object' || header === null || (header as { alg?: unknown }).alg !== 'HS256') return INVALID;
  const want = crypto.createHmac('sha256', secret).update(`${h}.${p}`).digest();
  const got = Buffer.from(s, 'base64url');
  if (got.length !== want.length || !crypto.timingSafeEqual(got, want)) return INVALID;
  if (typeof claims !== 'object' || claims === null || Array.isArray(claims)) return INVALID;
  const { exp, nbf, iss, aud } = claims;
  if (!isI64(exp)) return INVALID;
  if (nbf !== undefined && nbf !== null && !isI64(nbf)) return INVALID;
  if (iss !== undefined && iss !== null && typeof iss !== 'string') return INVALID;
  const audList = aud === undefined || aud === null ? null : typeof aud === 'string' ? [aud] : Array.isArray(aud) && aud.every((a) => typeof a === 'string') ? (aud as string[]) : undefined;
  if (audList === undefined) return INVALID;
  if (o.now > exp + o.skew) return 'expired websocket jwt';
  if (isI64(nbf) && o.now < nbf - o.skew) return 'websocket jwt is not valid yet';
  if (o.issuer !== undefined && iss !== o.issuer) return 'websocket jwt issuer mismatch';
  if (o.audience !== undefined && !(audList ?? []).includes(o.audience)) return 'websocket jwt audience mismatch';
  return null;
}

function parseSha256Hex(flag: string, v: string): Buffer {
  const t = v.trim();
  if (!/^[0-9a-fA-F]{64}$/.test(t)) bad(`${flag} must be a 64-character hex SHA-256 digest`);
  return Buffer.from(t, 'hex');
}

/** The command-line flags, as Codex 0.171 names them. */
export interface WsAuthFlags {
  wsAuth?: string;
  wsTokenFile?: string;
  wsTokenSha256?: string;
  wsSharedSecretFile?: string;
  wsIssuer?: string;
  wsAudience?: string;
  wsMaxClockSkewSeconds?: string;
}

/** Flags to a WsAuth (undefined: none given), refusing the combinations Codex refuses, in its words. */
export function wsAuthFromFlags(f: WsAuthFlags): WsAuth | undefined {
  const jwtFlags = f.wsSharedSecretFile !== undefined || f.wsIssuer !== undefined || f.wsAudience !== undefined || f.wsMaxClockSkewSeconds !== undefined;
  const tokenFlags = f.wsTokenFile !== undefined || f.wsTokenSha256 !== undefined;
  if (f.wsAuth === undefined) {
    if (jwtFlags || tokenFlags) bad('websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`');
    return undefined;
  }
  if (f.wsAuth === 'capability-token') {
    if (jwtFlags) bad('`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`');
    if (f.wsTokenFile !== undefined && f.wsTokenSha256 !== undefined) bad('`--ws-token-file` and `--ws-token-sha256` are mutually exclusive');
    if (f.wsTokenFile !== undefined) return { mode: 'capability-token', tokenFile: f.wsTokenFile };
    if (f.wsTokenSha256 !== undefined) {
      parseSha256Hex('--ws-token-sha256', f.wsTokenSha256);
      return { mode: 'capability-token', tokenSha256: f.wsTokenSha256 };
    }
    return bad('`--ws-token-file` or `--ws-token-sha256` is required when `--ws-auth capability-token` is set');
  }
  if (f.wsAuth === 'signed-bearer-token') {
    if (tokenFlags) bad('`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, not `signed-bearer-token`');
    if (f.wsSharedSecretFile === undefined) bad('`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set');
    let skew: number | undefined;
    if (f.wsMaxClockSkewSeconds !== undefined) {
      if (!/^\d+$/.test(f.wsMaxClockSkewSeconds)) bad(`invalid value '${f.wsMaxClockSkewSeconds}' for '--ws-max-clock-skew-seconds <SECONDS>': invalid digit found in string`);
      skew = Number(f.wsMaxClockSkewSeconds);
    }
    return {
      mode: 'signed-bearer-token',
      sharedSecretFile: f.wsSharedSecretFile!,
      ...(f.wsIssuer !== undefined ? { issuer: f.wsIssuer } : {}),
      ...(f.wsAudience !== undefined ? { audience: f.wsAudience } : {}),
      ...(skew !== undefined ? { maxClockSkewSeconds: skew } : {}),
    };
  }
  return bad(`invalid value '${f.wsAuth}' for '--ws-auth <MODE>' (possible values: capability-token, signed-bearer-token)`);
}

/** Whether a listen host is loopback (127.0.0.0/8 or ::1): only there may auth be waived. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h) || h === '::1' || h === '0:0:0:0:0:0:0:1';
}
