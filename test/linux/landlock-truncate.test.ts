/**
 * FS-13 below Landlock ABI 3 (Debian 12's 6.1 has ABI 2): truncation is not a Landlock right
 * there, so truncate(2) and open(O_RDONLY|O_TRUNC) of any file the uid may write, outside the
 * writable roots too, would go through. Landlock mode's path supervisor carries out those calls
 * itself, inside the writable roots only, so the report no longer lists truncation as a gap and
 * the run needs no `degraded` for it. Run on this host with PSB_LANDLOCK_ABI_MAX=2 (the whole
 * host process then sees ABI 2: probe, plan, filter and report), in a node process of its own.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps, MODES } from '../helpers/capabilities';
import { DIST_INDEX, makeScene, NODE, PYTHON, type Scene } from '../helpers/sandbox';

const scenes: Scene[] = [];
afterAll(() => {
  for (const s of scenes) s.cleanup();
});

// In the sandbox: each way to truncate a file, printed as ok or the errno's name.
const PROBE = `
import errno, os, sys
def attempt(f):
    try:
        f(); return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
out = []
for p in sys.argv[1:]:
    out.append(attempt(lambda: os.truncate(p, 0)))
    out.append(attempt(lambda: os.close(os.open(p, os.O_RDONLY | os.O_TRUNC))))
print(' '.join(out))
`;

const HOST = `
const lib = require(${JSON.stringify(DIST_INDEX)});
const [ws, outside, python, probe] = process.argv.slice(2);
(async () => {
  const policy = { mode: 'landlock', filesystem: { write: [ws] } };
  const res = {};
  try {
    const r = await lib.run(python, ['-c', probe, outside, ws + '/in.txt'], { cwd: ws, env: { PATH: '/usr/bin:/bin' }, policy });
    res.out = r.stdout.trim();
    res.abi = r.enforcement.mechanisms.landlockAbi;
    res.gaps = r.enforcement.gaps;
    res.degradedBy = r.enforcement.degradedBy;
    res.filesystemWrite = r.enforcement.guarantees.filesystemWrite;
  } catch (e) {
    res.error = e.code + ': ' + e.message;
  }
  console.log(JSON.stringify(res));
})();
`;

const landlockSkip = MODES.find((m) => m.name === 'landlock')!.skip;

describe.runIf(caps.linux)('FS-13 below Landlock ABI 3: truncation held by the path supervisor', () => {
  it.skipIf(landlockSkip ?? (caps.metadataSupervisor ? undefined : 'needs seccomp user notification') ?? (caps.python ? undefined : 'needs python3'))(
    'ABI 2 emulated: truncate(2) and O_RDONLY|O_TRUNC fail outside the writable roots, work inside, and no degraded is needed for it',
    () => {
      const scene = makeScene('truncate-abi2');
      scenes.push(scene);
      const outside = path.join(scene.out, 'keep.txt');
      fs.writeFileSync(outside, 'host data');
      fs.chmodSync(outside, 0o666); // writable by the uid: only the sandbox stands in the way
      fs.writeFileSync(path.join(scene.ws, 'in.txt'), 'workspace data');
      const host = path.join(scene.root, 'truncate-host.js');
      fs.writeFileSync(host, HOST);
      const r = spawnSync(NODE, [host, scene.ws, outside, PYTHON, PROBE], {
        encoding: 'utf8',
        timeout: 60_000,
        env: { ...process.env, PSB_LANDLOCK_ABI_MAX: '2' },
      });
      const res = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as Record<string, unknown>;
      expect(res.error, r.stderr).toBeUndefined();
      expect(res.abi).toBe(Math.min(2, caps.landlockAbi));
      // Outside refused both ways (EACCES, Landlock's errno), inside both work (the control).
      expect(res.out).toBe('EACCES EACCES ok ok');
      // Checked from outside: the host file is untouched; the workspace file was truncated.
      expect(fs.readFileSync(outside, 'utf8')).toBe('host data');
      expect(fs.statSync(path.join(scene.ws, 'in.txt')).size).toBe(0);
      // The report: no truncation gap, writes enforced, nothing that needed degraded for it.
      expect((res.gaps as string[]).join('\n')).not.toMatch(/truncat/);
      expect(res.filesystemWrite).toBe('enforced');
      expect((res.degradedBy as string[]).join('\n')).not.toMatch(/truncat/);
    },
  );
});
