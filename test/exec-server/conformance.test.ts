/**
 * Conformance: the same scripted sessions against the reference (`codex exec-server --listen
 * stdio`, @openai/codex@0.171.0, a devDependency) and against ours, compared as normalised
 * transcripts: output per stream, exit codes, error codes and texts, fs results and sandbox
 * outcomes. What differs by nature (session ids, timestamps, the order in which an exit and the
 * last output race) is normalised away; nothing else is.
 *
 * The reference's transcripts are recorded in fixtures/ (RECORD_FIXTURES=1 rewrites them); where
 * the reference binary cannot run, ours is compared with the recorded transcript instead.
 */
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { InterceptionCa } from '../../lib/network';

import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';

import { b64, Client, norm, pidsWith, referenceSkip, startWsServer, workspaceWrite, wsAttempt, type Server, type WsOutcome } from './client';

const FIXTURES = path.join(__dirname, 'fixtures');
const scene = makeScene('exec-conf');
afterAll(() => scene.cleanup());

const WS = scene.ws;
const OUT = scene.out;
const uri = (p: string) => 'file://' + p;
const SH_ENV = { PATH: '/usr/bin:/bin' };

function start(processId: string, argv: string[], extra: Record<string, unknown> = {}) {
  return { processId, argv, cwd: uri(WS), env: SH_ENV, tty: false, pipeStdin: false, ...extra };
}

type Session = (c: Client, server: Server, dir: string) => Promise<unknown>;
/**
 * https: a TLS server on loopback whose certificate (for "localhost") comes from a test CA. The
 * reference goes direct; ours goes through its proxy, so it is given the policy that allows the
 * loopback host (the reference has no policy). With CODEX_CA_CERTIFICATE naming the CA both fetch
 * it; without, both refuse it.
 */
const tls = {
  ca: null as InterceptionCa | null,
  server: null as https.Server | null,
  port: 0,
  seen: [] as string[],
};
const TLS_ARGS = ['--http-allow-domain', 'localhost', '--http-allow-local'];
/** Codex's own default for a request without a sandbox: run it unsandboxed. */
const CODEX_DEFAULT = ['--default-sandbox', 'none'];
const OUR_ARGS: Record<string, string[]> = { 'http-request-tls': TLS_ARGS, 'http-request-tls-untrusted': TLS_ARGS };
const SESSION_ENV: Record<string, () => Record<string, string>> = { 'http-request-tls': () => ({ CODEX_CA_CERTIFICATE: tls.ca!.certPath }) };
beforeAll(async () => {
  tls.ca = InterceptionCa.create({ dir: scene.out });
  const { key, cert } = tls.ca.leafFor('localhost');
  tls.server = https.createServer({ key, cert }, (req, res) => {
    tls.seen.push(`${req.method} ${req.url}`);
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      res.writeHead(201, { 'x-tls': 'yes', 'content-type': 'text/plain' });
      res.end(`secure ${req.method} ${req.url} ${body}`);
    });
  });
  await new Promise<void>((r) => tls.server!.listen(0, '127.0.0.1', r));
  tls.port = (tls.server.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise((r) => tls.server?.close(r));
  tls.ca?.dispose();
});

/** A response without what differs by nature (date) or by transport (keep-alive framing). */
function httpShape(m: { result?: Record<string, unknown>; error?: unknown }): unknown {
  if (!m.result) return { error: m.error };
  const headers = (m.result.headers as Array<{ name: string; value: string }>).filter((h) => ['x-tls', 'content-type'].includes(h.name));
  return { status: m.result.status, headers, body: Buffer.from(m.result.bodyBase64 as string, 'base64').toString() };
}

const OWN_HOME: Record<string, (dir: string) => void> = {
  'capability-discovery-v2'(dir) {
    const put = (p: string, text: string) => {
      fs.mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
      fs.writeFileSync(path.join(dir, p), text);
    };
    const skill = (name: string, extra = '') => `---\nname: ${name}\ndescription: The ${name} skill${extra}\n---\nbody\n`;
    put('codex-home/skills/alpha/SKILL.md', skill('alpha', '\nmetadata:\n  short-description: Short alpha # a comment'));
    put('codex-home/skills/alpha/agents/openai.yaml', 'interface:\n  display_name: Alpha\ndependencies:\n  tools:\n    - type: mcp\n      value: docs\n      description: "The docs server"\n      url: https://example.invalid/mcp\npolicy:\n  allow_implicit_invocation: false\n  products: [codex]\n');
    put('codex-home/skills/folded/SKILL.md', "---\nname: 'folded'\ndescription: >\n  spread over\n  two lines\n---\n");
    put('codex-home/skills/.system/sys/SKILL.md', skill('sys'));
    put('codex-home/skills/a/b/c/d/e/six/SKILL.md', skill('six-deep'));
    put('codex-home/skills/a/b/c/d/e/f/seven/SKILL.md', skill('seven-deep'));
    put('codex-home/skills/a-b/SKILL.md', skill('dash'));
    put('codex-home/skills/secret/SKILL.md', skill('secret'));
    put('codex-home/skills/nodesc/SKILL.md', '---\nname: nodesc\n---\n');
    // Header forms: a plain scalar over several lines, a literal block, YAML escapes, a number,
    // spaces to collapse, no name (the directory's), CRLF lines, a name over 64 characters.
    put('codex-home/skills/forms/cont/SKILL.md', '---\nname: cont\ndescription: goes on\n  over lines\n---\n');
    put('codex-home/skills/forms/lit/SKILL.md', '---\nname: lit\ndescription: |\n  line1\n  line2\nmetadata:\n  short-description: >\n    two\n    lines\n---\n');
    put('codex-home/skills/forms/esc/SKILL.md', '---\nname: "esc"\ndescription: "\\u00e9 \\x41 \\t tab"\n---\n');
    put('codex-home/skills/forms/num/SKILL.md', '---\nname: 123\ndescription: true\n---\n');
    put('codex-home/skills/forms/spaced/SKILL.md', "---\nname:   '  spaced   name '\ndescription: \"  a  b \"\n---\n");
    put('codex-home/skills/forms/unnamed/SKILL.md', '---\ndescription: no name\n---\n');
    put('codex-home/skills/forms/crlf/SKILL.md', '---\r\nname: crlf\r\ndescription: CR LF\r\n---\r\n');
    put('codex-home/skills/forms/long/SKILL.md', `---\nname: ${'n'.repeat(65)}\ndescription: too long a name\n---\n`);
    put('codex-home/skills/forms/max/SKILL.md', `---\nname: ${'m'.repeat(64)}\ndescription: the longest name\n---\n`);
    put('linked/SKILL.md', skill('linked'));
    fs.symlinkSync(path.join(dir, 'linked'), path.join(dir, 'codex-home/skills/link'));
    put('home/.agents/skills/mine/SKILL.md', skill('mine'));
    put('.agents/skills/project/SKILL.md', skill('project'));
    const plugin = 'codex-home/plugins/cache/market/plug/1.0.0';
    put(`${plugin}/.codex-plugin/plugin.json`, '{"name":"plug","version":"1.0.0"}\n');
    put(`${plugin}/.mcp.json`, '{"mcpServers":{}}\n');
    put(`${plugin}/skills/tool/SKILL.md`, skill('tool'));
    put('codex-home/config.toml', '[plugins."plug@market"]\nenabled = true\n\n[plugins."off@market"]\nenabled = false\n');
  },
};

/** Each session gets its own fresh directory inside the workspace (same name for both servers). */
async function runSession(server: Server, name: string, session: Session): Promise<unknown> {
  const dir = path.join(WS, `${name}-${server}`);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  // Some sessions give the server a HOME and CODEX_HOME of their own in the session dir, filled
  // before it starts (so what is found under ~ is theirs, whenever the server reads it).
  const setup = OWN_HOME[name];
  setup?.(dir);
  const env = { ...(setup ? { HOME: path.join(dir, 'home'), CODEX_HOME: path.join(dir, 'codex-home') } : {}), ...SESSION_ENV[name]?.() };
  // The reference runs a request without a sandbox unsandboxed; ours does so with this flag.
  const c = new Client(server, env, [...(OUR_ARGS[name] ?? []), ...CODEX_DEFAULT]);
  try {
    // Paths in transcripts name the session dir; normalise it so both servers compare.
    const t = await session(c, server, dir);
    return JSON.parse(JSON.stringify(t).split(dir).join('<DIR>').split(`${name}-${server}`).join('<DIR>'));
  } finally {
    await c.close();
  }
}

async function conform(name: string, session: Session): Promise<void> {
  const fixture = path.join(FIXTURES, `${name}.json`);
  let reference: unknown;
  if (referenceSkip === undefined) {
    reference = await runSession('reference', name, session);
    if (process.env.RECORD_FIXTURES === '1') {
      fs.mkdirSync(FIXTURES, { recursive: true });
      fs.writeFileSync(fixture, JSON.stringify(reference, null, 2) + '\n');
    }
  } else {
    // eslint-disable-next-line no-console
    console.warn(`[conformance] ${name}: reference unavailable (${referenceSkip}); comparing with the recorded fixture`);
    reference = JSON.parse(fs.readFileSync(fixture, 'utf8'));
  }
  const ours = await runSession('ours', name, session);
  expect(ours).toEqual(strictSeq(reference, name));
}

/**
 * The reference server's notifications for one process are sent from more than one task, and on a
 * loaded machine they once arrived with a seq lower than the one before (seqIncreasing false in
 * its transcript). Ours must deliver them in order: the reference's shape is held to strict order,
 * loudly, so a reordering on our side still fails.
 */
function strictSeq(t: unknown, name: string): unknown {
  if (Array.isArray(t)) return t.map((x) => strictSeq(x, name));
  if (t === null || typeof t !== 'object') return t;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(t)) {
    if ((k === 'seqIncreasing' || k === 'lastIsClosed' || k === 'closedSeqIsMax') && v === false) {
      // eslint-disable-next-line no-console
      console.warn(`[conformance] ${name}: the reference delivered a process's notifications out of order (${k} false); ours is held to strict order`);
      out[k] = true;
    } else {
      out[k] = strictSeq(v, name);
    }
  }
  return out;
}

/** seq numbers strictly increase, process/closed is the last event and comes after exited. */
function eventShape(c: Client, processId: string) {
  const ev = c.events(processId);
  const seqs = ev.map((e) => e.params!.seq as number);
  return {
    seqIncreasing: seqs.every((s, i) => i === 0 || s > seqs[i - 1]!),
    // The lowest, not the first delivered: the reference sometimes delivers out of order
    // (seqIncreasing false, then 2 came first); ours is held to strict order by seqIncreasing.
    firstSeq: Math.min(...seqs),
    lastIsClosed: ev[ev.length - 1]?.method === 'process/closed',
    exitedCount: ev.filter((e) => e.method === 'process/exited').length,
    closedSeqIsMax: (ev.find((e) => e.method === 'process/closed')?.params?.seq as number) === Math.max(...seqs),
  };
}

const SESSIONS: Record<string, Session> = {
  async 'handshake-and-errors'(c) {
    const t: unknown[] = [];
    const req = async (method: string, params?: unknown) => t.push([method, norm(await c.request(method, params))]);
    // Params are decoded before the state check: a bad start is -32602 even before initialize.
    await req('process/start', { processId: 'p', argv: ['true'], cwd: 'file:///tmp', env: {} });
    await req('process/start', start('p', ['true']));
    await req('fs/readFile', { path: uri(path.join(WS, 'x')) });
    await req('environment/info', {});
    await req('environment/status');
    await req('no/such/method', {});
    await req('initialize', {});
    const init = await c.request('initialize', { clientName: 't' });
    t.push(['initialize', typeof init.result?.sessionId, Object.keys((init.result?.environmentInfo as object) ?? {}).includes('shell')]);
    await req('initialize', { clientName: 't' });
    await req('process/start', start('p', ['true']));
    await req('environment/status');
    c.notify('initialized');
    await req('environment/status');
    return t;
  },

  async 'bad-input'(c) {
    await c.init();
    const t: unknown[] = [];
    const req = async (method: string, params?: unknown) => t.push([method, norm(await c.request(method, params))]);
    const rawErr = async (line: string) => {
      const before = c.responses.get(-1);
      c.responses.delete(-1);
      c.raw(line);
      const r = await c.waitFor(() => c.responses.get(-1), `parse error for ${line.slice(0, 20)}`);
      // The serde text after the prefix is the parser's own wording; the prefix and code are the contract.
      t.push(['raw', r.error?.code, r.error?.message.split(':').slice(0, 1).join(':')]);
      void before;
    };
    await rawErr('{not json\n');
    await rawErr('[1,2]\n');
    await rawErr('{"id":25}\n');
    c.raw('\n'); // an empty line is ignored
    await req('process/start', { ...start('a', ['true']), tty: 'yes' });
    await req('process/start', { ...start('a', ['true']), argv: 'true' });
    await req('process/start', { ...start('a', ['true']), env: undefined });
    await req('process/start', 'x');
    await req('process/start');
    await req('process/start', { ...start('a', ['true']), cwd: 'tmp' });
    await req('process/start', { ...start('a', ['true']), cwd: 'http://host/tmp' });
    await req('process/start', { ...start('a', ['true']), cwd: 'file://otherhost/tmp' });
    await req('process/start', { ...start('a', ['true']), sandbox: { permissions: { type: 'disabled' }, cwd: uri(WS) } });
    // Unknown fields are ignored (serde's default), the connection carries on.
    await req('process/start', { ...start('u', ['true']), bogusField: 1 });
    await c.closed('u');
    await req('process/start', start('u', ['true']));
    await req('process/write', { processId: 'u', chunk: '!!!', writeId: 'w' });
    await req('process/write', { processId: 'u', chunk: b64('x'), writeId: '' });
    await req('process/write', { processId: 'nope', chunk: b64('x'), writeId: 'w' });
    await req('process/signal', { processId: 'u', signal: 'kill' });
    await req('process/signal', { processId: 'nope', signal: 'interrupt' });
    await req('process/terminate', { processId: 'nope' });
    await req('process/read', { processId: 'nope' });
    await req('process/read', { processId: 'u', afterSeq: -1 });
    await req('process/start', start('x', ['/nonexistent/program']));
    await req('process/start', { ...start('y', ['true']), cwd: uri(path.join(WS, 'missing-dir')) });
    await req('environment/status');
    return t;
  },

  async 'process-output-and-exit'(c) {
    await c.init();
    const r = await c.request('process/start', start('p1', ['sh', '-c', 'echo hi; echo err >&2; printf "no newline"; exit 3']));
    await c.closed('p1');
    const read = await c.request('process/read', { processId: 'p1' });
    const res = read.result!;
    const chunks = res.chunks as Array<{ stream: string; chunk: string }>;
    const fromRead: Record<string, string> = {};
    for (const ch of chunks) fromRead[ch.stream] = (fromRead[ch.stream] ?? '') + Buffer.from(ch.chunk, 'base64').toString();
    const lastSeq = Math.max(...c.events('p1').map((e) => e.params!.seq as number));
    return {
      start: norm(r),
      output: c.output('p1'),
      exitCode: c.exitCode('p1'),
      sandboxDenied: c.events('p1').find((e) => e.method === 'process/exited')?.params?.sandboxDenied,
      shape: eventShape(c, 'p1'),
      read: { fromRead, nextSeqIsLastPlusOne: res.nextSeq === lastSeq + 1, exited: res.exited, exitCode: res.exitCode, closed: res.closed, failure: res.failure },
      duplicate: norm(await c.request('process/start', start('p1', ['true']))),
    };
  },

  async 'stdin-writes-signal-terminate'(c) {
    await c.init();
    const t: Record<string, unknown> = {};
    await c.request('process/start', start('cat', ['cat'], { pipeStdin: true }));
    t.w1 = norm(await c.request('process/write', { processId: 'cat', chunk: b64('one\n'), writeId: 'w1' }));
    t.w1again = norm(await c.request('process/write', { processId: 'cat', chunk: b64('one\n'), writeId: 'w1' }));
    t.w2 = norm(await c.request('process/write', { processId: 'cat', chunk: b64('two\n'), writeId: 'w2' }));
    await c.waitFor(() => (c.output('cat').stdout ?? '').includes('two'), 'cat output');
    t.signal = norm(await c.request('process/signal', { processId: 'cat', signal: 'interrupt' }));
    await c.closed('cat');
    // The reference sends exited and closed from different tasks: on a loaded machine its closed
    // can come first. The exit status is what is compared here, so wait for it on both servers.
    await c.waitFor(() => c.exitCode('cat') !== undefined, 'process/exited of cat');
    t.catOut = c.output('cat');
    t.catExit = c.exitCode('cat');
    t.writeAfterExit = norm(await c.request('process/write', { processId: 'cat', chunk: b64('x'), writeId: 'w3' }));

    await c.request('process/start', start('closed-stdin', ['sh', '-c', 'read x; echo "[$x]"']));
    t.noStdin = norm(await c.request('process/write', { processId: 'closed-stdin', chunk: b64('x\n'), writeId: 'a' }));
    await c.closed('closed-stdin');
    t.noStdinOut = c.output('closed-stdin');

    await c.request('process/start', start('sleeper', ['sleep', '1000']));
    t.terminate = norm(await c.request('process/terminate', { processId: 'sleeper' }));
    await c.closed('sleeper');
    t.sleeperExit = c.exitCode('sleeper');
    t.terminateAgain = norm(await c.request('process/terminate', { processId: 'sleeper' }));

    await c.request('process/start', start('selfterm', ['sh', '-c', 'kill -TERM $$']));
    await c.closed('selfterm');
    t.selfTermExit = c.exitCode('selfterm');
    return t;
  },

  async 'long-poll-read'(c) {
    await c.init();
    await c.request('process/start', start('late', ['sh', '-c', 'sleep 0.5; echo late; sleep 0.5']));
    // Blocks until the output arrives (well before the 20 s deadline), then returns it.
    const r = await c.request('process/read', { processId: 'late', afterSeq: 0, waitMs: 20_000 });
    const chunks = r.result!.chunks as Array<{ chunk: string; stream: string }>;
    const text = chunks.map((ch) => Buffer.from(ch.chunk, 'base64').toString()).join('');
    await c.closed('late');
    await c.request('process/start', start('quiet', ['sleep', '1000']));
    const q = await c.request('process/read', { processId: 'quiet', afterSeq: 0, waitMs: 200 });
    await c.request('process/terminate', { processId: 'quiet' });
    await c.closed('quiet');
    const after = await c.request('process/read', { processId: 'late', afterSeq: 1000 });
    return {
      late: { text, streams: chunks.map((ch) => ch.stream), exited: r.result!.exited },
      quiet: { chunks: q.result!.chunks, exited: q.result!.exited, closed: q.result!.closed },
      afterEnd: { chunks: after.result!.chunks, exited: after.result!.exited, closed: after.result!.closed },
    };
  },

  async 'pty'(c) {
    await c.init();
    await c.request('process/start', start('t', ['sh', '-c', 'stty size; test -t 0 && test -t 1 && echo is-tty; read x; echo got=$x'], { tty: true }));
    await c.waitFor(() => (c.output('t').pty ?? '').includes('is-tty'), 'pty output');
    const w = norm(await c.request('process/write', { processId: 't', chunk: b64('hello\n'), writeId: '1' }));
    await c.closed('t');
    // process/exited may follow process/closed (the reference once sent them in that order under
    // load): wait a moment for it on both sides, so only a missing one differs.
    await c.waitFor(() => (c.exitCode('t') !== undefined ? true : undefined), 'process/exited of t', 2000).catch(() => {});
    const out = c.output('t');
    return {
      streams: Object.keys(out),
      size: /\d+ \d+/.exec(out.pty ?? '')?.[0],
      isTty: (out.pty ?? '').includes('is-tty'),
      got: (out.pty ?? '').includes('got=hello'),
      write: w,
      exit: c.exitCode('t'),
    };
  },

  async 'pty-sandboxed'(c, _server, dir) {
    await c.init();
    const sti = `python3 -c "
import fcntl, termios
try:
    fcntl.ioctl(0, termios.TIOCSTI, b'Z'); print('sti-ok')
except OSError as e:
    print('sti-errno', e.errno)
"`;
    const script = `stty size; test -t 0 && test -t 1 && echo is-tty; ${sti}; read x; echo got=$x`;
    const r = await c.request('process/start', { ...start('t', ['sh', '-c', script], { tty: true }), cwd: uri(dir), sandbox: workspaceWrite(dir) });
    await c.waitFor(() => /sti-(ok|errno)/.test(c.output('t').pty ?? ''), 'pty output');
    await c.request('process/write', { processId: 't', chunk: b64('hello\n'), writeId: '1' });
    await c.closed('t');
    // process/exited may follow process/closed (the reference once sent them in that order under
    // load): wait a moment for it on both sides, so only a missing one differs.
    await c.waitFor(() => (c.exitCode('t') !== undefined ? true : undefined), 'process/exited of t', 2000).catch(() => {});
    const out = c.output('t').pty ?? '';
    return {
      start: norm(r),
      streams: Object.keys(c.output('t')),
      size: /\d+ \d+/.exec(out)?.[0],
      isTty: out.includes('is-tty'),
      sti: /sti-(ok|errno \d+)/.exec(out)?.[0],
      got: out.includes('got=hello'),
      exit: c.exitCode('t'),
    };
  },

  async 'concurrent-20'(c) {
    await c.init();
    const ids = Array.from({ length: 20 }, (_, i) => `c${i}`);
    const starts = await Promise.all(ids.map((id, i) => c.request('process/start', start(id, ['sh', '-c', `sleep 0.2; echo out-${i}; exit ${i % 4}`]))));
    await Promise.all(ids.map((id) => c.closed(id)));
    return {
      starts: starts.map(norm),
      results: ids.map((id) => [c.output(id).stdout, c.exitCode(id)]),
    };
  },

  async 'sandboxed-process-workspace-write'(c, _server, dir) {
    await c.init();
    const inside = path.join(dir, 'inside.txt');
    const outside = path.join(OUT, `outside-${path.basename(dir)}.txt`);
    const script = `printf x > "${inside}"; echo in=$?; printf x > "${outside}" 2>/dev/null; echo out=$?`;
    const r = await c.request('process/start', { ...start('w', ['sh', '-c', script]), cwd: uri(dir), sandbox: workspaceWrite(dir) });
    await c.closed('w');
    return {
      start: norm(r),
      stdout: c.output('w').stdout,
      exit: c.exitCode('w'),
      insideExists: fs.existsSync(inside),
      outsideExists: fs.existsSync(outside),
    };
  },

  async 'sandboxed-fs'(c, _server, dir) {
    await c.init();
    const inside = path.join(dir, 'f.txt');
    const outside = path.join(OUT, `fs-outside-${path.basename(dir)}.txt`);
    const outsideDir = path.join(OUT, `fs-outside-dir-${path.basename(dir)}`);
    const sb = workspaceWrite(dir);
    const t: Record<string, unknown> = {};
    t.writeInside = norm(await c.request('fs/writeFile', { path: uri(inside), dataBase64: b64('inside'), sandbox: sb }));
    t.insideContent = fs.existsSync(inside) ? fs.readFileSync(inside, 'utf8') : null;
    t.readInside = norm(await c.request('fs/readFile', { path: uri(inside), sandbox: sb }));
    t.writeOutside = norm(await c.request('fs/writeFile', { path: uri(outside), dataBase64: b64('x'), sandbox: sb }));
    t.outsideExists = fs.existsSync(outside);
    t.mkdirOutside = norm(await c.request('fs/createDirectory', { path: uri(outsideDir), sandbox: sb }));
    t.outsideDirExists = fs.existsSync(outsideDir);
    t.mkdirInside = norm(await c.request('fs/createDirectory', { path: uri(path.join(dir, 'd', 'e')), sandbox: sb }));
    t.removeInside = norm(await c.request('fs/remove', { path: uri(path.join(dir, 'd')), sandbox: sb }));
    t.insideDirGone = !fs.existsSync(path.join(dir, 'd'));
    // Positive control: the same write without a sandbox context succeeds outside.
    t.writeOutsideUnsandboxed = norm(await c.request('fs/writeFile', { path: uri(outside), dataBase64: b64('x') }));
    t.outsideExistsAfterControl = fs.existsSync(outside);
    fs.rmSync(outside, { force: true });
    return t;
  },

  async 'fs-unsandboxed'(c, _server, dir) {
    await c.init();
    const f = (n: string) => uri(path.join(dir, n));
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, method: string, params: unknown, map?: (m: ReturnType<typeof norm>) => unknown) => {
      const r = norm(await c.request(method, params));
      t.push([label, map ? map(r) : r]);
    };
    await req('write', 'fs/writeFile', { path: f('a.txt'), dataBase64: b64('hello\n') });
    await req('write no parent', 'fs/writeFile', { path: f('nodir/a.txt'), dataBase64: b64('x') });
    await req('write bad base64', 'fs/writeFile', { path: f('b.txt'), dataBase64: 'a' });
    await req('read', 'fs/readFile', { path: f('a.txt') });
    await req('read missing', 'fs/readFile', { path: f('missing') });
    await req('read dir', 'fs/readFile', { path: uri(dir) });
    await req('mkdir -p', 'fs/createDirectory', { path: f('d/e/g') });
    await req('mkdir again', 'fs/createDirectory', { path: f('d/e/g') });
    await req('mkdir no parent, not recursive', 'fs/createDirectory', { path: f('x/y'), recursive: false });
    await req('metadata file', 'fs/getMetadata', { path: f('a.txt') }, (r) => {
      const m = (r as { result?: Record<string, unknown> }).result;
      return m ? { isDirectory: m.isDirectory, isFile: m.isFile, isSymlink: m.isSymlink, size: m.size, createdAtMs: m.createdAtMs, mtimeIsNumber: typeof m.modifiedAtMs === 'number' } : r;
    });
    await req('metadata missing', 'fs/getMetadata', { path: f('missing') });
    await req('readDirectory', 'fs/readDirectory', { path: uri(dir) }, (r) => {
      const e = (r as { result?: { entries: Array<{ fileName: string }> } }).result?.entries;
      return e ? [...e].sort((a, b) => a.fileName.localeCompare(b.fileName)) : r;
    });
    await req('readDirectory of a file', 'fs/readDirectory', { path: f('a.txt') });
    await req('copy without recursive', 'fs/copy', { sourcePath: f('a.txt'), destinationPath: f('c.txt') });
    await req('copy file', 'fs/copy', { sourcePath: f('a.txt'), destinationPath: f('c.txt'), recursive: false });
    await req('copy dir', 'fs/copy', { sourcePath: f('d'), destinationPath: f('d2'), recursive: true });
    t.push(['copied dir', fs.existsSync(path.join(dir, 'd2', 'e', 'g'))]);
    await req('canonicalize', 'fs/canonicalize', { path: f('d/../a.txt') });
    await req('canonicalize missing', 'fs/canonicalize', { path: f('missing') });
    await req('remove non-empty, not recursive', 'fs/remove', { path: f('d'), recursive: false });
    await req('remove missing, not forced', 'fs/remove', { path: f('missing'), force: false });
    await req('remove missing', 'fs/remove', { path: f('missing') });
    await req('remove dir', 'fs/remove', { path: f('d') });
    t.push(['removed', !fs.existsSync(path.join(dir, 'd'))]);
    await req('other host', 'fs/readFile', { path: 'file://otherhost/etc/passwd' });
    await req('relative', 'fs/readFile', { path: 'etc/passwd' });
    await req('missing path field', 'fs/readFile', {});
    await req('unknown fs method', 'fs/noSuchMethod', {});
    return t;
  },
};


/** Sessions for the methods added after the first suite: each has a success, a denial or failure, and bad params. */
const MORE_SESSIONS: Record<string, Session> = {
  async 'error-precedence'(c) {
    await c.init();
    const t: unknown[] = [];
    const req = async (method: string, params?: unknown) => t.push([method, norm(await c.request(method, params))]);
    // Faults are reported in field order, as serde meets them: the bad URI first, then the missing field.
    await req('process/start', { processId: 'p', argv: ['true'], cwd: 'relative', env: {}, tty: false });
    await req('process/start', { processId: 'p', argv: ['true'], tty: false, cwd: 'http://x/y', env: {} });
    await req('process/start', { processId: 'p', cwd: 'relative' });
    await req('process/start', { processId: 'p', argv: 'x', cwd: 'relative', env: {}, tty: false, pipeStdin: false });
    await req('process/start', { ...start('p', ['true']), sandbox: { cwd: 'relative', permissions: {} } });
    await req('fs/readFile', { sandbox: 7, path: 'relative' });
    await req('fs/readFile', { path: 'relative', sandbox: 7 });
    return t;
  },

  async 'long-poll-exit'(c) {
    await c.init();
    await c.request('process/start', start('a', ['sh', '-c', 'echo first; sleep 0.5; echo late; sleep 0.5']));
    const r1 = await c.request('process/read', { processId: 'a', afterSeq: 0, waitMs: 20_000 });
    const r2 = await c.request('process/read', { processId: 'a', afterSeq: 1, waitMs: 20_000 });
    // Woken by the exit: the answer carries the close too (the reference's exit and close come together).
    const r3 = await c.request('process/read', { processId: 'a', afterSeq: 2, waitMs: 20_000 });
    const shape = (r: typeof r1) => ({ ...r.result, chunks: (r.result!.chunks as Array<{ chunk: string }>).map((ch) => Buffer.from(ch.chunk, 'base64').toString()) });
    // Whether the close is in that answer races in the reference (both seen): its nextSeq must agree with it.
    const { closed, nextSeq, ...rest } = shape(r3) as Record<string, unknown>;
    return { r1: shape(r1), r2: shape(r2), r3: { ...rest, nextSeqMatchesClosed: nextSeq === (closed ? 5 : 4) } };
  },

  async 'fs-handles'(c, _server, dir) {
    await c.init();
    const f = (n: string) => uri(path.join(dir, n));
    fs.writeFileSync(path.join(dir, 'a.txt'), 'hello world\n');
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, method: string, params: unknown) => t.push([label, norm(await c.request(method, params))]);
    await req('open', 'fs/open', { handleId: 'h1', path: f('a.txt') });
    await req('open again', 'fs/open', { handleId: 'h1', path: f('a.txt') });
    await req('read 0..5', 'fs/readBlock', { handleId: 'h1', offset: 0, len: 5 });
    await req('read to the end', 'fs/readBlock', { handleId: 'h1', offset: 6, len: 100 });
    await req('read past the end', 'fs/readBlock', { handleId: 'h1', offset: 100, len: 10 });
    await req('read len 0', 'fs/readBlock', { handleId: 'h1', offset: 0, len: 0 });
    await req('read len too big', 'fs/readBlock', { handleId: 'h1', offset: 0, len: 1048577 });
    await req('write on a read handle', 'fs/writeBlock', { handleId: 'h1', offset: 0, chunk: b64('x') });
    await req('close', 'fs/close', { handleId: 'h1' });
    await req('close again', 'fs/close', { handleId: 'h1' });
    await req('read after close', 'fs/readBlock', { handleId: 'h1', offset: 0, len: 5 });
    await req('open missing', 'fs/open', { handleId: 'm', path: f('missing') });
    await req('open a directory', 'fs/open', { handleId: 'd', path: uri(dir) });
    await req('replace', 'fs/open', { handleId: 'w', path: f('new.txt'), mode: 'replace' });
    await req('write', 'fs/writeBlock', { handleId: 'w', offset: 0, chunk: b64('xx') });
    await req('write at 5', 'fs/writeBlock', { handleId: 'w', offset: 5, chunk: b64('yy') });
    await req('write bad base64', 'fs/writeBlock', { handleId: 'w', offset: 0, chunk: '!!' });
    await req('read on a write handle', 'fs/readBlock', { handleId: 'w', offset: 0, len: 2 });
    await req('close w', 'fs/close', { handleId: 'w' });
    t.push(['written', fs.readFileSync(path.join(dir, 'new.txt')).toString('base64')]);
    await req('replace a directory', 'fs/open', { handleId: 'wd', path: uri(dir), mode: 'replace' });
    await req('replace, no parent', 'fs/open', { handleId: 'wp', path: f('nodir/x'), mode: 'replace' });
    await req('bad mode', 'fs/open', { handleId: 'x', path: f('a.txt'), mode: 'write' });
    await req('missing handleId', 'fs/open', { path: f('a.txt') });
    await req('missing len', 'fs/readBlock', { handleId: 'x', offset: 0 });
    await req('unknown handle', 'fs/readBlock', { handleId: 'nope', offset: 0, len: 1 });
    await req('unknown handle, write', 'fs/writeBlock', { handleId: 'nope', offset: 0, chunk: b64('x') });
    return t;
  },

  async 'fs-handles-sandboxed'(c, _server, dir) {
    await c.init();
    const sb = workspaceWrite(dir);
    const inside = path.join(dir, 'in.txt');
    const outside = path.join(OUT, `handle-outside-${path.basename(dir)}.txt`);
    fs.writeFileSync(inside, 'inside\n');
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, method: string, params: unknown) => t.push([label, norm(await c.request(method, params))]);
    await req('open inside', 'fs/open', { handleId: 'r', path: uri(inside), sandbox: sb });
    await req('read inside', 'fs/readBlock', { handleId: 'r', offset: 0, len: 100 });
    await req('close', 'fs/close', { handleId: 'r' });
    await req('replace inside', 'fs/open', { handleId: 'w', path: uri(path.join(dir, 'new.txt')), mode: 'replace', sandbox: sb });
    await req('write inside', 'fs/writeBlock', { handleId: 'w', offset: 0, chunk: b64('new') });
    await req('close w', 'fs/close', { handleId: 'w' });
    t.push(['inside written', fs.readFileSync(path.join(dir, 'new.txt'), 'utf8')]);
    await req('replace outside (denied)', 'fs/open', { handleId: 'o', path: uri(outside), mode: 'replace', sandbox: sb });
    t.push(['outside exists', fs.existsSync(outside)]);
    // Positive control: the same open without a sandbox context creates the file.
    await req('replace outside, unsandboxed', 'fs/open', { handleId: 'o2', path: uri(outside), mode: 'replace' });
    await req('close o2', 'fs/close', { handleId: 'o2' });
    t.push(['outside exists after the control', fs.existsSync(outside)]);
    fs.rmSync(outside, { force: true });
    return t;
  },

  async 'fs-walk'(c, _server, dir) {
    await c.init();
    fs.mkdirSync(path.join(dir, 'sub', 'deep'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'a.txt'), 'a');
    fs.writeFileSync(path.join(dir, 'B.txt'), 'b');
    fs.writeFileSync(path.join(dir, 'sub', 'deep', 'z'), 'z');
    fs.mkdirSync(path.join(OUT, 'walk-target'), { recursive: true });
    fs.writeFileSync(path.join(OUT, 'walk-target', 'secret'), 's');
    fs.symlinkSync(path.join(OUT, 'walk-target'), path.join(dir, 'dirlink'));
    fs.symlinkSync('a.txt', path.join(dir, 'filelink'));
    fs.symlinkSync('/nonexistent', path.join(dir, 'dangling'));
    fs.symlinkSync('.', path.join(dir, 'sub', 'loop'));
    const opts = (o: Record<string, unknown> = {}) => ({ maxDepth: 5, maxDirectories: 100, maxEntries: 100, followDirectorySymlinks: false, ...o });
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, params: unknown) => t.push([label, JSON.parse(JSON.stringify(norm(await c.request('fs/walk', params))).split(OUT).join('<OUT>'))]);
    await req('walk', { path: uri(dir), options: opts() });
    await req('follow', { path: uri(dir), options: opts({ followDirectorySymlinks: true }) });
    await req('depth 0', { path: uri(dir), options: opts({ maxDepth: 0 }) });
    await req('one directory', { path: uri(dir), options: opts({ maxDirectories: 1 }) });
    await req('two entries', { path: uri(dir), options: opts({ maxEntries: 2 }) });
    await req('a file', { path: uri(path.join(dir, 'a.txt')), options: opts() });
    await req('a link, not followed', { path: uri(path.join(dir, 'dirlink')), options: opts() });
    await req('missing', { path: uri(path.join(dir, 'missing')), options: opts() });
    await req('zero limit', { path: uri(dir), options: opts({ maxEntries: 0 }) });
    await req('over the caps', { path: uri(dir), options: opts({ maxDepth: 65 }) });
    await req('missing options', { path: uri(dir) });
    await req('missing option', { path: uri(dir), options: { maxDepth: 1 } });
    await req('other host', { path: 'file://otherhost/x', options: opts() });
    return t;
  },

  async 'fs-walk-sandboxed'(c, _server, dir) {
    await c.init();
    fs.mkdirSync(path.join(dir, 'sub'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'sub', 'f'), 'f');
    const t: Array<[string, unknown]> = [];
    t.push(['walk inside', norm(await c.request('fs/walk', { path: uri(dir), options: { maxDepth: 5, maxDirectories: 100, maxEntries: 100, followDirectorySymlinks: false }, sandbox: workspaceWrite(dir) }))]);
    return t;
  },

  async 'fs-watch-missing'(c, _server, dir) {
    await c.init();
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, params: unknown) => t.push([label, norm(await c.request('fs/watchMissing', params))]);
    fs.writeFileSync(path.join(dir, 'present'), 'x');
    await req('present', { watchId: 1, missing: [uri(path.join(dir, 'present'))] });
    await req('empty', { watchId: 2, missing: [] });
    await req('missing', { watchId: 3, missing: [uri(path.join(dir, 'later'))] });
    fs.writeFileSync(path.join(dir, 'later'), 'x');
    const n = await c.waitFor(() => c.notifications.find((m) => m.method === 'fs/missingChanged'), 'fs/missingChanged');
    t.push(['notification', n]);
    await req('bad id', { watchId: 'x', missing: [] });
    await req('not a sequence', { watchId: 4, missing: uri(dir) });
    await req('missing field', { watchId: 4 });
    return t;
  },

  async 'http-request-bad-params'(c) {
    await c.init();
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, params: unknown) => t.push([label, norm(await c.request('http/request', params))]);
    const base = { method: 'GET', url: 'http://127.0.0.1:9/', requestId: 'r' };
    await req('missing method', {});
    await req('missing url', { method: 'GET' });
    await req('missing requestId', { method: 'GET', url: 'http://127.0.0.1:9/' });
    await req('ftp', { ...base, url: 'ftp://x/' });
    await req('relative url', { ...base, url: 'not a url' });
    await req('bad method', { ...base, method: 'BAD METHOD' });
    await req('bad header name', { ...base, headers: [{ name: 'bad name', value: '1' }] });
    await req('bad redirect policy', { ...base, redirectPolicy: 'bogus' });
    await req('bad body', { ...base, bodyBase64: '!!' });
    return t;
  },

  async 'environment-config'(c) {
    fs.writeFileSync(path.join(c.home, 'config.toml'), 'model = "m1" # a comment\nother = 2\n[sandbox_workspace_write]\nnetwork_access = true\nwritable_roots = ["/a"]\n[profiles.fast]\nmodel = "m2"\n');
    await c.init();
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, params: unknown) => t.push([label, JSON.parse(JSON.stringify(norm(await c.request('environmentConfig/read', params))).split(c.home).join('<HOME>'))]);
    const cwd = uri(WS);
    await req('model', { cwd, configPaths: [['model']], requirementsPaths: [] });
    await req('a table and a nested key', { cwd, configPaths: [['sandbox_workspace_write'], ['profiles', 'fast', 'model']], requirementsPaths: [] });
    await req('nothing there', { cwd, configPaths: [['nope']], requirementsPaths: [] });
    await req('no paths', { cwd, configPaths: [], requirementsPaths: [] });
    await req('empty path', { cwd, configPaths: [[]], requirementsPaths: [] });
    await req('a string path', { cwd, configPaths: ['model'], requirementsPaths: [] });
    await req('missing requirementsPaths', { cwd, configPaths: [['model']] });
    await req('relative cwd', { cwd: 'relative', configPaths: [['model']], requirementsPaths: [] });
    // A config as users write them: Codex parses it and writes the asked paths back in its own format.
    fs.writeFileSync(
      path.join(c.home, 'config.toml'),
      [
        '# the user layer',
        "approval_policy = 'on-request'   # literal string",
        'developer_instructions = """',
        'Be brief.',
        'Quote "exactly".',
        '"""',
        "notify = ['''",
        "C:\\path\\hook''', \"say 'hi'\"]",
        'writable = [',
        '  "/a", # first',
        '  "/b",',
        ']',
        'nums = [1, 2.5, 1e3, 0x1F, 1_000, -0.0, inf]',
        'mixed = [ { x = 1 }, [true, false] ]',
        'shell_environment_policy = { inherit = "core", set = { PATH = "/usr/bin", "A B" = "tab\\there \\"q\\"" } }',
        'tui.theme = "dark"',
        'when = 1979-05-27 07:32:00.5Z',
        '',
        '[sandbox_workspace_write]',
        'network_access = true',
        '[profiles.fast]',
        'model = "m2"',
        '[profiles.fast.empty]',
        '[[skills.config]]',
        'path = "/s1"',
        '[[skills.config]]',
        'path = "/s2"',
        'enabled = false',
        '[mcp_servers.docs]',
        'command = "npx"',
        'args = ["-y", "docs"]',
        'env = { KEY = "v" }',
        '',
      ].join('\n'),
    );
    await req('a real config, every path', {
      cwd,
      configPaths: [['approval_policy'], ['developer_instructions'], ['notify'], ['writable'], ['nums'], ['mixed'], ['shell_environment_policy'], ['tui'], ['when'], ['sandbox_workspace_write'], ['profiles'], ['skills'], ['mcp_servers']],
      requirementsPaths: [],
    });
    await req('a real config, nested paths', { cwd, configPaths: [['mcp_servers', 'docs', 'env'], ['shell_environment_policy', 'set', 'A B'], ['profiles', 'fast', 'nope'], ['nums', 'x']], requirementsPaths: [] });
    fs.writeFileSync(path.join(c.home, 'config.toml'), 'model = \n');
    await req('an invalid config', { cwd, configPaths: [['model']], requirementsPaths: [] });
    return t.map(([l, r]) => [l, hideHost(r)]);
  },

  async 'capability-discovery'(c, _server, dir) {
    await c.init();
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, method: string, params: unknown) => t.push([label, norm(await c.request(method, params))]);
    await req('v1 empty root', 'capabilityRoots/discoverV1', { roots: [{ id: 'r', path: uri(dir) }] });
    const put = (p: string, text: string) => {
      fs.mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
      fs.writeFileSync(path.join(dir, p), text);
    };
    put('.codex-plugin/plugin.json', '{"name":"plug","version":"1.0.0"}\n');
    put('.mcp.json', '{"mcpServers":{}}\n');
    put('.codex/skills/foo/SKILL.md', '---\nname: foo\ndescription: Foo\n---\nbody\n');
    put('.agents/skills/bar/sub/inner/SKILL.md', '---\nname: inner\ndescription: d\n---\n');
    put('skills/baz/SKILL.md', '---\nname: baz\ndescription: Baz\n---\n');
    put('skills/baz/agents/openai.yaml', 'interface:\n  display_name: Baz\n');
    put('SKILL.md', '---\nname: top\ndescription: t\n---\n');
    await req('v1 plugin and skills', 'capabilityRoots/discoverV1', { roots: [{ id: 'r', path: uri(dir) }, { id: 'missing', path: uri(path.join(dir, 'nope')) }] });
    await req('v1 empty', 'capabilityRoots/discoverV1', { roots: [] });
    await req('v1 missing id', 'capabilityRoots/discoverV1', { roots: [{ path: uri(dir) }] });
    await req('v1 a string root', 'capabilityRoots/discoverV1', { roots: [uri(dir)] });
    await req('v2 missing cwd', 'capabilities/discoverV2', {});
    return t;
  },

  async 'http-request-tls'(c) {
    await c.init();
    const t: unknown[] = [];
    const before = tls.seen.length;
    const url = `https://localhost:${tls.port}`;
    t.push(['trusted GET', httpShape(await c.request('http/request', { method: 'GET', url: `${url}/a?b=1`, requestId: 'g' }))]);
    t.push(['trusted POST', httpShape(await c.request('http/request', { method: 'POST', url: `${url}/p`, requestId: 'p', bodyBase64: Buffer.from('data').toString('base64'), headers: [{ name: 'content-type', value: 'text/plain' }] }))]);
    t.push(['seen by the server', tls.seen.slice(before)]);
    return JSON.parse(JSON.stringify(t).split(String(tls.port)).join('<PORT>'));
  },

  async 'http-request-tls-untrusted'(c) {
    await c.init();
    const t: unknown[] = [];
    const before = tls.seen.length;
    t.push(['untrusted', httpShape(await c.request('http/request', { method: 'GET', url: `https://localhost:${tls.port}/u`, requestId: 'u' }))]);
    t.push(['seen by the server', tls.seen.slice(before)]);
    return JSON.parse(JSON.stringify(t).split(String(tls.port)).join('<PORT>'));
  },

  async 'capability-discovery-v2'(c, _server, dir) {
    // The files are made by OWN_HOME's setup, before the server starts.
    const skills = path.join(dir, 'codex-home', 'skills');
    await c.init();
    const t: Array<[string, unknown]> = [];
    const req = async (label: string, params: unknown) => t.push([label, norm(await c.request('capabilities/discoverV2', params))]);
    await req('skills and a plugin', { cwd: uri(dir) });
    await req('sandboxed, one skill denied', { cwd: uri(dir), sandbox: workspaceWrite(dir, [{ path: { type: 'path', path: uri(path.join(skills, 'secret')) }, access: 'deny' }]) });
    await req('sandboxed, the root denied', { cwd: uri(dir), sandbox: workspaceWrite(dir, [{ path: { type: 'path', path: uri(skills) }, access: 'deny' }]) });
    await req('missing cwd', {});
    await req('relative cwd', { cwd: 'relative' });
    await req('a bad sandbox', { cwd: uri(dir), sandbox: { bogus: 1 } });
    await req('a number', 5);
    await req('a sequence', []);
    return t;
  },
};

/** The machine's own facts (user home, host name) are the same for both servers: kept, but shown as placeholders. */
function hideHost(r: unknown): unknown {
  return JSON.parse(JSON.stringify(r).split(`"hostname":${JSON.stringify(os.hostname())}`).join('"hostname":"<HOST>"'));
}
Object.assign(SESSIONS, MORE_SESSIONS);

describe.skipIf(!caps.linux)('exec-server conformance with codex exec-server 0.171.0', () => {
  for (const [name, session] of Object.entries(SESSIONS)) {
    it(`${name}: ours matches the reference${referenceSkip ? ` (reference unavailable: ${referenceSkip}; vs recorded fixture)` : ''}`, async () => {
      await conform(name, session);
    });
  }

  it.skipIf(referenceSkip)(`WebSocket capability token: same refusals and acceptance as the reference${referenceSkip ? ` (skipped: ${referenceSkip})` : ''}`, async () => {
    const token = path.join(scene.root, 'ws-token');
    fs.writeFileSync(token, 'a-capability-token-0123456789\n', { mode: 0o600 });
    const outcome = async (server: Server) => {
      const srv = await startWsServer(server, ['--listen', 'ws://127.0.0.1:0', '--ws-auth', 'capability-token', '--ws-token-file', token]);
      try {
        const init = (o: WsOutcome) => ('http' in o ? { http: o.http } : o);
        return {
          none: init(await wsAttempt(srv.url, {})),
          wrong: init(await wsAttempt(srv.url, { Authorization: 'Bearer not-the-token-0123456789' })),
          right: init(await wsAttempt(srv.url, { Authorization: 'Bearer a-capability-token-0123456789' })),
        };
      } finally {
        await srv.stop();
      }
    };
    const ref = await outcome('reference');
    expect(ref).toEqual({ none: { http: 401 }, wrong: { http: 401 }, right: { initialized: 'string' } });
    expect(await outcome('ours')).toEqual(ref);
  });

  for (const server of ['reference', 'ours'] as const) {
    const skip = server === 'reference' ? referenceSkip : undefined;
    it.skipIf(skip)(`${server}: closing the connection kills every process it started (checked from outside)${skip ? ` (skipped: ${skip})` : ''}`, async () => {
      // A unique sleep duration marks the processes: the shell's -c string and the sleep's argv.
      const marker = `1000.${process.pid}${server === 'ours' ? 1 : 2}`;
      const c = new Client(server, {}, CODEX_DEFAULT);
      await c.init();
      for (let i = 0; i < 3; i++) await c.request('process/start', start(`s${i}`, ['sh', '-c', `sleep ${marker}${i}; true`]));
      await c.request('process/start', start('direct', ['sleep', `${marker}9`]));
      await c.waitFor(() => pidsWith(marker).length >= 7 || undefined, 'the shells and sleeps to appear');
      await c.close();
      const end = Date.now() + 20_000;
      while (pidsWith(marker).length > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
      expect(pidsWith(marker)).toEqual([]);
    });
  }
});
