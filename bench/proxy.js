#!/usr/bin/env node
/**
 * Managed-proxy benchmark: `node bench/proxy.js [--mb 100] [--requests 2000] [--rounds 5] [--json]`.
 *
 * Two peer processes stand in for the remote side (a TCP source and an HTTP server) and for the
 * sandboxed command (the clients); this process runs the proxy, as the host does. Reported, each
 * the best of `rounds` with direct and proxied runs interleaved:
 *   - an N MB download through CONNECT (the addon's native relay, and JS piping for comparison)
 *     vs. the same download direct over loopback; the ratio of the best runs and of the medians,
 *     and the proxy's own CPU time per 100 MB (a figure that does not depend on what else the
 *     machine is running);
 *   - plain-HTTP requests per second through the proxy (absolute-form, keep-alive client, pooled
 *     upstream connections) vs. direct, one at a time and 8 at once, with the number of upstream
 *     connections the server saw;
 *   - a PASS/FAIL verdict for each ratio against the goal (>= 0.9 of direct).
 * On a machine with fewer cores than the three processes need, the wall-clock ratios measure CPU
 * contention as much as the proxy; the CPU figures say how much the proxy itself costs.
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
  let webConnections = 0;
  const web = http.createServer((req, res) => res.end('ok'));
  web.on('connection', () => webConnections++);
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
  // n GETs over `conc` keep-alive client connections; resolves with requests per second.
  const gets = (n, opts, conc) =>
    new Promise((resolve, reject) => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: conc });
      let started = 0;
      let done = 0;
      const t0 = process.hrtime.bigint();
      const next = () => {
        if (started === n) return;
        started++;
        http
          .get({ ...opts, agent }, (res) => {
            res.resume();
            res.on('end', () => {
              if (++done === n) {
                agent.destroy();
                return resolve(n / (Number(process.hrtime.bigint() - t0) / 1e9));
              }
              next();
            });
          })
          .on('error', reject);
      };
      for (let i = 0; i < conc; i++) next();
    });
  Promise.all([
    new Promise((r) => source.listen(0, '127.0.0.1', r)),
    new Promise((r) => web.listen(0, '127.0.0.1', r)),
  ]).then(() => process.send({ sourcePort: source.address().port, webPort: web.address().port }));
  process.on('message', async (msg) => {
    try {
      if (msg.op === 'download') process.send({ secs: await download(msg.port, msg.bytes, msg.viaProxy, msg.hash) });
      else if (msg.op === 'gets') process.send({ rps: await gets(msg.n, msg.opts, msg.conc) });
      else if (msg.op === 'webConnections') process.send({ webConnections });
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

const GOAL = 0.9;

async function main() {
  const mb = argOf('--mb', 100);
  const requests = argOf('--requests', 2000);
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

  const start = async (relay) => {
    const proxy = await ManagedProxy.start({
      policy: { allow: ['bench.test'], allowLocal: true },
      lookup: async () => [{ address: '127.0.0.1', family: 4 }],
      relay,
    });
    return { proxy, ...(await proxy.attach(`bench-${relay}`)) };
  };
  const kernel = await start('auto');
  const js = await start('js');
  const { nativeRelay } = require(path.join(__dirname, '..', fs.existsSync(path.join(__dirname, '..', 'dist')) ? 'dist' : 'lib', 'network', 'relay'));
  const haveNativeRelay = nativeRelay() !== null;

  // Warm up every path once.
  await ask({ op: 'download', port: sourcePort, bytes: 8 << 20 });
  await ask({ op: 'download', port: kernel.port, bytes: 8 << 20, viaProxy: sourcePort });
  await ask({ op: 'download', port: js.port, bytes: 8 << 20, viaProxy: sourcePort });
  // Raw: the client only counts bytes (the worst case for a relay: every extra cost shows).
  // Consumer: the client hashes what it gets, as a real download does some work per byte.
  const download = async (port, viaProxy, hash) => {
    const cpu0 = process.cpuUsage();
    const { secs } = await ask({ op: 'download', port, bytes, viaProxy, hash });
    const cpu = process.cpuUsage(cpu0);
    return { secs, cpuMs: (cpu.user + cpu.system) / 1000 };
  };
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const measure = async (hash) => {
    const best = { direct: Infinity, kernel: Infinity, js: Infinity, kernelCpu: Infinity, jsCpu: Infinity };
    const all = { direct: [], kernel: [] };
    for (let i = 0; i < rounds; i++) {
      const d = (await download(sourcePort, undefined, hash)).secs;
      all.direct.push(d);
      best.direct = Math.min(best.direct, d);
      const k = await download(kernel.port, sourcePort, hash);
      all.kernel.push(k.secs);
      best.kernel = Math.min(best.kernel, k.secs);
      best.kernelCpu = Math.min(best.kernelCpu, k.cpuMs);
      const j = await download(js.port, sourcePort, hash);
      best.js = Math.min(best.js, j.secs);
      best.jsCpu = Math.min(best.jsCpu, j.cpuMs);
    }
    best.medianRatio = median(all.direct) / median(all.kernel);
    return best;
  };
  const raw = await measure(false);
  const consumer = await measure(true);

  // Plain HTTP: requests per second, one at a time and 8 at once, keep-alive clients.
  const direct = { host: '127.0.0.1', port: webPort, path: '/' };
  const proxied = { host: '127.0.0.1', port: kernel.port, path: `http://bench.test:${webPort}/`, headers: { host: `bench.test:${webPort}` } };
  const n = Math.max(50, Math.floor(requests / rounds));
  await ask({ op: 'gets', n: 200, opts: direct, conc: 1 });
  await ask({ op: 'gets', n: 200, opts: proxied, conc: 1 });
  const connectionsBefore = (await server.ask({ op: 'webConnections' })).webConnections;
  const rps = { direct1: 0, proxy1: 0, direct8: 0, proxy8: 0 };
  let proxiedRequests = 0;
  let proxyCpuUs = Infinity;
  for (let i = 0; i < rounds; i++) {
    rps.direct1 = Math.max(rps.direct1, (await ask({ op: 'gets', n, opts: direct, conc: 1 })).rps);
    const cpu0 = process.cpuUsage();
    rps.proxy1 = Math.max(rps.proxy1, (await ask({ op: 'gets', n, opts: proxied, conc: 1 })).rps);
    const cpu = process.cpuUsage(cpu0);
    proxyCpuUs = Math.min(proxyCpuUs, (cpu.user + cpu.system) / n);
    rps.direct8 = Math.max(rps.direct8, (await ask({ op: 'gets', n, opts: direct, conc: 8 })).rps);
    rps.proxy8 = Math.max(rps.proxy8, (await ask({ op: 'gets', n, opts: proxied, conc: 8 })).rps);
    proxiedRequests += 2 * n;
  }
  // Upstream connections opened for the proxied requests (direct clients keep theirs alive too:
  // at most 1 + 8 per round).
  const upstreamConnections = (await server.ask({ op: 'webConnections' })).webConnections - connectionsBefore - 9 * rounds;
  server.child.send({ op: 'exit' });
  client.child.send({ op: 'exit' });
  await kernel.detach();
  await js.detach();

  const mbps = (secs) => +(mb / secs).toFixed(1);
  const per100 = (ms) => +((ms * 100) / mb).toFixed(1);
  const result = {
    transferMB: mb,
    rounds,
    cpus: require('os').cpus().length,
    loadAverage: require('os').loadavg().map((x) => +x.toFixed(2)),
    nativeRelay: haveNativeRelay,
    directMBps: mbps(raw.direct),
    connectMBps: mbps(raw.kernel),
    ratio: +(raw.direct / raw.kernel).toFixed(3),
    medianRatio: +raw.medianRatio.toFixed(3),
    proxyCpuMsPer100MB: per100(raw.kernelCpu),
    jsRelayMBps: mbps(raw.js),
    jsRelayRatio: +(raw.direct / raw.js).toFixed(3),
    jsRelayCpuMsPer100MB: per100(raw.jsCpu),
    sha256ConsumerDirectMBps: mbps(consumer.direct),
    sha256ConsumerConnectMBps: mbps(consumer.kernel),
    sha256ConsumerRatio: +(consumer.direct / consumer.kernel).toFixed(3),
    requestsPerRound: n,
    directRps: Math.round(rps.direct1),
    proxyRps: Math.round(rps.proxy1),
    rpsRatio: +(rps.proxy1 / rps.direct1).toFixed(3),
    proxyCpuUsPerRequest: Math.round(proxyCpuUs),
    direct8Rps: Math.round(rps.direct8),
    proxy8Rps: Math.round(rps.proxy8),
    rps8Ratio: +(rps.proxy8 / rps.direct8).toFixed(3),
    proxiedRequests,
    upstreamConnections,
  };
  result.connectVerdict = result.ratio >= GOAL ? 'PASS' : 'FAIL';
  result.httpVerdict = result.rpsRatio >= GOAL ? 'PASS' : 'FAIL';
  if (args.includes('--json')) {
    console.log(JSON.stringify(result));
  } else {
    const r = result;
    console.log(`proxy bench (${r.cpus} CPUs, load average ${r.loadAverage.join(' ')}; best of ${rounds}, direct and proxied interleaved)`);
    console.log(
      `  CONNECT ${mb} MB, ${haveNativeRelay ? 'native relay' : 'JS piping (no native relay here)'}: direct ${r.directMBps} MB/s, via proxy ${r.connectMBps} MB/s, ratio ${r.ratio} (median ${r.medianRatio}) -> ${r.connectVerdict} (goal >= ${GOAL}); proxy CPU ${r.proxyCpuMsPer100MB} ms per 100 MB`,
    );
    console.log(`  CONNECT ${mb} MB, JS piping (relay: 'js'): ${r.jsRelayMBps} MB/s, ratio ${r.jsRelayRatio}; proxy CPU ${r.jsRelayCpuMsPer100MB} ms per 100 MB`);
    console.log(`  CONNECT ${mb} MB, sha256-hashing client: direct ${r.sha256ConsumerDirectMBps} MB/s, via proxy ${r.sha256ConsumerConnectMBps} MB/s, ratio ${r.sha256ConsumerRatio}`);
    console.log(
      `  plain HTTP GET, 1 at a time: direct ${r.directRps} req/s, via proxy ${r.proxyRps} req/s, ratio ${r.rpsRatio} -> ${r.httpVerdict} (goal >= ${GOAL}); proxy CPU ${r.proxyCpuUsPerRequest} us per request`,
    );
    console.log(`  plain HTTP GET, 8 at a time: direct ${r.direct8Rps} req/s, via proxy ${r.proxy8Rps} req/s, ratio ${r.rps8Ratio}`);
    console.log(`  upstream keep-alive pool: ${r.proxiedRequests} proxied requests used ${r.upstreamConnections} upstream connections`);
    if (r.cpus < 4) console.log(`  note: ${r.cpus} CPUs for three busy processes; wall-clock ratios include CPU contention (see the CPU figures)`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
