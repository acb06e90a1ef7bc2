// Policy features in the macOS (Seatbelt) generator and planner, as profile text and
// -D parameters (every OS): missing protected names, git 'allow-init', .aws, the 'startup-files'
// preset at any depth, unix sockets by path, restricted reads' platform set, symlinked protected
// paths, and the report's gaps. Each rule has a negative control (absent without the option).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  buildSeatbeltProfile,
  normaliseDarwinPath,
  platformReadPaths,
  platformReadRules,
  startupAncestorsRegex,
  startupFilesRegex,
} from '../../lib/platform/darwin-profile';
import { isWithin } from '../../lib/paths';
import { planDarwinSpawn } from '../../lib/platform/darwin';
import { resolvePolicy } from '../../lib/permissions';
import type { BackendSpawnRequest } from '../../lib/backend';
import type { SandboxPolicy } from '../../lib/policy-types';
import type { ResolvedRules } from '../../lib/rules';
import { makeRules } from '../helpers/rules';

const rules = (over: Partial<ResolvedRules> = {}): ResolvedRules => makeRules(over);
const W = '/Users/dev/proj';
const available = { sandboxExecAvailable: true };

function paramFor(params: Record<string, string>, value: string): string {
  const hit = Object.entries(params).find(([, v]) => v === value);
  if (!hit) throw new Error(`no parameter with value ${value}: ${JSON.stringify(params)}`);
  return hit[0];
}
const hasValue = (params: Record<string, string>, value: string) => Object.values(params).includes(value);
/** A PROTECTED_n parameter (a denied path, not merely a frozen ancestor) has this value. */
const isProtected = (params: Record<string, string>, value: string) =>
  Object.entries(params).some(([k, v]) => /^PROTECTED_\d+$/.test(k) && v === value);

function request(r: ResolvedRules, over: Partial<BackendSpawnRequest> = {}): BackendSpawnRequest {
  return { file: '/bin/echo', argv: ['echo', 'hi'], env: { PATH: '/usr/bin:/bin' }, cwd: W, stdio: ['pipe', 'pipe', 'pipe'], rules: r, ...over };
}

const tmpDirs: string[] = [];
function workspace(): string {
  // Not under /tmp: these workspaces hold .git symlinks, and a sandboxed test running alongside
  // with /tmp as a writable root (Codex's workspace_write) would find them as nested repositories.
  const d = fs.realpathSync(fs.mkdtempSync(path.join('/var/tmp', 'psb-darwin-policy-')));
  tmpDirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

/** Resolve a real policy on this host and plan it for macOS (paths as Seatbelt will see them). */
function planFor(policy: SandboxPolicy, cwd: string) {
  const r = resolvePolicy(policy, cwd);
  return { rules: r, plan: planDarwinSpawn(request(r, { cwd }), available), built: buildSeatbeltProfile(r) };
}

describe('missing protected names are denied by name (no placeholders)', () => {
  it('a missing .git, .codex, .agents, .aws in a writable root cannot be created: literal, subpath and any-case denials', () => {
    const ws = workspace();
    const { built, plan } = planFor({ filesystem: { write: [ws] } }, ws);
    for (const name of ['.git', '.codex', '.agents', '.aws']) {
      const p = normaliseDarwinPath(path.join(ws, name));
      expect(fs.existsSync(path.join(ws, name)), name).toBe(false);
      const k = paramFor(built.params, p);
      // The allowance itself excludes the name (even the first mkdir), and the denial wins last.
      expect(built.profile).toContain(`(require-not (literal (param "${k}")))`);
      expect(built.profile).toContain(`(deny file-write* (subpath (param "${k}")))`);
      const ci = new RegExp(built.params[`${k}_CI`]!);
      expect(ci.test(p.replace(name, name.toUpperCase()))).toBe(true);
      expect(built.profile).toContain(`(deny file-write* (regex (param "${k}_CI")))`);
    }
    // Nothing was created on the host by planning (macOS needs no placeholders).
    expect(fs.readdirSync(ws)).toEqual([]);
    expect(plan.enforcement.mechanisms.protectedMissing).toBe('denied by name');
    expect(plan.enforcement.guarantees.protectedPaths).toBe('enforced');
    expect(plan.enforcement.gaps.join('\n')).not.toMatch(/allow-init/);
  });

  it("git: 'allow-init' leaves .git creatable (no rule names it), and the report lists the gap with protectedPaths partial", () => {
    const ws = workspace();
    const { built, plan } = planFor({ filesystem: { write: [ws], git: 'allow-init' } }, ws);
    const dotGit = normaliseDarwinPath(path.join(ws, '.git'));
    expect(hasValue(built.params, dotGit)).toBe(false);
    // .codex/.agents/.aws stay protected (control that the option only touches .git).
    expect(hasValue(built.params, normaliseDarwinPath(path.join(ws, '.aws')))).toBe(true);
    expect(plan.enforcement.gaps.some((g) => g.startsWith("git: 'allow-init'") && g.includes(path.join(ws, '.git')))).toBe(true);
    expect(plan.enforcement.guarantees.protectedPaths).toBe('partial');
  });

  it('an existing .git is protected at hooks/config under allow-init as by default', () => {
    const ws = workspace();
    fs.mkdirSync(path.join(ws, '.git'));
    const { built, plan } = planFor({ filesystem: { write: [ws], git: 'allow-init' } }, ws);
    expect(hasValue(built.params, normaliseDarwinPath(path.join(ws, '.git', 'hooks')))).toBe(true);
    expect(hasValue(built.params, normaliseDarwinPath(path.join(ws, '.git', 'config')))).toBe(true);
    expect(plan.enforcement.gaps.join('\n')).not.toMatch(/allow-init/);
    expect(plan.enforcement.guarantees.protectedPaths).toBe('enforced');
  });
});

describe("protectPresets: ['startup-files'] at any depth", () => {
  const re = new RegExp(startupFilesRegex(W));

  it.each([
    `${W}/.bashrc`,
    `${W}/.zshrc`,
    `${W}/.profile`,
    `${W}/.gitmodules`,
    `${W}/.mcp.json`,
    `${W}/.ripgreprc`,
    `${W}/.vscode`,
    `${W}/.vscode/tasks.json`,
    `${W}/.idea/workspace.xml`,
    `${W}/.claude/commands`,
    `${W}/.claude/agents/x.md`,
    `${W}/a/b/c/d/e/f/.bashrc`,
    `${W}/node_modules/pkg/.vscode/settings.json`,
    `${W}/deep/.BASHRC`,
    `${W}/deep/.Claude/Commands/evil.md`,
  ])('matches %s', (p) => {
    expect(re.test(p)).toBe(true);
  });

  it.each([
    `${W}`,
    `${W}/bashrc`,
    `${W}/.bashrc.bak`,
    `${W}/x.bashrc`,
    `${W}/.claude`,
    `${W}/.claude/settings.json`,
    `${W}/src/.vscodex`,
    '/Users/dev/other/.bashrc',
    '/Users/dev/proj2/.bashrc',
  ])('does not match %s', (p) => {
    expect(re.test(p)).toBe(false);
  });

  it('the directory above a multi-component name cannot be created, removed or renamed (exact match only)', () => {
    const anc = new RegExp(startupAncestorsRegex(W)!);
    expect(anc.test(`${W}/.claude`)).toBe(true);
    expect(anc.test(`${W}/a/b/.CLAUDE`)).toBe(true);
    expect(anc.test(`${W}/.claude/settings.json`)).toBe(false);
    expect(anc.test(`${W}/.claudex`)).toBe(false);
  });

  it('every writable root, tmp roots included, gets the denial; none without the preset (negative control)', () => {
    const on = buildSeatbeltProfile(rules({ writeRoots: [W, '/Users/dev/other'], tmp: 'host', protectPresets: ['startup-files'] }), { hostTmpDir: '/private/var/folders/xy/T' });
    const roots = [W, '/Users/dev/other', '/private/tmp', '/private/var/tmp', '/private/var/folders/xy/T'];
    for (const root of roots) {
      const k = paramFor(on.params, startupFilesRegex(root));
      expect(on.profile).toContain(`(deny file-write* (regex (param "${k}")))`);
      const a = paramFor(on.params, startupAncestorsRegex(root)!);
      expect(on.profile).toContain(`(deny file-write-create file-write-unlink (regex (param "${a}")))`);
    }
    // After every allowance: Seatbelt applies the last matching rule.
    expect(on.profile.indexOf('(deny file-write* (regex (param "STARTUP_FILES_0")))')).toBeGreaterThan(on.profile.lastIndexOf('(allow file-write*'));
    const off = buildSeatbeltProfile(rules({ writeRoots: [W, '/Users/dev/other'], tmp: 'host' }), { hostTmpDir: '/private/var/folders/xy/T' });
    expect(off.profile).not.toContain('STARTUP_');
    expect(Object.keys(off.params).some((k) => k.startsWith('STARTUP_'))).toBe(false);
  });

  it('a whole-filesystem writable root gets the rule too', () => {
    const re2 = new RegExp(startupFilesRegex('/'));
    expect(re2.test('/Users/dev/.zshrc')).toBe(true);
    expect(re2.test('/.profile')).toBe(true);
    expect(re2.test('/Users/dev/zshrc')).toBe(false);
  });

  it("the resolver's bounded-walk gap is dropped (the names are covered at any depth); allow-init's is kept", () => {
    const walk = "protectPresets 'startup-files': the search in /Users/dev/proj stopped after 3 levels or 512 directories; start-up files deeper in the tree are not protected";
    const init = "git: 'allow-init': /Users/dev/proj/.git can be created; hooks and config planted in it run when git is used there outside the sandbox";
    const on = buildSeatbeltProfile(rules({ writeRoots: [W], protectPresets: ['startup-files'], gaps: [walk, init] }));
    expect(on.ruleGaps).toEqual([init]);
    // Negative control: without the preset's rule the walk gap would still be true, so it stays.
    const off = buildSeatbeltProfile(rules({ writeRoots: [W], gaps: [walk, init] }));
    expect(off.ruleGaps).toEqual([walk, init]);
  });

  it('end to end: the resolver passes the preset on, the plan reports it, and nothing is created on the host', () => {
    const ws = workspace();
    const { rules: r, built, plan } = planFor({ filesystem: { write: [ws], protectPresets: ['startup-files'] } }, ws);
    expect(r.protectPresets).toEqual(['startup-files']);
    expect(hasValue(built.params, startupFilesRegex(normaliseDarwinPath(ws)))).toBe(true);
    expect(plan.enforcement.mechanisms.startupFiles).toBe('any depth below every writable root');
    expect(fs.readdirSync(ws)).toEqual([]);
    const plain = planFor({ filesystem: { write: [ws] } }, ws);
    expect(plain.rules.protectPresets).toBeUndefined();
    expect(plain.plan.enforcement.mechanisms.startupFiles).toBeUndefined();
  });
});

describe('network.unixSockets', () => {
  it('a list: AF_UNIX sockets may be created and connect only to exactly those paths (path-literal), never bind', () => {
    const { profile, params, unixSockets } = buildSeatbeltProfile(
      rules({ network: { kind: 'none', unixSockets: ['/Users/dev/.docker/run/docker.sock', '/tmp/agent.sock'] } }),
    );
    expect(profile).toContain('(allow system-socket (socket-domain AF_UNIX))');
    const a = paramFor(params, '/Users/dev/.docker/run/docker.sock');
    const b = paramFor(params, '/private/tmp/agent.sock'); // /tmp is a symlink on macOS
    expect(profile).toContain(`(allow network-outbound (remote unix-socket (path-literal (param "${a}"))))`);
    expect(profile).toContain(`(allow network-outbound (remote unix-socket (path-literal (param "${b}"))))`);
    expect(profile).not.toMatch(/\(remote unix-socket\)/);
    expect(profile).not.toMatch(/\(allow network-bind/);
    expect(profile).not.toMatch(/\(allow network-outbound\)/);
    expect(unixSockets).toEqual(['/Users/dev/.docker/run/docker.sock', '/private/tmp/agent.sock']);
  });

  it("'all': any pathname socket (no path filter), still no bind", () => {
    const { profile, params, unixSockets } = buildSeatbeltProfile(rules({ network: { kind: 'none', unixSockets: 'all' } }));
    expect(profile).toContain('(allow system-socket (socket-domain AF_UNIX))');
    expect(profile).toContain('(allow network-outbound (remote unix-socket))');
    expect(profile).not.toMatch(/\(allow network-bind/);
    expect(params).toEqual({});
    expect(unixSockets).toBe('all');
  });

  it('without unixSockets nothing about unix sockets is allowed (negative control); an empty list allows nothing', () => {
    for (const r of [rules(), rules({ network: { kind: 'none', unixSockets: [] } }), rules({ network: { kind: 'proxy', proxy: { allow: ['x.com'] } } })]) {
      const { profile } = buildSeatbeltProfile(r, { proxyPorts: [43128] });
      expect(profile).not.toContain('AF_UNIX');
      expect(profile).not.toContain('(remote unix-socket');
    }
  });

  it('with a proxy the socket rules come on top of the proxy port only', () => {
    const { profile } = buildSeatbeltProfile(rules({ network: { kind: 'proxy', proxy: { allow: ['x.com'] }, unixSockets: ['/Users/dev/s.sock'] } }), { proxyPorts: [43128] });
    expect(profile).toContain('(allow network-outbound (remote ip "localhost:43128"))');
    expect(profile).toContain('(remote unix-socket (path-literal (param "UNIX_SOCKET_0")))');
    expect(profile).not.toMatch(/\(allow network-outbound\)/);
  });

  it('a socket reached through a symlink is allowed at its real path (what connect() is checked against)', () => {
    const ws = workspace();
    fs.mkdirSync(path.join(ws, 'real'));
    fs.writeFileSync(path.join(ws, 'real', 's.sock'), ''); // stands in for the socket
    fs.symlinkSync(path.join(ws, 'real'), path.join(ws, 'link'));
    const { params } = buildSeatbeltProfile(rules({ network: { kind: 'none', unixSockets: [path.join(ws, 'link', 's.sock'), path.join(ws, 'link', 'later.sock')] } }));
    expect(Object.values(params)).toEqual([
      normaliseDarwinPath(path.join(ws, 'real', 's.sock')),
      normaliseDarwinPath(path.join(ws, 'real', 'later.sock')),
    ]);
  });

  it('the report says what is enforced: the list as paths, no unix-socket gap, network stays enforced', () => {
    const r = rules({ writeRoots: [W], network: { kind: 'none', unixSockets: ['/Users/dev/s.sock'] } });
    const e = planDarwinSpawn(request(r), available).enforcement;
    expect(e.mechanisms.unixSockets).toEqual(['/Users/dev/s.sock']);
    expect(e.guarantees.network).toBe('enforced');
    expect(e.gaps.join('\n')).not.toMatch(/unixSockets/);
    const all = planDarwinSpawn(request(rules({ network: { kind: 'none', unixSockets: 'all' } })), available).enforcement;
    expect(all.mechanisms.unixSockets).toBe('all');
    expect(planDarwinSpawn(request(rules()), available).enforcement.mechanisms.unixSockets).toBeUndefined();
  });
});

describe('restricted reads: the documented platform set', () => {
  it('is read from platform-read.sb and does not include all of /etc', () => {
    const reads = platformReadPaths();
    expect(reads).toContain('/usr/lib');
    expect(reads).toContain('/private/etc/hosts');
    expect(reads).toContain('/private/etc/ssl');
    expect(reads).not.toContain('/private/etc');
    const readable = (f: string) => platformReadRules().some((r) => (r.subtree ? isWithin(f, r.path) : f === r.path));
    for (const secret of ['/private/etc/master.passwd', '/private/etc/sudoers', '/private/etc/ssh/ssh_host_ed25519_key', '/private/etc/kcpassword', '/Users/dev/.ssh/id_rsa']) {
      expect(readable(secret), secret).toBe(false);
    }
    // Control: what the set is for stays readable.
    for (const f of ['/private/etc/hosts', '/private/etc/ssl/cert.pem', '/usr/lib/libSystem.B.dylib', '/bin/sh']) expect(readable(f), f).toBe(true);
    // The root is a literal: listing / only, nothing below it.
    expect(platformReadRules()).toContainEqual({ path: '/', subtree: false });
    // Metadata-only rules (the / aliases, /dev entries) are not reads.
    expect(reads).not.toContain('/private');
    expect(reads).not.toContain('/dev');
  });

  it('the executable is readable (that file only) when outside the roots, and listed; not added when inside', () => {
    const outside = buildSeatbeltProfile(rules({ readAll: false, readRoots: [W] }), { executable: '/opt/homebrew/Cellar/node/22/bin/node' });
    const k = paramFor(outside.params, '/opt/homebrew/Cellar/node/22/bin/node');
    expect(outside.profile).toContain(`(allow file-read* file-map-executable (literal (param "${k}")))`);
    expect(outside.platformReads).toContain('/opt/homebrew/Cellar/node/22/bin/node');
    const inside = buildSeatbeltProfile(rules({ readAll: false, readRoots: [W] }), { executable: `${W}/bin/tool` });
    expect(inside.profile).not.toContain('EXECUTABLE');
    expect(inside.platformReads).not.toContain(`${W}/bin/tool`);
    const system = buildSeatbeltProfile(rules({ readAll: false, readRoots: [W] }), { executable: '/usr/bin/env' });
    expect(system.profile).not.toContain('EXECUTABLE');
    expect(system.platformReads).toEqual(platformReadPaths());
    const full = buildSeatbeltProfile(rules(), { executable: '/opt/homebrew/Cellar/node/22/bin/node' });
    expect(full.profile).not.toContain('EXECUTABLE');
    expect(full.platformReads).toEqual([]);
  });

  it('the report lists exactly that set as mechanisms.platformReads, only for restricted reads', () => {
    const e = planDarwinSpawn(request(rules({ readAll: false, readRoots: [W] }), { file: '/bin/echo' }), available).enforcement;
    expect(e.mechanisms.platformReads).toEqual(platformReadPaths()); // /bin/echo lies in /bin (or /usr/bin)
    expect(e.guarantees.filesystemRead).toBe('enforced');
    const full = planDarwinSpawn(request(rules()), available).enforcement;
    expect(full.mechanisms.platformReads).toBeUndefined();
    expect(full.guarantees.filesystemRead).toBe('not-requested');
  });

  it('the platform profile names only literal system paths (no user data, no cwd)', () => {
    for (const r of platformReadPaths()) expect(r.startsWith('/Users'), r).toBe(false);
  });
});

describe('symlinked protected paths: the link name itself is denied', () => {
  it('a .git symlink to a repository outside the workspace: the link cannot be removed, renamed or replaced', () => {
    const ws = workspace();
    const elsewhere = workspace();
    fs.mkdirSync(path.join(elsewhere, 'hooks'));
    fs.symlinkSync(elsewhere, path.join(ws, '.git'));
    const { built, plan } = planFor({ filesystem: { write: [ws] } }, ws);
    const link = normaliseDarwinPath(path.join(ws, '.git'));
    expect(isProtected(built.params, link)).toBe(true);
    const k = paramFor(built.params, link);
    expect(built.profile).toContain(`(deny file-write* (subpath (param "${k}")))`);
    expect(built.profile).toContain(`(require-not (literal (param "${k}")))`);
    expect(plan.enforcement.guarantees.protectedPaths).toBe('enforced');
    expect(plan.enforcement.gaps.join('\n')).not.toMatch(/can be replaced/);
  });

  it('a link on the way to a protected path inside the workspace: both the link name and the target are denied', () => {
    const ws = workspace();
    fs.mkdirSync(path.join(ws, 'realgit', 'hooks'), { recursive: true });
    fs.symlinkSync(path.join(ws, 'realgit'), path.join(ws, '.git'));
    const { built } = planFor({ filesystem: { write: [ws] } }, ws);
    expect(isProtected(built.params, normaliseDarwinPath(path.join(ws, '.git')))).toBe(true);
    expect(isProtected(built.params, normaliseDarwinPath(path.join(ws, 'realgit', 'hooks')))).toBe(true);
    // Control: a plain .git directory is protected at hooks/config, not as a whole name.
    const ws2 = workspace();
    fs.mkdirSync(path.join(ws2, '.git'));
    const plain = planFor({ filesystem: { write: [ws2] } }, ws2).built;
    expect(isProtected(plain.params, normaliseDarwinPath(path.join(ws2, '.git')))).toBe(false);
    expect(isProtected(plain.params, normaliseDarwinPath(path.join(ws2, '.git', 'hooks')))).toBe(true);
  });

  it('a protect entry reached through a link in the workspace protects the link too', () => {
    const ws = workspace();
    fs.mkdirSync(path.join(ws, 'target'));
    fs.symlinkSync(path.join(ws, 'target'), path.join(ws, 'cfg'));
    const { built } = planFor({ filesystem: { write: [ws], protect: [path.join(ws, 'cfg', 'settings')] } }, ws);
    expect(isProtected(built.params, normaliseDarwinPath(path.join(ws, 'cfg')))).toBe(true);
    expect(isProtected(built.params, normaliseDarwinPath(path.join(ws, 'target', 'settings')))).toBe(true);
  });
});

describe('hard links (file-link)', () => {
  it('are denied for protected and denied paths, start-up names, globs, and any source outside the writable roots', () => {
    const { profile, params } = buildSeatbeltProfile(
      rules({ writeRoots: [W, '/Users/dev/b'], readOnly: [`${W}/.git/config`], denyRead: [`${W}/.env`], protectPresets: ['startup-files'] }),
      { denyReadGlobs: ['/Users/dev/**/*.pem'] },
    );
    const prot = paramFor(params, `${W}/.git/config`);
    const den = paramFor(params, `${W}/.env`);
    for (const k of [prot, den]) {
      expect(profile).toContain(`(deny file-link (subpath (param "${k}")))`);
      expect(profile).toContain(`(deny file-link (regex (param "${k}_CI")))`);
    }
    expect(profile).toContain('(deny file-link (regex (param "STARTUP_FILES_0")))');
    expect(profile).toContain('(deny file-link (regex (param "DENY_GLOB_0")))');
    expect(profile).toContain(
      '(deny file-link (require-all (require-not (subpath (param "WRITABLE_ROOT_0"))) (require-not (subpath (param "WRITABLE_ROOT_1")))))',
    );
  });

  it('read-only policy: no hard link anywhere; workspace files may still be linked (no per-path rule without protections)', () => {
    expect(buildSeatbeltProfile(rules()).profile).toContain('(deny file-link)\n');
    const plain = buildSeatbeltProfile(rules({ writeRoots: [W] })).profile;
    expect(plain).toContain('(deny file-link (require-all (require-not (subpath (param "WRITABLE_ROOT_0")))))');
    expect(plain).not.toMatch(/\(deny file-link \((subpath|regex) /);
  });
});

describe('report gaps and shape', () => {
  it('has the guarantee keys lib/backend.ts declares', () => {
    const e = planDarwinSpawn(request(rules({ writeRoots: [W] })), available).enforcement;
    expect(Object.keys(e.guarantees).sort()).toEqual(
      ['denyRead', 'filesystemRead', 'filesystemWrite', 'network', 'processIsolation', 'protectedPaths', 'treeTeardown'].sort(),
    );
    expect(e.mechanisms.limits).toBe('none');
  });

  it('asked-for limits are listed as not enforced, by name; none asked, no such line (negative control)', () => {
    const asked = planDarwinSpawn(request(rules({ limits: { maxProcesses: 64, memoryBytes: 1 << 30, openFiles: 256, tmpBytes: 1 << 28 } })), available).enforcement;
    const line = asked.gaps.find((g) => g.startsWith('limits ('))!;
    for (const k of ['maxProcesses', 'memoryBytes', 'openFiles', 'tmpBytes']) expect(line).toContain(`limits.${k}`);
    expect(line).toMatch(/not enforced on macOS/);
    const none = planDarwinSpawn(request(rules()), available).enforcement;
    expect(none.gaps.some((g) => g.startsWith('limits ('))).toBe(false);
    // Host-safety lines hold for every Seatbelt run.
    for (const e of [asked, none]) {
      expect(e.gaps.join('\n')).toMatch(/kern\.maxprocperuid/);
      expect(e.gaps.join('\n')).toMatch(/not a private sized tmpfs/);
      expect(e.gaps.join('\n')).toMatch(/setpriority/);
      expect(e.gaps.join('\n')).toMatch(/__KMP_REGISTERED_LIB_/);
    }
  });

  it("the proxy's host loopback port is a gap only with a proxy", () => {
    const proxy = planDarwinSpawn(request(rules({ network: { kind: 'proxy', proxy: { allow: ['x.com'] } } })), { ...available, proxyPorts: [43128] }).enforcement;
    expect(proxy.gaps.some((g) => g.includes("host's loopback") && g.includes('43128'))).toBe(true);
    const none = planDarwinSpawn(request(rules()), available).enforcement;
    expect(none.gaps.some((g) => g.includes("host's loopback"))).toBe(false);
  });

  it('rule gaps from the resolver reach the report (nested-repository search cut short)', () => {
    const gap = 'nested repositories in /Users/dev/proj are searched 3 levels deep (within 256 directories); a repository below that keeps writable hooks and config';
    const e = planDarwinSpawn(request(rules({ writeRoots: [W], readOnly: [`${W}/.git/hooks`], gaps: [gap] })), available).enforcement;
    expect(e.gaps).toContain(gap);
    expect(e.guarantees.protectedPaths).toBe('partial');
  });
});
