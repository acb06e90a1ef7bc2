'use strict';
// Shared setup for the Windows suite. Runs inside Windows node.exe (under wine here, or on a real
// Windows runner): `node --test test/win32/` after scripts/test-win.sh has built
//   prebuilds/win32-x64/process-sandbox.node   (the addon)
//   .win/dist/                                  (lib/ compiled to CommonJS)
//   .win/fixtures/probe_child.exe               (test/win32/fixtures/probe_child.cc)
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..', '..');
const distDir = process.env.PSB_WIN_DIST || path.join(root, '.win', 'dist');
const addonPath = process.env.PSB_WIN_ADDON || path.join(root, 'prebuilds', 'win32-x64', 'process-sandbox.node');
const probeChild = process.env.PSB_WIN_PROBE_CHILD || path.join(root, '.win', 'fixtures', 'probe_child.exe');

const native = require(addonPath);
const { SandboxError } = require(path.join(distDir, 'errors.js'));
native.setErrorClass(SandboxError);
const win32 = require(path.join(distDir, 'platform', 'win32.js'));
const { SandboxedProcess } = require(path.join(distDir, 'child.js'));

/** wine version, or null on real Windows. Detected natively via ntdll!wine_get_version. */
const wine = native.winWineVersion();
const NEEDS_REAL_WINDOWS = wine
  ? `needs real Windows: wine ${wine} does not enforce restricted tokens, integrity levels or file ACLs`
  : false;

const systemRoot = process.env.SystemRoot || process.env.SYSTEMROOT || 'C:\\windows';
const cmdExe = path.join(systemRoot, 'system32', 'cmd.exe');

function tmpDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `psb-${prefix}-`));
}

const stateDir = tmpDir('state');
const backend = win32.createWin32Backend(native, { stateDir });

/** ResolvedRules with defaults; degraded under wine (which cannot enforce, see NEEDS_REAL_WINDOWS). */
function rules(over = {}) {
  return {
    readAll: true,
    readRoots: [],
    writeRoots: [],
    readOnly: [],
    denyRead: [],
    tmp: 'private', // the policy default; 'host' would re-ACL the whole %TEMP% tree on each read-only run
    network: { kind: 'full' },
    mode: 'auto',
    degraded: wine !== null,
    limits: {},
    ...over,
  };
}

function baseEnv(extra = {}) {
  // process.env is case-insensitive on Windows: copy each variable once, under its real name.
  const wanted = new Set(['SYSTEMROOT', 'WINDIR', 'COMSPEC', 'PATH', 'TEMP', 'TMP', 'PATHEXT']);
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (wanted.has(k.toUpperCase())) env[k] = v;
  return { ...env, ...extra };
}

function collect(stream) {
  return new Promise((resolve, reject) => {
    if (!stream) return resolve('');
    let s = '';
    stream.setEncoding('utf8');
    stream.on('data', (d) => (s += d));
    stream.on('end', () => resolve(s));
    stream.on('error', reject);
  });
}

/** Spawn through the backend and wait for exit and both output streams. */
async function runBackend(req, input) {
  const child = backend.spawn({
    stdio: ['pipe', 'pipe', 'pipe'],
    cwd: os.tmpdir(),
    env: baseEnv(),
    rules: null,
    ...req,
  });
  const out = collect(child.stdio[1]);
  const err = collect(child.stdio[2]);
  if (child.stdio[0]) {
    // A child that exits without reading its stdin closes the pipe first: EPIPE on our write is
    // that race, not a failure of the run (the exit status and output are what is checked).
    child.stdio[0].on('error', (e) => {
      if (e.code !== 'EPIPE') throw e;
    });
    child.stdio[0].end(input ?? '');
  }
  const [exit, stdout, stderr] = await Promise.all([child.exited, out, err]);
  return { child, exit, stdout, stderr };
}

/** Poll `check` until it returns true or `ms` pass (never one look, never a fixed sleep). */
async function pollFor(check, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (check()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Parse probe_child's "key:value" report lines. */
function parseReport(stdout) {
  const facts = {};
  for (const line of stdout.split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0) facts[line.slice(0, i)] = line.slice(i + 1);
  }
  return facts;
}

module.exports = {
  root,
  addonPath,
  native,
  win32,
  SandboxedProcess,
  backend,
  stateDir,
  SandboxError,
  wine,
  NEEDS_REAL_WINDOWS,
  cmdExe,
  probeChild,
  tmpDir,
  rules,
  baseEnv,
  collect,
  runBackend,
  parseReport,
  pollFor,
};
