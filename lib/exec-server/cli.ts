/**
 * `process-sandbox exec-server --listen stdio | ws://IP:PORT [--ws-token-file PATH]`: a
 * Codex-compatible exec-server. stdio: one JSON message per line on stdin/stdout (diagnostics go to
 * stderr); the server exits when stdin ends, after killing every process it started.
 */
import { SandboxError } from '../errors';
import { createExecServer, type ExecServerTransport } from './index';

export const EXEC_SERVER_USAGE = `Usage:
  process-sandbox exec-server --listen stdio|ws://IP:PORT [--ws-auth capability-token] [--ws-token-file <absolute path>]
    --listen stdio         JSON-RPC (Codex dialect) over stdin/stdout, one message per line
    --listen ws://IP:PORT  WebSocket, one message per text frame (port 0: any free port); the
                           URL actually listened on is printed on stdout, as the reference does
    --ws-token-file <p>    WebSocket clients must send "Authorization: Bearer <token in file>"
    --ws-auth capability-token   accepted for compatibility (implied by --ws-token-file)
`;

function parseListen(v: string, tokenFile: string | undefined): ExecServerTransport {
  if (v === 'stdio' || v === 'stdio://') {
    if (tokenFile !== undefined) throw new SandboxError('EINVALID_ARGUMENT', '--ws-token-file applies only to --listen ws://IP:PORT');
    return { kind: 'stdio' };
  }
  const m = /^ws:\/\/(\[[0-9a-fA-F:]+\]|[0-9.]+|localhost):(\d{1,5})\/?$/.exec(v);
  if (!m || Number(m[2]) > 65535) throw new SandboxError('EINVALID_ARGUMENT', `--listen must be stdio or ws://IP:PORT, got ${v}`);
  const host = m[1]!.replace(/^\[|\]$/g, '');
  return { kind: 'ws', host, port: Number(m[2]), ...(tokenFile !== undefined ? { tokenFile } : {}) };
}

export async function execServerMain(argv: string[]): Promise<number> {
  let listen = 'stdio';
  let tokenFile: string | undefined;
  let auth: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new SandboxError('EINVALID_ARGUMENT', `${a} needs a value`);
      return v;
    };
    if (a === '--listen') listen = value();
    else if (a.startsWith('--listen=')) listen = a.slice(9);
    else if (a === '--ws-token-file') tokenFile = value();
    else if (a === '--ws-auth') auth = value();
    else if (a === '--help' || a === '-h') {
      process.stdout.write(EXEC_SERVER_USAGE);
      return 0;
    } else throw new SandboxError('EINVALID_ARGUMENT', `unknown exec-server option: ${a}\n${EXEC_SERVER_USAGE}`);
  }
  if (auth !== undefined && auth !== 'capability-token') {
    throw new SandboxError('EINVALID_ARGUMENT', `--ws-auth ${auth} is not supported (only capability-token)`);
  }
  if (auth === 'capability-token' && tokenFile === undefined) {
    throw new SandboxError('EINVALID_ARGUMENT', '--ws-auth capability-token needs --ws-token-file');
  }
  const transport = parseListen(listen, tokenFile);
  if (transport.kind === 'ws' && transport.tokenFile === undefined && !/^(127\.|::1$|localhost$)/.test(transport.host)) {
    // Anyone who can reach the port can run commands as this user: say so loudly.
    process.stderr.write(`warning: exec-server on ${transport.host} without --ws-token-file accepts every client that can reach it\n`);
  }
  const server = await createExecServer({ transport });
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
