#!/usr/bin/env node
// npm "install" hook: use the prebuilt addon when one loads here, or the tree's own build when it
// is current; otherwise compile it with node-gyp. Replaces `node-gyp-build` as the hook because
// node-gyp-build runs `node-gyp rebuild` at the default log level, ~30 "gyp info" lines per
// install, and rebuilds a clone's build/Release on every `npm install` even when nothing changed.
// We pass --loglevel=warn, so a build prints compiler warnings and errors only.
//
// macOS: the sandbox needs nothing from the addon there (Seatbelt runs through
// /usr/bin/sandbox-exec; probe() reports the addon as not loaded), so with no prebuild the build
// is skipped with a note, and a forced build that fails does not fail the install: a Mac without
// a compiler must still install.
//
// Honoured as node-gyp-build does: --build-from-source (npm_config_build_from_source=true)
// always compiles. Nothing is downloaded: node-gyp uses npm's configured nodedir/headers.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

/** Runs `code` in a child node: a broken binary must not take this script down with it. */
function loadsInChild(root, code, env) {
  const r = spawnSync(process.execPath, ['-e', code], { cwd: root, stdio: 'ignore', env });
  return r.status === 0;
}

function prebuildLoads(root, env) {
  return loadsInChild(root, `require('node-gyp-build')(${JSON.stringify(root)})`, { ...env, PREBUILDS_ONLY: '1' });
}

function filesUnder(dir) {
  let names;
  try {
    names = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return names.flatMap((d) => (d.isDirectory() ? filesUnder(path.join(dir, d.name)) : [path.join(dir, d.name)]));
}

/**
 * The tree's build/Release addon is newer than everything it is built from (binding.gyp, every
 * file under native/, the node-addon-api headers' package) and loads as this package's addon.
 * A clone's second `npm install` then builds nothing.
 */
function buildIsCurrent(root, env) {
  const built = path.join(root, 'build', 'Release', 'process_sandbox.node');
  const gyp = path.join(root, 'binding.gyp');
  if (!fs.existsSync(built) || !fs.existsSync(gyp)) return false;
  const builtAt = fs.statSync(built).mtimeMs;
  const api = path.join(root, 'node_modules', 'node-addon-api', 'package.json');
  const inputs = [gyp, ...filesUnder(path.join(root, 'native')), ...(fs.existsSync(api) ? [api] : [])];
  if (inputs.some((f) => fs.statSync(f).mtimeMs > builtAt)) return false;
  return loadsInChild(root, `if (typeof require(${JSON.stringify(built)}).setErrorClass !== 'function') process.exit(2);`, env);
}

function nodeGypCommand(root, env) {
  // npm sets npm_config_node_gyp to its bundled node-gyp for lifecycle scripts.
  const bundled = env.npm_config_node_gyp;
  if (bundled) return [process.execPath, bundled];
  try {
    const pkg = require.resolve('node-gyp/package.json', { paths: [root] });
    const bin = require(pkg).bin;
    return [process.execPath, path.join(path.dirname(pkg), typeof bin === 'string' ? bin : bin['node-gyp'])];
  } catch {
    return [process.platform === 'win32' ? 'node-gyp.cmd' : 'node-gyp'];
  }
}

/** `node-gyp rebuild`; its output is kept and shown only when it fails. */
function build(root, env, platform) {
  const [cmd, ...pre] = nodeGypCommand(root, env);
  return spawnSync(cmd, [...pre, 'rebuild', '--loglevel=warn'], {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
    shell: platform === 'win32' && pre.length === 0,
    windowsHide: true,
  });
}

/**
 * The hook itself; returns the exit status. `platform` is a parameter so the macOS path can be
 * tested on any host (test/install/install-hook.test.ts).
 */
function install({ root = path.join(__dirname, '..'), platform = process.platform, env = process.env, stderr = process.stderr } = {}) {
  const fromSource = env.npm_config_build_from_source === 'true';
  if (!fromSource && (prebuildLoads(root, env) || buildIsCurrent(root, env))) return 0;
  const darwin = platform === 'darwin';
  if (darwin && !fromSource) {
    stderr.write('process-sandbox: no prebuilt addon for macOS; not compiling it: the macOS sandbox (Seatbelt, through /usr/bin/sandbox-exec) does not use it\n');
    return 0;
  }
  stderr.write(`process-sandbox: no prebuilt addon loads on ${platform}-${process.arch}; compiling it (needs python3, make and a C++17 compiler)\n`);
  const r = build(root, env, platform);
  if (r.error || r.status !== 0) {
    stderr.write(`${r.stdout ?? ''}${r.stderr ?? ''}`);
    const why = r.error ? r.error.message : `node-gyp exited with ${r.status}`;
    if (darwin) {
      stderr.write(`process-sandbox: building the addon failed (${why}); macOS does not need it, the install goes on\n`);
      return 0;
    }
    stderr.write(`process-sandbox: building the addon failed (${why})\n`);
    return 1;
  }
  // Compiler warnings (stderr) are worth seeing; make's progress lines (stdout) are not.
  if (r.stderr && r.stderr.trim()) stderr.write(r.stderr);
  return 0;
}

module.exports = { install };
if (require.main === module) process.exitCode = install();
