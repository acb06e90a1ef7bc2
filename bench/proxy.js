#!/usr/bin/env node
/**
 * Managed-proxy benchmark: `node bench/proxy.js [--mb 100] [--requests 300] [--json]`.
 *
 * A peer process (standing in for the sandboxed command) runs a TCP source and the clients. This
 * process runs the proxy, as the host does. Reported:
 *   - throughput of an N MB download through CONNECT vs. the same download direct over loopback,
 *     and their ratio (target ≥ 0.8);
 *   - added latency per request: sequential small GETs through the proxy (absolute-form) vs.
 *     direct, both with keep-alive on the client side.
 * Loads lib/network from dist/ when built, else transpiles the TypeScript on the fly.
 */
'use strict';
const { fork } = require('child_process');
const fs = require('fs');
const http = require('http');
const net = require('net');
const path = require('path');

const args = process.argv.slice(2);
const argOf = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};

// ---------------------------------------------------------------- peer (the "sandboxed" side)
if (args[0] === '--peer') {
  const CHUNK = Buffer.alloc(1 << 20, 0x5a);
  const source = net.createServer((sock) => {
    sock.once('data', (line) => {
      let left = Number(String(line).trim());
      const pump = () => {
        while (left > 0) {
          const n = Math.min(left, CHUNK.length);
          left -= n;
          if (!sock.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) return void sock.once('drain', pump);
        }
        sock.end();
      };
      pump();
    });
    sock.on('error', () => {});
  });
  const web = http.createServer((req, res) => res.end('ok'));
  const download = (port, bytes, viaProxy, hash) =>
    new Promise((resolve, reject) => {
      const sock = net.connect(port, '127.0.0.1');
      const sha = hash ? require('crypto').createHash('sha256') : null;
      let got = 0;
      let headerDone = !viaProxy;
      let pending = Buffer.alloc(0);
      let t0 = 0;
      sock.on('connect', () => {
        t0 = process.hrtime.bigint();
        if (viaProxy) sock.write(`CONNECT bench.test:${viaProxy} HTTP/1.1\r\nHost: bench.test:${viaProxy}\r\n\r\n`);
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
          if (sha) sha.update(pending.subarray(end + 4));
          sock.write(`${bytes}\n`);
          return;
        }
        got += chunk.length;
        if (sha) sha.update(chunk);
      });
      sock.on('end', () => {
        const secs = Number(process.hrtime.bigint() - t0) / 1e9;
        if (got !== bytes) return reject(new Error(`short read ${got}/${bytes}`));
        if (sha) sha.digest();
        resolve(secs);
      });
      sock.on('error', reject);
    });
  const gets = (n, opts) =>
    new Promise((resolve, reject) => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      let i = 0;
      const t0 = process.hrtime.bigint();
      const next = () => {
        if (i++ === n) {
          agent.destroy();
          return resolve(Number(process.hrtime.bigint() - t0) / 1e6 / n);
        }
        http
          .get({ ...opts, agent }, (res) => {
            res.resume();
            res.on('end', next);
          })
          .on('error', reject);
      };
      next();
    });
  Promise.all([
    new Promise((r) => source.listen(0, '127.0.0.1', r)),
    new Promise((r) => web.listen(0, '127.0.0.1', r)),
  ]).then(() => process.send({ sourcePort: source.address().port, webPort: web.address().port }));
  process.on('message', async (msg) => {
    try {
      if (msg.op === 'download') process.send({ secs: await download(msg.port, msg.bytes, msg.viaProxy, msg.hash) });
      else if (msg.op === 'gets') process.send({ ms: await gets(msg.n, msg.opts) });
      else if (msg.op === 'exit') process.exit(0);
    } catch (err) {
      process.send({ error: String(err && err.stack) });
    }
  });
  return;
}

// ---------------------------------------------------------------- host side (runs the proxy)
function loadNetwork() {
  const root = path.join(__dirname, '..');
  const built = path.join(root, 'dist', 'network', 'index.js');
  if (fs.existsSync(built)) return require(built);
  const ts = require('typescript');
  require.extensions['.ts'] = (module, filename) => {
    const out = ts.transpileModule(fs.readFileSync(filename, 'utf8'), {
      fileName: filename,
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
    });
    module._compile(out.outputText, filename);
  };
  return require(path.join(root, 'lib', 'network', 'index.ts'));
}

async function main() {
  const mb = argOf('--mb', 100);
  const requests = argOf('--requests', 300);
  const rounds = argOf('--rounds', 5);
  const bytes = mb * 1024 * 1024;
  const { ManagedProxy } = loadNetwork();

  // Two peers: one serves (the remote side), one downloads (the sandboxed command).
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
  const { sourcePort, webPort } = await server.recv();
  await client.recv();
  const ask = client.ask;

  const proxy = await ManagedProxy.start({
    policy: { allow: ['bench.test'], allowLocal: true },
    lookup: async () => [{ address: '127.0.0.1', family: 4 }],
  });
  const { port, detach } = await proxy.attach('bench');

  // Warm up both paths once, then take the best of `rounds` for each.
  await ask({ op: 'download', port: sourcePort, bytes: 8 << 20 });
  await ask({ op: 'download', port, bytes: 8 << 20, viaProxy: sourcePort });
  // Raw: the client only counts bytes (the worst case for a relay: every extra copy shows).
  // Consumer: the client hashes what it gets, as a real download would do some work per byte.
  const measure = async (hash) => {
    let direct = Infinity;
    let proxied = Infinity;
    for (let i = 0; i < rounds; i++) {
      direct = Math.min(direct, (await ask({ op: 'download', port: sourcePort, bytes, hash })).secs);
      proxied = Math.min(proxied, (await ask({ op: 'download', port, bytes, viaProxy: sourcePort, hash })).secs);
    }
    return { direct, proxied };
  };
  const raw = await measure(false);
  const consumer = await measure(true);
  const directMs = (await ask({ op: 'gets', n: requests, opts: { host: '127.0.0.1', port: webPort, path: '/' } })).ms;
  const proxyMs = (
    await ask({
      op: 'gets',
      n: requests,
      opts: { host: '127.0.0.1', port, path: `http://bench.test:${webPort}/`, headers: { host: `bench.test:${webPort}` } },
    })
  ).ms;
  server.child.send({ op: 'exit' });
  client.child.send({ op: 'exit' });
  await detach();

  const mbps = (secs) => +(mb / secs).toFixed(1);
  const result = {
    transferMB: mb,
    rounds,
    directMBps: mbps(raw.direct),
    connectMBps: mbps(raw.proxied),
    ratio: +(raw.direct / raw.proxied).toFixed(3),
    sha256ConsumerDirectMBps: mbps(consumer.direct),
    sha256ConsumerConnectMBps: mbps(consumer.proxied),
    sha256ConsumerRatio: +(consumer.direct / consumer.proxied).toFixed(3),
    cpus: require('os').cpus().length,
    requests,
    directMsPerRequest: +directMs.toFixed(3),
    proxyMsPerRequest: +proxyMs.toFixed(3),
    addedMsPerRequest: +(proxyMs - directMs).toFixed(3),
  };
  if (args.includes('--json')) {
    console.log(JSON.stringify(result));
  } else {
    console.log(
      `proxy CONNECT ${mb} MB (best of ${rounds}, ${result.cpus} CPUs): raw direct ${result.directMBps} MB/s, via proxy ${result.connectMBps} MB/s, ratio ${result.ratio} (target >= 0.8)`,
    );
    console.log(
      `proxy CONNECT ${mb} MB with a sha256-hashing client: direct ${result.sha256ConsumerDirectMBps} MB/s, via proxy ${result.sha256ConsumerConnectMBps} MB/s, ratio ${result.sha256ConsumerRatio}`,
    );
    console.log(
      `proxy latency over ${requests} GETs: direct ${result.directMsPerRequest} ms, via proxy ${result.proxyMsPerRequest} ms, added ${result.addedMsPerRequest} ms/request`,
    );
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
