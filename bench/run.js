#!/usr/bin/env node
// npm run bench: our spawn against child_process.spawn, side by side in one process.
// Prints median latency of each, the ratio, and sequential and 8-way concurrent throughput, for
// /bin/true and a small sh pipeline, plain and in each sandbox mode this host supports. The
// sandboxed variants use the policy "write the workspace (a fresh temp dir, the cwd), no network";
// the proxy variants route the network through one shared ManagedProxy, as a harness running many
// commands would. Latency rounds are interleaved so that drift and the other tenants' load hit
// every variant alike; BENCH_N sets the samples per variant, BENCH_ROUNDS the interleaving. For
// /bin/true the latencies are measured a second time with BENCH_PACE_MS (5) before each spawn.
// Then a file-heavy command (untar 5,000 files, git add, commit, status) in each mode, and
// `npm install` (see fileHeavyBench and npmInstallBench below).
'use strict';
const cp = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, probe, ManagedProxy } = require(path.join(__dirname, '..', 'dist', 'index.js'));
const { spareStats } = require(path.join(__dirname, '..', 'dist', 'platform', 'linux', 'spare.js'));

const N = Number(process.env.BENCH_N || 200);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 10);
const CONC = 8;
const PACE_MS = Number(process.env.BENCH_PACE_MS || 5);

function nodeSpawn(file, args) {
  return new Promise((resolve, reject) => {
    const c = cp.spawn(file, args, { stdio: 'ignore' });
    c.once('error', reject);
    c.once('exit', () => resolve());
  });
}

function oursSpawn(policy, cwd, proxy) {
  const opts = { stdio: 'ignore', policy, cwd, ...(proxy ? { proxy: { instance: proxy } } : {}) };
  return (file, args) => spawn(file, args, opts).exited;
}

/**
 * fn with an environment variable set while it runs synchronously (our spawn reads PSB_CGROUP and
 * PSB_SUPERVISION at each spawn, before its first await).
 */
function withEnv(name, value, fn) {
  return (...a) => {
    const saved = process.env[name];
    process.env[name] = value;
    try {
      return fn(...a);
    } finally {
      if (saved === undefined) delete process.env[name];
      else process.env[name] = saved;
    }
  };
}

async function latencies(fn, file, args, n, gapMs = 0) {
  const out = [];
  for (let i = 0; i < n; i++) {
    if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
    const t = process.hrtime.bigint();
    await fn(file, args);
    out.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return out;
}

/** Median latency per variant, rounds interleaved, optionally with a pause before each spawn. */
async function interleaved(variants, file, args, gapMs = 0) {
  const lat = new Map(variants.map(([name]) => [name, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, fn] of variants) lat.get(name).push(...(await latencies(fn, file, args, Math.ceil(N / ROUNDS), gapMs)));
  }
  return new Map([...lat].map(([name, xs]) => [name, median(xs)]));
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

/**
 * Busy CPU time of the whole machine in ms (/proc/stat: user, nice, system, irq, softirq; not
 * steal, the hypervisor's), or undefined off Linux. Spent by every process and kernel thread, so
 * read it on a quiet machine: it counts what a spawn costs around the host too (init, the
 * namespaces' teardown, kernel workers).
 */
function busyMs() {
  try {
    const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    return ((f[0] + f[1] + f[2] + f[5] + f[6]) * 1000) / 100; // USER_HZ is 100
  } catch {
    return undefined;
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

async function main() {
  const p = probe();
  if (process.env.BENCH_NPM_ONLY) return npmInstallBench(p); // only the npm install rows
  if (process.env.BENCH_FILES_ONLY) return fileHeavyBench(p); // only the file-heavy rows
  if (process.env.BENCH_SRT_ONLY) return require('./srt').srtBench(); // only the srt drop-in rows
  const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-bench-'));
  const policy = (mode, network = 'none') => ({ mode, filesystem: { write: [ws] }, network, ...(mode === 'landlock' ? { degraded: true } : {}) });
  const proxy = ManagedProxy.create({ policy: { allow: ['example.com'] }, closeWithLastProcess: false });
  const viaProxy = { proxy: { allow: ['example.com'] } };
  const variants = [['node child_process.spawn', nodeSpawn], ['ours, policy: null (plain)', oursSpawn(null, ws)]];
  if (p.features.isolatedMode) {
    variants.push(['ours, isolated mode', oursSpawn(policy('isolated'), ws)]);
    variants.push(['ours, isolated, network proxy', oursSpawn(policy('isolated', viaProxy), ws, proxy)]);
  }
  if (p.features.isolatedMode) {
    // A terminal made inside the sandbox (`pty`), as an agent's interactive shell gets; Node's own
    // spawn above has none, so this row says what the terminal adds, not a like-for-like ratio.
    const ptyOpts = { pty: { cols: 80, rows: 24 }, policy: policy('isolated'), cwd: ws };
    variants.push(['ours, isolated, pty inside', (file, args) => spawn(file, args, ptyOpts).exited]);
  }
  if (p.features.landlockMode) {
    variants.push(['ours, landlock mode', oursSpawn(policy('landlock'), ws)]);
    // Its supervision as threads of the host (the opt-out) against the default, a process of its
    // own (native/linux/supervision_process.cc).
    variants.push(['ours, landlock, host supervision', withEnv('PSB_SUPERVISION', 'thread', oursSpawn(policy('landlock'), ws))]);
    variants.push(['ours, landlock, network proxy', oursSpawn(policy('landlock', viaProxy), ws, proxy)]);
    // As root where no pids cgroup can be made (a default container; PSB_CGROUP=off, read at each
    // spawn, emulates it): init traces the tree and counts (native/linux/spawn_trace.cc). The
    // second workload forks three times inside, through init each time.
    if (p.features.euid === 0 && p.features.processTracing) {
      variants.push(['ours, landlock, traced cap', withEnv('PSB_CGROUP', 'off', oursSpawn(policy('landlock'), ws))]);
    }
  }
  // A workspace shaped like a checkout (250 directories three levels deep, a nested repository):
  // what the planner walks on every spawn (nested repositories, resolve.ts), cached between spawns.
  const tree = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-bench-tree-'));
  for (let a = 0; a < 10; a++) for (let b = 0; b < 5; b++) for (let c = 0; c < 4; c++) fs.mkdirSync(path.join(tree, `a${a}`, `b${b}`, `c${c}`), { recursive: true });
  fs.mkdirSync(path.join(tree, 'a0', 'b0', 'c0', '.git', 'hooks'), { recursive: true });
  if (p.features.isolatedMode) {
    const treePolicy = { mode: 'isolated', filesystem: { write: [tree] }, network: 'none' };
    variants.push(['ours, isolated, 250-dir workspace', (file, args) => spawn(file, args, { stdio: 'ignore', policy: treePolicy, cwd: tree }).exited]);
  }
  const workloads = [['/bin/true', []], ['/bin/sh', ['-c', 'echo a b c | tr a-z A-Z | wc -c > /dev/null']]];
  console.log(`process-sandbox bench: node ${process.version}, ${os.cpus().length} cpus, N=${N} in ${ROUNDS} interleaved rounds, ${p.features.kernel || process.platform}, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  for (const [file, args] of workloads) {
    console.log(`\n${[file, ...args].join(' ')}`);
    // Warm up every variant, then interleave rounds so drift hits all of them alike.
    for (const [, fn] of variants) await latencies(fn, file, args, 10);
    const lat = await interleaved(variants, file, args);
    const base = lat.get(variants[0][0]);
    // cpu ms: busy time of the whole machine per spawn over the sequential run (back to back,
    // the CPU a spawn costs is what bounds its rate on a small machine).
    console.log('  variant                          median ms   ratio   seq/s   8-way/s   cpu ms');
    for (const [name, fn] of variants) {
      const m = lat.get(name);
      const nSeq = Math.min(N, 100);
      // Quiet before and after: the previous variant's 8-way burst ends (kernel workers tear its
      // namespaces down after the exits), and this run's own tail is counted.
      const settle = () => new Promise((r) => setTimeout(r, 300));
      await settle();
      const b0 = busyMs();
      const seq = await throughput(fn, file, args, nSeq, 1);
      await settle();
      const b1 = busyMs();
      const par = await throughput(fn, file, args, Math.min(N, 200), CONC);
      const cpu = b0 === undefined || b1 === undefined ? '-' : ((b1 - b0) / nSeq).toFixed(2);
      console.log(`  ${name.padEnd(32)} ${m.toFixed(2).padStart(9)} ${(m / base).toFixed(2).padStart(7)} ${seq.toFixed(0).padStart(7)} ${par.toFixed(0).padStart(9)} ${cpu.padStart(8)}`);
    }
    if (file !== '/bin/true') continue;
    // A harness runs a model's commands one at a time, with time between them: the same spawns
    // with a pause before each (the CPU is free meanwhile; a sandbox prepared ahead is ready by
    // then, see README "Performance").
    const paced = await interleaved(variants, file, args, PACE_MS);
    const pacedBase = paced.get(variants[0][0]);
    console.log(`  paced, ${PACE_MS} ms before each spawn:`);
    for (const [name] of variants) {
      const m = paced.get(name);
      console.log(`  ${name.padEnd(32)} ${m.toFixed(2).padStart(9)} ${(m / pacedBase).toFixed(2).padStart(7)}`);
    }
  }
  const sp = spareStats();
  console.log(`\nsandboxes prepared ahead: ${sp.prepared} made, ${sp.used} used, ${sp.discarded} discarded unused (one is kept, for the shape spawned last)`);
  await proxy.close();
  fs.rmSync(ws, { recursive: true, force: true });
  fs.rmSync(tree, { recursive: true, force: true });
  await fileHeavyBench(p);
  await npmInstallBench(p);
  await require('./srt').srtBench();
  if (process.env.BENCH_SPAWN_ONLY) return;
  if (fs.existsSync(path.join(__dirname, 'proxy.js'))) {
    console.log('');
    require('./proxy.js');
  }
}

/**
 * A file-heavy command: untar a 5,000-file tree (50 directories of 100 small files) into a fresh
 * repository, `git add -A`, `git commit`, `git status`, all in one `sh`: unsandboxed
 * (child_process) against isolated mode and Landlock mode, rounds interleaved. In Landlock mode
 * tar's fchown (as root), fchmod and utimensat per file (about 15,000 calls as root) each go to
 * the host's supervisor, so this is what that round trip costs; with procPrivacy every read-only
 * open goes there too (its own row). Every run's tree is kept until
 * the end: on a journal-less ext4, inode allocation slows for minutes after mass deletions, and
 * the variant measured next would pay for it. BENCH_FILES_RUNS sets the runs per variant
 * (default 3); BENCH_FILES_ONLY runs only this; BENCH_SPAWN_ONLY skips it. BENCH_FILES_DIR puts
 * the trees elsewhere than /var/tmp (a tmpfs: no disk, so what is left is the sandbox's cost).
 */
async function fileHeavyBench(p) {
  if (process.env.BENCH_SPAWN_ONLY || process.platform !== 'linux') return;
  const have = (cmd) => cp.spawnSync('/bin/sh', ['-c', `command -v ${cmd}`]).status === 0;
  if (!have('tar') || !have('git')) return console.log('\nfile-heavy workload: skipped (needs tar and git on PATH)');
  const runs = Number(process.env.BENCH_FILES_RUNS || 3);
  const root = fs.mkdtempSync(path.join(process.env.BENCH_FILES_DIR || '/var/tmp', 'psb-bench-files-'));
  const src = path.join(root, 'src');
  for (let d = 0; d < 50; d++) {
    fs.mkdirSync(path.join(src, `d${d}`), { recursive: true });
    for (let f = 0; f < 100; f++) fs.writeFileSync(path.join(src, `d${d}`, `f${f}.txt`), `file ${d}/${f}\n`);
  }
  const tarball = path.join(root, 'tree.tar');
  cp.execFileSync('tar', ['cf', tarball, '-C', src, '.']);
  fs.mkdirSync(path.join(root, 'home', '.ssh'), { recursive: true });
  const env = {
    PATH: process.env.PATH,
    HOME: path.join(root, 'home'),
    LANG: 'C.UTF-8',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_NAME: 'bench',
    GIT_AUTHOR_EMAIL: 'bench@example.com',
    GIT_COMMITTER_NAME: 'bench',
    GIT_COMMITTER_EMAIL: 'bench@example.com',
  };
  const script = `tar xf '${tarball}' && git add -A && git commit -qm bench && git status --short`;
  let k = 0;
  // A fresh repository per run, made outside the measurement (isolated mode keeps .git's config
  // and hooks read-only, so the command works in an existing repository, as an agent does).
  const repo = () => {
    const d = path.join(root, `r${k++}`);
    fs.mkdirSync(d);
    cp.execFileSync('git', ['init', '-q', d], { env });
    return d;
  };
  const check = (what, code) => {
    if (code !== 0) throw new Error(`file-heavy workload, ${what}: exit ${code}`);
  };
  const variants = [['unsandboxed (child_process)', (cwd) => new Promise((res, rej) => cp.spawn('/bin/sh', ['-c', script], { cwd, env, stdio: 'ignore' }).once('error', rej).once('exit', (c) => res(check('unsandboxed', c))))]];
  const ours = (mode, procPrivacy = false, changes = undefined, apply = false, denyRead = false) => async (cwd) => {
    const filesystem = { write: [cwd], ...(denyRead ? { denyRead: [path.join(root, 'home', '.ssh')] } : {}) };
    const policy = { mode, filesystem, network: 'none', ...(mode === 'landlock' ? { degraded: true } : {}), ...(procPrivacy ? { procPrivacy } : {}) };
    // changes: a journal per run beside the repository (outside the writable root), kept to the end.
    const opts = changes ? { changes: { mode: changes, dir: `${cwd}-changes` } } : {};
    const child = spawn('/bin/sh', ['-c', script], { cwd, env, stdio: 'ignore', policy, ...opts });
    check(mode, (await child.exited).code);
    await child.changes?.settled;
    if (apply) await child.changes.apply();
  };
  if (p.features.isolatedMode) variants.push(['isolated mode', ours('isolated')]);
  if (p.features.landlockMode) variants.push(['landlock mode', ours('landlock')]);
  // Its supervision as threads of the host (PSB_SUPERVISION=thread) against the default.
  if (p.features.landlockMode) variants.push(['landlock, host supervision', withEnv('PSB_SUPERVISION', 'thread', ours('landlock'))]);
  // procPrivacy: every read-only open (git reads the index, objects, config...) also goes to
  // the supervisor, and those of files through its Landlock-confined opener thread.
  if (p.features.landlockMode && p.features.metadataSupervisor) variants.push(['landlock, procPrivacy', ours('landlock', true)]);
  // A deny-read directory under the readable root: every listing and every stat, access and
  // readlink (git status lstats each file) also goes to the supervisor (supervise_stats.cc).
  if (p.features.landlockMode && p.features.metadataSupervisor) variants.push(['landlock, deny-read', ours('landlock', false, undefined, false, true)]);
  // changes: 'record': every write call is journaled first (lib/changes); the ratio to plain
  // Landlock mode is printed under the table.
  if (p.features.landlockMode && p.features.metadataSupervisor) variants.push(['landlock, changes record', ours('landlock', false, 'record')]);
  // Isolated mode stages through an overlay of each writable root (lib/changes/overlay.ts):
  // 'stage' leaves the writes in the layer, 'stage + apply' copies them in afterwards, 'record'
  // applies them through the journal when the command ends. Ratios to isolated mode under the table.
  if (p.features.isolatedMode) {
    variants.push(['isolated, changes stage', ours('isolated', false, 'stage')]);
    variants.push(['isolated, changes stage + apply', ours('isolated', false, 'stage', true)]);
    variants.push(['isolated, changes record', ours('isolated', false, 'record')]);
  }
  const times = new Map(variants.map(([n]) => [n, []]));
  try {
    for (let r = 0; r < runs; r++) {
      for (const [name, fn] of variants) {
        const d = repo();
        const t = process.hrtime.bigint();
        await fn(d);
        times.get(name).push(Number(process.hrtime.bigint() - t) / 1e6);
      }
    }
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
  const med = (name) => median(times.get(name));
  const base = med(variants[0][0]);
  const iso = times.has('isolated mode') ? med('isolated mode') : undefined;
  console.log(`\nfile-heavy: untar 5,000 files, git add -A, git commit, git status in one sh (${runs} runs each, interleaved)`);
  console.log('  variant                          median ms   ratio   vs isolated');
  for (const [name] of variants) {
    const m = med(name);
    console.log(`  ${name.padEnd(32)} ${m.toFixed(0).padStart(9)} ${(m / base).toFixed(2).padStart(7)} ${iso === undefined ? '-' : (m / iso).toFixed(2).padStart(13)}`);
  }
  if (times.has('landlock, changes record')) {
    console.log(`  changes record vs plain Landlock mode: ${(med('landlock, changes record') / med('landlock mode')).toFixed(2)}x`);
  }
  for (const v of ['stage', 'stage + apply', 'record']) {
    if (times.has(`isolated, changes ${v}`)) console.log(`  changes ${v} vs plain isolated mode: ${(med(`isolated, changes ${v}`) / med('isolated mode')).toFixed(2)}x`);
  }
}

/**
 * `npm install` of a small project (one dependency, is-number) with a warm cache, unsandboxed
 * against sandboxed (default policy: the project writable, the registry through the proxy, caches
 * 'private'). The cache is a fresh HOME's ~/.npm, warmed once unsandboxed. Isolated mode sees it
 * through an overlay (hits); Landlock mode's private cache starts cold (every run fetches).
 * BENCH_NPM_RUNS sets the runs per variant (default 5); BENCH_NPM_ONLY runs only this;
 * BENCH_SPAWN_ONLY or no npm skips it.
 */
async function npmInstallBench(p) {
  if (process.env.BENCH_SPAWN_ONLY || process.platform !== 'linux') return;
  const npm = cp.spawnSync('/bin/sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).stdout.trim();
  if (!npm) return console.log('\nnpm install: skipped (no npm on PATH)');
  const runs = Number(process.env.BENCH_NPM_RUNS || 5);
  const root = fs.mkdtempSync(path.join('/var/tmp', 'psb-bench-npm-'));
  const home = path.join(root, 'home');
  fs.mkdirSync(home);
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    LANG: 'C.UTF-8',
    npm_config_update_notifier: 'false',
    ...(process.env.NODE_EXTRA_CA_CERTS ? { NODE_EXTRA_CA_CERTS: process.env.NODE_EXTRA_CA_CERTS } : {}),
  };
  let k = 0;
  const project = () => {
    const d = path.join(root, `p${k++}`);
    fs.mkdirSync(d);
    fs.writeFileSync(path.join(d, 'package.json'), JSON.stringify({ name: 'bench', version: '1.0.0', dependencies: { 'is-number': '^7.0.0' } }));
    return d;
  };
  const args = ['install', '--prefer-offline', '--no-audit', '--no-fund', '--no-package-lock'];
  const warm = cp.spawnSync(npm, args, { cwd: project(), env, encoding: 'utf8' });
  if (warm.status !== 0) {
    console.log(`\nnpm install: skipped (warming the cache failed: ${(warm.stderr || '').trim().split('\n').pop()})`);
    return fs.rmSync(root, { recursive: true, force: true });
  }
  // allowLocal: where the registry name resolves to a private or documentation address (a
  // mirror), the proxy would refuse it otherwise.
  const net = { proxy: { allow: ['registry.npmjs.org'], allowLocal: true } };
  const variants = [['unsandboxed (child_process)', (cwd) => new Promise((res, rej) => cp.spawn(npm, args, { cwd, env, stdio: 'ignore' }).once('exit', (c) => (c === 0 ? res() : rej(new Error(`npm exit ${c}`)))))]];
  const ours = (mode) => async (cwd) => {
    const policy = { mode, filesystem: { write: [cwd] }, network: net, ...(mode === 'landlock' ? { degraded: true } : {}) };
    const c = spawn(npm, args, { cwd, env, stdio: 'ignore', policy });
    const e = await c.exited;
    if (e.code !== 0) throw new Error(`sandboxed npm exit ${e.code}`);
  };
  if (p.features.isolatedMode) variants.push(['isolated (cache: overlay, warm)', ours('isolated')]);
  if (p.features.landlockMode) variants.push(['landlock (cache: private, cold)', ours('landlock')]);
  const times = new Map(variants.map(([n]) => [n, []]));
  for (let r = 0; r < runs; r++) {
    for (const [name, fn] of variants) {
      const d = project();
      const t = process.hrtime.bigint();
      await fn(d);
      times.get(name).push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  }
  const base = median(times.get(variants[0][0]));
  console.log(`\nnpm install (1 dependency, warm host cache, ${runs} runs each, interleaved)`);
  console.log('  variant                          median ms   ratio');
  for (const [name] of variants) {
    const m = median(times.get(name));
    console.log(`  ${name.padEnd(32)} ${m.toFixed(0).padStart(9)} ${(m / base).toFixed(2).padStart(7)}`);
  }
  fs.rmSync(root, { recursive: true, force: true });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
