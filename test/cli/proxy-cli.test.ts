/**
 * The CLI's managed network: `process-sandbox run --allow-domain <host> [--deny-domain h]
 * [--allow-local] --json -- cmd`, driven as a user would, in both Linux modes.
 *
 * The CLI resolves names with the system resolver, so the only name used is `localhost` (read from
 * the host's own /etc/hosts, never edited); the server listens on 127.0.0.1, so reaching it through
 * an allowed name needs --allow-local. From outside, the server counts its connections.
 */
import { spawn as cpSpawn } from 'node:child_process';
import * as http from 'node:http';
import * as net from 'node:net';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { caps, MODES } from '../helpers/capabilities';

const CLI = path.resolve(__dirname, '..', '..', 'dist', 'cli.js');
const ENV = { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: '/', LANG: 'C' };

interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
  json: Record<string, any>;
}

/** Runs the CLI asynchronously (the test's own server must keep answering meanwhile). */
function cli(args: string[]): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const p = cpSpawn(process.execPath, [CLI, ...args], { env: ENV, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (b) => (stdout += b));
    p.stderr.on('data', (b) => (stderr += b));
    const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
    p.on('error', reject);
    p.on('close', (status) => {
      clearTimeout(timer);
      // The JSON line; on a refusal the CLI's own message follows it.
      const last = stderr.trim().split('\n').filter((l) => l.startsWith('{')).pop() ?? '';
      let json: Record<string, any> = {};
      try {
        json = JSON.parse(last) as Record<string, any>;
      } catch {
        /* a test that needs it says so */
      }
      resolve({ status, stdout, stderr, json });
    });
  });
}

let server: http.Server;
let port = 0;
let connections = 0;
const urls: string[] = [];

const curl = (p: string) => ['--', 'curl', '-sS', '-m', '20', '-D', '-', '-o', '/dev/null', `http://localhost:${port}${p}`];
const statusLine = (out: string) => out.split('\r\n')[0];
const proxyError = (out: string) => /^x-proxy-error: (.*)$/im.exec(out)?.[1]?.trim() ?? null;

describe.runIf(caps.linux)('CLI managed network (--allow-domain, --deny-domain, --allow-local, audit in --json)', () => {
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      urls.push(req.url ?? '');
      res.end('hello');
    });
    server.on('connection', () => connections++);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const modeArgs = mode === 'landlock' ? ['--mode', 'landlock', '--degraded'] : ['--mode', 'isolated'];

    it.skipIf(skip)('--allow-domain localhost --allow-local reaches the server; the allow is in the JSON audit', async () => {
      const before = connections;
      const r = await cli(['run', ...modeArgs, '--allow-domain', 'localhost', '--allow-local', '--json', ...curl(`/${mode}/allowed`)]);
      expect(r.status, r.stderr).toBe(0);
      expect(statusLine(r.stdout)).toBe('HTTP/1.1 200 OK');
      expect(connections).toBe(before + 1);
      expect(urls).toContain(`/${mode}/allowed`);
      expect(r.json.enforcement.mode).toBe(mode);
      expect(String(r.json.enforcement.mechanisms.network)).toMatch(/^proxy only/);
      expect(r.json.audit).toEqual([
        expect.objectContaining({ host: 'localhost', port, protocol: 'http', method: 'GET', decision: 'allow', source: 'allowlist', processId: expect.any(String) }),
      ]);
    });

    it.skipIf(skip)('without --allow-local the same name is refused: 403 blocked-by-policy, the server sees nothing', async () => {
      const before = connections;
      const r = await cli(['run', ...modeArgs, '--allow-domain', 'localhost', '--json', ...curl(`/${mode}/local`)]);
      expect(r.status, r.stderr).toBe(0);
      expect(statusLine(r.stdout)).toBe('HTTP/1.1 403 Forbidden');
      expect(proxyError(r.stdout)).toBe('blocked-by-policy');
      expect(r.json.audit).toEqual([expect.objectContaining({ host: 'localhost', decision: 'deny', source: 'policy', reason: 'not_allowed_local' })]);
      expect(connections).toBe(before);
    });

    it.skipIf(skip)('--deny-domain wins over --allow-domain: 403 blocked-by-denylist', async () => {
      const before = connections;
      const r = await cli(['run', ...modeArgs, '--allow-domain', 'localhost', '--deny-domain', 'localhost', '--allow-local', '--json', ...curl(`/${mode}/denied`)]);
      expect(r.status, r.stderr).toBe(0);
      expect(statusLine(r.stdout)).toBe('HTTP/1.1 403 Forbidden');
      expect(proxyError(r.stdout)).toBe('blocked-by-denylist');
      expect(r.json.audit).toEqual([expect.objectContaining({ host: 'localhost', decision: 'deny', source: 'denylist' })]);
      expect(connections).toBe(before);
    });

    it.skipIf(skip)('--allow-domain=localhost:<port> reaches that port only; another port is refused (host:port once never matched)', async () => {
      const before = connections;
      const r = await cli(['run', ...modeArgs, `--allow-domain=localhost:${port}`, '--allow-local', '--json', ...curl(`/${mode}/port`)]);
      expect(r.status, r.stderr).toBe(0);
      expect(statusLine(r.stdout)).toBe('HTTP/1.1 200 OK');
      expect(connections).toBe(before + 1);
      const other = await cli(['run', ...modeArgs, `--allow-domain=localhost:${port === 65535 ? port - 1 : port + 1}`, '--allow-local', '--json', ...curl(`/${mode}/other-port`)]);
      expect(other.status, other.stderr).toBe(0);
      expect(statusLine(other.stdout)).toBe('HTTP/1.1 403 Forbidden');
      expect(proxyError(other.stdout)).toBe('blocked-by-allowlist');
      expect(other.json.audit).toEqual([expect.objectContaining({ host: 'localhost', port, decision: 'deny', reason: 'not_allowed' })]);
      expect(connections).toBe(before + 1);
      expect(urls).not.toContain(`/${mode}/other-port`);
    });

    it.skipIf(skip)('a name that is not listed is refused (blocked-by-allowlist); a direct connection fails', async () => {
      const before = connections;
      const r = await cli(['run', ...modeArgs, '--allow-domain', 'example.invalid', '--allow-local', '--json', ...curl(`/${mode}/unlisted`)]);
      expect(r.status, r.stderr).toBe(0);
      expect(statusLine(r.stdout)).toBe('HTTP/1.1 403 Forbidden');
      expect(proxyError(r.stdout)).toBe('blocked-by-allowlist');
      expect(r.json.audit).toEqual([expect.objectContaining({ host: 'localhost', decision: 'deny', source: 'allowlist', reason: 'not_allowed' })]);
      // Around the proxy: no connection, no audit event.
      const d = await cli(['run', ...modeArgs, '--allow-domain', 'localhost', '--allow-local', '--json', '--', 'curl', '-sS', '-m', '5', '--noproxy', '*', `http://127.0.0.1:${port}/${mode}/direct`]);
      expect(d.status).not.toBe(0);
      expect(d.json.audit).toEqual([]);
      expect(connections).toBe(before);
      expect(urls).not.toContain(`/${mode}/direct`);
    });
  });

  it.skipIf(MODES[1].skip)('a proxy policy in Landlock mode without --degraded runs when every guarantee it asks for holds, else is refused with status 125 and nothing runs', async () => {
    const before = connections;
    const degraded = await cli(['run', '--mode', 'landlock', '--degraded', '--allow-domain', 'localhost', '--allow-local', '--json', ...curl('/landlock/degraded')]);
    expect(degraded.status).toBe(0);
    const needs = (degraded.json.enforcement as { degradedBy?: string[] }).degradedBy ?? [];
    const seen = connections;
    expect(seen).toBe(before + 1);
    const r = await cli(['run', '--mode', 'landlock', '--allow-domain', 'localhost', '--allow-local', '--json', ...curl('/landlock/not-degraded')]);
    if (needs.length > 0) {
      expect(r.status).toBe(125);
      expect(r.json.error).toMatchObject({ code: expect.stringMatching(/^E[A-Z_]+$/) });
      expect(r.stdout).toBe('');
      expect(connections).toBe(seen);
    } else {
      // Through the proxy, as with --degraded: the listener got the request.
      expect(r.status).toBe(0);
      expect(connections).toBe(seen + 1);
    }
  });

  it('--deny-domain or --allow-local alone do not switch the proxy on: refused, saying what they need, and nothing connects', async () => {
    const before = connections;
    for (const flags of [['--allow-local'], ['--deny-domain', 'example.com']]) {
      const r = await cli(['run', ...flags, '--json', '--', 'curl', '-sS', '-m', '5', `http://localhost:${port}/no-proxy`]);
      expect(r.status).toBe(125);
      expect(r.stderr.split('\n')[0]).toBe(`process-sandbox: ${flags[0]} applies to the proxy: add --allow-domain <host> (the proxy's allow list) or drop ${flags[0]}`);
    }
    expect(connections).toBe(before);
  });
});
