/**
 * `process-sandbox exec-server --listen stdio | ws://IP:PORT [auth flags]`: a Codex-compatible
 * exec-server. stdio: one JSON message per line on stdin/stdout (diagnostics go to stderr); the
 * server exits when stdin ends, after killing every process it started. The WebSocket auth flags
 * are Codex 0.171's (ws-auth.ts); a ws listener without them refuses to start. --require-sandbox
 * is ours (sandbox-floor.ts).
 */
import { SandboxError } from '../errors';
import { createExecServer } from '../index';
import type { ExecServerTransport } from './index';
import { wsAuthFromFlags, type WsAuthFlags } from './ws-auth';

export const EXEC_SERVER_USAGE = `Usage:
  process-sandbox exec-server --listen stdio|ws://IP:PORT [--require-sandbox] [WebSocket auth options]
    --listen stdio         JSON-RPC (Codex dialect) over stdin/stdout, one message per line
    --listen ws://IP:PORT  WebSocket, one message per text frame (port 0: any free port); the
                           URL actually listened on is printed on stdout, as Codex does
  Sandbox floor:
    --require-sandbox      refuse every request that would run a command or touch the file
                           system without a sandbox: process/start, fs/* and
                           capabilities/discoverV2 without a "sandbox" (or with permissions that
                           confine nothing: disabled, external, an unrestricted file system with
                           the network on), and fs/watchMissing, environmentConfig/read and
                           capabilityRoots/discoverV1 (they cannot carry one). Off by default on
                           stdio and authenticated ws, as Codex: a request without a "sandbox"
                           runs unsandboxed as this server's user, so real Codex clients that send
                           none keep working. Always on with
                           --ws-dangerously-allow-unauthenticated.
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
                                   --require-sandbox; never allowed off loopback)
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

function parseListen(v: string): { kind: 'stdio' } | { kind: 'ws'; host: string; port: number } {
  if (v === 'stdio' || v === 'stdio://') return { kind: 'stdio' };
  // An IP literal only, as Codex: a host name could resolve to something other than loopback.
  const m = /^ws:\/\/(\[[0-9a-fA-F:]+\]|[0-9.]+):(\d{1,5})$/.exec(v);
  if (!m || Number(m[2]) > 65535) throw new SandboxError('EINVALID_ARGUMENT', `--listen must be stdio or ws://IP:PORT, got ${v}`);
  return { kind: 'ws', host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]) };
}

export async function execServerMain(argv: string[]): Promise<number> {
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
    else if (a === '--help' || a === '-h') {
      process.stdout.write(EXEC_SERVER_USAGE);
      return 0;
    } else throw new SandboxError('EINVALID_ARGUMENT', `unknown exec-server option: ${a}\n${EXEC_SERVER_USAGE}`);
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
    ...(requireSandbox ? { requireSandbox: true } : {}),
    ...(httpAllow.length || httpDeny.length || httpAllowLocal ? { httpPolicy: { allow: httpAllow, deny: httpDeny, allowLocal: httpAllowLocal } } : {}),
  });
  if (server.address) {
    const h = server.address.host.includes(':') ? `[${server.address.host}]` : server.address.host;
    process.stdout.write(`ws://${h}:${server.address.port}\n`);
  }
  const stop = () => void server.close();
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  await server.done;
  return 0;
}
