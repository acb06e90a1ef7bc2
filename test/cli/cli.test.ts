/**
 * The CLI contract, driven exactly as a user would: `node dist/cli.js run [options] --
 * <command>` and `node dist/cli.js probe [--json]`, as real processes. dist/ is built by
 * test/helpers/global-setup.ts.
 *
 * Exit statuses: the command's own; 128+N on signal N; 125 when the sandbox cannot be set up or the
 * flags are bad; 126 found but not executable; 127 not found.
 *
 * Every denial has its positive control: the same command with the flag that allows it.
 */
import { spawn as cpSpawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliMessage, parseRunArgs } from '../../lib/cli/run-args';
import { probe } from '../../lib/index';
import { fixtureDir, isRunning, killAll, pidsWithArg, requireBuilt, uniqueSleepArg, waitFor, type ProcStat } from '../contract/helpers';

const ROOT = path.resolve(__dirname, '..', '..');
const CLI = path.join(ROOT, 'dist', 'cli.js');
const MiB = 1024 * 1024;

const report = process.platform === 'linux' ? probe() : null;
const canSandbox = report !== null && report.defaultMode !== null;
const canIsolated = canSandbox && report!.features.isolatedMode === true;
const canLandlock = canSandbox && report!.features.landlockMode === true;
// The CLI's default policy (private /tmp, cwd writable) is refused in Landlock mode without
// --degraded, so the sandboxed CLI tests need a host whose default mode is isolated.
const defaultIsolated = canSandbox && report!.defaultMode === 'isolated';
if (!canSandbox) console.warn(`SKIPPING sandboxed CLI tests: ${JSON.stringify(report)}`);
else if (!defaultIsolated) console.warn(`SKIPPING sandboxed CLI tests that use the default policy: default mode is ${report!.defaultMode}`);

/** A small, known environment for the CLI (plus whatever a test adds). */
function baseEnv(extra: Record<string, string> = {}): Record<string, string> {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/', LANG: 'C', ...extra };
}

interface CliResult {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function cli(args: string[], opts: { cwd?: string; env?: Record<string, string>; input?: string } = {}): CliResult {
  const r: SpawnSyncReturns<string> = spawnSync(process.execPath, [CLI, ...args], {
    cwd: opts.cwd,
    env: opts.env ?? baseEnv(),
    input: opts.input ?? '',
    encoding: 'utf8',
    timeout: 30_000,
    killSignal: 'SIGKILL',
    maxBuffer: 64 * MiB,
  });
  if (r.error) throw new Error(`process-sandbox ${args.join(' ')}: ${r.error.message} (a hung CLI is killed after 30 s)\nstderr: ${r.stderr}`);
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

/** The JSON line --json prints at the end of stderr. */
function jsonResult(r: CliResult): Record<string, any> {
  const lines = r.stderr.trim().split('\n');
  const last = lines[lines.length - 1];
  try {
    return JSON.parse(last);
  } catch {
    throw new Error(`--json: the last stderr line should be the JSON result, got:\n${r.stderr}`);
  }
}

let dir: string;
beforeAll(() => {
  requireBuilt('dist');
  requireBuilt('addon');
  dir = fixtureDir('psb-cli-');
});
afterAll(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe('package.json wiring', () => {
  it('declares the bin and the build scripts the tests rely on', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    expect(pkg.name).toBe('process-sandbox');
    expect(pkg.bin?.['process-sandbox']).toBe('dist/cli.js');
    for (const s of ['build:ts', 'build:native', 'build:prebuild', 'prepack', 'test', 'install']) expect(pkg.scripts?.[s], `script ${s}`).toBeTypeOf('string');
    expect(pkg.scripts['build:prebuild']).toMatch(/prebuildify/);
    expect(pkg.scripts['build:prebuild']).toMatch(/--napi/);
    expect(pkg.scripts['build:prebuild']).toMatch(/--strip/);
    expect(pkg.scripts['build:prebuild']).toMatch(/--tag-libc/);
    expect(pkg.scripts.prepack).toBe('bash scripts/prepack.sh');
    expect(pkg.scripts.install).toBe('node scripts/install.js');
    expect(pkg.files).toContain('scripts/install.js');
    // npm runs `pre<name>` before `<name>`: a script called `prebuild` would compile on every
    // `npm run build` a second time. No script may be an accidental pre-hook of another.
    for (const name of Object.keys(pkg.scripts)) {
      if (name.startsWith('pre') && name !== 'prepare' && name !== 'prepack' && name !== 'prepublishOnly') {
        expect(pkg.scripts[name.slice(3)], `"${name}" is a pre-hook of "${name.slice(3)}"`).toBeUndefined();
      }
    }
  });

  it('dist/cli.js is executable and starts with a node shebang', () => {
    expect(fs.statSync(CLI).mode & 0o111).not.toBe(0);
    expect(fs.readFileSync(CLI, 'utf8').startsWith('#!/usr/bin/env node')).toBe(true);
  });
});

describe('exit statuses', () => {
  describe.each([
    ['plain', ['--no-sandbox']],
    ['sandboxed', []],
  ] as const)('%s', (name, flags) => {
    const skip = name === 'sandboxed' && !defaultIsolated;

    it.skipIf(skip).each([0, 1, 7, 255])('the command\'s own status %i', (n) => {
      expect(cli(['run', ...flags, '--', 'sh', '-c', `exit ${n}`], { cwd: dir }).status).toBe(n);
    });

    it.skipIf(skip).each([
      ['KILL', 9],
      ['TERM', 15],
      ['USR1', 10],
      ['HUP', 1],
    ] as const)('128+N when the command dies of SIG%s', (sig, n) => {
      expect(cli(['run', ...flags, '--', 'sh', '-c', `kill -${sig} $$; sleep 5`], { cwd: dir }).status).toBe(128 + n);
    });

    it.skipIf(skip)('127 and "command not found: X" for a missing command', () => {
      const r = cli(['run', ...flags, '--', 'no-such-command-psb'], { cwd: dir });
      expect(r.status).toBe(127);
      expect(r.stderr).toContain('command not found: no-such-command-psb');
    });

    it.skipIf(skip)('126 and "not executable: X" for a file without the execute bit', () => {
      const f = path.join(dir, `noexec-${name}.sh`);
      fs.writeFileSync(f, '#!/bin/sh\necho ran\n', { mode: 0o644 });
      const r = cli(['run', ...flags, '--', f], { cwd: dir });
      expect(r.status).toBe(126);
      expect(r.stderr).toContain(`not executable: ${f}`);
      expect(r.stdout).toBe('');
      // Positive control: executable, it runs.
      fs.chmodSync(f, 0o755);
      expect(cli(['run', ...flags, '--', f], { cwd: dir })).toMatchObject({ status: 0, stdout: 'ran\n' });
    });
  });

  it.each([
    [['run', '--bogus', '--', 'true'], /unknown option: --bogus/],
    [['run'], /missing command/],
    [['run', '--network', 'sideways', '--', 'true'], /--network/],
    [['run', '--tmp', 'shared', '--', 'true'], /--tmp/],
    [['run', '--mode', 'chroot', '--', 'true'], /--mode/],
    [['run', '--env', 'NOEQUALS', '--', 'true'], /--env/],
    [['run', '--timeout', '-1', '--', 'true'], /--timeout/],
    [['run', '--cwd'], /--cwd/],
    [['frobnicate'], /unknown command/],
    [['run', '--network', 'proxy', '--', 'true'], /--network proxy needs at least one --allow-domain/],
    [['run', '--network', 'full', '--allow-domain', 'example.com', '--', 'true'], /--allow-domain needs --network proxy/],
    [['run', '--json-fd', 'x', '--', 'true'], /--json-fd/],
    [['run', '--json-fd', '3', '--json-file', '/dev/null', '--', 'true'], /mutually exclusive/],
    [['probe', '--bogus'], /unknown option: --bogus/],
    // A boolean flag given a value is refused, not read as the flag.
    [['run', '--json=1', '--', 'true'], /^process-sandbox: --json takes no value, got --json=1 \(drop the '=1'\)$/],
    [['run', '--no-sandbox=yes', '--', 'true'], /--no-sandbox takes no value/],
    [['run', '--cwd=', '--', 'true'], /--cwd= needs a value/],
    [['run', '--bogus=1', '--', 'true'], /unknown option: --bogus$/],
    // Contradictions are refused, saying what to drop.
    [['run', '--no-sandbox', '--write', '/tmp', '--', 'true'], /--no-sandbox runs the command unrestricted, so --write would be ignored: drop --no-sandbox or --write$/],
    [['run', '--deny-read', '/etc', '--no-sandbox', '--', 'true'], /--no-sandbox .* so --deny-read would be ignored/],
    [['run', '--no-sandbox', '--write', '/tmp', '--deny-read', '/etc', '--', 'true'], /so --write, --deny-read would be ignored: drop --no-sandbox or those options$/],
    [['run', '--json', '--json-fd', '1', '--', 'true'], /--json prints the result on stderr and --json-fd 1 sends it elsewhere: drop --json/],
    [['run', '--json-file', '/dev/null', '--json', '--', 'true'], /--json prints the result on stderr and --json-file \/dev\/null sends it elsewhere: drop --json/],
    [['run', '--write', 'none', '--write', '/tmp', '--', 'true'], /--write none \(nothing writable\) contradicts --write \/tmp/],
    [['run', '--deny-domain', 'example.com', '--', 'true'], /--deny-domain applies to the proxy/],
    [['run', '--allow-local', '--', 'true'], /--allow-local applies to the proxy/],
  ])('125 for bad usage, one line plus a hint: %j', (args, why) => {
    const r = cli(args as string[], { cwd: dir });
    expect(r.status).toBe(125);
    const lines = r.stderr.trimEnd().split('\n');
    expect(lines[0]).toMatch(why);
    expect(lines[0]).toMatch(/^process-sandbox: /);
    expect(lines.length, r.stderr).toBe(2);
    expect(lines[1]).toMatch(/^Try 'process-sandbox( run| probe)? --help'/);
    expect(r.stdout).toBe('');
  });

  it('--network proxy without an allow list refuses and runs nothing (positive control: with one it runs)', () => {
    const marker = path.join(dir, 'proxy-marker');
    const r = cli(['run', '--network', 'proxy', '--no-sandbox', '--', 'touch', marker], { cwd: dir });
    expect(r.status).toBe(125);
    expect(fs.existsSync(marker)).toBe(false);
    if (!defaultIsolated) {
      console.warn('SKIPPING the positive control of --network proxy: it needs a sandbox in isolated mode (--no-sandbox with --network is refused)');
      return;
    }
    const ok = cli(['run', '--network', 'proxy', '--allow-domain', 'example.com', '--', 'touch', marker], { cwd: dir });
    expect(ok.status, ok.stderr).toBe(0);
    expect(fs.existsSync(marker)).toBe(true);
  });

  it('a contradiction runs nothing: --no-sandbox with --write leaves the marker unmade (positive control: without --write it runs)', () => {
    const marker = path.join(dir, 'nosb-write-marker');
    const r = cli(['run', '--no-sandbox', '--write', dir, '--', 'touch', marker], { cwd: dir });
    expect(r.status).toBe(125);
    expect(fs.existsSync(marker)).toBe(false);
    expect(cli(['run', '--no-sandbox', '--', 'touch', marker], { cwd: dir }).status).toBe(0);
    expect(fs.existsSync(marker)).toBe(true);
  });

  it('--opt=value is read as --opt value for every option that takes a value', () => {
    const values: Record<string, string> = {
      '--cwd': '/tmp', '--write': '/tmp', '--read': '/usr', '--deny-read': '/etc/shadow', '--protect': '/tmp/p',
      '--network': 'proxy', '--allow-domain': 'example.com', '--deny-domain': 'bad.example.com', '--tmp': 'host',
      '--mode': 'isolated', '--env': 'A=b=c', '--timeout': '2.5', '--json-fd': '1', '--json-file': '/tmp/r.json', '--caches': 'host-readonly',
      '--changes': 'record', '--changes-dir': '/tmp/j', '--changes-max-bytes': '1000',
    };
    const needs: Record<string, string[]> = {
      '--network': ['--allow-domain', 'example.com'], '--deny-domain': ['--allow-domain', 'example.com'],
      '--changes-dir': ['--changes', 'record'], '--changes-max-bytes': ['--changes', 'record'],
    };
    // Every option the help text lists with a <value> is covered.
    const listed = [...cli(['run', '--help']).stdout.matchAll(/^ {2}(--[a-z-]+) </gm)].map((m) => m[1]);
    expect(Object.keys(values).sort()).toEqual(listed.sort());
    for (const [flag, v] of Object.entries(values)) {
      const extra = needs[flag] ?? [];
      const spaced = parseRunArgs([flag, v, ...extra, '--', 'true'], '/');
      const joined = parseRunArgs([`${flag}=${v}`, ...extra, '--', 'true'], '/');
      expect(joined, flag).toEqual(spaced);
      expect(joined, flag).not.toEqual(parseRunArgs([...extra, '--', 'true'], '/'));
    }
    // A value holding '=' keeps everything after the first one.
    expect(parseRunArgs(['--env=A=b=c', '--', 'true'], '/').env).toEqual([['A', 'b=c']]);
  });

  it('--cwd=DIR runs the command there (not "unknown option: --cwd=/tmp")', () => {
    const sub = fixtureDir('psb-cli-cwdeq-');
    try {
      const r = cli(['run', '--no-sandbox', `--cwd=${sub}`, '--', 'pwd'], { cwd: dir });
      expect(r, r.stderr).toMatchObject({ status: 0, stdout: `${sub}\n` });
      if (!defaultIsolated) return void console.warn('SKIPPING the sandboxed --cwd=DIR run: default mode is not isolated');
      const s = cli(['run', `--cwd=${sub}`, '--write=none', '--', 'pwd'], { cwd: dir });
      expect(s, s.stderr).toMatchObject({ status: 0, stdout: `${sub}\n` });
    } finally {
      fs.rmSync(sub, { recursive: true, force: true });
    }
  });

  it('a policy error names the CLI option that produced it, not the API field', () => {
    const missing = path.join(dir, 'no-such-dir');
    const r = cli(['run', '--write', missing, '--', 'true'], { cwd: dir });
    expect(r.status).toBe(125);
    expect(r.stderr.trimEnd()).toBe(`process-sandbox: --write ${missing}: writable root ${missing} does not exist`);
    const p = cli(['run', '--allow-domain', 'example.com', '--allow-domain', 'http://localhost', '--', 'true'], { cwd: dir });
    expect(p.status).toBe(125);
    expect(p.stderr).toMatch(/^process-sandbox: --allow-domain http:\/\/localhost is not a domain pattern/);
    expect(p.stderr).not.toMatch(/policy\.|options\./);
    const j = cli(['run', '--json', '--write', missing, '--', 'true'], { cwd: dir });
    expect(jsonResult(j).error).toMatchObject({ code: 'EINVALID_POLICY', message: `--write ${missing}: writable root ${missing} does not exist` });
  });

  it('cliMessage maps every policy field the CLI fills back to its option', () => {
    const a = parseRunArgs(['--write', 'rel/dir', '--read', '/r0', '--read', '/r1', '--deny-read', '/d', '--protect', '/p', '--allow-domain', 'a.com', '--deny-domain', 'b.com', '--', 'true'], '/w');
    expect(cliMessage('policy.filesystem.write[0]: x', a)).toBe('--write rel/dir: x');
    expect(cliMessage('policy.filesystem.read[1] and policy.filesystem.read[0]', a)).toBe('--read /r1 and --read /r0');
    expect(cliMessage('policy.filesystem.denyRead[0] policy.filesystem.protect[0]', a)).toBe('--deny-read /d --protect /p');
    expect(cliMessage('policy.network.proxy.allow[0] policy.network.proxy.deny[0]', a)).toBe('--allow-domain a.com --deny-domain b.com');
    expect(cliMessage('cannot enforce x; pass degraded: true (CLI --degraded) to accept', a)).toBe('cannot enforce x; pass --degraded to accept');
    expect(cliMessage('options.cwd does not exist: /q', a)).toBe('--cwd does not exist: /q');
    const dflt = parseRunArgs(['--', 'true'], '/w');
    expect(cliMessage('policy.filesystem.write[0]: x', dflt)).toBe('the working directory /w (writable by default; --write none for read-only): x');
  });

  it('options are read only before the command: its own arguments pass through untouched', () => {
    const r = cli(['run', '--no-sandbox', 'echo', '--network', 'full', '--help', '--'], { cwd: dir });
    expect(r).toMatchObject({ status: 0, stdout: '--network full --help --\n' });
    const r2 = cli(['run', '--no-sandbox', '--', 'printf', '%s\\n', '--version'], { cwd: dir });
    expect(r2).toMatchObject({ status: 0, stdout: '--version\n' });
  });

  it('125 for a missing --cwd directory, and nothing runs', () => {
    const marker = path.join(dir, 'cwd-marker');
    const r = cli(['run', '--no-sandbox', '--cwd', path.join(dir, 'missing'), '--', 'touch', marker], { cwd: dir });
    expect(r.status).toBe(125);
    expect(fs.existsSync(marker)).toBe(false);
  });

  it.skipIf(!canLandlock)('125 with a one-line reason when --mode landlock cannot enforce the policy', () => {
    const marker = path.join(dir, 'landlock-marker');
    // (A writable root over /proc is a guarantee Landlock mode never holds: the host's own /proc
    // files would be writable. Policies it can hold run without --degraded.)
    const r = cli(['run', '--mode', 'landlock', '--write', dir, '--write', '/proc', '--', 'touch', marker], { cwd: dir });
    expect(r.status).toBe(125);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^process-sandbox: .*(Landlock|landlock)/);
    expect(fs.existsSync(marker)).toBe(false);
  });

  it.each([[['--help']], [['-h']], [[]], [['help']]])('%j exits 0 and prints the usage on stdout', (args) => {
    const r = cli(args);
    expect(r.status).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('process-sandbox run [options] [--] <command> [args...]');
    expect(r.stdout).toContain('process-sandbox probe [--json]');
  });

  it.each([[['run', '--help']], [['run', '-h']], [['run', '--cwd', '/', '--help']], [['help', 'run']]])('%j prints the run options and exits 0, running nothing', (args) => {
    const r = cli(args);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^Usage: process-sandbox run /);
    for (const flag of ['--json-fd', '--json-file', '--timeout', '--allow-domain', '--keep-env']) expect(r.stdout).toContain(flag);
  });

  it('probe --help and --version exit 0', () => {
    expect(cli(['probe', '--help'])).toMatchObject({ status: 0, stdout: expect.stringMatching(/^Usage: process-sandbox probe/) });
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    expect(cli(['--version'])).toMatchObject({ status: 0, stdout: `${pkg.version}\n`, stderr: '' });
  });
});

describe.skipIf(!defaultIsolated)('run flags (sandboxed)', () => {
  it('--cwd sets the working directory (default: the current directory)', () => {
    const sub = path.join(dir, 'sub');
    fs.mkdirSync(sub, { recursive: true });
    expect(cli(['run', '--cwd', sub, '--', 'pwd'], { cwd: dir }).stdout).toBe(`${sub}\n`);
    expect(cli(['run', '--', 'pwd'], { cwd: sub }).stdout).toBe(`${sub}\n`);
  });

  it('the cwd is writable by default; --write none makes it read-only', () => {
    const ws = fixtureDir('psb-cli-ws-');
    try {
      const f = path.join(ws, 'written');
      expect(cli(['run', '--', 'sh', '-c', `echo x > ${f}`], { cwd: ws }).status).toBe(0);
      expect(fs.readFileSync(f, 'utf8')).toBe('x\n');
      fs.rmSync(f);
      const r = cli(['run', '--write', 'none', '--', 'sh', '-c', `echo x > ${f}`], { cwd: ws });
      expect(r.status).not.toBe(0);
      expect(fs.existsSync(f)).toBe(false);
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });

  it('--write <path> makes that path writable instead of the cwd', () => {
    const ws = fixtureDir('psb-cli-ws-');
    const other = fixtureDir('psb-cli-other-');
    try {
      const r = cli(['run', '--write', other, '--', 'sh', '-c', `echo o > ${other}/o; echo w > ${ws}/w`], { cwd: ws });
      expect(r.status).not.toBe(0);
      expect(fs.readFileSync(path.join(other, 'o'), 'utf8')).toBe('o\n');
      expect(fs.existsSync(path.join(ws, 'w'))).toBe(false);
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
      fs.rmSync(other, { recursive: true, force: true });
    }
  });

  it('--read restricts reads to the given roots', () => {
    const a = path.join(dir, 'read-a');
    const b = path.join(dir, 'read-b');
    fs.mkdirSync(a, { recursive: true });
    fs.mkdirSync(b, { recursive: true });
    fs.writeFileSync(path.join(a, 'f'), 'A\n');
    fs.writeFileSync(path.join(b, 'f'), 'B\n');
    // Control: without --read both are readable.
    expect(cli(['run', '--', 'cat', path.join(a, 'f'), path.join(b, 'f')], { cwd: a })).toMatchObject({ status: 0, stdout: 'A\nB\n' });
    const r = cli(['run', '--read', a, '--', 'cat', path.join(a, 'f'), path.join(b, 'f')], { cwd: a });
    expect(r.stdout).toBe('A\n');
    expect(r.status).not.toBe(0);
  });

  it('--deny-read makes a path unreadable', () => {
    const secret = path.join(dir, 'secret.txt');
    fs.writeFileSync(secret, 'hush\n');
    expect(cli(['run', '--', 'cat', secret], { cwd: dir })).toMatchObject({ status: 0, stdout: 'hush\n' });
    // Denied files may read as an error or as an empty placeholder; either way the content is gone.
    const r = cli(['run', '--deny-read', secret, '--', 'cat', secret], { cwd: dir });
    expect(r.stdout).not.toContain('hush');
    // Outside a writable root too.
    const outside = fixtureDir('psb-cli-deny-');
    try {
      fs.writeFileSync(path.join(outside, 's'), 'hush\n');
      expect(cli(['run', '--', 'cat', path.join(outside, 's')], { cwd: dir }).stdout).toBe('hush\n');
      expect(cli(['run', '--deny-read', outside, '--', 'cat', path.join(outside, 's')], { cwd: dir }).stdout).not.toContain('hush');
    } finally {
      fs.rmSync(outside, { recursive: true, force: true });
    }
  });

  describe('--network', () => {
    let server: net.Server;
    let port: number;
    beforeAll(async () => {
      server = net.createServer((s) => s.end('hello\n'));
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
      port = (server.address() as net.AddressInfo).port;
    });
    afterAll(() => new Promise<void>((r) => server.close(() => r())));

    // Exit 0 = connected to the host's listener, 3 = refused/denied.
    const connect = () => [
      process.execPath,
      '-e',
      `require('net').connect(${port},'127.0.0.1').on('connect',()=>process.exit(0)).on('error',()=>process.exit(3))`,
    ];

    it('--no-sandbox control: the host listener is reachable', () => {
      expect(cli(['run', '--no-sandbox', '--', ...connect()], { cwd: dir }).status).toBe(0);
    });
    it('--network full reaches it', () => {
      expect(cli(['run', '--network', 'full', '--', ...connect()], { cwd: dir }).status).toBe(0);
    });
    it('--network none (and the default) does not', () => {
      expect(cli(['run', '--network', 'none', '--', ...connect()], { cwd: dir }).status).toBe(3);
      expect(cli(['run', '--', ...connect()], { cwd: dir }).status).toBe(3);
    });
  });

  describe('--tmp', () => {
    let marker: string;
    beforeAll(() => {
      // /tmp itself, not os.tmpdir(): the modes are about the /tmp mount, whatever TMPDIR says.
      marker = path.join('/tmp', `psb-cli-host-tmp-${process.pid}`);
      fs.writeFileSync(marker, 'host\n');
    });
    afterAll(() => fs.rmSync(marker, { force: true }));
    const name = () => path.basename(marker);

    it('private (the default): a fresh, writable /tmp without the host files', () => {
      for (const flags of [[], ['--tmp', 'private']]) {
        const inside = `psb-cli-inside-${process.pid}`;
        const r = cli(['run', ...flags, '--', 'sh', '-c', `test ! -e /tmp/${name()} && touch /tmp/${inside} && echo ok`], { cwd: dir });
        expect(r).toMatchObject({ status: 0, stdout: 'ok\n' });
        expect(fs.existsSync(path.join('/tmp', inside))).toBe(false);
      }
    });

    it('host: the host /tmp, writable', () => {
      const made = path.join('/tmp', `psb-cli-made-${process.pid}`);
      try {
        const r = cli(['run', '--tmp', 'host', '--', 'sh', '-c', `cat /tmp/${name()} && touch ${made}`], { cwd: dir });
        expect(r).toMatchObject({ status: 0, stdout: 'host\n' });
        expect(fs.existsSync(made)).toBe(true);
      } finally {
        fs.rmSync(made, { force: true });
      }
    });

    it('none: /tmp gets no writable mount', () => {
      const made = path.join('/tmp', `psb-cli-none-${process.pid}`);
      const r = cli(['run', '--tmp', 'none', '--', 'touch', made], { cwd: dir });
      expect(r.status).not.toBe(0);
      expect(fs.existsSync(made)).toBe(false);
    });
  });

  describe('environment', () => {
    const secrets = { FOO_TOKEN: 't', AWS_SECRET_ACCESS_KEY: 'a', MY_PASSWORD: 'p', X_API_KEY: 'k', GITHUB_TOKEN: 'g' };
    const envOf = (r: CliResult) => Object.fromEntries(r.stdout.split('\0').filter(Boolean).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));

    it('the default env drops secret-looking variables and keeps the rest', () => {
      const r = cli(['run', '--', '/usr/bin/env', '-0'], { cwd: dir, env: baseEnv({ ...secrets, PLAIN_VAR: 'kept' }) });
      const env = envOf(r);
      expect(env.PLAIN_VAR).toBe('kept');
      expect(env.PATH).toBe(baseEnv().PATH);
      for (const k of Object.keys(secrets)) expect(env[k], k).toBeUndefined();
    });

    it('--keep-env keeps everything', () => {
      const r = cli(['run', '--keep-env', '--', '/usr/bin/env', '-0'], { cwd: dir, env: baseEnv({ ...secrets, PLAIN_VAR: 'kept' }) });
      expect(envOf(r)).toMatchObject({ ...secrets, PLAIN_VAR: 'kept' });
    });

    it('--env sets variables (repeatable, = in values, wins over the inherited value)', () => {
      const r = cli(['run', '--env', 'A=1', '--env', 'B=x=y', '--env', 'PLAIN_VAR=new', '--env', 'FOO_TOKEN=explicit', '--', '/usr/bin/env', '-0'], {
        cwd: dir,
        env: baseEnv({ PLAIN_VAR: 'old', FOO_TOKEN: 'inherited' }),
      });
      expect(envOf(r)).toMatchObject({ A: '1', B: 'x=y', PLAIN_VAR: 'new', FOO_TOKEN: 'explicit' });
    });

    it('--no-sandbox still drops secrets unless --keep-env', () => {
      expect(envOf(cli(['run', '--no-sandbox', '--', '/usr/bin/env', '-0'], { cwd: dir, env: baseEnv(secrets) })).FOO_TOKEN).toBeUndefined();
      expect(envOf(cli(['run', '--no-sandbox', '--keep-env', '--', '/usr/bin/env', '-0'], { cwd: dir, env: baseEnv(secrets) })).FOO_TOKEN).toBe('t');
    });
  });

  it('--timeout kills the command and everything it started (137)', async () => {
    const a = uniqueSleepArg();
    const b = uniqueSleepArg();
    const child = cpSpawn(process.execPath, [CLI, 'run', '--timeout', '3', '--', 'sh', '-c', `sleep ${a} & sleep ${b} & wait`], { cwd: dir, env: baseEnv(), stdio: 'ignore' });
    let found: ProcStat[] = [];
    try {
      await waitFor(() => (found = [...pidsWithArg(a), ...pidsWithArg(b)]).length === 2, 'the grandchildren to start');
      const status = await new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
      expect(status).toBe(137);
      await waitFor(() => found.every((s) => !isRunning(s)), 'the grandchildren to be gone');
    } finally {
      killAll(found);
      child.kill('SIGKILL');
    }
  });

  it('a --timeout expiry says so in one line on stderr', () => {
    const r = cli(['run', '--timeout', '0.5', '--', 'sh', '-c', 'echo started >&2; exec sleep 30'], { cwd: dir });
    expect(r.status).toBe(137);
    expect(r.stderr.trimEnd().split('\n')).toEqual(['started', 'process-sandbox: timed out after 0.5s; the command and everything it started were killed']);
    // Positive control: a command that finishes in time prints nothing of ours.
    const ok = cli(['run', '--timeout', '30', '--', 'sh', '-c', 'echo fine >&2'], { cwd: dir });
    expect(ok).toMatchObject({ status: 0, stderr: 'fine\n' });
  });

  it("a --timeout past Node's timer limit is refused (125) before anything runs; the limit itself is taken", () => {
    // 2147484 s is past 2^31 - 1 ms: Node's setTimeout would fire at once and kill the command.
    const marker = path.join(dir, 'timer-marker');
    for (const t of ['2147484', '2147483.648', 'Infinity']) {
      const r = cli(['run', '--timeout', t, '--', 'sh', '-c', 'touch "$1"', 'sh', marker], { cwd: dir });
      expect(r.status, r.stderr).toBe(125);
      expect(r.stderr).toMatch(/^process-sandbox: --timeout expects a positive number of seconds, at most 2147483 \(about 24\.8 days: Node's timer limit\)\n/);
      expect(fs.existsSync(marker), 'nothing may run').toBe(false);
    }
    const ok = cli(['run', '--timeout', '2147483', '--', 'sh', '-c', 'sleep 1; touch "$1"; echo done', 'sh', marker], { cwd: dir });
    expect(ok).toMatchObject({ status: 0, stdout: 'done\n' });
    expect(fs.existsSync(marker)).toBe(true);
  });

  it('TERM sent to the CLI reaches the command; the CLI exits 143', async () => {
    const child = cpSpawn(process.execPath, [CLI, 'run', '--', 'sh', '-c', 'echo ready; exec sleep 60'], { cwd: dir, env: baseEnv(), stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((r) => child.stdout!.once('data', () => r()));
    // The CLI installs its forwarding handler right after starting the command; wait until the
    // kernel shows TERM as caught (SigCgt) so the test does not race that window.
    const caught = () => {
      const m = /SigCgt:\s+([0-9a-f]+)/.exec(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      return m !== null && ((BigInt(`0x${m[1]}`) >> BigInt(os.constants.signals.SIGTERM - 1)) & 1n) === 1n;
    };
    await waitFor(caught, 'the CLI to catch SIGTERM');
    child.kill('SIGTERM');
    expect(await new Promise((r) => child.on('exit', (code) => r(code)))).toBe(143);
  });

  describe('--json', () => {
    it('prints exit info and the enforcement report as the last stderr line', () => {
      const r = cli(['run', '--json', '--', 'sh', '-c', 'echo out; echo err >&2; exit 3'], { cwd: dir });
      expect(r.status).toBe(3);
      expect(r.stdout).toBe('out\n');
      expect(r.stderr.split('\n')[0]).toBe('err');
      const j = jsonResult(r);
      expect(j).toMatchObject({ code: 3, signal: null, exitStatus: 3, timedOut: false });
      expect(typeof j.durationMs).toBe('number');
      expect(j.enforcement).toMatchObject({ platform: 'linux', sandboxed: true });
      expect(j.enforcement.guarantees).toBeTypeOf('object');
    });

    it('reports a signal death and --timeout', () => {
      const j = jsonResult(cli(['run', '--json', '--timeout', '0.5', '--', 'sleep', '30'], { cwd: dir }));
      expect(j).toMatchObject({ code: null, signal: 'SIGKILL', exitStatus: 137, timedOut: true });
    });

    it('reports a start failure with its code', () => {
      const r = cli(['run', '--json', '--', 'no-such-command-psb'], { cwd: dir });
      expect(r.status).toBe(127);
      expect(jsonResult(r)).toMatchObject({ error: { code: 'ENOT_FOUND' }, exitStatus: 127 });
    });

    it('--json-fd N writes the result to fd N and leaves stderr to the command alone', async () => {
      const out = path.join(dir, `json-fd-${crypto.randomUUID()}.json`);
      const fd = fs.openSync(out, 'w');
      try {
        const child = cpSpawn(process.execPath, [CLI, 'run', '--json-fd', '3', '--', 'sh', '-c', 'echo out; echo err >&2; test -e /proc/self/fd/3 && echo fd3=open || echo fd3=closed; exit 5'], {
          cwd: dir,
          env: baseEnv(),
          stdio: ['ignore', 'pipe', 'pipe', fd],
        });
        let stdout = '';
        let stderr = '';
        child.stdout!.on('data', (b) => (stdout += b));
        child.stderr!.on('data', (b) => (stderr += b));
        const status = await new Promise<number | null>((r) => child.on('close', (code) => r(code)));
        expect(status).toBe(5);
        expect(stderr).toBe('err\n');
        // The command itself never sees fd 3.
        expect(stdout).toBe('out\nfd3=closed\n');
        const j = JSON.parse(fs.readFileSync(out, 'utf8').trim());
        expect(j).toMatchObject({ code: 5, exitStatus: 5, timedOut: false, enforcement: { sandboxed: true } });
      } finally {
        fs.closeSync(fd);
      }
    });

    it('--json-file PATH writes the result to the file; stderr is the command\'s', () => {
      const out = path.join(dir, `json-file-${crypto.randomUUID()}.json`);
      const r = cli(['run', '--json-file', out, '--', 'sh', '-c', 'echo err >&2; exit 4'], { cwd: dir });
      expect(r.status).toBe(4);
      expect(r.stderr).toBe('err\n');
      expect(JSON.parse(fs.readFileSync(out, 'utf8'))).toMatchObject({ code: 4, exitStatus: 4 });
      // A command that writes into the result file itself (the cwd is writable) cannot leave
      // anything beside the result.
      const forged = cli(['run', '--json-file', out, '--', 'sh', '-c', `printf '%04000d\\n{"code":0,"forged":true}\\n' 0 > ${JSON.stringify(out)}; exit 6`], { cwd: dir });
      expect(forged.status).toBe(6);
      const text = fs.readFileSync(out, 'utf8');
      expect(text.trim().split('\n')).toHaveLength(1);
      expect(JSON.parse(text)).toMatchObject({ code: 6, exitStatus: 6 });
      expect(text).not.toContain('forged');
      // A command that swaps the name for its own file: refused (125), and what it left is not ours.
      const swapped = cli(['run', '--json-file', out, '--', 'sh', '-c', `rm -f ${JSON.stringify(out)}; echo '{"code":0}' > ${JSON.stringify(out)}`], { cwd: dir });
      expect(swapped.status).toBe(125);
      expect(swapped.stderr).toMatch(/^process-sandbox: --json-file .* was replaced while the command ran/m);
      const bad = cli(['run', '--json-file', out, '--', 'no-such-command-psb'], { cwd: dir });
      expect(bad.status).toBe(127);
      expect(JSON.parse(fs.readFileSync(out, 'utf8'))).toMatchObject({ error: { code: 'ENOT_FOUND' }, exitStatus: 127 });
    });

    it('--json-fd refuses an fd the caller did not open (Node\'s own), without crashing', () => {
      for (const n of ['3', '4', '5', '7', '9']) {
        const r = cli(['run', '--json-fd', n, '--no-sandbox', '--', 'true'], { cwd: dir });
        expect(r.signal, `--json-fd ${n}`).toBeNull();
        expect(r.status, `--json-fd ${n}: ${r.stderr}`).toBe(125);
        expect(r.stderr).toMatch(new RegExp(`^process-sandbox: --json-fd ${n}: `));
      }
    });

    it('--no-sandbox reports an unsandboxed run and really is unrestricted', () => {
      const other = fixtureDir('psb-cli-nosb-');
      try {
        const r = cli(['run', '--json', '--no-sandbox', '--', 'touch', path.join(other, 'x')], { cwd: dir });
        expect(r.status).toBe(0);
        expect(jsonResult(r).enforcement).toMatchObject({ sandboxed: false, mode: 'none' });
        expect(fs.existsSync(path.join(other, 'x'))).toBe(true);
      } finally {
        fs.rmSync(other, { recursive: true, force: true });
      }
    });
  });

  describe('--mode and --degraded', () => {
    it.skipIf(!canIsolated)('--mode isolated runs isolated', () => {
      const r = cli(['run', '--json', '--mode', 'isolated', '--', 'true'], { cwd: dir });
      expect(r.status).toBe(0);
      expect(jsonResult(r).enforcement.mode).toBe('isolated');
    });

    it.skipIf(!canLandlock)('--mode landlock --degraded runs in Landlock mode and lists the gaps', () => {
      const r = cli(['run', '--json', '--mode', 'landlock', '--degraded', '--', 'true'], { cwd: dir });
      expect(r.status).toBe(0);
      const e = jsonResult(r).enforcement;
      expect(e.mode).toBe('landlock');
      expect(e.gaps.length).toBeGreaterThan(0);
    });

    it('--mode auto is the default', () => {
      const a = jsonResult(cli(['run', '--json', '--', 'true'], { cwd: dir })).enforcement.mode;
      const b = jsonResult(cli(['run', '--json', '--mode', 'auto', '--', 'true'], { cwd: dir })).enforcement.mode;
      expect(a).toBe(report!.defaultMode);
      expect(b).toBe(a);
    });
  });
});

describe.each([
  ['plain', ['--no-sandbox']],
  ['sandboxed', []],
] as const)('stdio streams straight through (%s)', (name, flags) => {
  it.skipIf(name === 'sandboxed' && !defaultIsolated)('200 MB through cat, no loss, CLI peak RSS far below the stream size', { timeout: 300_000 }, async () => {
    const total = 200 * MiB;
    // head stops after exactly `total` bytes, then the command waits so the CLI is still alive
    // when its VmHWM is read; one more line on stdin releases it.
    const child = cpSpawn(process.execPath, [CLI, 'run', ...flags, '--', 'sh', '-c', `head -c ${total}; echo DONE >&2; read line`], {
      cwd: dir,
      env: baseEnv(),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const got = crypto.createHash('sha256');
    let received = 0;
    child.stdout!.on('data', (b: Buffer) => {
      received += b.length;
      got.update(b);
    });
    let stderr = '';
    const done = new Promise<void>((resolve) => child.stderr!.on('data', (b: Buffer) => (stderr += b).includes('DONE') && resolve()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    const sent = crypto.createHash('sha256');
    const block = crypto.randomBytes(MiB);
    for (let i = 0; i < total / MiB; i++) {
      const chunk = Buffer.from(block);
      chunk.writeUInt32LE(i, 0);
      sent.update(chunk);
      if (!child.stdin!.write(chunk)) await new Promise((r) => child.stdin!.once('drain', r));
    }
    await done;
    const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8');
    const hwmKiB = Number(/VmHWM:\s+(\d+) kB/.exec(status)![1]);
    child.stdin!.end('go\n');
    expect(await exited, `CLI stderr: ${stderr}`).toBe(0);
    expect(received).toBe(total);
    expect(got.digest('hex')).toBe(sent.digest('hex'));
    // Node itself needs some tens of MB; buffering the stream would need 200 MB more.
    expect(hwmKiB * 1024, `CLI VmHWM ${hwmKiB} kB`).toBeLessThan(120 * MiB);
  });
});

describe('probe', () => {
  it('prints a human summary', () => {
    const r = cli(['probe']);
    expect(r.status).toBe(canSandbox ? 0 : 1);
    expect(r.stdout).toContain(`platform: ${process.platform}-${process.arch}`);
    expect(r.stdout).toContain('addon: loaded');
    expect(r.stdout).toMatch(/default mode: /);
  });

  it('--json prints the probe report', () => {
    const r = cli(['probe', '--json']);
    expect(r.status).toBe(canSandbox ? 0 : 1);
    const j = JSON.parse(r.stdout);
    expect(j).toMatchObject({ platform: process.platform, arch: process.arch, addonLoaded: true });
    expect(j.defaultMode).toBe(report?.defaultMode ?? null);
    expect(j.features).toBeTypeOf('object');
  });
});
