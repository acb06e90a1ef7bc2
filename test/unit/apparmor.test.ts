/** Ubuntu's AppArmor restriction on user namespaces: the profile we print and the hint refusals give. */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  apparmorConfinedHint,
  apparmorConfinement,
  apparmorHint,
  apparmorParserKnowsUserns,
  apparmorProfile,
  apparmorRestrictsUserns,
} from '../../lib/platform/linux/apparmor';

const CLI = path.join(__dirname, '..', '..', 'dist', 'cli.js');

describe('apparmor-profile', () => {
  it('grants userns to exactly the binary named, unconfined otherwise, with install steps as comments', () => {
    const text = apparmorProfile('/opt/node-v20/bin/node', true);
    const rules = text.split('\n').filter((l) => !l.startsWith('#'));
    expect(rules).toContain('profile process-sandbox-opt.node-v20.bin.node /opt/node-v20/bin/node flags=(unconfined) {');
    expect(rules).toContain('  userns,');
    expect(rules[0]).toBe('abi <abi/4.0>,');
    // Nothing but comments before the preamble: the whole output can go into the file it names.
    expect(text).toMatch(/^(#[^\n]*\n)+abi /);
    expect(text).toContain('sudo apparmor_parser -r /etc/apparmor.d/process-sandbox-opt.node-v20.bin.node');
  });

  it('for a parser without abi/4.0 (AppArmor 3, Debian 12): abi 3.0, no userns rule, still unconfined, and says why', () => {
    const text = apparmorProfile('/usr/local/bin/node', false);
    const rules = text.split('\n').filter((l) => !l.startsWith('#'));
    expect(rules[0]).toBe('abi <abi/3.0>,');
    expect(rules).toContain('profile process-sandbox-usr.local.bin.node /usr/local/bin/node flags=(unconfined) {');
    expect(rules.join('\n')).not.toMatch(/userns,|abi\/4\.0/);
    expect(text).toMatch(/predates the userns rule/);
    expect(text).toMatch(/^(#[^\n]*\n)+abi /);
  });

  it('picks the variant by the abi files the parser ships: 4.0 present, or no parser at all, means userns', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-aa-abi-'));
    try {
      expect(apparmorParserKnowsUserns(dir)).toBe(true); // no parser: print Ubuntu's text
      fs.writeFileSync(path.join(dir, '3.0'), '');
      expect(apparmorParserKnowsUserns(dir)).toBe(false); // Debian 12's apparmor 3.0.8
      fs.writeFileSync(path.join(dir, '4.0'), '');
      expect(apparmorParserKnowsUserns(dir)).toBe(true); // Ubuntu 24.04's apparmor 4
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("says plainly, in the header of both variants, that every program the binary runs gets the right, and where to attach it instead", () => {
    for (const userns of [true, false]) {
      const header = apparmorProfile('/usr/bin/node', userns)
        .split('\n')
        .filter((l) => l.startsWith('#'))
        .join('\n');
      expect(header).toContain('# WARNING: every program this binary runs, for every user of this host, gets the same right:');
      expect(header).toMatch(/undoes Ubuntu's restriction host-wide/);
      expect(header).toMatch(/an Electron app's own executable, or a copy of Node at a path only the\n# application uses: --node \/opt\/myapp\/bin\/node\), not to a Node shared by the host/);
      // Before the install steps: read before anything is installed.
      expect(header.indexOf('WARNING')).toBeLessThan(header.indexOf('# Install'));
    }
  });

  it('refuses a path AppArmor would read differently (relative, spaces, rule syntax)', () => {
    for (const bad of ['node', '/opt/my node/bin/node', '/opt/x,y/node', '/opt/{a}/node']) {
      expect(() => apparmorProfile(bad), bad).toThrow(/must be absolute/);
    }
  });

  it('the CLI writes it for the running Node by its real path, and refuses a missing --node (125)', () => {
    const ok = spawnSync(process.execPath, [CLI, 'apparmor-profile'], { encoding: 'utf8' });
    expect(ok.status).toBe(0);
    expect(ok.stdout).toContain(` ${fs.realpathSync(process.execPath)} flags=(unconfined) {`);
    expect(ok.stdout.includes('  userns,')).toBe(apparmorParserKnowsUserns()); // this host's parser decides
    const eq = spawnSync(process.execPath, [CLI, 'apparmor-profile', `--node=${process.execPath}`], { encoding: 'utf8' });
    expect(eq.stdout).toBe(ok.stdout);
    const bad = spawnSync(process.execPath, [CLI, 'apparmor-profile', '--node', '/nonexistent/node'], { encoding: 'utf8' });
    expect(bad.status).toBe(125);
    expect(bad.stdout).toBe('');
    expect(bad.stderr).toMatch(/--node \/nonexistent\/node: ENOENT/);
  });

  it('the help gives the same warning and shows --node with an application-owned path; the top-level help points at it', () => {
    const help = spawnSync(process.execPath, [CLI, 'apparmor-profile', '--help'], { encoding: 'utf8' });
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('WARNING: every program this binary runs, for every user of this host, gets the same right');
    expect(help.stdout).toContain('  Example: process-sandbox apparmor-profile --node /opt/myapp/bin/node\n');
    expect(help.stdout).toMatch(/^ {2}--node <path> {10}the Node binary to write it for/m);
    const top = spawnSync(process.execPath, [CLI, '--help'], { encoding: 'utf8' });
    expect(top.stdout).toMatch(/apparmor-profile +print an AppArmor profile that lets a Node binary, and all it runs, use user namespaces \(see its --help\)/);
  });
});

describe('the restriction is named when it is on', () => {
  it('reads the sysctl: 1 is on; 0 or absent is off', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-aa-'));
    try {
      fs.writeFileSync(path.join(dir, 'on'), '1\n');
      fs.writeFileSync(path.join(dir, 'off'), '0\n');
      expect(apparmorRestrictsUserns(path.join(dir, 'on'))).toBe(true);
      expect(apparmorRestrictsUserns(path.join(dir, 'off'))).toBe(false);
      expect(apparmorRestrictsUserns(path.join(dir, 'absent'))).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reads this process's AppArmor label: a profile in enforce or complain mode is named; unconfined, an unconfined-mode profile, another LSM's label or none is not", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-aa-label-'));
    const f = (name: string, text: string) => {
      fs.writeFileSync(path.join(dir, name), text);
      return path.join(dir, name);
    };
    try {
      expect(apparmorConfinement([f('a', 'psb-emulated-userns-restriction (enforce)\n')])).toBe('psb-emulated-userns-restriction (enforce)');
      expect(apparmorConfinement([f('b', 'snap.node.node (complain)\0')])).toBe('snap.node.node (complain)');
      expect(apparmorConfinement([f('c', 'unconfined\n')])).toBe(null);
      expect(apparmorConfinement([f('d', 'process-sandbox-usr.bin.node (unconfined)\n')])).toBe(null);
      expect(apparmorConfinement([f('e', 'system_u:system_r:unconfined_t:s0\n')])).toBe(null);
      // The first file missing (before 5.8): the shared one is read.
      expect(apparmorConfinement([path.join(dir, 'absent'), path.join(dir, 'a')])).toBe('psb-emulated-userns-restriction (enforce)');
      expect(apparmorConfinement([path.join(dir, 'absent')])).toBe(null);
      expect(apparmorConfinedHint('x (enforce)')).toMatch(/AppArmor profile x \(enforce\).*process-sandbox apparmor-profile/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the hint names the sysctl and both ways out', () => {
    expect(apparmorHint()).toMatch(/kernel\.apparmor_restrict_unprivileged_userns=1/);
    expect(apparmorHint()).toMatch(/process-sandbox apparmor-profile/);
    expect(apparmorHint()).toMatch(/set the sysctl to 0/);
  });
});
