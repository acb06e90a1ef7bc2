#!/usr/bin/env node
// npm "install" hook: use the prebuilt addon when one loads here; otherwise compile it with
// node-gyp. Replaces `node-gyp-build` as the hook for one reason: node-gyp-build runs
// `node-gyp rebuild` at the default log level, ~30 "gyp info" lines per install. We pass
// --loglevel=warn, so a build prints compiler warnings and errors only.
//
// Honoured as node-gyp-build does: --build-from-source (npm_config_build_from_source=true)
// always compiles. Nothing is downloaded: node-gyp uses npm's configured nodedir/headers.
'use strict';
const { spawnSync } = require('node:child_process');
const path = require('node:path');

const root = path.join(__dirname, '..');

function prebuildLoads() {
  // In a child process: a broken binary must not take this script down with it.
  const r = spawnSync(process.execPath, ['-e', `require('node-gyp-build')(${JSON.stringify(root)})`], {
    cwd: root,
    stdio: 'ignore',
    env: { ...process.env, PREBUILDS_ONLY: '1' },
  });
  return r.status === 0;
}

function nodeGypCommand() {
  // npm sets npm_config_node_gyp to its bundled node-gyp for lifecycle scripts.
  const bundled = process.env.npm_config_node_gyp;
  if (bundled) return [process.execPath, bundled];
  try {
    const pkg = require.resolve('node-gyp/package.json', { paths: [root] });
    const bin = require(pkg).bin;
    return [process.execPath, path.join(path.dirname(pkg), typeof bin === 'string' ? bin : bin['node-gyp'])];
  } catch {
    return [process.platform === 'win32' ? 'node-gyp.cmd' : 'node-gyp'];
  }
}

const fromSource = process.env.npm_config_build_from_source === 'true';
if (!fromSource && prebuildLoads()) process.exit(0);

const [cmd, ...pre] = nodeGypCommand();
process.stderr.write(`process-sandbox: no prebuilt addon loads on ${process.platform}-${process.arch}; compiling it (needs python3, make and a C++17 compiler)\n`);
// Output is kept and shown only when the build fails: a successful install prints one line.
const r = spawnSync(cmd, [...pre, 'rebuild', '--loglevel=warn'], {
  cwd: root,
  stdio: ['ignore', 'pipe', 'pipe'],
  encoding: 'utf8',
  maxBuffer: 64 * 1024 * 1024,
  shell: process.platform === 'win32' && pre.length === 0,
  windowsHide: true,
});
if (r.error || r.status !== 0) {
  process.stderr.write(`${r.stdout ?? ''}${r.stderr ?? ''}`);
  process.stderr.write(`process-sandbox: building the addon failed (${r.error ? r.error.message : `node-gyp exited with ${r.status}`})\n`);
  process.exit(1);
}
// Compiler warnings (stderr) are worth seeing; make's progress lines (stdout) are not.
if (r.stderr && r.stderr.trim()) process.stderr.write(r.stderr);
