/**
 * A small exec-server client for the tests: drives a server process over stdio (ours through
 * dist/cli.js, or the reference `codex exec-server --listen stdio` from @openai/codex@0.171.0),
 * one JSON message per line, and keeps every notification.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

export const REPO = path.resolve(__dirname, '..', '..');
export const OUR_CLI = path.join(REPO, 'dist', 'cli.js');
export const REFERENCE_BIN = path.join(REPO, 'node_modules', '@openai', 'codex-linux-x64', 'vendor', 'x86_64-unknown-linux-musl', 'bin', 'codex');

/** Why the reference cannot run here, or undefined when it can. */
export const referenceSkip: string | undefined =
  process.env.PSB_NO_REFERENCE === '1'
    ? 'PSB_NO_REFERENCE=1'
    : process.platform !== 'linux' || process.arch !== 'x64'
    ? `the reference binary is installed for linux-x64 only (here ${process.platform}-${process.arch})`
    : fs.existsSync(REFERENCE_BIN)
      ? undefined
      : `reference binary missing at ${REFERENCE_BIN} (devDependency @openai/codex@0.171.0 not installed)`;

export type Server = 'ours' | 'reference';

export interface Message {
  id?: string | number;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
}

export class Client {
  readonly proc: ChildProcess;
  readonly notifications: Message[] = [];
  readonly responses = new Map<string | number, Message>();
  private readonly waiters: Array<() => void> = [];
  private nextId = 1;
  private buf = '';
  /** The server's CODEX_HOME (and HOME fallback), fresh per client. */
  readonly home: string;
  stderr = '';

  constructor(
    readonly server: Server,
    env: Record<string, string> = {},
    /** Extra flags for our server only (the reference has no such flags, e.g. its http policy). */
    ourArgs: string[] = [],
    /** The server's working directory. */
    cwd = '/',
  ) {
    const home = fs.mkdtempSync('/var/tmp/psb-exec-home-');
    this.home = home;
    const [cmd, args] =
      server === 'ours' ? [process.execPath, [OUR_CLI, 'exec-server', '--listen', 'stdio', ...ourArgs]] : [REFERENCE_BIN, ['exec-server', '--listen', 'stdio']];
    this.proc = spawn(cmd, args, {
      stdio: ['pipe', 'pipe', 'pipe'],
      cwd,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? home, CODEX_HOME: home, LANG: 'C.UTF-8', SHELL: '/bin/sh', ...env },
    });
    this.proc.stdout!.setEncoding('utf8');
    this.proc.stdout!.on('data', (d: string) => {
      this.buf += d;
      let i: number;
      while ((i = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, i);
        this.buf = this.buf.slice(i + 1);
        if (!line.trim()) continue;
        const m = JSON.parse(line) as Message;
        if (m.method !== undefined) this.notifications.push(m);
        else if (m.id !== undefined) this.responses.set(m.id, m);
        for (const w of this.waiters.splice(0)) w();
      }
    });
    this.proc.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
  }

  raw(line: string): void {
    this.proc.stdin!.write(line);
  }

  send(m: object): void {
    this.raw(JSON.stringify(m) + '\n');
  }

  notify(method: string, params?: object): void {
    this.send(params === undefined ? { method } : { method, params });
  }

  /** Sends a request and waits for its response (result or error). */
  async request(method: string, params?: unknown, id: string | number = this.nextId++): Promise<Message> {
    this.send(params === undefined ? { id, method } : { id, method, params });
    return this.waitFor(() => this.responses.get(id), `response to ${method} #${id}`);
  }

  /** Polls received messages until `get` returns something (generous deadline). */
  async waitFor<T>(get: () => T | undefined, what: string, ms = 30_000): Promise<T> {
    const end = Date.now() + ms;
    for (;;) {
      const v = get();
      if (v !== undefined && v !== false) return v;
      if (Date.now() > end) throw new Error(`${this.server}: timed out waiting for ${what}; stderr: ${this.stderr.slice(-2000)}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, 50);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  async init(): Promise<void> {
    const r = await this.request('initialize', { clientName: 'psb-test' });
    if (r.error) throw new Error(`initialize failed: ${r.error.message}`);
    this.notify('initialized');
  }

  events(processId: string): Message[] {
    return this.notifications.filter((n) => n.params?.processId === processId);
  }

  /** Waits for process/closed of a process. */
  async closed(processId: string, ms?: number): Promise<void> {
    await this.waitFor(() => this.events(processId).find((n) => n.method === 'process/closed'), `process/closed of ${processId}`, ms);
  }

  /** Output per stream, from the notifications. */
  output(processId: string): Record<string, string> {
    const out: Record<string, string> = {};
    for (const n of this.events(processId)) {
      if (n.method !== 'process/output') continue;
      const s = n.params!.stream as string;
      out[s] = (out[s] ?? '') + Buffer.from(n.params!.chunk as string, 'base64').toString('utf8');
    }
    return out;
  }

  exitCode(processId: string): number | undefined {
    return this.events(processId).find((n) => n.method === 'process/exited')?.params?.exitCode as number | undefined;
  }

  async close(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const gone = new Promise<void>((r) => this.proc.once('exit', () => r()));
      this.proc.stdin!.end();
      const t = setTimeout(() => this.proc.kill('SIGKILL'), 15_000);
      await gone;
      clearTimeout(t);
    }
    fs.rmSync(this.home, { recursive: true, force: true });
  }
}

/** A normalised error or result: what a conformance comparison looks at. */
export function norm(m: Message): unknown {
  if (m.error) return { error: { code: m.error.code, message: m.error.message, ...(m.error.data !== undefined ? { data: m.error.data } : {}) } };
  return { result: m.result };
}

export function b64(s: string): string {
  return Buffer.from(s).toString('base64');
}

/** Host pids whose command line contains `marker` (checked from outside the server). */
export function pidsWith(marker: string): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, 'utf8');
      if (cmd.includes(marker)) out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Starts a WebSocket exec-server process and waits for the URL it prints on stdout. */
export async function startWsServer(server: Server, args: string[]): Promise<{ url: string; stop(): Promise<void>; stderr(): string }> {
  const { spawn: spawnChild } = await import('node:child_process');
  const home = fs.mkdtempSync('/var/tmp/psb-exec-home-');
  const child =
    server === 'ours'
      ? spawnChild(process.execPath, [OUR_CLI, 'exec-server', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
      : spawnChild(REFERENCE_BIN, ['exec-server', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, CODEX_HOME: home } });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await gone;
    }
    fs.rmSync(home, { recursive: true, force: true });
  };
  const end = Date.now() + 20_000;
  while (!/ws:\/\/\S+\n/.test(out) && child.exitCode === null && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  const url = /(ws:\/\/\S+)\n/.exec(out)?.[1];
  if (!url) {
    await stop();
    throw new Error(`${server}: no URL on stdout (exit ${child.exitCode}): ${out} ${err}`);
  }
  return { url, stop, stderr: () => err };
}

export type WsOutcome = { http: number; body: string } | { error: string } | { initialized: string; started?: unknown };

/**
 * One WebSocket connection attempt with these headers. Once open it initializes and, when
 * `startParams` is given, sends that process/start: a refused attempt must never get that far,
 * which the caller checks from outside (the file the command would write).
 */
export function wsAttempt(url: string, headers: Record<string, string>, startParams?: object): Promise<WsOutcome> {
  return new Promise((resolve) => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const WebSocket = require('ws') as typeof import('ws');
    const ws = new WebSocket(url, { headers });
    ws.on('unexpected-response', (_q, r) => {
      let body = '';
      r.on('data', (d: Buffer) => (body += d.toString()));
      r.on('end', () => resolve({ http: r.statusCode ?? 0, body }));
    });
    ws.on('error', (e) => resolve({ error: e.message }));
    ws.on('open', () => ws.send(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'ws' } })));
    let initialized = '';
    ws.on('message', (d) => {
      const m = JSON.parse(d.toString()) as Message;
      if (m.id === 1) {
        initialized = typeof m.result?.sessionId;
        if (!startParams) {
          ws.close();
          resolve({ initialized });
          return;
        }
        ws.send(JSON.stringify({ method: 'initialized' }));
        ws.send(JSON.stringify({ id: 2, method: 'process/start', params: startParams }));
      } else if (m.method === 'process/closed' || (m.id === 2 && m.error)) {
        ws.close();
        resolve({ initialized, started: m.error ? m.error : 'closed' });
      }
    });
  });
}

/**
 * Codex's workspace-write `sandbox` context: read everything, write the project roots (`root`),
 * plus any extra permission entries (a `deny`, say).
 */
/** Polls `get` every 20 ms until it gives a value (not undefined or false); throws after `ms`. */
export async function poll<T>(get: () => T | undefined | false, what: string, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = get();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * A WebSocket connection to an exec-server (`options` as ws takes them: headers, localAddress),
 * its messages as they arrive, `opened` (rejects with `HTTP <status>` on a refused upgrade), and
 * `request(method, params)` resolving with the response of that id.
 */
export function wsConnection(url: string, options: Record<string, unknown> = {}) {
  const WebSocket = require('ws') as typeof import('ws');
  const ws = new WebSocket(url, options);
  const messages: Message[] = [];
  ws.on('message', (d) => messages.push(JSON.parse(d.toString()) as Message));
  const opened = new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once('error', reject);
  });
  let id = 1;
  const request = async (method: string, params?: unknown) => {
    const n = id++;
    ws.send(JSON.stringify({ id: n, method, params }));
    return poll(() => messages.find((m) => m.id === n), `response #${n} (${method})`);
  };
  return { ws, messages, opened, request };
}

export function workspaceWrite(root: string, extraEntries: object[] = []) {
  const uri = (p: string) => 'file://' + p;
  return {
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [
          { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
          { path: { type: 'special', value: { kind: 'project_roots' } }, access: 'write' },
          ...extraEntries,
        ],
      },
      network: 'restricted',
    },
    cwd: uri(root),
    workspaceRoots: [uri(root)],
    windowsSandboxLevel: 'disabled',
    useLegacyLandlock: false,
  };
}

/** The Responses API, streamed, just enough for `codex exec`: a tool call, then a final message. */
export function standInModel(command: string) {
  const bodies: Array<{ input: Array<Record<string, unknown>> }> = [];
  const sse = (events: object[]) => events.map((e) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify(e)}\n\n`).join('');
  const usage = { input_tokens: 1, input_tokens_details: null, output_tokens: 1, output_tokens_details: null, total_tokens: 2 };
  const server = http.createServer((req, res) => {
    let b = '';
    req.on('data', (d) => (b += d));
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url?.endsWith('/responses')) {
        res.writeHead(404);
        res.end();
        return;
      }
      const body = JSON.parse(b) as { input: Array<Record<string, unknown>> };
      bodies.push(body);
      const toolDone = body.input.some((i) => i.type === 'function_call_output');
      const n = bodies.length;
      const item = toolDone
        ? { type: 'message', role: 'assistant', id: `msg_${n}`, content: [{ type: 'output_text', text: 'done' }] }
        : { type: 'function_call', id: `fc_${n}`, call_id: 'call_1', name: 'exec_command', arguments: JSON.stringify({ cmd: command }) };
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(
        sse([
          { type: 'response.created', response: { id: `resp_${n}` } },
          { type: 'response.output_item.done', item },
          { type: 'response.completed', response: { id: `resp_${n}`, usage } },
        ]),
      );
    });
  });
  return { server, bodies };
}
