/**
 * WebSocket auth of the exec-server, from outside: the CLI (dist/cli.js) is started as a separate
 * process and driven over real sockets.
 *
 * - Codex 0.171's two modes with its flags: every refusal (status and text) is compared with the
 *   reference binary's, side by side, for the same tokens.
 * - Each refusal is paired with the positive control (the right credential connects), and a
 *   refused client's process/start is checked not to have run: the file its command would write
 *   does not exist, while the control's does.
 * - What we add: no auth refuses to start (unless the unsafe opt-out, and never off loopback), a
 *   browser Origin is refused unless allowed, a credential file others can read is refused.
 */
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { verifyJwt, wsAuthFromFlags } from '../../lib/exec-server/ws-auth';
import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { OUR_CLI, referenceSkip, startWsServer, wsAttempt, type Server, type WsOutcome } from './client';

const scene = makeScene('exec-ws-auth');
afterAll(() => scene.cleanup());

const TOKEN = 'a-capability-token-0123456789';
const tokenFile = path.join(scene.root, 'token');
fs.writeFileSync(tokenFile, TOKEN + '\n', { mode: 0o600 });
const SECRET = crypto.randomBytes(32).toString('hex');
const secretFile = path.join(scene.root, 'secret');
fs.writeFileSync(secretFile, SECRET + '\n', { mode: 0o600 });

const b64u = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
function jwt(claims: Record<string, unknown>, header: Record<string, unknown> = { alg: 'HS256', typ: 'JWT' }, key = SECRET): string {
  const s = `${b64u(header)}.${b64u(claims)}`;
  return `${s}.${crypto.createHmac('sha256', key).update(s).digest('base64url')}`;
}

let markerN = 0;
/** A process/start whose command writes a fresh marker file; returns both. */
function markedStart(): { marker: string; params: object } {
  const marker = path.join(scene.ws, `ran-${process.pid}-${markerN++}`);
  return {
    marker,
    params: { processId: 'p', argv: ['sh', '-c', `echo ran > ${marker}`], cwd: 'file://' + scene.ws, env: { PATH: '/usr/bin:/bin' }, tty: false, pipeStdin: false },
  };
}

/** One attempt with a process/start behind it, plus whether its command ran (seen on disk). */
async function attempt(url: string, headers: Record<string, string>): Promise<{ outcome: WsOutcome; ran: boolean }> {
  const { marker, params } = markedStart();
  const outcome = await wsAttempt(url, headers, params);
  return { outcome, ran: fs.existsSync(marker) };
}

function runCli(args: string[]): { status: number | null; stderr: string; stdout: string } {
  const r = spawnSync(process.execPath, [OUR_CLI, 'exec-server', ...args], { encoding: 'utf8', timeout: 20_000 });
  return { status: r.status, stderr: r.stderr, stdout: r.stdout };
}

describe('exec-server ws auth: pure checks', () => {
  const now = 1_000_000;
  const secret = Buffer.from(SECRET);
  const o = { issuer: 'iss1', audience: 'aud1', skew: 10, now };
  it('a good HS256 token passes; each fault gets its own text', () => {
    expect(verifyJwt(jwt({ exp: now + 60, iss: 'iss1', aud: 'aud1' }), secret, o)).toBeNull();
    expect(verifyJwt(jwt({ exp: now + 60, iss: 'iss1', aud: ['x', 'aud1'] }), secret, o)).toBeNull();
    expect(verifyJwt(jwt({ exp: now - 5, iss: 'iss1', aud: 'aud1' }), secret, o)).toBeNull(); // within the skew
    expect(verifyJwt(jwt({ exp: now - 30, iss: 'iss1', aud: 'aud1' }), secret, o)).toBe('expired websocket jwt');
    expect(verifyJwt(jwt({ exp: now + 60, nbf: now + 60, iss: 'iss1', aud: 'aud1' }), secret, o)).toBe('websocket jwt is not valid yet');
    expect(verifyJwt(jwt({ exp: now + 60, iss: 'x', aud: 'aud1' }), secret, o)).toBe('websocket jwt issuer mismatch');
    expect(verifyJwt(jwt({ exp: now + 60, iss: 'iss1' }), secret, o)).toBe('websocket jwt audience mismatch');
    for (const bad of [
      jwt({ iss: 'iss1', aud: 'aud1' }), // no exp
      jwt({ exp: String(now + 60), iss: 'iss1', aud: 'aud1' }),
      jwt({ exp: now + 60.5, iss: 'iss1', aud: 'aud1' }),
      jwt({ exp: now + 60, iss: 'iss1', aud: 'aud1' }, undefined, 'another-key'),
      `${b64u({ alg: 'none' })}.${b64u({ exp: now + 60 })}.`,
      jwt({ exp: now + 60 }, { alg: 'HS512' }),
      'abc',
    ]) {
      expect(verifyJwt(bad, secret, o)).toBe('invalid websocket jwt');
    }
  });

  it('flag combinations are refused in Codex words', () => {
    expect(() => wsAuthFromFlags({ wsTokenFile: '/x' })).toThrow('websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`');
    expect(() => wsAuthFromFlags({ wsAuth: 'capability-token' })).toThrow('`--ws-token-file` or `--ws-token-sha256` is required');
    expect(() => wsAuthFromFlags({ wsAuth: 'capability-token', wsTokenFile: '/x', wsTokenSha256: 'a'.repeat(64) })).toThrow('mutually exclusive');
    expect(() => wsAuthFromFlags({ wsAuth: 'capability-token', wsTokenSha256: 'abc' })).toThrow('--ws-token-sha256 must be a 64-character hex SHA-256 digest');
    expect(() => wsAuthFromFlags({ wsAuth: 'capability-token', wsTokenFile: '/x', wsIssuer: 'i' })).toThrow('require `--ws-auth signed-bearer-token`');
    expect(() => wsAuthFromFlags({ wsAuth: 'signed-bearer-token' })).toThrow('`--ws-shared-secret-file` is required');
    expect(() => wsAuthFromFlags({ wsAuth: 'signed-bearer-token', wsSharedSecretFile: '/s', wsTokenFile: '/x' })).toThrow('require `--ws-auth capability-token`');
    expect(() => wsAuthFromFlags({ wsAuth: 'bogus' })).toThrow(/possible values: capability-token, signed-bearer-token/);
    expect(wsAuthFromFlags({})).toBeUndefined();
  });
});

describe.skipIf(!caps.linux)('exec-server ws auth: the CLI, from outside', () => {
  it('no auth on ws: refused to start (nothing listens); the unsafe opt-out starts on loopback only', async () => {
    const r = runCli(['--listen', 'ws://127.0.0.1:0']);
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/without authentication lets every local user run commands/);
    expect(r.stderr).toMatch(/--ws-dangerously-allow-unauthenticated/);
    const off = runCli(['--listen', 'ws://0.0.0.0:0', '--ws-dangerously-allow-unauthenticated']);
    expect(off.status).not.toBe(0);
    expect(off.stderr).toMatch(/on 0\.0\.0\.0 \(not loopback\) needs authentication/);
    // Positive control: the opt-out really starts a server a client can use, and says what it
    // risks; an unsandboxed command does not run there (the sandbox floor, sandbox-floor.test.ts,
    // where a sandboxed one runs).
    const srv = await startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', '--ws-dangerously-allow-unauthenticated']);
    try {
      expect(await wsAttempt(srv.url, {})).toEqual({ initialized: 'string' });
      expect(await attempt(srv.url, {})).toMatchObject({ outcome: { initialized: 'string', started: { code: -32602 } }, ran: false });
      expect(srv.stderr()).toMatch(/accepts unauthenticated clients/);
    } finally {
      await srv.stop();
    }
  });

  it('non-loopback with auth starts (auth, not the address, is what is required)', async () => {
    const srv = await startWsServer('ours', ['--listen', 'ws://0.0.0.0:0', '--ws-auth', 'capability-token', '--ws-token-file', tokenFile]);
    try {
      const url = srv.url.replace('0.0.0.0', '127.0.0.1');
      expect(await attempt(url, {})).toMatchObject({ outcome: { http: 401 }, ran: false });
      expect(await attempt(url, { Authorization: `Bearer ${TOKEN}` })).toMatchObject({ ran: true });
    } finally {
      await srv.stop();
    }
  });

  it('a credential file group or others can read is refused; mode 600 starts', async () => {
    for (const [flag, file, mode] of [
      ['--ws-token-file', tokenFile, 0o644],
      ['--ws-token-file', tokenFile, 0o640],
      ['--ws-shared-secret-file', secretFile, 0o604],
    ] as const) {
      const copy = path.join(scene.root, `loose-${mode.toString(8)}`);
      fs.copyFileSync(file, copy);
      fs.chmodSync(copy, mode);
      const mode_ = flag === '--ws-token-file' ? 'capability-token' : 'signed-bearer-token';
      const r = runCli(['--listen', 'ws://127.0.0.1:0', '--ws-auth', mode_, flag, copy]);
      expect(r.status).not.toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(`is accessible by group or others (mode ${mode.toString(8)}); run chmod 600 ${copy}`);
      fs.chmodSync(copy, 0o600);
      const srv = await startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', '--ws-auth', mode_, flag, copy]);
      await srv.stop();
    }
    const short = path.join(scene.root, 'short-token');
    fs.writeFileSync(short, 'abc', { mode: 0o600 });
    expect(runCli(['--listen', 'ws://127.0.0.1:0', '--ws-auth', 'capability-token', '--ws-token-file', short]).stderr).toMatch(/too short/);
  });

  it.skipIf(!caps.root)(`a credential file owned by another user is refused${caps.root ? '' : ' (skipped: needs root to chown)'}`, () => {
    const other = path.join(scene.root, 'other-owner');
    fs.copyFileSync(tokenFile, other);
    fs.chmodSync(other, 0o600);
    fs.chownSync(other, 65534, 65534);
    const r = runCli(['--listen', 'ws://127.0.0.1:0', '--ws-auth', 'capability-token', '--ws-token-file', other]);
    expect(r.stderr).toMatch(/is owned by uid 65534, not by this server's user/);
  });

  describe('the credential file and the directories holding it', () => {
    const capArgs = (file: string) => ['--listen', 'ws://127.0.0.1:0', '--ws-auth', 'capability-token', '--ws-token-file', file];
    /** A token file in a fresh directory of this mode (under the scene, mode 755). */
    const tokenIn = (name: string, dirMode: number): string => {
      const dir = path.join(scene.root, name);
      fs.mkdirSync(dir);
      fs.chmodSync(dir, dirMode);
      const f = path.join(dir, 'token');
      fs.writeFileSync(f, TOKEN + '\n', { mode: 0o600 });
      return f;
    };
    /** A refusal to start: non-zero exit, nothing printed on stdout (no URL: nothing listens). */
    const refusedToStart = (file: string, why: string | RegExp) => {
      const r = runCli(capArgs(file));
      expect(r.status, r.stderr).not.toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(why);
    };
    /** Positive control: the server starts with this file, and a client holding the token runs a command. */
    const startsAndRuns = async (file: string) => {
      const srv = await startWsServer('ours', capArgs(file));
      try {
        expect(await attempt(srv.url, { Authorization: `Bearer ${TOKEN}` })).toEqual({ outcome: { initialized: 'string', started: 'closed' }, ran: true });
      } finally {
        await srv.stop();
      }
    };

    it('a FIFO in the token file\'s place is refused at once (the start does not wait for a writer)', async () => {
      const good = tokenIn('fifo-dir', 0o700);
      const fifo = path.join(path.dirname(good), 'fifo');
      expect(spawnSync('mkfifo', ['-m', '600', fifo]).status).toBe(0);
      refusedToStart(fifo, `websocket auth secret ${fifo} is not a regular file`);
      await startsAndRuns(good);
    });

    /**
     * A Secret volume as the kubelet lays it out: the volume's root (a tmpfs, mode 1777, root's),
     * a timestamped directory (0755) holding the files (defaultMode, 0644 unless the volume says
     * otherwise), `..data` linking to it and one link per key through `..data`, all relative.
     * Here owned by whoever runs the test (root: exactly the kubelet's; psbtest: the server's own).
     */
    const secretVolume = (name: string, fileMode: number): { dir: string; link: string; file: string } => {
      const dir = path.join(scene.root, name);
      fs.mkdirSync(dir);
      fs.chmodSync(dir, 0o1777);
      const ts = '..2026_12_04_21_00_00.123456789';
      fs.mkdirSync(path.join(dir, ts));
      fs.chmodSync(path.join(dir, ts), 0o755);
      const file = path.join(dir, ts, 'token');
      fs.writeFileSync(file, TOKEN);
      fs.chmodSync(file, fileMode);
      fs.symlinkSync(ts, path.join(dir, '..data'));
      fs.symlinkSync('..data/token', path.join(dir, 'token'));
      return { dir, link: path.join(dir, 'token'), file };
    };

    it('a Kubernetes Secret volume (token -> ..data/token -> ..<timestamp>/token) starts at defaultMode 0400; its default 0644 is refused, naming the fix', async () => {
      const v = secretVolume('k8s-secret', 0o400);
      await startsAndRuns(v.link);
      const loose = secretVolume('k8s-secret-0644', 0o644);
      refusedToStart(
        loose.link,
        `websocket auth secret ${loose.link} (through symbolic links: ${loose.file}) is accessible by group or others (mode 644); run chmod 600 ${loose.file} (a Kubernetes Secret volume: set defaultMode: 0400)`,
      );
      fs.chmodSync(loose.file, 0o400); // control: the same volume once the mode is right
      await startsAndRuns(loose.link);
    });

    it('a link chain to a world-writable target, a looping chain and a dangling link are refused; a plain symlink to a good file starts', async () => {
      const v = secretVolume('k8s-writable', 0o606);
      refusedToStart(v.link, `is accessible by group or others (mode 606)`);
      fs.chmodSync(v.file, 0o600);
      await startsAndRuns(v.link);
      const good = tokenIn('link-dir', 0o700);
      const link = path.join(path.dirname(good), 'link');
      fs.symlinkSync(good, link);
      await startsAndRuns(link);
      const loop = path.join(path.dirname(good), 'loop');
      fs.symlinkSync('loop', loop);
      refusedToStart(loop, /more than 40 symbolic links on the way/);
      const dangling = path.join(path.dirname(good), 'dangling');
      fs.symlinkSync('missing', dangling);
      refusedToStart(dangling, /failed to read websocket auth secret .*ENOENT/);
    });

    it('a link in a directory others can write (not sticky) is refused, though its target sits in a private one; closed, it starts', async () => {
      const good = tokenIn('link-target-private', 0o700);
      const open = path.join(scene.root, 'link-in-open-dir');
      fs.mkdirSync(open);
      fs.chmodSync(open, 0o777);
      const link = path.join(open, 'token');
      fs.symlinkSync(good, link);
      refusedToStart(
        link,
        `the directory ${open} holding a symbolic link on the way to websocket auth secret ${link} is writable by group or others (mode 777)`,
      );
      // The volume's own root is 1777 like the kubelet's tmpfs: sticky passes; 0777 does not (it
      // is above the file's directory too, so that check names it first).
      const v = secretVolume('k8s-open-root', 0o400);
      fs.chmodSync(v.dir, 0o777);
      refusedToStart(v.link, `the directory ${v.dir} holding websocket auth secret ${v.link} is writable by group or others (mode 777)`);
      fs.chmodSync(open, 0o755);
      await startsAndRuns(link);
      fs.chmodSync(v.dir, 0o1777);
      await startsAndRuns(v.link);
    });

    it.skipIf(!caps.root)(`a link to a file another (non-root) user owns, or a link another user made in a sticky directory, is refused${caps.root ? '' : ' (skipped: needs root to chown)'}`, async () => {
      const v = secretVolume('k8s-other-file', 0o400);
      fs.chownSync(v.file, 65534, 65534);
      refusedToStart(v.link, `websocket auth secret ${v.link} (through symbolic links: ${v.file}) is owned by uid 65534, not by this server's user (uid 0) or root`);
      fs.chownSync(v.file, 0, 0);
      await startsAndRuns(v.link);
      // The volume's root is sticky and world-writable: another user may add a link there, and
      // pointing the flag at it would let them pick the file (as protected_symlinks refuses).
      const w = secretVolume('k8s-other-link', 0o400);
      fs.lchownSync(path.join(w.dir, '..data'), 65534, 65534);
      refusedToStart(w.link, `the symbolic link ${path.join(w.dir, '..data')} on the way to it is owned by uid 65534, not by this server's user (uid 0) or root`);
      fs.lchownSync(path.join(w.dir, '..data'), 0, 0);
      await startsAndRuns(w.link);
    });

    it('a directory group or others can write is refused (here or above); a sticky 1777 one and a 700 one start', async () => {
      for (const mode of [0o770, 0o775, 0o757]) {
        const f = tokenIn(`loose-dir-${mode.toString(8)}`, mode);
        refusedToStart(f, `the directory ${path.dirname(f)} holding websocket auth secret ${f} is writable by group or others (mode ${mode.toString(8)})`);
        // Control: the same file starts once the directory is closed.
        fs.chmodSync(path.dirname(f), 0o755);
        await startsAndRuns(f);
      }
      // A writable directory above the one holding the file can rename that one away.
      const above = path.join(scene.root, 'loose-above');
      fs.mkdirSync(above);
      fs.chmodSync(above, 0o777);
      const inner = path.join(above, 'inner');
      fs.mkdirSync(inner, { mode: 0o700 });
      const deep = path.join(inner, 'token');
      fs.writeFileSync(deep, TOKEN, { mode: 0o600 });
      refusedToStart(deep, `the directory ${above} holding websocket auth secret ${deep} is writable by group or others (mode 777)`);
      await startsAndRuns(tokenIn('sticky-dir', 0o1777));
      await startsAndRuns(tokenIn('private-dir', 0o700));
    });

    it.skipIf(!caps.root)(`a directory owned by another user is refused${caps.root ? '' : ' (skipped: needs root to chown)'}`, async () => {
      const f = tokenIn('other-owner-dir', 0o755);
      fs.chownSync(path.dirname(f), 65534, 65534);
      refusedToStart(f, `the directory ${path.dirname(f)} holding websocket auth secret ${f} is owned by uid 65534`);
      fs.chownSync(path.dirname(f), 0, 0);
      await startsAndRuns(f);
    });
  });

  it('a browser Origin is refused with 403 (even with the right token) unless --ws-allow-origin names it', async () => {
    const args = ['--listen', 'ws://127.0.0.1:0', '--ws-auth', 'capability-token', '--ws-token-file', tokenFile];
    const srv = await startWsServer('ours', [...args, '--ws-allow-origin', 'http://allowed.example']);
    try {
      const auth = { Authorization: `Bearer ${TOKEN}` };
      expect(await attempt(srv.url, { ...auth, Origin: 'http://evil.example' })).toEqual({ outcome: { http: 403, body: '' }, ran: false });
      expect(await attempt(srv.url, { ...auth, Origin: 'http://127.0.0.1' })).toEqual({ outcome: { http: 403, body: '' }, ran: false });
      // The allowed origin still needs the token.
      expect(await attempt(srv.url, { Origin: 'http://allowed.example' })).toMatchObject({ outcome: { http: 401 }, ran: false });
      expect(await attempt(srv.url, { ...auth, Origin: 'http://allowed.example' })).toEqual({ outcome: { initialized: 'string', started: 'closed' }, ran: true });
    } finally {
      await srv.stop();
    }
  });
});

describe.skipIf(!caps.linux)('exec-server ws auth: same refusals as the reference, and nothing runs', () => {
  const sha = crypto.createHash('sha256').update(TOKEN).digest('hex');
  const now = () => Math.floor(Date.now() / 1000);
  const modes: Record<string, { args: string[]; cases: () => Record<string, Record<string, string>> }> = {
    'capability-token (file)': {
      args: ['--ws-auth', 'capability-token', '--ws-token-file', tokenFile],
      cases: () => ({
        none: {},
        wrong: { Authorization: 'Bearer not-the-token-0123456789' },
        basic: { Authorization: `Basic ${TOKEN}` },
        empty: { Authorization: 'Bearer   ' },
        browser: { Authorization: `Bearer ${TOKEN}`, Origin: 'http://evil.example' },
        right: { Authorization: `Bearer ${TOKEN}` },
        rightLowercase: { Authorization: `bearer ${TOKEN}` },
      }),
    },
    'capability-token (sha256)': {
      args: ['--ws-auth', 'capability-token', '--ws-token-sha256', sha],
      cases: () => ({ wrong: { Authorization: 'Bearer nope-0123456789abcdef' }, right: { Authorization: `Bearer ${TOKEN}` } }),
    },
    'signed-bearer-token': {
      args: ['--ws-auth', 'signed-bearer-token', '--ws-shared-secret-file', secretFile, '--ws-issuer', 'iss1', '--ws-audience', 'aud1', '--ws-max-clock-skew-seconds', '10'],
      cases: () => ({
        none: {},
        expired: { Authorization: `Bearer ${jwt({ exp: now() - 60, iss: 'iss1', aud: 'aud1' })}` },
        notYet: { Authorization: `Bearer ${jwt({ exp: now() + 600, nbf: now() + 300, iss: 'iss1', aud: 'aud1' })}` },
        issuer: { Authorization: `Bearer ${jwt({ exp: now() + 600, iss: 'other', aud: 'aud1' })}` },
        audience: { Authorization: `Bearer ${jwt({ exp: now() + 600, iss: 'iss1', aud: 'other' })}` },
        badSignature: { Authorization: `Bearer ${jwt({ exp: now() + 600, iss: 'iss1', aud: 'aud1' }, undefined, 'x'.repeat(40))}` },
        algNone: { Authorization: `Bearer ${b64u({ alg: 'none' })}.${b64u({ exp: now() + 600, iss: 'iss1', aud: 'aud1' })}.` },
        noExp: { Authorization: `Bearer ${jwt({ iss: 'iss1', aud: 'aud1' })}` },
        right: { Authorization: `Bearer ${jwt({ exp: now() + 600, iss: 'iss1', aud: ['aud1', 'x'] })}` },
      }),
    },
  };
  for (const [name, m] of Object.entries(modes)) {
    it(`${name}: each refusal is the reference's; refused clients run nothing, the right credential runs${referenceSkip ? ` (reference unavailable: ${referenceSkip}; ours only)` : ''}`, async () => {
      const run = async (server: Server) => {
        const srv = await startWsServer(server, ['--listen', 'ws://127.0.0.1:0', ...m.args]);
        try {
          const out: Record<string, unknown> = {};
          for (const [k, headers] of Object.entries(m.cases())) out[k] = await attempt(srv.url, headers);
          return out;
        } finally {
          await srv.stop();
        }
      };
      const ours = await run('ours');
      for (const [k, v] of Object.entries(ours)) {
        const ok = k.startsWith('right');
        expect(v, k).toMatchObject(ok ? { outcome: { initialized: 'string', started: 'closed' }, ran: true } : { ran: false });
      }
      if (referenceSkip === undefined) expect(ours).toEqual(await run('reference'));
    });
  }
});
