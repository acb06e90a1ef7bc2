#!/usr/bin/env node
// The srt drop-in's two library paths against the real sandbox-runtime (srt), side by side in one
// process, rounds interleaved: `wrapWithSandbox` + `spawn(line, { shell: true })` (srt's documented
// path: a shell runs the line, the line starts the sandbox) and our in-process `spawnSandboxed`.
// Same settings for both: write the workspace, read everything else, one allowed domain (so both
// start their network proxies). `node bench/srt.js`, or the srt rows of `npm run bench`.
// The real srt needs bubblewrap, socat and ripgrep (apt); without them its rows are skipped, loudly.
'use strict';
const cp = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const N = Number(process.env.BENCH_SRT_N || 20);

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function shellRun(line, cwd, env = process.env) {
  return new Promise((resolve, reject) => {
    const c = cp.spawn(line, { shell: true, cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.stderr.on('data', (d) => (out += d));
    c.once('error', reject);
    c.once('close', (code) => (code === 0 ? resolve() : reject(new Error(`exit ${code}: ${out}`))));
  });
}

function hasRealSrtTools() {
  const missing = ['bwrap', 'socat', 'rg'].filter((t) => cp.spawnSync('sh', ['-c', `command -v ${t}`]).status !== 0);
  return missing;
}

async function srtBench() {
  const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-bench-srt-'));
  const config = {
    network: { allowedDomains: ['registry.npmjs.org'], deniedDomains: [] },
    filesystem: { denyRead: [], allowWrite: [ws], denyWrite: [] },
  };
  const ours = require(path.join(__dirname, '..', 'dist', 'srt', 'index.js')).SandboxManager;
  const variants = [];
  const command = 'echo hi > out.txt';
  variants.push(['node spawn(shell) unsandboxed', () => shellRun(command, ws)]);
  variants.push(['ours: wrapWithSandbox + shell', async () => shellRun(await ours.wrapWithSandbox(command), ws)]);
  // The same line run by a grandchild of this host, which the host does not adopt: the CLI
  // fallback (a Node start and a load of the package per command), what every line cost before.
  variants.push(['ours: the line via its CLI fallback', async () => shellRun('sh -c "$PSB_LINE"', ws, { ...process.env, PSB_LINE: await ours.wrapWithSandbox(command) })]);
  variants.push([
    'ours: spawnSandboxed',
    async () => {
      const c = await ours.spawnSandboxed(command, { cwd: ws });
      c.stdout?.resume();
      c.stderr?.resume();
      const r = await c.wait();
      if (r.exitCode !== 0) throw new Error(`spawnSandboxed exit ${r.exitCode}`);
    },
  ]);
  const missing = hasRealSrtTools();
  let real;
  if (process.platform !== 'linux') console.log('  (the real srt rows need Linux here: skipped)');
  else if (missing.length) console.log(`  (the real srt rows are SKIPPED: ${missing.join(', ')} missing; apt-get install bubblewrap socat ripgrep)`);
  else {
    try {
      real = require('@anthropic-ai/sandbox-runtime').SandboxManager;
    } catch (e) {
      console.log(`  (the real srt rows are SKIPPED: @anthropic-ai/sandbox-runtime does not load: ${e.message})`);
    }
  }
  // Each manager is initialized once, as a harness does; its wraps then reuse it.
  const cwd = process.cwd();
  process.chdir(ws);
  try {
    await ours.initialize(config);
    if (real) {
      await real.initialize(config);
      variants.push(['real srt: wrapWithSandbox + shell', async () => shellRun(await real.wrapWithSandbox(command), ws)]);
    }
    for (const [, fn] of variants) await fn(); // warm up
    const lat = new Map(variants.map(([n]) => [n, []]));
    for (let i = 0; i < N; i++) {
      for (const [name, fn] of variants) {
        const t = process.hrtime.bigint();
        await fn();
        lat.get(name).push(Number(process.hrtime.bigint() - t) / 1e6);
      }
    }
    const base = median(lat.get(variants[0][0]));
    console.log(`\nsrt drop-in: \`${command}\`, N=${N} interleaved, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
    console.log('  variant                               median ms   ratio');
    for (const [name] of variants) {
      const m = median(lat.get(name));
      console.log(`  ${name.padEnd(37)} ${m.toFixed(1).padStart(9)} ${(m / base).toFixed(2).padStart(7)}`);
    }
  } finally {
    await ours.reset();
    if (real) await real.reset();
    process.chdir(cwd);
    fs.rmSync(ws, { recursive: true, force: true });
  }
}

module.exports = { srtBench };
if (require.main === module) {
  srtBench().then(
    () => process.exit(0),
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
}
