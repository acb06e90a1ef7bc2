#!/usr/bin/env node
'use strict';
// Real-Windows verification of the Windows backend (docs/windows.md). Run on a Windows x64 machine,
// once in a normal console and once elevated, after `npm run test:win` produced the artifacts on
// Linux (prebuilds/win32-x64/process-sandbox.node, dist/, .win/dist/, .win/fixtures/probe_child.exe)
// and the tree was copied over:
//   node scripts/verify-windows.js
// Runs test/win32/*.wine.js with node's own runner, fails on any failure and on any skip other
// than the wine-only tests (so a test that could not run on real Windows does not pass silently),
// then prints the one-off checks that need a person.
const cp = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const fail = (msg) => {
  console.error(`verify-windows: ${msg}`);
  process.exit(1);
};

if (process.platform !== 'win32') fail('run this on Windows (on Linux, `npm run test:win` runs the wine suite)');
const need = ['prebuilds/win32-x64/process-sandbox.node', 'dist/index.js', '.win/dist/platform/win32.js', '.win/fixtures/probe_child.exe'];
for (const f of need) if (!fs.existsSync(path.join(root, f))) fail(`missing ${f}: run \`npm run test:win\` on Linux and copy the tree, or build it here`);

const native = require(path.join(root, 'prebuilds', 'win32-x64', 'process-sandbox.node'));
const wine = native.winWineVersion();
if (wine) fail(`this is wine ${wine}, not Windows: use scripts/test-win.sh`);

let elevated = false;
try {
  cp.execFileSync('net', ['session'], { stdio: 'ignore' });
  elevated = true;
} catch {
  // `net session` needs administrator rights: not elevated.
}
console.log(`verify-windows: ${require('node:os').release()}, node ${process.version}, ${elevated ? 'ELEVATED' : 'not elevated'}`);

const files = fs.readdirSync(path.join(root, 'test', 'win32')).filter((f) => f.endsWith('.wine.js')).map((f) => path.join('test', 'win32', f));
const r = cp.spawnSync(process.execPath, ['--test', '--test-reporter=tap', '--test-concurrency=1', ...files], {
  cwd: root,
  env: { ...process.env, PREBUILDS_ONLY: '1' },
  encoding: 'utf8',
  maxBuffer: 64 << 20,
});
const tap = `${r.stdout}`;
fs.writeFileSync(path.join(root, '.win', `verify-${elevated ? 'elevated' : 'user'}.tap`), tap + r.stderr);
// Skips that are expected on real Windows: tests that only make sense under wine.
const expectedSkip = /only meaningful under wine|real Windows denies the write this test needs/;
const failed = [];
const badSkips = [];
for (const line of tap.split(/\r?\n/)) {
  if (/^not ok /.test(line)) failed.push(line);
  const m = /^ok \d+ - (.*) # SKIP (.*)$/.exec(line);
  if (m && !expectedSkip.test(m[2])) badSkips.push(`${m[1]} (${m[2]})`);
}
const count = (k) => (new RegExp(`^# ${k} (\\d+)`, 'm').exec(tap) || [])[1] || '0';
console.log(`verify-windows: ${count('pass')} passed, ${count('fail')} failed, ${count('skipped')} skipped (TAP in .win/)`);
for (const f of failed) console.log(`  FAILED ${f}`);
for (const s of badSkips) console.log(`  SKIPPED ON REAL WINDOWS ${s}`);

console.log(`
One-off checks (by hand; see docs/windows.md):
  1. Electron: in an Electron app (>= 23), require this package from the main process and run
     run('cmd.exe', ['/c', 'echo', 'ok'], { policy: { network: 'full' } }) -> stdout "ok", sandboxed: true.
  2. Console: from an interactive console, a sandboxed powershell started with stdio 'inherit'
     reports [Console]::IsInputRedirected = True (a pipe, not your console); typing still reaches it.
  3. BatBadBut: run('t.bat', ['"&calc']) throws EINVALID_ARGUMENT and no calculator opens.
  4. Memory-read gap (expected today): a sandboxed powershell can still OpenProcess(PROCESS_VM_READ)
     on your explorer.exe. If that starts failing, the gap can be dropped from the report.
  5. Elevated console: run this script again elevated; the token test must show the child at
     Medium integrity without Administrators.
  6. ACLs off the JS thread (deferred start): the liveness test's diagnostics below must show loop
     turns > 0 during the ACL phase (with a real propagation walk over 20,000 files here) and 0 for
     the synchronous control; "needs real Windows: access denied on a writable root" (icacls) and
     "needs real Windows: while a run is alive its deny ACEs are on disk" must have passed above.`);
for (const line of tap.split(/\r?\n/)) if (/^# (ACL phase|synchronous control):/.test(line)) console.log(`  ${line}`);
if (failed.length > 0 || badSkips.length > 0 || r.status === null) process.exit(1);
