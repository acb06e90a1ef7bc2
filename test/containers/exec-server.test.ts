/**
 * The exec-server deployed as a container (deploy/exec-server), driven by the real Codex CLI.
 * Run by `npm run test:containers` (scripts/containers/exec-server.sh), which starts its own
 * dockerd and builds the image; elsewhere this file skips, saying so.
 *
 * The server runs in a container with Docker's default seccomp profile (user namespaces refused,
 * so the sandbox is Landlock mode), listening on loopback with a capability token on a root-owned
 * tmpfs mounted read-only. By default as kubernetes.yaml runs it: uid 1000, the token one file of
 * its own, mode 0400, at /run/exec-server (the pod's init container copies it there from the
 * Secret). With PSB_CONTAINERS_TOKEN_LAYOUT=kubelet, as root in the container (every capability
 * dropped) reading a Secret volume as the kubelet lays it out: token -> ..data/token,
 * ..data -> ..2026_…, the files root's, mode 0400 (defaultMode), the tmpfs 1777. Codex sends no credential to an exec-server URL (Codex 0.171), so it talks to
 * an authenticating relay on loopback that adds the bearer token, as docs/exec-server.md
 * recommends. A stand-in model answers with one tool call that writes inside the workspace and
 * outside it; checked from outside: the inside file landed, the outside one did not although
 * the server's user can write there unsandboxed, the command ran under a seccomp filter of ours (one more
 * than the server's own),
 * and a client without the token is refused before any connection exists.
 *
 * The container uses the host's network namespace (--network host): the test daemon has no
 * bridge (no iptables rules on the test host), and the listener stays on 127.0.0.1.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';

import { REFERENCE_BIN, referenceSkip, standInModel } from '../exec-server/client';

const IMAGE = process.env.PSB_CONTAINERS_EXEC_IMAGE;
const DOCKER = process.env.PSB_DOCKER ?? 'docker';
const LAYOUT = process.env.PSB_CONTAINERS_TOKEN_LAYOUT === 'kubelet' ? 'kubelet' : 'plain';
/** The server's uid in the container: kubernetes.yaml's, or root reading the Secret volume. */
const UID = LAYOUT === 'kubelet' ? 0 : 1000;
const TOKEN_DIR = LAYOUT === 'kubelet' ? '/var/run/secrets/exec-server' : '/run/exec-server';
const skip = !IMAGE
  ? 'PSB_CONTAINERS_EXEC_IMAGE is unset: run by npm run test:containers (its own dockerd and image)'
  : process.getuid?.() !== 0
    ? 'needs root (a tmpfs for the token, files owned by uid 1000)'
    : referenceSkip;
if (skip) console.warn(`[containers/exec-server] SKIPPING: ${skip}`);

function docker(args: string[]): string {
  return execFileSync(DOCKER, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Status code a WebSocket handshake to `url` gets with these headers (101 when it opens). */
function handshake(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => {
      ws.close();
      resolve(101);
    });
    ws.once('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
      ws.terminate();
    });
    ws.once('error', (e) => reject(e));
  });
}

/** A loopback relay that adds `Authorization: Bearer <token>` and forwards frames both ways. */
function authRelay(upstream: string, token: string) {
  const server = http.createServer((_req, res) => {
    res.writeHead(404);
    res.end();
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    const up = new WebSocket(upstream, { headers: { Authorization: `Bearer ${token}` } });
    up.once('error', () => socket.destroy());
    up.once('open', () => {
      wss.handleUpgrade(req, socket, head, (client) => {
        client.on('message', (d, isBinary) => up.send(d, { binary: isBinary }));
        up.on('message', (d, isBinary) => client.send(d, { binary: isBinary }));
        client.on('close', () => up.close());
        up.on('close', () => client.close());
      });
    });
  });
  return server;
}

describe.skipIf(skip !== undefined)(`the exec-server container (Docker, token layout: ${LAYOUT})`, () => {
  // Made in beforeAll: a skipped describe still runs this body (to collect its tests).
  const base = `/var/tmp/psb-exec-container-${process.pid}`;
  const ws = path.join(base, 'ws');
  const out = path.join(base, 'out');
  const secrets = path.join(base, 'secrets');
  const home = path.join(base, 'codex-home');
  const token = `psb-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
  const name = `psb-exec-server-${process.pid}`;
  let url = '';
  let mounted = false;

  beforeAll(async () => {
    fs.rmSync(base, { recursive: true, force: true });
    fs.mkdirSync(base, { mode: 0o700 });
    for (const d of [ws, out, home]) fs.mkdirSync(d, { recursive: true });
    fs.chmodSync(base, 0o755);
    // The workspace and the outside directory both belong to the server's uid: a refused write
    // outside is the sandbox's, not the file system's.
    for (const d of [ws, out]) {
      fs.chownSync(d, 1000, 1000);
      // Root without capabilities (the kubelet layout's server) writes by the mode bits alone.
      if (UID !== 1000) fs.chmodSync(d, 0o777);
    }
    // A root-owned tmpfs, mounted read-only into the container.
    fs.mkdirSync(secrets);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'psb-secret', secrets]);
    mounted = true;
    if (LAYOUT === 'kubelet') {
      // What the kubelet writes for a Secret volume with defaultMode 0400: a timestamped
      // directory, ..data pointing at it, one link per key, every file root's, the tmpfs 1777.
      const stamp = '..2026_12_04_21_00_00.000000001';
      fs.chmodSync(secrets, 0o1777);
      fs.mkdirSync(path.join(secrets, stamp), { mode: 0o755 });
      fs.writeFileSync(path.join(secrets, stamp, 'token'), token, { mode: 0o400 });
      fs.chmodSync(path.join(secrets, stamp, 'token'), 0o400);
      fs.symlinkSync(stamp, path.join(secrets, '..data'));
      fs.symlinkSync('..data/token', path.join(secrets, 'token'));
    } else {
      // What the pod's init container leaves in its memory-backed volume (kubernetes.yaml).
      fs.writeFileSync(path.join(secrets, 'token'), token);
      fs.chownSync(path.join(secrets, 'token'), 1000, 1000);
      fs.chmodSync(path.join(secrets, 'token'), 0o400);
    }
    spawnSync(DOCKER, ['rm', '-f', name]);
    // The image's defaults but for the address (loopback, port 0) and the workspace, which is
    // mounted at the path Codex names on this host (Codex sends its own cwd).
    docker([
      'run', '-d', '--name', name, '--network', 'host',
      // As kubernetes.yaml's container: read-only root, a writable /tmp, no capabilities, no
      // privilege escalation (no_new_privs); the seccomp profile is the runtime's default.
      '--read-only', '--tmpfs', '/tmp:rw,exec,mode=1777', '--cap-drop', 'ALL', '--security-opt', 'no-new-privileges',
      '--user', `${UID}:${UID}`,
      '-v', `${ws}:${ws}`, '-v', `${out}:${out}`, '-v', `${secrets}:${TOKEN_DIR}:ro`,
      // The host's choice of where Landlock mode's supervision runs (scripts/containers/run.sh).
      ...(process.env.PSB_SUPERVISION ? ['-e', `PSB_SUPERVISION=${process.env.PSB_SUPERVISION}`] : []),
      IMAGE!,
      '--listen', 'ws://127.0.0.1:0', '--ws-auth', 'capability-token', '--ws-token-file', `${TOKEN_DIR}/token`,
      '--require-sandbox', '--floor-write', ws,
    ]);
    // The URL listened on is the server's first line on stdout.
    for (let i = 0; i < 200 && !url; i++) {
      const logs = spawnSync(DOCKER, ['logs', name], { encoding: 'utf8' });
      url = /ws:\/\/127\.0\.0\.1:\d+/.exec(logs.stdout)?.[0] ?? '';
      if (!url) {
        const state = docker(['inspect', '-f', '{{.State.Running}}', name]).trim();
        if (state !== 'true') throw new Error(`the exec-server container exited: ${logs.stdout}${logs.stderr}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    if (!url) throw new Error(`the exec-server container printed no URL: ${spawnSync(DOCKER, ['logs', name], { encoding: 'utf8' }).stderr}`);
  });

  afterAll(() => {
    const logs = spawnSync(DOCKER, ['logs', name], { encoding: 'utf8' });
    console.log(`[containers/exec-server] server log:\n${logs.stdout}${logs.stderr}`);
    // Its processes after the tool call: the supervision process among them (not with PSB_SUPERVISION=thread).
    console.log(`[containers/exec-server] processes:\n${spawnSync(DOCKER, ['exec', name, 'ps', '-eo', 'pid,ppid,args'], { encoding: 'utf8' }).stdout}`);
    spawnSync(DOCKER, ['rm', '-f', name]);
    if (mounted) spawnSync('umount', [secrets]);
    fs.rmSync(base, { recursive: true, force: true });
  });

  it(`runs as uid ${UID} under the default seccomp profile, without capabilities`, () => {
    const cfg = JSON.parse(docker(['inspect', name]))[0] as { Config: { User: string }; HostConfig: { Privileged: boolean; SecurityOpt: string[] | null; CapAdd: string[] | null } };
    expect(cfg.Config.User).toBe(`${UID}:${UID}`);
    expect(cfg.HostConfig.Privileged).toBe(false);
    // The default seccomp profile: no seccomp= (nor apparmor=) option.
    expect(cfg.HostConfig.SecurityOpt ?? []).toEqual(['no-new-privileges']);
    expect(cfg.HostConfig.CapAdd ?? []).toEqual([]);
    const st = docker(['exec', name, 'cat', '/proc/1/status']);
    expect(st).toMatch(/^Seccomp:\s+2$/m);
    expect(st).toMatch(/^CapEff:\s+0+$/m);
  });

  it('refuses a client without the token, or with another, before any connection exists', async () => {
    expect(await handshake(url, {})).toBe(401);
    expect(await handshake(url, { Authorization: 'Bearer not-the-token-at-all' })).toBe(401);
    // Positive control: the token opens it.
    expect(await handshake(url, { Authorization: `Bearer ${token}` })).toBe(101);
  });

  it('the Codex CLI runs a tool call through it: the write inside the workspace lands, the one outside does not', async () => {
    const inside = path.join(ws, 'inside.txt');
    const outside = path.join(out, 'outside.txt');
    // Control: the server's user can write the outside directory unsandboxed, in the same container.
    docker(['exec', '--user', `${UID}:${UID}`, name, 'sh', '-c', `printf x > ${out}/control && rm ${out}/control`]);
    const command = `printf in > ${inside}; echo in=$?; printf out > ${outside}; echo out=$?; grep -E '^(NoNewPrivs|Seccomp_filters):' /proc/self/status`;
    const model = standInModel(command);
    await new Promise<void>((r) => model.server.listen(0, '127.0.0.1', r));
    const relay = authRelay(url, token);
    await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
    fs.writeFileSync(
      path.join(home, 'config.toml'),
      [
        'model = "stand-in"',
        'model_provider = "standin"',
        '[model_providers.standin]',
        'name = "standin"',
        `base_url = "http://127.0.0.1:${(model.server.address() as { port: number }).port}/v1"`,
        'wire_api = "responses"',
        'env_key = "STANDIN_KEY"',
        'request_max_retries = 0',
        'stream_max_retries = 0',
        // The floor bounds writes to the workspace: Codex must not ask for /tmp and $TMPDIR.
        '[sandbox_workspace_write]',
        'exclude_slash_tmp = true',
        'exclude_tmpdir_env_var = true',
        '',
      ].join('\n'),
    );
    try {
      const child = spawn(REFERENCE_BIN, ['exec', '--skip-git-repo-check', '--sandbox', 'workspace-write', '-C', ws, 'write the two files'], {
        cwd: ws,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          HOME: home,
          CODEX_HOME: home,
          STANDIN_KEY: 'stand-in-key',
          CODEX_EXEC_SERVER_URL: `ws://127.0.0.1:${(relay.address() as { port: number }).port}`,
        },
      });
      let log = '';
      child.stdout!.on('data', (d: Buffer) => (log += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
      const code = await new Promise<number | null>((resolve) => {
        const t = setTimeout(() => child.kill('SIGKILL'), 120_000);
        child.once('exit', (c) => {
          clearTimeout(t);
          resolve(c);
        });
      });
      expect(code, log).toBe(0);
      // What the tool call printed went back to the model in the second turn.
      const output = JSON.stringify(model.bodies.flatMap((b) => b.input).find((i) => i.type === 'function_call_output'));
      expect(output, log).toMatch(/in=0/);
      expect(output).toMatch(/out=[1-9]/);
      // Under a filter of ours: the server itself has one (Docker's profile), the command more.
      const serverFilters = Number(/^Seccomp_filters:\s+(\d+)$/m.exec(docker(['exec', name, 'cat', '/proc/1/status']))?.[1]);
      expect(serverFilters).toBeGreaterThan(0);
      expect(Number(/Seccomp_filters:\\t(\d+)/.exec(output)?.[1]), output).toBeGreaterThan(serverFilters);
      expect(output).toMatch(/NoNewPrivs:\\t1/);
      // Checked from outside: the inside write landed, the outside one did not.
      expect(fs.readFileSync(inside, 'utf8')).toBe('in');
      expect(fs.existsSync(outside)).toBe(false);
      expect(fs.readdirSync(out)).toEqual([]);
    } finally {
      await new Promise((r) => relay.close(r));
      await new Promise((r) => model.server.close(r));
    }
  });
});
