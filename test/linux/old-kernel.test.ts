/**
 * Debian 11's kernel (5.10), emulated on this host: a seccomp filter installed before Node starts
 * answers what 5.10 answers (mount_setattr and landlock_create_ruleset: ENOSYS; close_range with
 * CLOSE_RANGE_CLOEXEC: EINVAL). The kernel matrix's v5.10 row runs the real kernel; this runs on
 * every host, as root and as a user.
 *
 * Found there: even `policy: null` failed (close_range(2): EINVAL, the command's fds are marked
 * close-on-exec with a 5.11 flag), and auto mode picked isolated mode, whose spawn then failed in
 * its mount setup. Now plain runs mark each fd from /proc/self/fd, and mode selection refuses
 * isolated mode by name (ENOT_ENFORCED) before anything runs.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps } from '../helpers/capabilities';
import { BASE_ENV, DIST_INDEX, makeScene, NODE, PYTHON, type Scene } from '../helpers/sandbox';

// Installs the filter (no_new_privs, then SECCOMP_MODE_FILTER) and execs argv[1:].
const SHIM = String.raw`
import ctypes, os, platform, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
arch = {'x86_64': 0xc000003e, 'aarch64': 0xc00000b7}[platform.machine()]
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO = 0x7fff0000, 0x00050000
s = lambda code, k: struct.pack('HBBI', code, 0, 0, k)
j = lambda k, jt, jf, code=JEQ: struct.pack('HBBI', code, jt, jf, k)
prog = [s(LD, 4), j(arch, 1, 0), s(RET, ALLOW), s(LD, 0),
        j(442, 0, 1), s(RET, ERRNO | 38),          # mount_setattr (5.12): ENOSYS
        j(444, 0, 1), s(RET, ERRNO | 38),          # landlock_create_ruleset (5.13): ENOSYS
        j(436, 0, 3), s(LD, 32), j(4, 0, 1, JSET), s(RET, ERRNO | 22),  # close_range(.., CLOEXEC): EINVAL
        s(RET, ALLOW)]
buf = ctypes.create_string_buffer(b''.join(prog))
class Fprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]
fp = Fprog(len(prog), ctypes.addressof(buf))
if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fp), 0, 0) != 0:
    sys.exit('seccomp: errno %d' % ctypes.get_errno())
os.execv(sys.argv[1], sys.argv[1:])
`;

// In the emulated 5.10: what probe() says, auto and isolated mode refused (nothing ran), a plain
// run with an extra host fd open that it must not inherit.
const SCRIPT = `
const fs = require('fs');
const lib = require(${JSON.stringify(DIST_INDEX)});
const [ws, out] = process.argv.slice(1);
(async () => {
  const r = { probe: lib.probe() };
  for (const policy of [{ filesystem: { write: [ws] } }, { filesystem: { write: [ws] }, mode: 'isolated' }, { filesystem: { write: [ws] }, degraded: true }]) {
    try {
      await lib.run('/bin/sh', ['-c', 'touch ' + ws + '/ran; touch ' + out + '/ran'], { policy, env: ${JSON.stringify(BASE_ENV)} });
      (r.refusals ??= []).push({ ran: true });
    } catch (e) {
      (r.refusals ??= []).push({ code: e.code, message: e.message });
    }
  }
  const leak = fs.openSync('/dev/null', 'r');
  try {
    const p = await lib.run('/bin/sh', ['-c', 'echo plain; ls /proc/self/fd'], { policy: null, env: ${JSON.stringify(BASE_ENV)} });
    r.plain = { stdout: p.stdout, leak };
  } catch (e) {
    r.plain = { code: e.code, message: e.message };
  }
  console.log(JSON.stringify(r));
})();
`;

const scenes: Scene[] = [];
afterAll(() => scenes.forEach((s) => s.cleanup()));

function underShim(scene: Scene): Record<string, any> {
  const script = path.join(scene.root, 'old-kernel.js');
  fs.writeFileSync(script, SCRIPT);
  const r = spawnSync(PYTHON, ['-c', SHIM, NODE, script, scene.ws, scene.out], { encoding: 'utf8', timeout: 120_000 });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').pop()!);
}

describe.runIf(caps.linux && caps.python !== null && ['x64', 'arm64'].includes(process.arch))('a 5.10 kernel (emulated with a seccomp filter)', () => {
  it('probe() says nothing can sandbox; auto and isolated mode are refused by name and nothing runs', () => {
    const scene = makeScene('old-kernel');
    scenes.push(scene);
    const r = underShim(scene);
    expect(r.probe.features).toMatchObject({ mountApi: false, isolatedMode: false, landlockMode: false, landlockAbi: 0 });
    expect(r.probe.defaultMode).toBe(null);
    expect(r.refusals).toHaveLength(3);
    for (const f of r.refusals) {
      expect(f).toMatchObject({ code: 'ENOT_ENFORCED', message: expect.stringMatching(/isolated mode needs Linux 5\.12.*upgrade the kernel/) });
    }
    // Checked from outside: neither write happened.
    expect(fs.existsSync(`${scene.ws}/ran`)).toBe(false);
    expect(fs.existsSync(`${scene.out}/ran`)).toBe(false);
  });

  it('policy: null still runs (fds marked close-on-exec one by one) and inherits only its stdio', () => {
    const scene = makeScene('old-kernel-plain');
    scenes.push(scene);
    const r = underShim(scene);
    expect(r.plain.code, r.plain.message).toBeUndefined();
    const lines: string[] = r.plain.stdout.trim().split('\n');
    expect(lines[0]).toBe('plain');
    // 0-2 and the directory ls reads (3); not the host's fd `leak` nor anything else of Node's.
    const fds = lines.slice(1).map(Number);
    expect(fds).not.toContain(r.plain.leak);
    expect(Math.max(...fds)).toBeLessThanOrEqual(3);
  });

  it('control: without the filter this host has the mount API', () => {
    const r = spawnSync(NODE, ['-e', `require(${JSON.stringify(DIST_INDEX)}).probe().features.mountApi === true || process.exit(3)`]);
    expect(r.status).toBe(0);
  });
});
