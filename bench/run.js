#!/usr/bin/env node
// npm run bench: our spawn against child_process.spawn, side by side in one process.
// Prints median latency of each, the ratio, and sequential and 8-way concurrent throughput, for
// /bin/true and a small sh pipeline, plain and in each sandbox mode this host supports.
'use strict';
const cp = require('node:child_process');
const path = require('node:path');
const { spawn, probe } = require(path.join(__dirname, '..', 'dist', 'index.js'));

const N = Number(process.env.BENCH_N || 200);
const CONC = 8;

function nodeSpawn(file, args) {
  return new Promise((resolve, reject) => {
    const c = cp.spawn(file, args, { stdio: 'ignore' });
    c.once('error', reject);
    c.once('exit', () => resolve());
  });
}

function oursSpawn(policy) {
  return (file, args) => spawn(file, args, { stdio: 'ignore', policy }).exited;
}

async function latencies(fn, file, args, n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    await fn(file, args);
    out.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return out;
}

async function throughput(fn, file, args, n, conc) {
  const t = process.hrtime.bigint();
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      await fn(file, args);
    }
  };
  await Promise.all(Array.from({ length: conc }, worker));
  return n / (Number(process.hrtime.bigint() - t) / 1e9);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

async function main() {
  const p = probe();
  const variants = [['node child_process.spawn', nodeSpawn], ['ours, policy: null (plain)', oursSpawn(null)]];
  if (p.features.isolatedMode) variants.push(['ours, isolated mode', oursSpawn({ mode: 'isolated' })]);
  if (p.features.landlockMode) variants.push(['ours, landlock mode', oursSpawn({ mode: 'landlock', degraded: true })]);
  const workloads = [['/bin/true', []], ['/bin/sh', ['-c', 'echo a b c | tr a-z A-Z | wc -c > /dev/null']]];
  console.log(`process-sandbox bench: node ${process.version}, ${require('node:os').cpus().length} cpus, N=${N}, ${p.features.kernel || process.platform}`);
  for (const [file, args] of workloads) {
    console.log(`\n${[file, ...args].join(' ')}`);
    // Warm up every variant, then interleave rounds so drift hits all of them alike.
    for (const [, fn] of variants) await latencies(fn, file, args, 10);
    const lat = new Map(variants.map(([name]) => [name, []]));
    const rounds = 5;
    for (let r = 0; r < rounds; r++) {
      for (const [name, fn] of variants) lat.get(name).push(...(await latencies(fn, file, args, Math.ceil(N / rounds))));
    }
    const base = median(lat.get(variants[0][0]));
    console.log('  variant                          median ms   ratio   seq/s   8-way/s');
    for (const [name, fn] of variants) {
      const m = median(lat.get(name));
      const seq = await throughput(fn, file, args, Math.min(N, 100), 1);
      const par = await throughput(fn, file, args, Math.min(N, 200), CONC);
      console.log(`  ${name.padEnd(32)} ${m.toFixed(2).padStart(9)} ${(m / base).toFixed(2).padStart(7)} ${seq.toFixed(0).padStart(7)} ${par.toFixed(0).padStart(9)}`);
    }
  }
  if (require('node:fs').existsSync(path.join(__dirname, 'proxy.js'))) {
    console.log('');
    require('./proxy.js');
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
