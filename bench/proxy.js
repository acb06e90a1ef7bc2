#!/usr/bin/env node
/**
 * Managed-proxy benchmark: `node bench/proxy.js [--mb 100] [--rounds 7] [--small 400] [--json]`.
 *
 * Two peer processes stand in for the remote side (a TCP source, an HTTP and an HTTPS server) and
 * for the sandboxed command (the client); this process runs the proxy, as the host does. Each
 * round runs every case direct and through the proxy, one after the other, so load on the machine
 * hits both alike; the report gives the median of the per-round ratios and their spread (min-max).
 *   - N MB downloads, direct vs. through the proxy: a CONNECT tunnel (the addon's native relay;
 *     JS piping for comparison), a plain-HTTP (absolute-form) GET, and an HTTPS GET through a
 *     TLS-intercepted CONNECT (the proxy terminates TLS and talks TLS to the origin);
 *   - CPU time per GB of each process (client, server, proxy), and the ratio that CPU allows: with
 *     every core busy (this machine is shared), time goes as total CPU, so direct CPU over
 *     proxied CPU; on an idle machine with C cores a run takes at least max(total / C, its busiest
 *     process), so the ratio of those floors (above 1: the CPU does not bound it);
 *   - many small (1 kB) GETs, one at a time, with a keep-alive client and with a new connection per
 *     request: the latency the proxy adds per request (median over rounds), its CPU per request,
 *     and how many upstream connections the proxied requests used (the keep-alive pool);
 *   - a PASS/FAIL verdict per target (CONNECT >= 0.9, plain HTTP >= 0.8, TLS-intercepted >= 0.5).
 * Loads lib/network from dist/ when built, else transpiles the TypeScript on the fly.
 */
'use strict';
const { fork } = require('child_process');
const fs = require('fs');
const http = require('http');
const https = require('https');
const net = require('net');
const os = require('os');
const path = require('path');
const tls = require('tls');

const args = process.argv.slice(2);
const argOf = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const cpuMs = (since) => {
  const c = process.cpuUsage(since);
  return (c.user + c.system) / 1000;
};

// ---------------------------------------------------------------- peers
if (args[0] === '--peer') {
  const CHUNK = Buffer.alloc(1 << 20, 0x5a);
  const SMALL = Buffer.alloc(1024, 0x61);
  // Writes `left` bytes of CHUNK to a stream, with backpressure, then ends it.
  const pump = (out, left) => {
    const more = () => {
      while (left > 0) {
        const n = Math.min(left, CHUNK.length);
        left -= n;
        if (!out.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) return void out.once('drain', more);
      }
      out.end();
    };
    more();
  };
  const source = net.createServer((sock) => {
    sock.once('data', (line) => pump(sock, Number(String(line).trim())));
    sock.on('error', () => {});
  });
  // GET /bytes/N: N bytes with a Content-Length; anything else: 1 kB.
  const serve = (req, res) => {
    const m = /^\/bytes\/(\d+)$/.exec(req.url);
    if (!m) return res.end(SMALL);
    res.writeHead(200, { 'content-length': m[1], 'content-type': 'application/octet-stream' });
    pump(res, Number(m[1]));
  };
  let webConnections = 0;
  const web = http.createServer(serve);
  web.on('connection', () => webConnections++);
  let secure = null;

  // A raw CONNECT download: counts bytes (the worst case for a relay: every extra cost shows).
  const download = (port, bytes, viaProxy) =>
    new Promise((resolve, reject) => {
      const sock = net.connect(port, '127.0.0.1');
      let got = 0;
      let headerDone = !viaProxy;
      let pending = Buffer.alloc(0);
      let t0 = 0;
      sock.on('connect', () => {
        t0 = process.hrtime.bigint();
        if (viaProxy) sock.write(`CONNECT tunnel.test:${viaProxy} HTTP/1.1\r\nHost: tunnel.test:${viaProxy}\r\n\r\n`);
        else sock.write(`${bytes}\n`);
      });
      sock.on('data', (chunk) => {
        if (!headerDone) {
          pending = Buffer.concat([pending, chunk]);
          const end = pending.indexOf('\r\n\r\n');
          if (end < 0) return;
          if (!pending.subarray(0, 12).toString().includes(' 200')) return reject(new Error(String(pending)));
          headerDone = true;
          got += pending.length - end - 4;
          sock.write(`${bytes}\n`);
          return;
        }
        got += chunk.length;
      });
      sock.on('end', () => {
        const secs = Number(process.hrtime.bigint() - t0) / 1e9;
        if (got !== bytes) return reject(new Error(`short read ${got}/${bytes}`));
        resolve(secs);
      });
      sock.on('error', reject);
    });
  // One GET with Node's client; resolves with { secs, bytes }.
  const get = (mod, opts) =>
    new Promise((resolve, reject) => {
      const t0 = process.hrtime.bigint();
      let got = 0;
      mod
        .get(opts, (res) => {
          res.on('data', (c) => (got += c.length));
          res.on('end', () => resolve({ secs: Number(process.hrtime.bigint() - t0) / 1e9, bytes: got }));
          res.on('error', reject);
        })
        .on('error', reject);
    });
  // An HTTPS GET through a CONNECT tunnel (the proxy intercepts it), or direct.
  const tlsGet = async (proxyPort, originPort, reqPath, ca) => {
    let socket;
    if (proxyPort) {
      socket = await new Promise((resolve, reject) => {
        const s = net.connect(proxyPort, '127.0.0.1', () => s.write(`CONNECT bench.test:${originPort} HTTP/1.1\r\nHost: bench.test:${originPort}\r\n\r\n`));
        let head = Buffer.alloc(0);
        const onData = (c) => {
          head = Buffer.concat([head, c]);
          const end = head.indexOf('\r\n\r\n');
          if (end < 0) return;
          s.off('data', onData);
          if (!head.subarray(0, 12).toString().includes(' 200')) return reject(new Error(String(head)));
          s.pause();
          resolve(s);
        };
        s.on('data', onData);
        s.on('error', reject);
      });
    }
    return get(https, {
      host: '127.0.0.1',
      port: originPort,
      path: reqPath,
      servername: 'bench.test',
      ca,
      headers: { host: `bench.test:${originPort}` },
      // A createConnection of the request's own is used only without an agent.
      ...(socket ? { agent: undefined, createConnection: () => tls.connect({ socket, servername: 'bench.test', ca }) } : { agent: false }),
    });
  };
  // n small GETs one at a time; keepAlive: one client connection for all, else one per request.
  const smalls = async (n, opts, keepAlive) => {
    const agent = keepAlive ? new http.Agent({ keepAlive: true, maxSockets: 1 }) : false;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) {
      const r = await get(http, { ...opts, agent });
      if (r.bytes !== 1024) throw new Error(`small GET got ${r.bytes} bytes`);
    }
    if (agent) agent.destroy();
    return Number(process.hrtime.bigint() - t0) / 1e9 / n;
  };
  const timed = async (fn) => {
    const c0 = process.cpuUsage();
    const r = await fn();
    return { ...r, cpuMs: cpuMs(c0) };
  };
  const ops = {
    async listen(msg) {
      secure = https.createServer({ key: msg.key, cert: msg.cert }, serve);
      await Promise.all([source, web, secure].map((s) => new Promise((r) => s.listen(0, '127.0.0.1', r))));
      return { sourcePort: source.address().port, webPort: web.address().port, securePort: secure.address().port };
    },
    download: (m) => timed(async () => ({ secs: await download(m.port, m.bytes, m.viaProxy) })),
    httpGet: (m) =>
      timed(async () => {
        const r = await get(http, { host: '127.0.0.1', port: m.port, path: m.path, agent: false, headers: { host: `bench.test:${m.webPort}` } });
        if (r.bytes !== m.bytes) throw new Error(`short read ${r.bytes}/${m.bytes}`);
        return r;
      }),
    tlsGet: (m) =>
      timed(async () => {
        const r = await tlsGet(m.proxyPort, m.port, m.path, m.ca);
        if (r.bytes !== m.bytes) throw new Error(`short read ${r.bytes}/${m.bytes}`);
        return r;
      }),
    smalls: (m) => timed(async () => ({ secsPerRequest: await smalls(m.n, m.opts, m.keepAlive) })),
    cpu: async () => ({ cpuMs: cpuMs() }),
    webConnections: async () => ({ webConnections }),
    exit: () => process.exit(0),
  };
  process.on('message', async (msg) => {
    try {
      process.send(await ops[msg.op](msg));
    } catch (err) {
      process.send({ error: String(err && err.stack) });
    }
  });
  // The host side may die first (an error): never outlive it.
  process.on('disconnect', () => process.exit(0));
  process.send({ ready: true });
  return;
}

// ---------------------------------------------------------------- host side (runs the proxy)
function loadNetwork() {
  const root = path.join(__dirname, '..');
  const built = path.join(root, 'dist', 'network', 'index.js');
  if (fs.existsSync(built)) return { ...require(built), ...require(path.join(root, 'dist', 'network', 'relay.js')) };
  const ts = require('typescript');
  require.extensions['.ts'] = (module, filename) => {
    const out = ts.transpileModule(fs.readFileSync(filename, 'utf8'), {
      fileName: filename,
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
    });
    module._compile(out.outputText, filename);
  };
  return { ...require(path.join(root, 'lib', 'network', 'index.ts')), ...require(path.join(root, 'lib', 'network', 'relay.ts')) };
}

const GOALS = { connect: 0.9, http: 0.8, tls: 0.5 };

async function main() {
  const mb = argOf('--mb', 100);
  const rounds = argOf('--rounds', 7);
  const smallN = argOf('--small', 400);
  const bytes = mb * 1024 * 1024;
  const { ManagedProxy, InterceptionCa, nativeRelay } = loadNetwork();
  const cores = os.cpus().length;

  const spawnPeer = () => {
    const child = fork(__filename, ['--peer'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const replies = [];
    const waiters = [];
    child.on('message', (m) => (waiters.length ? waiters.shift()(m) : replies.push(m)));
    const recv = () => new Promise((r) => (replies.length ? r(replies.shift()) : waiters.push(r)));
    const ask = async (msg) => {
      child.send(msg);
      const m = await recv();
      if (m.error) throw new Error(m.error);
      return m;
    };
    return { child, recv, ask };
  };
  const server = spawnPeer();
  const client = spawnPeer();
  await Promise.all([server.recv(), client.recv()]);
  // The origin's certificate comes from a CA of its own, trusted by the proxy (originCa) and by the
  // direct client; the intercepting proxy's CA is trusted by the proxied client.
  const originCa = InterceptionCa.create();
  const mitmCa = InterceptionCa.create();
  const { sourcePort, webPort, securePort } = await server.ask({ op: 'listen', ...originCa.leafFor('bench.test') });

  const start = async (relay) => {
    const proxy = await ManagedProxy.start({
      policy: { allow: ['bench.test', 'tunnel.test'], allowLocal: true },
      lookup: async () => [{ address: '127.0.0.1', family: 4 }],
      relay,
      interception: {
        ca: mitmCa,
        originCa: originCa.certPem,
        credentials: [{ host: 'bench.test', header: 'authorization', placeholder: 'placeholder-0000', value: 'secret-value-0000' }],
      },
    });
    return { proxy, ...(await proxy.attach(`bench-${relay}`)) };
  };
  const native = await start('auto');
  const js = await start('js');
  const haveNativeRelay = nativeRelay() !== null;

  // One measured run: wall time as the client saw it, and the CPU of the client, the server and
  // this process (the proxy) over it.
  const run = async (msg) => {
    const s0 = (await server.ask({ op: 'cpu' })).cpuMs;
    const p0 = process.cpuUsage();
    const r = await client.ask(msg);
    const proxyMs = cpuMs(p0);
    const serverMs = (await server.ask({ op: 'cpu' })).cpuMs - s0;
    return { secs: r.secs ?? r.secsPerRequest, cpu: { client: r.cpuMs, server: serverMs, proxy: proxyMs } };
  };
  const cases = {
    connect: [{ op: 'download', port: sourcePort, bytes }, { op: 'download', port: native.port, bytes, viaProxy: sourcePort }],
    connectJs: [null, { op: 'download', port: js.port, bytes, viaProxy: sourcePort }],
    http: [
      { op: 'httpGet', port: webPort, path: `/bytes/${bytes}`, bytes, webPort },
      { op: 'httpGet', port: native.port, path: `http://bench.test:${webPort}/bytes/${bytes}`, bytes, webPort },
    ],
    tls: [
      { op: 'tlsGet', port: securePort, path: `/bytes/${bytes}`, bytes, ca: originCa.certPem },
      { op: 'tlsGet', port: securePort, proxyPort: native.port, path: `/bytes/${bytes}`, bytes, ca: mitmCa.certPem },
    ],
  };
  // --only NAME[,NAME]: just those cases (connect, connectJs, http, tls, keepAlive, newConnection).
  const only = args.includes('--only') ? args[args.indexOf('--only') + 1].split(',') : null;
  if (only) for (const k of Object.keys(cases)) if (!only.includes(k)) delete cases[k];
  const smallDirect = { host: '127.0.0.1', port: webPort, path: '/small' };
  const smallProxied = { host: '127.0.0.1', port: native.port, path: `http://bench.test:${webPort}/small`, headers: { host: `bench.test:${webPort}` } };
  const smallCases = {
    keepAlive: [
      { op: 'smalls', n: smallN, opts: smallDirect, keepAlive: true },
      { op: 'smalls', n: smallN, opts: smallProxied, keepAlive: true },
    ],
    newConnection: [
      { op: 'smalls', n: smallN, opts: smallDirect, keepAlive: false },
      { op: 'smalls', n: smallN, opts: smallProxied, keepAlive: false },
    ],
  };
  if (only) for (const k of Object.keys(smallCases)) if (!only.includes(k)) delete smallCases[k];

  // Warm-up: every path once, small.
  const warm = (m) => ({ ...m, bytes: 8 << 20, path: m.path && m.path.replace(/\/bytes\/\d+$/, `/bytes/${8 << 20}`) });
  for (const pair of Object.values(cases)) for (const m of pair) if (m) { await client.ask(warm(m)); }
  for (const pair of Object.values(smallCases)) for (const m of pair) await client.ask({ ...m, n: 50 });

  const samples = {};
  const add = (name, v) => (samples[name] ??= []).push(v);
  for (let i = 0; i < rounds; i++) {
    for (const [name, [d, p]] of Object.entries(cases)) {
      const direct = d ? await run(d) : null;
      const proxied = await run(p);
      if (direct) add(`${name}.direct`, direct);
      add(`${name}.proxy`, proxied);
      if (direct) add(`${name}.ratio`, direct.secs / proxied.secs);
      else if (samples['connect.direct']) add(`${name}.ratio`, samples['connect.direct'][i].secs / proxied.secs);
      if (direct) {
        // What the CPU alone allows. Busy: with every core taken (other work included), time goes
        // as total CPU, so the ratio tends to direct CPU over proxied CPU. Idle: a run cannot take
        // less than max(total / cores, its busiest process); the ratio of those floors.
        const d = direct.cpu;
        const c = proxied.cpu;
        const sum = (x) => x.client + x.server + (x.proxy ?? 0);
        const floor = (x) => Math.max(sum(x) / cores, x.client, x.server, x.proxy ?? 0);
        add(`${name}.busy`, sum({ client: d.client, server: d.server }) / sum(c));
        add(`${name}.idle`, floor({ client: d.client, server: d.server }) / floor(c));
      }
    }
    for (const [name, [d, p]] of Object.entries(smallCases)) {
      const direct = await run(d);
      const c0 = (await server.ask({ op: 'webConnections' })).webConnections;
      const proxied = await run(p);
      add(`${name}.upstreamConnections`, (await server.ask({ op: 'webConnections' })).webConnections - c0);
      add(`${name}.addedUs`, (proxied.secs - direct.secs) * 1e6);
      add(`${name}.directUs`, direct.secs * 1e6);
      add(`${name}.proxyCpuUs`, (proxied.cpu.proxy * 1000) / smallN);
    }
  }
  server.child.send({ op: 'exit' });
  client.child.send({ op: 'exit' });
  await native.detach();
  await js.detach();
  originCa.dispose();
  mitmCa.dispose();

  const sorted = (xs) => [...xs].sort((a, b) => a - b);
  const median = (xs) => sorted(xs)[xs.length >> 1];
  const r3 = (x) => +x.toFixed(3);
  const stat = (xs) => ({ median: r3(median(xs)), min: r3(sorted(xs)[0]), max: r3(sorted(xs)[xs.length - 1]) });
  const perGb = (runs, who) => Math.round(median(runs.map((s) => s.cpu[who])) * (1024 / mb));
  const result = { transferMB: mb, rounds, cpus: cores, loadAverage: os.loadavg().map((x) => +x.toFixed(2)), nativeRelay: haveNativeRelay };
  for (const name of Object.keys(cases)) {
    const proxied = samples[`${name}.proxy`];
    const entry = {
      ratio: samples[`${name}.ratio`] ? stat(samples[`${name}.ratio`]) : null,
      proxyMBps: +(mb / median(proxied.map((s) => s.secs))).toFixed(0),
      cpuMsPerGB: { proxy: perGb(proxied, 'proxy'), client: perGb(proxied, 'client'), server: perGb(proxied, 'server') },
    };
    const direct = samples[`${name}.direct`];
    if (direct) {
      entry.directMBps = +(mb / median(direct.map((s) => s.secs))).toFixed(0);
      entry.directCpuMsPerGB = { client: perGb(direct, 'client'), server: perGb(direct, 'server') };
      entry.cpuBusy = stat(samples[`${name}.busy`]);
      entry.cpuIdle = stat(samples[`${name}.idle`]);
    }
    if (GOALS[name]) {
      entry.goal = GOALS[name];
      entry.verdict = entry.ratio && entry.ratio.median >= GOALS[name] ? 'PASS' : 'FAIL';
    }
    result[name] = entry;
  }
  for (const name of Object.keys(smallCases)) {
    result[name] = {
      requests: smallN,
      directUsPerRequest: Math.round(median(samples[`${name}.directUs`])),
      addedUs: stat(samples[`${name}.addedUs`].map((x) => Math.round(x))),
      proxyCpuUsPerRequest: Math.round(median(samples[`${name}.proxyCpuUs`])),
      upstreamConnectionsPerRound: median(samples[`${name}.upstreamConnections`]),
    };
  }
  if (args.includes('--json')) return void console.log(JSON.stringify(result));
  const r = result;
  const spread = (s) => `${s.median} (${s.min}-${s.max})`;
  console.log(`proxy bench: ${cores} CPUs, load average ${r.loadAverage.join(' ')}; ${rounds} rounds, direct and proxied interleaved; median (min-max) of the per-round ratios`);
  const line = (label, e) => {
    const d = e.directMBps ? `direct ${e.directMBps} MB/s, ` : '';
    const v = e.verdict ? ` -> ${e.verdict} (goal >= ${e.goal})` : '';
    console.log(`  ${label}: ${d}via proxy ${e.proxyMBps} MB/s, ratio ${spread(e.ratio)}${v}`);
    if (e.cpuBusy) console.log(`      the CPU taken allows a ratio of ${spread(e.cpuBusy)} with every core busy, ${spread(e.cpuIdle)} on an idle machine`);
    const dc = e.directCpuMsPerGB ? `; direct: client ${e.directCpuMsPerGB.client}, server ${e.directCpuMsPerGB.server}` : '';
    console.log(`      CPU ms per GB: proxy ${e.cpuMsPerGB.proxy}, client ${e.cpuMsPerGB.client}, server ${e.cpuMsPerGB.server}${dc}`);
  };
  if (r.connect) line(`CONNECT ${mb} MB (${haveNativeRelay ? 'native relay' : 'JS piping, no native relay here'})`, r.connect);
  if (r.connectJs && r.connectJs.ratio) line(`CONNECT ${mb} MB (relay: 'js', for comparison)`, r.connectJs);
  if (r.http) line(`plain HTTP GET ${mb} MB`, r.http);
  if (r.tls) line(`TLS-intercepted HTTPS GET ${mb} MB`, r.tls);
  for (const [name, label] of [['keepAlive', 'keep-alive client'], ['newConnection', 'a new connection per request']]) {
    const e = r[name];
    if (!e) continue;
    console.log(`  ${e.requests} x 1 kB GET, one at a time, ${label}: direct ${e.directUsPerRequest} us per request, the proxy adds ${spread(e.addedUs)} us; proxy CPU ${e.proxyCpuUsPerRequest} us per request; ${e.upstreamConnectionsPerRound} upstream connections`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
