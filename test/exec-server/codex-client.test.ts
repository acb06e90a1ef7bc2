/**
 * A real client: the pinned Codex CLI (@openai/codex 0.171.0, `codex exec`) drives our
 * exec-server. A stand-in model endpoint on loopback answers the first turn with one
 * `exec_command` tool call and the second with a message; Codex runs the call through our
 * server (CODEX_EXEC_SERVER_URL), sandboxed as `--sandbox workspace-write` asks. Checked from
 * outside: the write inside the workspace landed, the one outside did not (and the outside
 * directory is writable by this user: the refusal is the sandbox's), and every call Codex made on
 * our server was answered (its file probes, which carry no sandbox, run in our default sandbox).
 * Codex's danger-full-access sends no sandbox: our default sandbox confines it, and
 * `--default-sandbox none` gives Codex's unsandboxed behaviour back.
 *
 * Codex 0.171 sends no credential on CODEX_EXEC_SERVER_URL (checked: no Authorization header,
 * URL userinfo dropped), so this listener uses the explicit unsafe opt-out, on loopback, for the
 * time of the test; the README's recipe says so, and gives the stdio one (environments.toml) too.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { createExecServer } from '../../lib';
import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { OUR_CLI, REFERENCE_BIN, referenceSkip, standInModel } from './client';

const scene = makeScene('exec-codex');
afterAll(() => scene.cleanup());

describe.skipIf(!caps.linux || !caps.userns || referenceSkip !== undefined)(
  `the Codex CLI runs its tool call through our exec-server${referenceSkip ? ` (skipped: ${referenceSkip})` : caps.userns ? '' : ' (skipped: no unprivileged user namespaces)'}`,
  () => {
    /**
     * `codexSandbox`: Codex's --sandbox; `serverArgs`: our stdio server's flags; `outsideLands`:
     * whether the write outside the workspace is expected to land.
     */
    async function runCodex(transport: 'ws' | 'stdio', codexSandbox = 'workspace-write', serverArgs: string[] = [], outsideLands = false) {
      const tag = `${transport}-${codexSandbox}-${serverArgs.join('')}`;
      const inside = path.join(scene.ws, `inside-${tag}.txt`);
      const outside = path.join(scene.out, `outside-${tag}.txt`);
      // The outside directory is writable by this user: a refusal there is the sandbox's.
      fs.writeFileSync(path.join(scene.out, 'control.txt'), 'x');
      expect(fs.existsSync(path.join(scene.out, 'control.txt'))).toBe(true);
      fs.rmSync(path.join(scene.out, 'control.txt'));
      const command = `printf in > ${inside}; echo in=$?; printf out > ${outside}; echo out=$?`;
      const model = standInModel(command);
      await new Promise<void>((r) => model.server.listen(0, '127.0.0.1', r));
      const calls: Array<{ method: string; error?: { code: number; message: string } }> = [];
      const server = await createExecServer({
        transport: { kind: 'ws', host: '127.0.0.1', port: 0, dangerouslyAllowUnauthenticated: true },
        floorWrite: [scene.ws],
        observe: (e) => {
          calls.push(e);
        },
      });
      const home = fs.mkdtempSync('/var/tmp/psb-codex-home-');
      const stdioMarker = path.join(home, 'our-stdio-server-started');
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
          // Codex's workspace-write also asks for /tmp and $TMPDIR; the floor bounds writes to
          // the workspace (--floor-write), so the recipe turns those off.
          '[sandbox_workspace_write]',
          'exclude_slash_tmp = true',
          'exclude_tmpdir_env_var = true',
          '',
        ].join('\n'),
      );
      if (transport === 'stdio') {
        // The recipe without a listener: Codex starts our server itself and talks over its stdio.
        fs.writeFileSync(
          path.join(home, 'environments.toml'),
          [
            'default = "sandboxed"',
            '[[environments]]',
            'id = "sandboxed"',
            'program = "/bin/sh"',
            // The marker shows Codex really started our server (not its own executor).
            `args = ${JSON.stringify(['-c', `: > ${stdioMarker}; exec ${process.execPath} ${OUR_CLI} exec-server --listen stdio ${serverArgs.join(' ')}`])}`,
            '',
          ].join('\n'),
        );
      }
      try {
        const child = spawn(REFERENCE_BIN, ['exec', '--skip-git-repo-check', '--sandbox', codexSandbox, '-C', scene.ws, 'write the two files'], {
          cwd: scene.ws,
          stdio: ['ignore', 'pipe', 'pipe'],
          env: {
            PATH: process.env.PATH ?? '/usr/bin:/bin',
            HOME: home,
            CODEX_HOME: home,
            STANDIN_KEY: 'stand-in-key',
            ...(transport === 'ws' ? { CODEX_EXEC_SERVER_URL: `ws://127.0.0.1:${server.address!.port}` } : {}),
          },
        });
        let out = '';
        child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
        child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
        const code = await new Promise<number | null>((resolve) => {
          const t = setTimeout(() => child.kill('SIGKILL'), 120_000);
          child.once('exit', (c) => {
            clearTimeout(t);
            resolve(c);
          });
        });
        expect(code, out).toBe(0);
        // What the tool call printed went back to the model in the second turn.
        const output = model.bodies.flatMap((b) => b.input).find((i) => i.type === 'function_call_output');
        expect(JSON.stringify(output), out).toMatch(/in=0/);
        expect(JSON.stringify(output)).toMatch(outsideLands ? /out=0/ : /out=[1-9]/);
        expect(fs.readFileSync(inside, 'utf8')).toBe('in');
        expect(fs.existsSync(outside)).toBe(outsideLands);
        if (transport === 'stdio') {
          expect(fs.existsSync(stdioMarker)).toBe(true);
          return;
        }
        // The command really went through our server, sandboxed; nothing Codex asked failed.
        const methods = calls.map((c) => c.method);
        expect(methods).toContain('process/start');
        // Codex probes for files (AGENTS.md, .git, ...) without a sandbox: they run in the default
        // sandbox, within the floor's bounds, and answer (found, or -32004 not found); nothing
        // Codex asked failed otherwise.
        expect(calls.some((c) => c.method === 'fs/getMetadata' && !c.error)).toBe(true);
        expect(calls.filter((c) => c.error && c.error.code !== -32004), JSON.stringify(calls)).toEqual([]);
        // eslint-disable-next-line no-console
        console.log(`[codex-client] calls on our server: ${JSON.stringify(Object.entries(methods.reduce<Record<string, number>>((a, m) => ((a[m] = (a[m] ?? 0) + 1), a), {})))}`);
        // Under the floor environment/info does not advertise the two methods that take no sandbox,
        // and Codex does not call them.
        expect(methods).not.toContain('fs/watchMissing');
        expect(methods).not.toContain('environmentConfig/read');
      } finally {
        await server.close();
        await new Promise((r) => model.server.close(r));
        fs.rmSync(home, { recursive: true, force: true });
      }
    }

    it('CODEX_EXEC_SERVER_URL (ws, the floor): a write inside the workspace lands, one outside is refused; every call is answered', () => runCodex('ws'));
    it('environments.toml program (stdio, no listener): the same tool call, the same outcome', () => runCodex('stdio'));
    // Codex's danger-full-access sends no sandbox: our default sandbox (workspace-write over the
    // request's cwd) still confines it; --default-sandbox none gives Codex's own behaviour back.
    it('danger-full-access (no sandbox sent): our default sandbox keeps the outside write out', () => runCodex('stdio', 'danger-full-access'));
    it('danger-full-access with --default-sandbox none: unsandboxed, as Codex; the outside write lands', () =>
      runCodex('stdio', 'danger-full-access', ['--default-sandbox', 'none'], true));
  },
);
