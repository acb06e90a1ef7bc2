/**
 * A writable root that another user owns (a root host serving an unprivileged user's workspace,
 * or an unprivileged host given a root-owned directory), without the protected names in it.
 *
 * Isolated mode holds a missing protected name (.aws, .git, ...) and a missing deny-read name with
 * a placeholder made by the sandbox's init. Init's capabilities do not reach a directory whose
 * owner is not mapped into the sandbox's user namespace, so it cannot create the placeholder
 * there; nor can the command (same ids, no capabilities): there is nothing to hold, and the
 * command runs. It reads the workspace; its writes there are refused by the directory's own
 * modes (the command has no capability to pass them), which is checked from outside, along with
 * the absence of any placeholder left behind. Positive control: the same command in a workspace
 * the host's user owns writes its file.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { makeScene, sh } from '../helpers/sandbox';

const scene = makeScene('foreign-ws');
afterAll(() => scene.cleanup());

/** A directory another user owns, readable and not writable by us, with no protected names; or why there is none. */
function foreignDir(): { dir: string } | { skip: string } {
  if (caps.root) {
    const dir = path.join(scene.root, 'foreign');
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'readme'), 'hello\n');
    fs.chownSync(path.join(dir, 'readme'), 65534, 65534);
    fs.chownSync(dir, 65534, 65534);
    fs.chmodSync(dir, 0o755);
    return { dir };
  }
  // Unprivileged: a root-owned directory that is already there (we cannot make one).
  const dir = '/srv';
  try {
    const st = fs.statSync(dir);
    const names = fs.readdirSync(dir);
    if (st.uid === 0 && (st.mode & 0o022) === 0 && !names.some((n) => n.startsWith('.'))) return { dir };
    return { skip: `${dir} is not a root-owned, 0755, dot-free directory here` };
  } catch (e) {
    return { skip: `${dir}: ${(e as Error).message}` };
  }
}

const foreign = foreignDir();
const SCRIPT = 'ls -a >/dev/null && echo listed; (echo x > f) 2>/dev/null || echo write-refused; mkdir .aws 2>/dev/null || echo aws-refused; echo done';

for (const m of MODES) {
  const why = m.skip ?? ('skip' in foreign ? foreign.skip : undefined);
  describe.skipIf(why !== undefined)(`${m.name} mode: a writable root another user owns${why ? ` (skipped: ${why})` : ''}`, () => {
    it('runs (no placeholder is needed where none can be made): reads work, writes are refused by the directory, nothing is left there', async () => {
      const dir = (foreign as { dir: string }).dir;
      const before = fs.readdirSync(dir).sort();
      const missingDeny = path.join(dir, `deny-${process.pid}`);
      const r = await sh(SCRIPT, { cwd: dir, policy: modePolicy(m.name, { filesystem: { write: [dir], denyRead: [missingDeny] } }) });
      expect(r.stderr).not.toMatch(/mount step/);
      expect(r.code).toBe(0);
      expect(r.stdout).toBe('listed\nwrite-refused\naws-refused\ndone\n');
      // Outside: no file, no .aws, no placeholder of the deny-read name; the directory is as it was.
      expect(fs.readdirSync(dir).sort()).toEqual(before);
      expect(fs.existsSync(path.join(dir, '.aws'))).toBe(false);
    });

    it('positive control: in a workspace of our own the same command writes its file', async () => {
      const own = fs.mkdtempSync(path.join(scene.ws, `own-${m.name}-`));
      const r = await sh(SCRIPT, { cwd: own, policy: modePolicy(m.name, { filesystem: { write: [own] } }) });
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^listed\n/);
      expect(r.stdout).not.toMatch(/write-refused/);
      expect(fs.readFileSync(path.join(own, 'f'), 'utf8')).toBe('x\n');
    });
  });
}
