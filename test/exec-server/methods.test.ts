/**
 * Our exec-server's new method families beyond what the reference comparison covers (the
 * reference has no network policy and no limits like these): bounded memory (a 700 MiB
 * fs/readFile is refused and can be streamed with fs/open + fs/readBlock), bounded handles,
 * fs/walk and fs/open inside a sandbox that denies part of the tree (symlinks are no way out),
 * and http/request through the managed proxy (a denied host is refused, audited, and the target
 * really got nothing). Each denial is paired with its positive control.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';

import { createExecServer, type CreateExecServerOptions, type ExecServer } from '../../lib';
import { InterceptionCa } from '../../lib/network';
import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { workspaceWrite, type Message } from './client';

const scene = makeScene('exec-methods');
afterAll(() => scene.cleanup());
const uri = (p: string) => 'file://' + p;

/**
 * An in-process client over the stdio transport. A request without a sandbox takes Codex's
 * unsandboxed path here (defaultSandbox 'none'): these tests are about the methods themselves;
 * the default sandbox has its own tests (default-sandbox.test.ts).
 */
async function peer(options: Omit<CreateExecServerOptions, 'transport'> = {}) {
  const input = new PassThrough();
  const output = new PassThrough();
  const messages: Message[] = [];
  const server: ExecServer = await createExecServer({ transport: { kind: 'stdio', input, output }, defaultSandbox: 'none', ...options });
  let buf = '';
  output.setEncoding('utf8');
  output.on('data', (d: string) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      messages.push(JSON.parse(buf.slice(0, i)) as Message);
      buf = buf.slice(i + 1);
    }
  });
  let id = 1;
  const waitFor = async <T>(get: () => T | undefined, what: string): Promise<T> => {
    const end = Date.now() + 60_000;
    for (;;) {
      const v = get();
      if (v !== undefined) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const request = async (method: string, params?: unknown) => {
    const n = id++;
    input.write(JSON.stringify({ id: n, method, params }) + '\n');
    return waitFor(() => messages.find((m) => m.id === n), `#${n} ${method}`);
  };
  await request('initialize', { clientName: 't' });
  input.write('{"method":"initialized"}\n');
  return {
    request,
    messages,
    waitFor,
    close: async () => {
      input.end();
      await server.done;
    },
  };
}

/** Read everything, write the workspace, and nothing at all under `denied`. */
const denyingSandbox = (root: string, denied: string) => workspaceWrite(root, [{ path: { type: 'path', path: uri(denied) }, access: 'deny' }]);

describe.skipIf(!caps.linux)('exec-server: bounded memory and handles', () => {
  it('a 700 MiB fs/readFile is refused (the server does not load it); fs/open + fs/readBlock stream it', async () => {
    const big = path.join(scene.ws, 'big.bin');
    const fd = fs.openSync(big, 'w');
    fs.ftruncateSync(fd, 700 * 1024 * 1024); // sparse: costs no disk
    fs.writeSync(fd, Buffer.from('tail'), 0, 4, 700 * 1024 * 1024 - 4);
    fs.closeSync(fd);
    const c = await peer();
    try {
      const before = process.memoryUsage().rss;
      const r = await c.request('fs/readFile', { path: uri(big) });
      expect(r.error?.message).toBe(
        `file \`${big}\` is larger than 16777216 bytes, the fs/readFile limit of this exec-server; read it in blocks with fs/open and fs/readBlock`,
      );
      // The refusal came from a stat, not from reading: memory did not grow by anything near the file.
      expect(process.memoryUsage().rss - before).toBeLessThan(200 * 1024 * 1024);
      // Positive control: the same file, in blocks.
      expect((await c.request('fs/open', { handleId: 'b', path: uri(big) })).result).toEqual({ handleId: 'b' });
      const last = await c.request('fs/readBlock', { handleId: 'b', offset: 700 * 1024 * 1024 - 4, len: 1024 * 1024 });
      expect(last.result).toEqual({ chunk: Buffer.from('tail').toString('base64'), eof: true });
      const mid = await c.request('fs/readBlock', { handleId: 'b', offset: 300 * 1024 * 1024, len: 1024 * 1024 });
      expect(Buffer.from((mid.result as { chunk: string }).chunk, 'base64').length).toBe(1024 * 1024);
    } finally {
      await c.close();
      fs.rmSync(big, { force: true });
    }
  });

  it('handles are bounded per connection: one past the bound is refused, a close frees a slot', async () => {
    const f = path.join(scene.ws, 'h.txt');
    fs.writeFileSync(f, 'h');
    const c = await peer({ maxFileHandles: 3 });
    try {
      for (const id of ['a', 'b', 'c']) expect((await c.request('fs/open', { handleId: id, path: uri(f) })).result).toEqual({ handleId: id });
      expect((await c.request('fs/open', { handleId: 'd', path: uri(f) })).error).toEqual({
        code: -32600,
        message: 'too many open file handles on this connection (at most 3); close some with fs/close',
      });
      await c.request('fs/close', { handleId: 'b' });
      expect((await c.request('fs/open', { handleId: 'd', path: uri(f) })).result).toEqual({ handleId: 'd' });
    } finally {
      await c.close();
    }
  });
});

describe.skipIf(!caps.linux)('exec-server: a FIFO cannot block the server', () => {
  it('fs/writeFile, fs/open (read and replace) and fs/readFile on a FIFO nobody reads fail at once; the next request is answered', async () => {
    const fifo = path.join(scene.ws, 'fifo');
    execFileSync('mkfifo', [fifo]);
    const c = await peer();
    try {
      expect((await c.request('fs/writeFile', { path: uri(fifo), dataBase64: 'eA==' })).error).toEqual({ code: -32603, message: 'No such device or address (os error 6)' });
      expect((await c.request('fs/open', { handleId: 'w', path: uri(fifo), mode: 'replace' })).error).toEqual({ code: -32603, message: 'No such device or address (os error 6)' });
      expect((await c.request('fs/open', { handleId: 'r', path: uri(fifo) })).error).toEqual({ code: -32600, message: `path \`${fifo}\` is not a file` });
      expect((await c.request('fs/readFile', { path: uri(fifo) })).error).toEqual({ code: -32600, message: `path \`${fifo}\` is not a file` });
      // Positive control: the server still answers, and a regular file is written.
      const f = path.join(scene.ws, 'regular');
      expect((await c.request('fs/writeFile', { path: uri(f), dataBase64: 'eA==' })).result).toEqual({});
      expect(fs.readFileSync(f, 'utf8')).toBe('x');
    } finally {
      await c.close();
    }
  });
});

describe.skipIf(!caps.linux || !caps.userns)(`exec-server: sandboxed fs/walk and fs/open stay inside the policy${caps.userns ? '' : ' (skipped: no unprivileged user namespaces)'}`, () => {
  const root = path.join(scene.ws, 'walk');
  const denied = path.join(scene.out, 'walk-denied');
  fs.mkdirSync(root, { recursive: true });
  fs.mkdirSync(denied, { recursive: true });
  fs.writeFileSync(path.join(denied, 'secret'), 'top secret');
  fs.writeFileSync(path.join(root, 'mine'), 'mine');
  fs.symlinkSync(denied, path.join(root, 'link'));
  const opts = { maxDepth: 5, maxDirectories: 100, maxEntries: 100, followDirectorySymlinks: true };

  it('a followed symlink into a denied directory lists nothing of it; unsandboxed, the same walk does', async () => {
    const c = await peer();
    try {
      const control = await c.request('fs/walk', { path: uri(root), options: opts });
      const paths = (r: Message) => ((r.result?.entries as Array<{ path: string }>) ?? []).map((e) => e.path);
      expect(paths(control)).toContain(uri(path.join(root, 'link', 'secret')));
      const sandboxed = await c.request('fs/walk', { path: uri(root), options: opts, sandbox: denyingSandbox(root, denied) });
      expect(sandboxed.error).toBeUndefined();
      expect(paths(sandboxed)).toContain(uri(path.join(root, 'mine')));
      expect(paths(sandboxed).filter((p) => p.includes('secret'))).toEqual([]);
    } finally {
      await c.close();
    }
  });

  it('fs/open of a denied file fails inside the sandbox (through a symlink too); unsandboxed it opens', async () => {
    const c = await peer();
    try {
      const sb = denyingSandbox(root, denied);
      for (const p of [path.join(denied, 'secret'), path.join(root, 'link', 'secret')]) {
        const r = await c.request('fs/open', { handleId: 's', path: uri(p), sandbox: sb });
        expect(r.error, p).toBeDefined();
        expect(r.result).toBeUndefined();
      }
      expect((await c.request('fs/open', { handleId: 'ok', path: uri(path.join(denied, 'secret')) })).result).toEqual({ handleId: 'ok' });
      expect((await c.request('fs/readBlock', { handleId: 'ok', offset: 0, len: 100 })).result).toEqual({ chunk: Buffer.from('top secret').toString('base64'), eof: true });
      // The denied file is unchanged, and a sandboxed replace outside the workspace wrote nothing.
      const r = await c.request('fs/open', { handleId: 'w', path: uri(path.join(denied, 'secret')), mode: 'replace', sandbox: sb });
      expect(r.error).toBeDefined();
      expect(fs.readFileSync(path.join(denied, 'secret'), 'utf8')).toBe('top secret');
    } finally {
      await c.close();
    }
  });
  it('in a host whose execPath is an Electron-like application, the sandboxed fs helper still runs as Node', async () => {
    // A stand-in for Electron's executable: Node only with ELECTRON_RUN_AS_NODE=1, else it exits.
    const starts = path.join(root, 'starts.log');
    const fake = path.join(root, 'fake-electron');
    fs.writeFileSync(fake, `#!/bin/sh\necho start >> '${starts}'\n[ "$ELECTRON_RUN_AS_NODE" = 1 ] && exec '${process.execPath}' "$@"\nexit 42\n`, { mode: 0o755 });
    const real = process.execPath;
    process.execPath = fake;
    const c = await peer();
    try {
      const r = await c.request('fs/walk', { path: uri(root), options: opts, sandbox: denyingSandbox(root, denied) });
      expect(r.error).toBeUndefined();
      expect(((r.result?.entries as Array<{ path: string }>) ?? []).map((e) => e.path)).toContain(uri(path.join(root, 'mine')));
      expect(fs.readFileSync(starts, 'utf8')).toMatch(/^start\n/); // the helper did start the application
    } finally {
      process.execPath = real;
      await c.close();
    }
  });
});

describe.skipIf(!caps.linux)('exec-server: http/request goes through the managed proxy', () => {
  async function target() {
    let hits = 0;
    const srv = http.createServer((req, res) => {
      hits++;
      res.writeHead(200, { 'content-type': 'text/plain', 'x-test': 'yes' });
      res.end(`hello ${req.method} ${req.url}`);
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    return { port: (srv.address() as { port: number }).port, hits: () => hits, close: () => new Promise((r) => srv.close(r)) };
  }

  it('an allowed host is fetched (buffered and streamed); a host not allowed is refused and audited, and the target got nothing', async () => {
    const t = await target();
    const c = await peer({ httpPolicy: { allow: ['127.0.0.1'], allowLocal: true } });
    try {
      const ok = await c.request('http/request', { method: 'GET', url: `http://127.0.0.1:${t.port}/a?b=1`, requestId: 'r1', headers: [{ name: 'X-A', value: '1' }] });
      expect(ok.error).toBeUndefined();
      expect(ok.result?.status).toBe(200);
      expect(Buffer.from(ok.result?.bodyBase64 as string, 'base64').toString()).toBe('hello GET /a?b=1');
      expect(ok.result?.headers).toContainEqual({ name: 'x-test', value: 'yes' });
      expect(t.hits()).toBe(1);
      const allowEvent = await c.waitFor(() => c.messages.find((m) => m.method === 'network/policyDecision' && m.params?.decision === 'allow'), 'allow audit');
      expect(allowEvent.params).toMatchObject({ processId: 'r1', host: '127.0.0.1', port: t.port, protocol: 'http' });

      const streamed = await c.request('http/request', { method: 'GET', url: `http://127.0.0.1:${t.port}/s`, requestId: 'r2', streamResponse: true });
      expect(streamed.result).toMatchObject({ status: 200, bodyBase64: '' });
      await c.waitFor(() => c.messages.find((m) => m.method === 'http/request/bodyDelta' && m.params?.requestId === 'r2' && m.params?.done === true), 'last delta');
      const body = c.messages
        .filter((m) => m.method === 'http/request/bodyDelta' && m.params?.requestId === 'r2')
        .map((m) => Buffer.from(m.params!.deltaBase64 as string, 'base64').toString())
        .join('');
      expect(body).toBe('hello GET /s');

      const hitsBefore = t.hits();
      const denied = await c.request('http/request', { method: 'GET', url: `http://localhost:${t.port}/`, requestId: 'r3' });
      expect(denied.error).toEqual({ code: -32603, message: "http/request failed: localhost is denied by the exec-server's network policy (blocked-by-allowlist)" });
      const denyEvent = await c.waitFor(() => c.messages.find((m) => m.method === 'network/policyDecision' && m.params?.decision === 'deny'), 'deny audit');
      expect(denyEvent.params).toMatchObject({ processId: 'r3', host: 'localhost', decision: 'deny' });
      expect(t.hits()).toBe(hitsBefore);
    } finally {
      await c.close();
      await t.close();
    }
  });

  it("a timeoutMs past Node's timer limit (2^31 - 1 ms) waits that long, not 1 ms: the request is fetched", async () => {
    const t = await target();
    const c = await peer({ httpPolicy: { allow: ['127.0.0.1'], allowLocal: true } });
    try {
      for (const [i, timeoutMs] of [2 ** 31 - 1, 2 ** 31 + 1000, Number.MAX_SAFE_INTEGER].entries()) {
        const r = await c.request('http/request', { method: 'GET', url: `http://127.0.0.1:${t.port}/t${i}`, requestId: `t${i}`, timeoutMs });
        expect(r.error, `timeoutMs ${timeoutMs}`).toBeUndefined();
        expect(Buffer.from(r.result?.bodyBase64 as string, 'base64').toString()).toBe(`hello GET /t${i}`);
      }
      expect(t.hits()).toBe(3);
    } finally {
      await c.close();
      await t.close();
    }
  });

  it('https through the policy: a server whose CA is named by CODEX_CA_CERTIFICATE is fetched; without it, or for a host its certificate does not name, the TLS check refuses and the target got no request', async () => {
    const ca = InterceptionCa.create({ dir: scene.out });
    // The certificate names "localhost" only (a DNS name, no IP address).
    const { key, cert } = ca.leafFor('localhost');
    const seen: string[] = [];
    const srv = https.createServer({ key, cert }, (req, res) => {
      seen.push(req.url ?? '');
      res.writeHead(200, { 'x-tls': 'yes' });
      res.end(`secure ${req.method} ${req.url}`);
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as { port: number }).port;
    const saved = process.env.CODEX_CA_CERTIFICATE;
    const c = await peer({ httpPolicy: { allow: ['localhost', '127.0.0.1'], allowLocal: true } });
    try {
      delete process.env.CODEX_CA_CERTIFICATE;
      if (process.env.SSL_CERT_FILE) console.warn(`[http/request] SSL_CERT_FILE is set (${process.env.SSL_CERT_FILE}); the untrusted case assumes it does not name the test CA`);
      const untrusted = await c.request('http/request', { method: 'GET', url: `https://localhost:${port}/u`, requestId: 'u' });
      expect(untrusted.error).toEqual({ code: -32603, message: `http/request failed: error sending request for url (https://localhost:${port}/u)` });
      expect(seen).toEqual([]);

      process.env.CODEX_CA_CERTIFICATE = ca.certPath;
      const ok = await c.request('http/request', { method: 'POST', url: `https://localhost:${port}/t?q=1`, requestId: 't', bodyBase64: Buffer.from('x').toString('base64') });
      expect(ok.error).toBeUndefined();
      expect(ok.result?.status).toBe(200);
      expect(Buffer.from(ok.result?.bodyBase64 as string, 'base64').toString()).toBe('secure POST /t?q=1');
      expect(ok.result?.headers).toContainEqual({ name: 'x-tls', value: 'yes' });
      expect(seen).toEqual(['/t?q=1']);
      const allow = await c.waitFor(() => c.messages.find((m) => m.method === 'network/policyDecision' && m.params?.processId === 't'), 'the allow audit of t');
      expect(allow.params).toMatchObject({ decision: 'allow', host: 'localhost', port, protocol: 'httpsConnect' });

      // The same server by its IP address: the certificate is checked against the URL's host.
      const wrongHost = await c.request('http/request', { method: 'GET', url: `https://127.0.0.1:${port}/w`, requestId: 'w' });
      expect(wrongHost.error).toEqual({ code: -32603, message: `http/request failed: error sending request for url (https://127.0.0.1:${port}/w)` });
      expect(seen).toEqual(['/t?q=1']);

      // A bundle with no certificate in it is refused with Codex's advice, before any connection.
      const empty = path.join(scene.out, 'no-certs.pem');
      fs.writeFileSync(empty, 'not a certificate\n');
      process.env.CODEX_CA_CERTIFICATE = empty;
      const bad = await c.request('http/request', { method: 'GET', url: `https://localhost:${port}/b`, requestId: 'b' });
      expect(bad.error?.message).toContain('ensure it points to a PEM file containing one or more CERTIFICATE blocks');
      expect(seen).toEqual(['/t?q=1']);
    } finally {
      if (saved === undefined) delete process.env.CODEX_CA_CERTIFICATE;
      else process.env.CODEX_CA_CERTIFICATE = saved;
      await c.close();
      await new Promise((r) => srv.close(r));
      ca.dispose();
    }
  });

  it('with no http policy configured every host is denied (the target got nothing)', async () => {
    const t = await target();
    const c = await peer();
    try {
      const r = await c.request('http/request', { method: 'GET', url: `http://127.0.0.1:${t.port}/`, requestId: 'r' });
      expect(r.error?.message).toMatch(/^http\/request failed: 127\.0\.0\.1 is denied by the exec-server's network policy/);
      // https goes as CONNECT: refused the same way, before any TLS.
      const s = await c.request('http/request', { method: 'GET', url: `https://127.0.0.1:${t.port}/`, requestId: 's' });
      expect(s.error?.message).toMatch(/^http\/request failed: 127\.0\.0\.1 is denied by the exec-server's network policy \(blocked-by-/);
      expect(t.hits()).toBe(0);
    } finally {
      await c.close();
      await t.close();
    }
  });
});

describe.skipIf(!caps.linux)('exec-server: fs/watchMissing follows file-system events', () => {
  const changed = (c: Awaited<ReturnType<typeof peer>>, watchId: number) => c.messages.filter((m) => m.method === 'fs/missingChanged' && m.params?.watchId === watchId).length;
  const settle = () => new Promise((r) => setTimeout(r, 400));

  it('a path three levels under what exists is reported once it appears, not when its parents do; `mkdir -p` in one go is not missed', async () => {
    const dir = fs.mkdtempSync(path.join(scene.out, 'watch-'));
    const c = await peer();
    try {
      expect((await c.request('fs/watchMissing', { watchId: 1, missing: [uri(path.join(dir, 'a/b/c'))] })).result).toEqual({ watching: true });
      expect((await c.request('fs/watchMissing', { watchId: 2, missing: [uri(path.join(dir, 'x/y/z'))] })).result).toEqual({ watching: true });
      fs.mkdirSync(path.join(dir, 'a'));
      await settle();
      fs.mkdirSync(path.join(dir, 'a/b'));
      await settle();
      // The parents alone are not the path (checked after each step).
      expect(changed(c, 1)).toBe(0);
      fs.writeFileSync(path.join(dir, 'a/b/c'), '');
      await c.waitFor(() => (changed(c, 1) > 0 ? true : undefined), 'fs/missingChanged for a/b/c');
      // All three components made at once, faster than a watcher can follow them down.
      fs.mkdirSync(path.join(dir, 'x/y/z'), { recursive: true });
      await c.waitFor(() => (changed(c, 2) > 0 ? true : undefined), 'fs/missingChanged for x/y/z');
      await settle();
      expect([changed(c, 1), changed(c, 2)]).toEqual([1, 1]);
    } finally {
      await c.close();
    }
  });

  it('the watched ancestor removed and made again: the path is still reported when it appears', async () => {
    const dir = fs.mkdtempSync(path.join(scene.out, 'watch-'));
    fs.mkdirSync(path.join(dir, 'p'));
    const c = await peer();
    try {
      await c.request('fs/watchMissing', { watchId: 7, missing: [uri(path.join(dir, 'p/q'))] });
      fs.rmdirSync(path.join(dir, 'p'));
      await settle();
      expect(changed(c, 7)).toBe(0);
      fs.mkdirSync(path.join(dir, 'p/q'), { recursive: true });
      await c.waitFor(() => (changed(c, 7) > 0 ? true : undefined), 'fs/missingChanged for p/q');
    } finally {
      await c.close();
    }
  });

  it('more watched directories than a connection may hold: the rest are polled, and every watch is still reported', async () => {
    const dir = fs.mkdtempSync(path.join(scene.out, 'watch-'));
    const n = 80; // above MAX_FS_WATCHERS (64): at least 16 watches run on the poll
    for (let i = 0; i < n; i++) fs.mkdirSync(path.join(dir, `d${i}`));
    const c = await peer();
    try {
      for (let i = 0; i < n; i++) expect((await c.request('fs/watchMissing', { watchId: 100 + i, missing: [uri(path.join(dir, `d${i}`, 'f'))] })).result).toEqual({ watching: true });
      for (let i = 0; i < n; i++) fs.writeFileSync(path.join(dir, `d${i}`, 'f'), '');
      await c.waitFor(() => (Array.from({ length: n }, (_, i) => changed(c, 100 + i)).every((k) => k === 1) ? true : undefined), 'every fs/missingChanged');
    } finally {
      await c.close();
    }
  });
});
