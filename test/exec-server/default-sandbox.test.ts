/**
 * The default sandbox (`--default-sandbox`), from outside: a request that carries no `sandbox`
 * runs in Codex's workspace-write profile over its cwd by default (fs/*: over the server's working
 * directory; read-only when that is /), in read-only with `read-only`, and unsandboxed, as Codex
 * does, only with `none`. Each outside write is checked on the host (the outside directory is
 * writable by this user, and `none` does write there: a refusal is the sandbox's).
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { b64, Client } from './client';

const scene = makeScene('exec-default');
afterAll(() => scene.cleanup());
const uri = (p: string) => 'file://' + p;

let n = 0;
/** A process/start without a sandbox, writing one file inside the workspace and one outside. */
function start(c: Client) {
  n++;
  const inside = path.join(scene.ws, `in-${n}`);
  const outside = path.join(scene.out, `out-${n}`);
  const processId = `d${n}`;
  const req = c.request('process/start', {
    processId,
    argv: ['sh', '-c', `echo in > ${inside}; echo out > ${outside}; true`],
    cwd: uri(scene.ws),
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    pipeStdin: false,
  });
  return { inside, outside, processId, req };
}

async function client(args: string[], cwd = '/'): Promise<Client> {
  const c = new Client('ours', {}, args, cwd);
  await c.init();
  return c;
}

describe.skipIf(!caps.linux || !caps.userns)(
  `exec-server --default-sandbox: a request without a sandbox${caps.userns ? '' : ' (skipped: no unprivileged user namespaces)'}`,
  () => {
    it('process/start: workspace-write over its cwd by default, read-only, or unsandboxed with none', async () => {
      const expectations: Array<[string[], string, boolean, boolean]> = [
        [[], 'linuxSeccomp', true, false],
        [['--default-sandbox', 'workspace-write'], 'linuxSeccomp', true, false],
        [['--default-sandbox', 'read-only'], 'linuxSeccomp', false, false],
        [['--default-sandbox', 'none'], 'none', true, true],
      ];
      for (const [args, sandboxType, inLands, outLands] of expectations) {
        const c = await client(args);
        try {
          const s = start(c);
          expect((await s.req).result, args.join(' ')).toEqual({ processId: s.processId, sandboxType });
          await c.closed(s.processId);
          expect(fs.existsSync(s.inside), `${args.join(' ')}: inside`).toBe(inLands);
          expect(fs.existsSync(s.outside), `${args.join(' ')}: outside`).toBe(outLands);
        } finally {
          await c.close();
        }
      }
    });

    it('fs/*: the default over the server working directory (read-only over /); none writes anywhere', async () => {
      const inWs = await client([], scene.ws);
      const atRoot = await client([]);
      const none = await client(['--default-sandbox', 'none']);
      try {
        const write = (c: Client, p: string) => c.request('fs/writeFile', { path: uri(p), dataBase64: b64('x') });
        const a = path.join(scene.ws, 'fs-a');
        const b = path.join(scene.out, 'fs-b');
        expect((await write(inWs, a)).error).toBeUndefined();
        expect((await write(inWs, b)).error?.message).toMatch(/Read-only file system|Permission denied/);
        const c = path.join(scene.ws, 'fs-c');
        expect((await write(atRoot, c)).error?.message).toMatch(/Read-only file system|Permission denied/);
        // Reads are not narrowed by the default (it reads everything).
        const read = await atRoot.request('fs/readFile', { path: uri(path.join(scene.out, 'secret.txt')) });
        expect(Buffer.from(read.result!.dataBase64 as string, 'base64').toString()).toBe('top secret');
        const d = path.join(scene.out, 'fs-d');
        expect((await write(none, d)).error).toBeUndefined();
        expect(fs.readFileSync(a, 'utf8')).toBe('x');
        expect(fs.readFileSync(d, 'utf8')).toBe('x');
        expect(fs.existsSync(b)).toBe(false);
        expect(fs.existsSync(c)).toBe(false);
      } finally {
        await inWs.close();
        await atRoot.close();
        await none.close();
      }
    });
  },
);
