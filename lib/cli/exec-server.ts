/**
 * `process-sandbox exec-server --listen stdio | ws://IP:PORT [auth flags]`: a Codex-compatible
 * exec-server. stdio: one JSON message per line on stdin/stdout (diagnostics go to stderr); the
 * server exits when stdin ends, after killing every process it started. The WebSocket auth flags
 * are Codex 0.171's (lib/exec-server/ws-auth.ts); a ws listener without them refuses to start.
 * --default-sandbox, --require-sandbox, --floor-write and --floor-read are ours
 * (lib/exec-server/sandbox-floor.ts).
 */
import { SandboxError } from '../errors';
import type { ExecServer, ExecServerTransport } from '../exec-server';
import { DEFAULT_LIMITS, LIMIT_FLAGS, type LimitName } from '../exec-server/limits';
import { wsAuthFromFlags, type WsAuthFlags } from '../exec-server/ws-auth';
import { createExecServer } from '../index';

export const usage = `Usage:
  process-sandbox exec-server --listen stdio|ws://IP:PORT [sandbox options] [WebSocket auth options]
    --listen stdio         JSON-RPC (Codex dialect) over stdin/stdout, one message per line
    --listen ws://IP:PORT  WebSocket, one message per text frame (port 0: any free port); the
                           URL actually listened on is printed on stdout, as Codex does
  Default sandbox (a process/start, fs/*, fs/open or capabilities/discoverV2 without "sandbox"):
    --default-sandbox workspace-write|read-only|none
                           workspace-write (default): read everything, write the request's cwd
                           (fs/* and fs/open: the --floor-write directories under the floor,
                           else this server's working directory; over / it is read-only), no
                           network; read-only: the same without the write; none: run it
                           unsandboxed as this server's user, as Codex does (not with the floor)
  Sandbox floor:
    --require-sandbox      every request runs sandboxed, and a sandbox is judged by what it
                           resolves to (after :root, /, .., symlinks): one that makes anything
                           outside the --floor-write directories writable, or that has the
                           host network, is refused, as are permissions that confine nothing
                           (disabled, external, unrestricted with the network on) and
                           fs/watchMissing, environmentConfig/read and capabilityRoots/discoverV1
                           (they cannot carry a sandbox). Always on with
                           --ws-dangerously-allow-unauthenticated.
    --floor-write <dir>    writes may land only in this directory (repeatable; default: this
                           server's working directory, which must not be /). /tmp is outside
                           unless given here
    --floor-read <dir>     also bound reads (repeatable): a sandbox that reads the whole file
                           system, or a readable root outside --floor-read and --floor-write, is
                           refused (the platform's fixed reads stay: /usr, /lib, a few /etc
                           files, never /etc/shadow). Without it reads are not bounded: a
                           sandbox with ":root" read reads what this server's user can
    --floor-allow-network  let a sandbox have the host network and host unix sockets (refused
                           by default under the floor: they reach every service on this host,
                           a root server's docker.sock included); the managed proxy is allowed
  WebSocket auth (the same flags as codex exec-server; one mode is required):
    --ws-auth capability-token     clients send "Authorization: Bearer <token>"
      --ws-token-file <path>       the token (file mode 600, at least 16 characters), or
      --ws-token-sha256 <hex>      the token's SHA-256 digest
    --ws-auth signed-bearer-token  clients send "Authorization: Bearer <HS256 JWT with exp>"
      --ws-shared-secret-file <path>   the HMAC secret (file mode 600, at least 32 bytes)
      --ws-issuer <iss>            required iss claim
      --ws-audience <aud>          required aud claim
      --ws-max-clock-skew-seconds <n>  allowed skew on exp/nbf (default 30)
    --ws-allow-origin <origin>     allow browser clients from this Origin (repeatable; by
                                   default any request with an Origin or Sec-WebSocket-Origin
                                   header gets 403)
    --ws-allow-host <host>         on a loopback listener, also accept this Host name
                                   (repeatable; by default only 127.0.0.1, [::1] and localhost,
                                   with no port or the listening one, others get 421: DNS
                                   rebinding)
    --ws-dangerously-allow-unauthenticated
                                   listen on loopback without auth: every local user can then
                                   run commands as this one, sandboxed only (implies
                                   --require-sandbox and its bounds; never allowed off
                                   loopback)
  Bounds (a request past one is refused with -32600; a connection past one gets HTTP 503):
    --max-server-processes <n>     processes starting or running in the whole server, every
                                   session and the sandboxed fs helpers together (default
                                   ${DEFAULT_LIMITS.maxServerProcesses})
    --max-session-processes <n>    the same per session (default ${DEFAULT_LIMITS.maxProcesses})
    --max-sessions <n>             sessions, detached ones waiting for a resume included
                                   (default ${DEFAULT_LIMITS.maxSessions})
    --max-connections <n>          WebSocket connections at once (default ${DEFAULT_LIMITS.maxConnections})
    --max-connections-per-peer <n> WebSocket connections from one address (default
                                   ${DEFAULT_LIMITS.maxConnectionsPerPeer}; on loopback every local user is one address)
  http/request (made by the server through its managed proxy; by default every host is denied):
    --http-allow-domain <pattern>  allow this domain (repeatable; *.example.com, **.example.com)
    --http-deny-domain <pattern>   deny this domain even when allowed (repeatable)
    --http-allow-local             let allowed names reach loopback and private addresses
`;

const AUTH_FLAGS: Record<string, keyof WsAuthFlags> = {
  '--ws-auth': 'wsAuth',
  '--ws-token-file': 'wsTokenFile',
  '--ws-token-sha256': 'wsTokenSha256',
  '--ws-shared-secret-file': 'wsSharedSecretFile',
  '--ws-issuer': 'wsIssuer',
  '--ws-audience': 'wsAudience',
  '--ws-max-clock-skew-seconds': 'wsMaxClockSkewSeconds',
};

const LIMIT_BY_FLAG: Record<string, LimitName> = Object.fromEntries(Object.entries(LIMIT_FLAGS).map(([k, f]) => [f, k as LimitName]));

function positiveInteger(flag: string, v: string): number {
  if (!/^[1-9]\d{0,8}$/.test(v)) throw new SandboxError('EINVALID_ARGUMENT', `${flag} must be a positive integer, got ${v}`);
  return Number(v);
}

function parseListen(v: string): { kind: 'stdio' } | { kind: 'ws'; host: string; port: number } {
  if (v === 'stdio' || v === 'stdio://') return { kind: 'stdio' };
  // An IP literal only, as Codex: a host name could resolve to something other than loopback.
  const m = /^ws:\/\/(\[[0-9a-fA-F:]+\]|[0-9.]+):(\d{1,5})$/.exec(v);
  if (!m || Number(m[2]) > 65535) throw new SandboxError('EINVALID_ARGUMENT', `--listen must be stdio or ws://IP:PORT, got ${v}`);
  return { kind: 'ws', host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]) };
}

/**
 * The exec-server command. A start-up refusal (a bad flag, a floor that bounds nothing, a port in
 * use) is one line on stderr plus a hint, exit 125, as `run` reports a usage error.
 */
export async function main(argv: string[]): Promise<number> {
  let server: ExecServer | 'help';
  try {
    server = await startFromFlags(argv);
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    process.stderr.write(`process-sandbox: exec-server: ${msg.split('\n')[0]}\nTry 'process-sandbox exec-server --help' for the options.\n`);
    return 125;
  }
  if (server === 'help') return 0;
  const running = server;
  const stop = () => void running.close();
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  await running.done;
  return 0;
}

async function startFromFlags(argv: string[]): Promise<ExecServer | 'help'> {
  let listen = 'stdio';
  const flags: WsAuthFlags = {};
  const origins: string[] = [];
  const hosts: string[] = [];
  let unauthenticated = false;
  const httpAllow: string[] = [];
  const httpDeny: string[] = [];
  let httpAllowLocal = false;
  let wsOnly: string | undefined;
  let requireSandbox = false;
  const floorWrite: string[] = [];
  const floorRead: string[] = [];
  let defaultSandbox: string | undefined;
  let floorAllowNetwork = false;
  const limits: Partial<Record<LimitName, number>> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const a = eq > 0 ? arg.slice(0, eq) : arg;
    const value = () => {
      const v = eq > 0 ? arg.slice(eq + 1) : argv[++i];
      if (v === undefined) throw new SandboxError('EINVALID_ARGUMENT', `${a} needs a value`);
      return v;
    };
    if (a === '--listen') listen = value();
    else if (a in AUTH_FLAGS) {
      const k = AUTH_FLAGS[a]!;
      if (flags[k] !== undefined) throw new SandboxError('EINVALID_ARGUMENT', `${a} may be given only once`);
      flags[k] = value();
      wsOnly ??= a;
    } else if (a === '--ws-allow-origin') {
      origins.push(value());
      wsOnly ??= a;
    } else if (a === '--ws-allow-host') {
      hosts.push(value());
      wsOnly ??= a;
    } else if (a === '--ws-dangerously-allow-unauthenticated') {
      unauthenticated = true;
      wsOnly ??= a;
    } else if (a === '--http-allow-domain') httpAllow.push(value());
    else if (a === '--http-deny-domain') httpDeny.push(value());
    else if (a === '--http-allow-local') httpAllowLocal = true;
    else if (a === '--require-sandbox') requireSandbox = true;
    else if (a === '--floor-write') floorWrite.push(value());
    else if (a === '--floor-read') floorRead.push(value());
    else if (a === '--floor-allow-network') floorAllowNetwork = true;
    else if (a in LIMIT_BY_FLAG) limits[LIMIT_BY_FLAG[a]!] = positiveInteger(a, value());
    else if (a === '--default-sandbox') {
      if (defaultSandbox !== undefined) throw new SandboxError('EINVALID_ARGUMENT', `${a} may be given only once`);
      defaultSandbox = value();
    }
    else if (a === '--help' || a === '-h') {
      process.stdout.write(usage);
      return 'help';
    } else throw new SandboxError('EINVALID_ARGUMENT', `unknown exec-server option: ${a}`);
  }
  const where = parseListen(listen);
  if (where.kind === 'stdio' && wsOnly !== undefined) throw new SandboxError('EINVALID_ARGUMENT', `${wsOnly} applies only to --listen ws://IP:PORT`);
  const auth = wsAuthFromFlags(flags);
  let transport: ExecServerTransport;
  if (where.kind === 'stdio') transport = where;
  else {
    if (auth !== undefined && unauthenticated) {
      throw new SandboxError('EINVALID_ARGUMENT', '--ws-dangerously-allow-unauthenticated cannot be combined with --ws-auth');
    }
    transport = {
      ...where,
      ...(auth !== undefined ? { auth } : {}),
      ...(origins.length ? { allowOrigins: origins } : {}),
      ...(hosts.length ? { allowHosts: hosts } : {}),
      ...(unauthenticated ? { dangerouslyAllowUnauthenticated: true } : {}),
    };
  }
  const server = await createExecServer({
    transport,
    ...limits,
    ...(requireSandbox ? { requireSandbox: true } : {}),
    ...(floorWrite.length ? { floorWrite } : {}),
    ...(floorRead.length ? { floorRead } : {}),
    ...(floorAllowNetwork ? { floorAllowNetwork: true } : {}),
    ...(defaultSandbox !== undefined ? { defaultSandbox: defaultSandbox as 'workspace-write' } : {}),
    ...(httpAllow.length || httpDeny.length || httpAllowLocal ? { httpPolicy: { allow: httpAllow, deny: httpDeny, allowLocal: httpAllowLocal } } : {}),
  });
  if (server.address) {
    const h = server.address.host.includes(':') ? `[${server.address.host}]` : server.address.host;
    process.stdout.write(`ws://${h}:${server.address.port}\n`);
  }
  if ((requireSandbox || unauthenticated) && floorRead.length === 0 && process.geteuid?.() === 0) {
    process.stderr.write(
      'process-sandbox: exec-server: warning: the sandbox floor does not bound reads (no --floor-read): a request whose sandbox reads everything can read every file root can, /etc/shadow included\n',
    );
  }
  return server;
}
