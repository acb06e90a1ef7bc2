/**
 * Shared pieces of the Linux-enforced managed-network suites (enforced*.test.ts): the client
 * scripts that run inside the sandbox, and a `run` wrapper that collects the audit events and
 * decider calls of one sandboxed command.
 *
 * Names resolve through the proxy's injected `lookup` (every *.test name below points at
 * 127.0.0.1, where the test's servers listen); /etc/hosts is never touched. The servers count
 * connections, so a test can prove from the outside that a refused request reached nothing.
 */
import { run, type RunOptions, type RunResult } from '../../lib/index';
import type { AuditEvent, DeciderRequest, LookupFn } from '../../lib/network';
import type { ProxyPolicy } from '../../lib/policy-types';
import { modePolicy, type LinuxMode } from '../helpers/capabilities';
import { BASE_ENV } from '../helpers/sandbox';

export { BASE_ENV };

/** Every name ending in `.test` resolves to loopback; anything else does not resolve. */
export const lookup: LookupFn = async (host) => (host.endsWith('.test') ? [{ address: '127.0.0.1', family: 4 }] : []);

export interface SandboxedRun extends RunResult<string> {
  events: AuditEvent[];
  deciderCalls: DeciderRequest[];
}

/**
 * Runs `cmd` in `mode` with a proxy policy (a fresh proxy for this run). The decider allows
 * names starting with `ask-yes` and denies the rest.
 */
export async function runWithProxy(
  mode: LinuxMode,
  proxy: ProxyPolicy,
  cmd: string,
  args: string[],
  opts: { processId?: string; cwd?: string; write?: string[]; env?: Record<string, string>; timeout?: number } & Pick<RunOptions, 'encoding'> = {},
): Promise<SandboxedRun> {
  const events: AuditEvent[] = [];
  const deciderCalls: DeciderRequest[] = [];
  const r = await run(cmd, args, {
    cwd: opts.cwd ?? '/',
    env: opts.env ?? BASE_ENV,
    timeout: opts.timeout ?? 60_000,
    policy: modePolicy(mode, { network: { proxy }, ...(opts.write ? { filesystem: { write: opts.write } } : {}) }),
    proxy: {
      lookup,
      onAudit: (e) => events.push(e),
      decider: async (req) => {
        deciderCalls.push(req);
        return req.host.startsWith('ask-yes') ? { decision: 'allow', reason: 'test says yes' } : { decision: 'deny', reason: 'test says no' };
      },
      deciderTimeoutMs: 10_000,
      ...(opts.processId ? { processId: opts.processId } : {}),
    },
  });
  return { ...(r as RunResult<string>), events, deciderCalls };
}

/**
 * Node client (works on Node 20: it speaks to the proxy named in HTTP_PROXY itself).
 *   node -e NODE_CLIENT '[["http","http://a.test:1/x"],["connect","a.test:1","/y"],["direct","127.0.0.1",1]]'
 * Prints "RESULT <json>", one entry per action:
 *   http:    { status, xerr, body }     absolute-form request through HTTP_PROXY
 *   connect: { status, xerr, inner }    CONNECT through HTTP_PROXY, then GET path inside the tunnel
 *   direct:  "ok" or an error code       a plain TCP connect, no proxy
 */
export const NODE_CLIENT = String.raw`
const http = require('http');
const net = require('net');
const proxy = new URL(process.env.HTTP_PROXY || 'http://127.0.0.1:9');
function viaProxy(url) {
  return new Promise((resolve) => {
    const u = new URL(url);
    const req = http.request({ host: proxy.hostname, port: proxy.port, path: url, headers: { host: u.host }, agent: false }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, xerr: res.headers['x-proxy-error'] || null, body }));
    });
    req.setTimeout(20000, () => req.destroy(new Error('ETIMEDOUT')));
    req.on('error', (e) => resolve({ error: e.code || e.message }));
    req.end();
  });
}
function tunnel(target, path) {
  return new Promise((resolve) => {
    const req = http.request({ host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: target, headers: { host: target }, agent: false });
    req.setTimeout(20000, () => req.destroy(new Error('ETIMEDOUT')));
    req.on('error', (e) => resolve({ error: e.code || e.message }));
    req.on('response', (res) => resolve({ status: res.statusCode, xerr: res.headers['x-proxy-error'] || null }));
    req.on('connect', (res, sock, head) => {
      if (res.statusCode !== 200) {
        sock.destroy();
        resolve({ status: res.statusCode, xerr: res.headers['x-proxy-error'] || null });
        return;
      }
      let data = head.toString();
      sock.on('data', (c) => (data += c));
      sock.on('end', () => resolve({ status: res.statusCode, xerr: null, inner: data.split('\r\n')[0] }));
      sock.on('error', (e) => resolve({ status: res.statusCode, error: e.code }));
      sock.write('GET ' + path + ' HTTP/1.1\r\nHost: ' + target + '\r\nConnection: close\r\n\r\n');
    });
    req.end();
  });
}
function direct(host, port) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port: Number(port) });
    s.setTimeout(5000, () => { s.destroy(); resolve('ETIMEDOUT'); });
    s.on('connect', () => { s.end('LEAK'); resolve('ok'); });
    s.on('error', (e) => resolve(e.code || e.message));
  });
}
(async () => {
  const out = [];
  for (const [kind, a, b] of JSON.parse(process.argv[1])) {
    if (kind === 'http') out.push(await viaProxy(a));
    else if (kind === 'connect') out.push(await tunnel(a, b));
    else out.push(await direct(a, b));
  }
  console.log('RESULT ' + JSON.stringify(out));
})();
`;

/**
 * Python client: urllib takes the proxy from http_proxy/HTTP_PROXY itself.
 *   python3 -c PY_CLIENT URL... → "RESULT [{status, xerr, body}|{error}, ...]"
 * An argument "direct:HOST:PORT" tries a plain TCP connect instead ("ok" or an errno name).
 */
export const PY_CLIENT = String.raw`
import sys, json, socket, errno, urllib.request, urllib.error
out = []
for a in sys.argv[1:]:
    if a.startswith('direct:'):
        _, h, p = a.split(':')
        try:
            socket.create_connection((h, int(p)), timeout=5).sendall(b'LEAK'); out.append('ok')
        except OSError as e:
            out.append(errno.errorcode.get(e.errno, str(e)))
        continue
    try:
        r = urllib.request.urlopen(a, timeout=20)
        out.append({'status': r.status, 'xerr': r.headers.get('x-proxy-error'), 'body': r.read().decode()})
    except urllib.error.HTTPError as e:
        out.append({'status': e.code, 'xerr': e.headers.get('x-proxy-error'), 'body': e.read().decode()})
    except Exception as e:
        out.append({'error': repr(e)})
print('RESULT ' + json.dumps(out))
`;

export function parseResult<T = unknown>(r: RunResult<string>): T[] {
  const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
  if (line === undefined) throw new Error(`client printed no result (code ${r.code}, signal ${r.signal}):\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(line.slice('RESULT '.length)) as T[];
}

/** The audit events as compact strings, for readable comparisons. */
export function brief(events: AuditEvent[]): string[] {
  return events.map((e) => `${e.processId} ${e.protocol} ${e.host} ${e.decision} ${e.source}`);
}

/** Node honours NODE_USE_ENV_PROXY (http and fetch) from 24, backported to 22.21. */
export function nodeHonoursEnvProxy(version = process.versions.node): boolean {
  const [major, minor] = version.split('.').map(Number);
  return major >= 24 || (major === 22 && minor >= 21);
}
