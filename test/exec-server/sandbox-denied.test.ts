/**
 * process/exited.sandboxDenied is judged from the command's output (the denial text on stderr),
 * so it must be computed once that output has been read, not at the exit, when it may still sit
 * in the pipe. A denied write is repeated many times: every run reports true, in process/exited
 * and in process/read alike; an allowed command reports false (positive control).
 */
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { Client, workspaceWrite } from './client';

const scene = makeScene('exec-denied');
afterAll(() => scene.cleanup());
const uri = (p: string) => 'file://' + p;
const RUNS = 20;

describe.skipIf(!caps.linux || !caps.userns)(
  `exec-server: sandboxDenied is judged on the complete output${caps.userns ? '' : ' (skipped: no unprivileged user namespaces)'}`,
  () => {
    it(`a denied write reports sandboxDenied true in all ${RUNS} runs (exited and read agree); an allowed one false`, async () => {
      const c = new Client('ours');
      await c.init();
      try {
        const run = async (id: string, target: string) => {
          const r = await c.request('process/start', {
            processId: id,
            argv: ['touch', target],
            cwd: uri(scene.ws),
            env: { PATH: '/usr/bin:/bin' },
            tty: false,
            pipeStdin: false,
            sandbox: workspaceWrite(scene.ws),
          });
          expect(r.error, id).toBeUndefined();
          await c.closed(id);
          const exited = c.events(id).find((e) => e.method === 'process/exited')!.params!;
          const read = (await c.request('process/read', { processId: id })).result!;
          expect(read.sandboxDenied, `${id}: process/read agrees with process/exited`).toBe(exited.sandboxDenied);
          return { exitCode: exited.exitCode, denied: exited.sandboxDenied, stderr: c.output(id).stderr ?? '' };
        };
        const results = [];
        for (let i = 0; i < RUNS; i++) results.push(await run(`denied-${i}`, path.join(scene.out, `denied-${i}`)));
        for (const r of results) expect(r.stderr).toMatch(/Read-only file system|Permission denied/);
        expect(results.map((r) => r.denied)).toEqual(Array(RUNS).fill(true));
        const allowed = await run('allowed', path.join(scene.ws, 'allowed'));
        expect(allowed).toMatchObject({ exitCode: 0, denied: false });
      } finally {
        await c.close();
      }
    });
  },
);
