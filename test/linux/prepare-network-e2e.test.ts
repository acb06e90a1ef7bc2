/**
 * End to end, the Codex way: an ExecParams with `networkProxy` (Codex's RemoteNetworkProxyLaunchConfig)
 * goes through prepareExecRequest, which starts our ManagedProxy (no startManagedNetwork hook given),
 * and spawnPrepared runs curl attached to it.
 *
 *   - sandboxed (workspace_write, network restricted): curl reaches an allowed loopback server
 *     through the proxy, a denied name gets 403 + x-proxy-error, a direct connection fails, and
 *     every audit event carries the request's processId; the proxy closes with the process;
 *   - plain launch (no sandbox context): the env points at a host listener made by prepare; it
 *     works the same and the listener is gone once the command has exited.
 * Names resolve through the injected lookup (runtime.network.lookup); from outside, each server
 * counts its connections.
 */
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { spawnPrepared } from '../../lib/index';
import type { AuditEvent, LookupFn } from '../../lib/network';
import { pathToFileUri, permissionProfileToJson, workspaceWriteProfile } from '../../lib/permissions';
import { prepareExecRequest, type ExecParams, type PreparedExecRequest } from '../../lib/prepare';
import { caps } from '../helpers/capabilities';
import { eventually } from '../helpers/sandbox';

interface Server {
  port: number;
  connections: number;
  urls: string[];
  close(): Promise<void>;
}

async function server(): Promise<Server> {
  const s: Server = { port: 0, connections: 0, urls: [], close: async () => {} };
  const srv = http.createServer((req, res) => {
    s.urls.push(req.url ?? '');
    res.end('hello');
  });
  srv.on('connection', () => s.connections++);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  s.port = (srv.address() as net.AddressInfo).port;
  s.close = () =>
    new Promise<void>((r) => {
      srv.closeAllConnections();
      srv.close(() => r());
    });
  return s;
}

const lookup: LookupFn = async (host) => (host.endsWith('.test') ? [{ address: '127.0.0.1', family: 4 }] : []);

let workspace: string;
let allowed: Server;
let denied: Server;

/** Runs a prepared request to the end and returns its exit code and stdout. */
async function runPrepared(prepared: PreparedExecRequest): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawnPrepared(prepared);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr?.on('data', (b: Buffer) => (stderr += b.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('close', (c: number | null) => resolve(c)));
  return { code, stdout, stderr };
}

function params(processId: string, script: string, sandboxed: boolean): ExecParams {
  return {
    processId,
    argv: ['/bin/sh', '-c', script],
    cwd: pathToFileUri(workspace),
    env: { PATH: '/usr/bin:/bin', HTTP_PROXY: 'http://upstream.invalid:3128', CODEX_NETWORK_PROXY_ATTRIBUTION: 'secret-token' },
    tty: false,
    pipeStdin: false,
    enforceManagedNetwork: true,
    networkProxy: {
      proxy: { enabled: true, mode: 'full', allowLocalBinding: true, domains: { 'allowed.test': 'allow', 'denied.test': 'deny' } },
    },
    ...(sandboxed
      ? {
          sandbox: {
            permissions: permissionProfileToJson(workspaceWriteProfile(), { uriPaths: true }),
            cwd: pathToFileUri(workspace),
            workspaceRoots: [pathToFileUri(workspace)],
            windowsSandboxLevel: 'disabled' as const,
            useLegacyLandlock: false,
          },
        }
      : {}),
  };
}

/** One line per request: the status line and x-proxy-error (if any); then the direct attempt's exit code. */
const script = () =>
  [
    `curl -sS -m 20 -D - -o /dev/null http://allowed.test:${allowed.port}/e2e | tr -d '\\r' | grep -Ei '^(HTTP/|x-proxy-error:)' | tr '\\n' ' '; echo`,
    `curl -sS -m 20 -D - -o /dev/null http://denied.test:${denied.port}/e2e | tr -d '\\r' | grep -Ei '^(HTTP/|x-proxy-error:)' | tr '\\n' ' '; echo`,
    `curl -sS -m 5 --noproxy '*' -o /dev/null http://127.0.0.1:${denied.port}/direct 2>/dev/null; echo "direct=$?"`,
    'echo "attribution=${CODEX_NETWORK_PROXY_ATTRIBUTION:-unset} active=$CODEX_NETWORK_PROXY_ACTIVE"',
  ].join('\n');

describe.runIf(caps.linux)('prepareExecRequest with networkProxy → spawnPrepared (Linux)', () => {
  beforeAll(async () => {
    workspace = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'ps-net-e2e-')));
    [allowed, denied] = await Promise.all([server(), server()]);
  });
  afterAll(async () => {
    await Promise.all([allowed?.close(), denied?.close()]);
    if (workspace) fs.rmSync(workspace, { recursive: true, force: true });
  });

  it.skipIf(!caps.userns)('sandboxed: allowed via the proxy, denied 403, direct refused, audit carries the processId', async () => {
    const events: AuditEvent[] = [];
    const before = { allowed: allowed.connections, denied: denied.connections };
    const prepared = await prepareExecRequest(params('exec-net-1', script(), true), { network: { lookup, onAudit: (e) => events.push(e) } });
    expect(prepared.sandboxType).toBe('linuxSeccomp');
    expect(prepared.rules?.network).toEqual({ kind: 'proxy', proxy: { allow: ['allowed.test'], deny: ['denied.test'], allowLocal: true, mode: 'full' } });
    expect(prepared.managedProxy?.processId).toBe('exec-net-1');
    const r = await runPrepared(prepared);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n').map((l) => l.trim());
    expect(lines[0]).toBe('HTTP/1.1 200 OK');
    expect(lines[1]).toBe('HTTP/1.1 403 Forbidden x-proxy-error: blocked-by-denylist');
    expect(lines[2]).not.toBe('direct=0');
    expect(lines[3]).toBe('attribution=unset active=1');
    expect(events.map((e) => `${e.processId} ${e.host} ${e.decision} ${e.source}`)).toEqual([
      'exec-net-1 allowed.test allow allowlist',
      'exec-net-1 denied.test deny denylist',
    ]);
    // Outside: one request reached the allowed server; nothing reached the denied one.
    expect(allowed.connections).toBe(before.allowed + 1);
    expect(denied.connections).toBe(before.denied);
    expect(allowed.urls).toContain('/e2e');
    expect(denied.urls).toEqual([]);
    // The proxy closed with its process.
    expect(prepared.managedProxy?.instance.closed).toBe(true);
  });

  it.skipIf(caps.userns || !caps.landlock)('sandboxed without user namespaces: the proxy needs degraded Landlock, so the spawn is refused (fail closed)', async () => {
    const prepared = await prepareExecRequest(params('exec-net-ll', 'true', true), { network: { lookup } });
    expect(() => spawnPrepared(prepared)).toThrow(expect.objectContaining({ name: 'SandboxError' }));
  });

  it('plain launch: the env points at a host listener made by prepare; it works and is gone after exit', async () => {
    const events: AuditEvent[] = [];
    const before = { allowed: allowed.connections, denied: denied.connections };
    // A plain launch has no sandbox: the "direct" line is not a denial check here.
    const prepared = await prepareExecRequest(params('exec-net-2', script(), false), { network: { lookup, onAudit: (e) => events.push(e) } });
    expect(prepared.sandboxType).toBe('none');
    const port = prepared.managedProxy!.attachment!.port;
    expect(prepared.env.HTTP_PROXY).toBe(`http://127.0.0.1:${port}`);
    const r = await runPrepared(prepared);
    const lines = r.stdout.trim().split('\n').map((l) => l.trim());
    expect(lines.slice(0, 2), r.stderr).toEqual(['HTTP/1.1 200 OK', 'HTTP/1.1 403 Forbidden x-proxy-error: blocked-by-denylist']);
    expect(lines[3]).toBe('attribution=unset active=1');
    expect(events.map((e) => `${e.processId} ${e.host} ${e.decision}`)).toEqual(['exec-net-2 allowed.test allow', 'exec-net-2 denied.test deny']);
    expect(allowed.connections).toBe(before.allowed + 1);
    // The unsandboxed direct connection reached the denied server itself (it is not a sandbox).
    expect(denied.urls).toEqual(['/direct']);
    // The host listener is released with the command, and the proxy with it.
    await eventually(() => prepared.managedProxy!.instance.closed);
    expect(prepared.managedProxy!.instance.closed).toBe(true);
    const refused = await new Promise<string>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.on('connect', () => {
        s.destroy();
        resolve('connected');
      });
      s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
    });
    expect(refused).toBe('ECONNREFUSED');
  });
});
