/**
 * A file written and then executed at once: `cp` of a binary, a linker's output, a tool that
 * installs a script and runs it. Landlock mode with read-only carve-outs opens every file for
 * writing in the host and hands the command the fd (native/linux/supervisor/answer_later.cc). The host's own
 * copy of that open file used to live until the supervisor thread ran again after the handover,
 * so a command that wrote, closed and executed the file before then got ETXTBSY ("Text file
 * busy"): 165 of 300 runs of the loop below on a busy 2-CPU host. Now the host drops its copy
 * before the command runs again, for files that can be executed. Isolated mode (the kernel's own
 * open) is the control: none may fail in either mode.
 */
import fs from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { makeScene, py, type Scene } from '../helpers/sandbox';

const landlockSkip = caps.metadataSupervisor
  ? undefined
  : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode has no path supervisor';
// eslint-disable-next-line no-console
if (landlockSkip) console.warn(`[landlock-exec-written] SKIPPING the Landlock-mode case: ${landlockSkip}`);
// eslint-disable-next-line no-console
if (!caps.python) console.warn('[landlock-exec-written] SKIPPING: no system python3');

// Each round: a child creates an executable (mode 0755), writes /bin/true into it, closes it and
// executes it straight away, with no other call in between. Exit 100 + errno when execve fails.
const LOOP = `import os
src = open('/bin/true', 'rb').read()
bad = []
for i in range(300):
  p = 'x%d' % i
  pid = os.fork()
  if pid == 0:
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o755)
    os.write(fd, src)
    os.close(fd)
    try:
      os.execv(p, [p])
    except OSError as e:
      os._exit(100 + e.errno)
  _, st = os.waitpid(pid, 0)
  if st != 0: bad.append(os.waitstatus_to_exitcode(st))
  os.unlink(p)
print('ran 300, failed', len(bad), sorted(set(bad)))`;

describe.runIf(caps.linux && caps.python)('a file written and executed at once', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const s = skip ?? (mode === 'landlock' ? landlockSkip : undefined);
    let scene: Scene;
    let policy: SandboxPolicy;

    beforeEach(() => {
      scene = makeScene(`exec-written-${mode}`);
      // .git/hooks is a carve-out: Landlock mode supervises every open for writing.
      fs.mkdirSync(`${scene.ws}/.git/hooks`, { recursive: true });
      policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
    });
    afterEach(() => scene.cleanup());

    it.skipIf(s)('300 rounds of write, close, execve: never ETXTBSY', async () => {
      const r = await py(LOOP, [], { cwd: scene.ws, policy, timeout: 120_000 });
      if (mode === 'landlock') expect(r.enforcement.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
      expect([r.stdout, r.stderr]).toEqual(['ran 300, failed 0 []\n', '']);
      // Outside: every file was made and removed in the workspace.
      expect(fs.readdirSync(scene.ws).filter((n) => /^x\d+$/.test(n))).toEqual([]);
    }, 150_000);
  });
});
