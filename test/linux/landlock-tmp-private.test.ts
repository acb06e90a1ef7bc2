/**
 * Landlock mode's private TMPDIR (and the private caches in it) is not readable by another
 * Landlock-mode sandbox of the same user: not one that started before it (its TMPDIR did not
 * exist when that one was planned), not one that started after. Controls: each reads its own
 * TMPDIR, and a host file in /tmp made before the run stays readable. Isolated mode's /tmp is a
 * tmpfs of its own (test/linux/fs.test.ts and others), so this is Landlock mode only.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { TMP_PARENT_PREFIX } from '../../lib/platform/linux/landlock-rules';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { eventually, makeScene, sh, type Scene } from '../helpers/sandbox';

const landlock = MODES.find((m) => m.name === 'landlock')!;

/** Waits (bounded) for a file in the cwd; the scripts share the workspace. */
const waitFor = (name: string) => `i=0; while [ ! -s ${name} ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done`;

/** The writer: a secret and a private cache entry in its TMPDIR, then it waits for the readers. */
const WRITER = [
  'echo s3cret-of-a > "$TMPDIR/secret"',
  'mkdir -p "$TMPDIR/caches/npm" && echo cache-of-a > "$TMPDIR/caches/npm/blob"',
  'echo "own-secret:$(cat "$TMPDIR/secret")"',
  'echo "$TMPDIR" > a-tmpdir.part && mv a-tmpdir.part a-tmpdir',
  waitFor('b-done-1'),
  waitFor('b-done-2'),
].join('\n');

/** The reader ($1: its number): tries the writer's TMPDIR by path and by listing, and its own. */
const READER = (hostFile: string) =>
  [
    'echo started > b-started-$1',
    waitFor('a-tmpdir'),
    'A=$(cat a-tmpdir)',
    'echo mine > "$TMPDIR/mine" && echo "own:$(cat "$TMPDIR/mine")"',
    `echo "host:$(cat ${hostFile})"`,
    'cat "$A/secret" && echo READ-SECRET',
    'cat "$A/caches/npm/blob" && echo READ-CACHE',
    'ls -a "$A" | sed "s/^/name:/"',
    'ls -a "$(dirname "$A")" | sed "s/^/parent:/"',
    'echo done; echo done > b-done-$1',
  ].join('\n');

describe.runIf(caps.linux)('Landlock mode: the TMPDIR is private among sandboxes of one user', () => {
  let scene: Scene;
  let hostFile: string;
  beforeEach((ctx) => {
    if (landlock.skip) ctx.skip(landlock.skip);
    scene = makeScene('tmp-private');
    hostFile = path.join(os.tmpdir(), `psb-tmp-private-${crypto.randomBytes(6).toString('hex')}`);
    fs.writeFileSync(hostFile, 'host-file', { mode: 0o644 });
  });
  afterEach(() => {
    scene?.cleanup();
    if (hostFile) fs.rmSync(hostFile, { force: true });
  });

  it('a reader started before the writer and one started after cannot read its secret or its cache', async () => {
    const plain = modePolicy('landlock', { filesystem: { write: [scene.ws] } });
    // The second reader has a deny-read path: listings then go through the supervisor, which
    // refuses the other runs' TMPDIRs too (where it can take the command's directory fds).
    const withDeny = modePolicy('landlock', { filesystem: { write: [scene.ws], denyRead: [path.join(scene.out, 'secret.txt')] } });
    const opts = { cwd: scene.ws, timeout: 120_000 };
    const before = sh(READER(hostFile).replaceAll('$1', '1'), { ...opts, policy: plain });
    expect(await eventually(() => fs.existsSync(path.join(scene.ws, 'b-started-1')), 60_000), 'the first reader started').toBe(true);
    const writer = sh(WRITER, { ...opts, policy: plain });
    expect(await eventually(() => fs.existsSync(path.join(scene.ws, 'a-tmpdir')), 60_000), 'the writer wrote its secret').toBe(true);
    const aTmp = fs.readFileSync(path.join(scene.ws, 'a-tmpdir'), 'utf8').trim();
    // The secret is really there, outside, while the readers look.
    expect(fs.readFileSync(path.join(aTmp, 'secret'), 'utf8')).toBe('s3cret-of-a\n');
    const after = await sh(READER(hostFile).replaceAll('$1', '2'), { ...opts, policy: withDeny });
    const [b1, a] = await Promise.all([before, writer]);

    expect(a.stdout, a.stderr).toContain('own-secret:s3cret-of-a'); // the writer reads its own
    for (const [name, r] of [['started before', b1], ['started after', after]] as const) {
      expect(r.stdout, `${name}: ${r.stderr}`).toContain('done');
      expect(r.stdout, name).toContain('own:mine'); // its own TMPDIR
      expect(r.stdout, name).toContain('host:host-file'); // /tmp made before the run
      for (const leak of ['s3cret-of-a', 'READ-SECRET', 'cache-of-a', 'READ-CACHE']) expect(r.stdout, `${name}: ${leak}`).not.toContain(leak);
      expect(r.enforcement.mechanisms.tmp, name).toBe('private');
      expect(r.enforcement.gaps.join('\n'), name).not.toMatch(/readable by other Landlock-mode sandboxes/);
    }
    // Listing: refused where the supervisor carries listings out (a deny-read path in the
    // policy); otherwise the names are visible, never the contents, and the report says so.
    if (caps.listSupervised) {
      expect(after.stdout).not.toMatch(/^name:secret$/m);
      expect(after.stdout).not.toMatch(/^parent:process-sandbox-tmp-/m);
      expect(after.enforcement.gaps.join('\n')).not.toMatch(/TMPDIRs of this user .* can be listed/);
    }
    expect(b1.enforcement.gaps.join('\n')).toMatch(/names in other Landlock-mode sandboxes' TMPDIRs of this user \(.*\) can be listed, not read/);
  }, 240_000);

  // The directory for TMPDIRs is the user's own, mode 0700; one that is not (made first by someone
  // else, or opened up) is not used, and then nothing may call the TMPDIR private.
  it('where that directory cannot be trusted, the TMPDIR is made beside it and the report says it is not private', async () => {
    const hostTmp = path.join(scene.root, 'host-tmp');
    fs.mkdirSync(hostTmp, { mode: 0o700 });
    const parent = path.join(hostTmp, `${TMP_PARENT_PREFIX}${process.getuid?.() ?? 0}`);
    fs.mkdirSync(parent);
    fs.chmodSync(parent, 0o755);
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = hostTmp; // os.tmpdir() of the host process
    let r: Awaited<ReturnType<typeof sh>>;
    try {
      r = await sh('echo "$TMPDIR"', { cwd: scene.ws, policy: modePolicy('landlock', { filesystem: { write: [scene.ws] } }) });
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
    expect(path.dirname(r.stdout.trim()), r.stderr).toBe(hostTmp);
    expect(fs.readdirSync(parent)).toEqual([]);
    expect(r.enforcement.mechanisms.tmp).toBe('per-run TMPDIR, readable by other Landlock-mode sandboxes of this user');
    expect(r.enforcement.gaps.join('\n')).toContain(
      `the TMPDIR (and the private caches in it) is readable by other Landlock-mode sandboxes of this user: it was made in ${hostTmp}`,
    );
    const caches = Object.values(r.enforcement.mechanisms.caches as Record<string, string>).join('\n');
    expect(caches).not.toContain('(private');
    expect(caches).toContain('in the TMPDIR, which is not private');
  });
});
