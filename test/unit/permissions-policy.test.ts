import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SandboxError } from '../../lib/errors';
import { isLikelySandboxDenied, isSecretEnvName, resolvePolicy } from '../../lib/permissions';

let tmp: string;
beforeAll(() => {
  // Not under /tmp: a .git symlink made here would be a nested repository to a sandboxed test
  // running alongside with /tmp as a writable root (Codex's workspace_write).
  tmp = fs.realpathSync(fs.mkdtempSync(path.join('/var/tmp', 'ps-perm-')));
});
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

function mk(...parts: string[]): string {
  const p = path.join(tmp, ...parts);
  fs.mkdirSync(p, { recursive: true });
  return p;
}

function expectPolicyError(fn: () => unknown, code: string, message: RegExp | string): void {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(SandboxError);
  expect((caught as SandboxError).code).toBe(code);
  if (typeof message === 'string') expect((caught as SandboxError).message).toBe(message);
  else expect((caught as SandboxError).message).toMatch(message);
}

describe('resolvePolicy defaults', () => {
  it('undefined policy: read all, write nothing, network none, tmp private, auto', () => {
    expect(resolvePolicy(undefined, '/')).toEqual({
      readAll: true,
      readRoots: [],
      writeRoots: [],
      readOnly: [],
      denyRead: [],
      tmp: 'private',
      network: { kind: 'none' },
      mode: 'auto',
      degraded: false,
      limits: {},
    });
  });

  it('empty objects are the defaults too', () => {
    expect(resolvePolicy({ filesystem: {}, limits: {} }, '/')).toEqual(resolvePolicy(undefined, '/'));
  });
});

describe('resolvePolicy validation', () => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['unknown top-level field', { filesytem: {} }, /^policy\.filesytem is not a known field/],
    ['unknown filesystem field', { filesystem: { wirte: [] } }, /^policy\.filesystem\.wirte is not a known field/],
    ['unknown proxy field', { network: { proxy: { allow: [], alow: [] } } }, /^policy\.network\.proxy\.alow is not a known field/],
    ['unknown limits field', { limits: { cpu: 1 } }, /^policy\.limits\.cpu is not a known field/],
    ['policy not an object', 'strict', /^policy must be an object, got "strict"/],
    ['write not an array', { filesystem: { write: '/tmp' } }, /^policy\.filesystem\.write must be an array of absolute paths/],
    ['relative write path', { filesystem: { write: ['rel/dir'] } }, /^policy\.filesystem\.write\[0\] must be an absolute path, got "rel\/dir"/],
    ['relative read path', { filesystem: { read: ['/', 'x'] } }, /^policy\.filesystem\.read\[1\] must be an absolute path/],
    ['read as a bad string', { filesystem: { read: 'some' } }, /^policy\.filesystem\.read must be 'all' or an array/],
    ['NUL in denyRead', { filesystem: { denyRead: ['/a\0b'] } }, /^policy\.filesystem\.denyRead\[0\] must not contain a NUL byte/],
    ['non-string protect', { filesystem: { protect: [1] } }, /^policy\.filesystem\.protect\[0\] must be a string, got number/],
    ['bad tmp', { filesystem: { tmp: 'shared' } }, /^policy\.filesystem\.tmp must be one of 'private', 'host', 'none'/],
    ['bad git', { filesystem: { git: 'all' } }, /^policy\.filesystem\.git must be one of/],
    ['bad network string', { network: 'proxy' }, /^policy\.network must be 'none', 'full' or/],
    ['proxy without allow', { network: { proxy: {} } }, /^policy\.network\.proxy\.allow is required/],
    ['proxy allow not strings', { network: { proxy: { allow: [3] } } }, /^policy\.network\.proxy\.allow\[0\] must be a string/],
    ['proxy bad mode', { network: { proxy: { allow: ['a.com'], mode: 'half' } } }, /^policy\.network\.proxy\.mode must be one of 'full', 'limited'/],
    ['bad mode', { mode: 'fast' }, /^policy\.mode must be one of 'auto', 'isolated', 'landlock'/],
    ['bad degraded', { degraded: 'yes' }, /^policy\.degraded must be a boolean/],
    ['zero limit', { limits: { maxProcesses: 0 } }, /^policy\.limits\.maxProcesses must be a positive integer, got 0/],
    ['fractional limit', { limits: { memoryBytes: 1.5 } }, /^policy\.limits\.memoryBytes must be a positive integer, got 1\.5/],
    ['string limit', { limits: { openFiles: '10' } }, /^policy\.limits\.openFiles must be a positive integer, got "10"/],
  ];
  for (const [name, policy, re] of cases) {
    it(`rejects ${name}`, () => {
      expectPolicyError(() => resolvePolicy(policy as never, '/'), 'EINVALID_POLICY', re);
    });
  }

  it('a missing writable root is EINVALID_POLICY naming the field', () => {
    const missing = path.join(tmp, 'does-not-exist');
    expectPolicyError(
      () => resolvePolicy({ filesystem: { write: [missing] } }, '/'),
      'EINVALID_POLICY',
      `policy.filesystem.write[0]: writable root ${missing} does not exist`,
    );
  });

  it('accepts full valid policies', () => {
    const w = mk('valid');
    const r = resolvePolicy(
      {
        filesystem: { read: 'all', write: [w], denyRead: [], protect: [], git: 'whole', tmp: 'host' },
        network: { proxy: { allow: ['example.com'], deny: ['bad.example.com'], allowLocal: true, mode: 'limited' } },
        mode: 'landlock',
        degraded: true,
        limits: { maxProcesses: 64, memoryBytes: 1 << 30, openFiles: 256 },
      },
      '/',
    );
    expect(r.writeRoots).toEqual([w]);
    expect(r.network).toEqual({
      kind: 'proxy',
      proxy: { allow: ['example.com'], deny: ['bad.example.com'], allowLocal: true, mode: 'limited' },
    });
    expect(r.mode).toBe('landlock');
    expect(r.degraded).toBe(true);
    expect(r.tmp).toBe('host');
    expect(r.limits).toEqual({ maxProcesses: 64, memoryBytes: 1 << 30, openFiles: 256 });
    expect(r.readOnly).toEqual([path.join(w, '.agents'), path.join(w, '.aws'), path.join(w, '.codex'), path.join(w, '.git')]);
  });

  it('network full', () => {
    expect(resolvePolicy({ network: 'full' }, '/').network).toEqual({ kind: 'full' });
  });
});

describe('resolvePolicy paths', () => {
  it('canonicalises roots and drops missing read and deny paths', () => {
    const real = mk('canon', 'real');
    const link = path.join(tmp, 'canon', 'link');
    fs.symlinkSync(real, link);
    const r = resolvePolicy(
      { filesystem: { read: [link, path.join(tmp, 'nope')], denyRead: [path.join(tmp, 'nope2')] } },
      '/',
    );
    expect(r.readAll).toBe(false);
    expect(r.readRoots).toEqual([real]);
    expect(r.denyRead).toEqual([]);
  });

  it('default carve-outs for a plain writable root (included even when missing; a missing .git is held whole)', () => {
    const w = mk('plain');
    const r = resolvePolicy({ filesystem: { write: [w] } }, '/');
    expect(r.writeRoots).toEqual([w]);
    expect(r.readOnly).toEqual([path.join(w, '.agents'), path.join(w, '.aws'), path.join(w, '.codex'), path.join(w, '.git')]);
    expect(r.gaps).toBeUndefined();
    // With an existing .git: its hooks and config.
    mk('plain', '.git');
    expect(resolvePolicy({ filesystem: { write: [w] } }, '/').readOnly).toEqual([
      path.join(w, '.agents'),
      path.join(w, '.aws'),
      path.join(w, '.codex'),
      path.join(w, '.git', 'config'),
      path.join(w, '.git', 'config.worktree'),
      path.join(w, '.git', 'hooks'),
    ]);
  });

  it("another run's .git placeholder (empty, 0555) counts as a missing .git, so nothing is created inside it", () => {
    const w = mk('ghostgit');
    fs.mkdirSync(path.join(w, '.git'), { mode: 0o555 });
    fs.chmodSync(path.join(w, '.git'), 0o555);
    try {
      const r = resolvePolicy({ filesystem: { write: [w] } }, '/');
      expect(r.readOnly).toContain(path.join(w, '.git'));
      expect(r.readOnly).not.toContain(path.join(w, '.git', 'hooks'));
    } finally {
      fs.chmodSync(path.join(w, '.git'), 0o755);
    }
  });

  it("git: 'allow-init' leaves a missing .git creatable and says so; unknown git values are errors", () => {
    const w = mk('allowinit');
    const r = resolvePolicy({ filesystem: { write: [w], git: 'allow-init' } }, '/');
    expect(r.readOnly).toEqual([path.join(w, '.agents'), path.join(w, '.aws'), path.join(w, '.codex')]);
    expect(r.gaps).toEqual([expect.stringContaining(`git: 'allow-init': ${path.join(w, '.git')} can be created`)]);
    // An existing .git keeps its hooks and config protected.
    mk('allowinit', '.git');
    const r2 = resolvePolicy({ filesystem: { write: [w], git: 'allow-init' } }, '/');
    expect(r2.readOnly).toContain(path.join(w, '.git', 'hooks'));
    expect(r2.gaps).toBeUndefined();
    expect(() => resolvePolicy({ filesystem: { write: [w], git: 'allow_init' as never } }, '/')).toThrow(
      /policy\.filesystem\.git must be one of 'hooks-and-config', 'whole', 'allow-init'/,
    );
  });

  it('network.unixSockets: a list of absolute paths or all, with or without a proxy', () => {
    expect(resolvePolicy({ network: { unixSockets: ['/run/a.sock'] } }, '/').network).toEqual({ kind: 'none', unixSockets: ['/run/a.sock'] });
    expect(resolvePolicy({ network: { unixSockets: 'all' } }, '/').network).toEqual({ kind: 'none', unixSockets: 'all' });
    expect(resolvePolicy({ network: { proxy: { allow: ['x.com'] }, unixSockets: 'all' } }, '/').network).toMatchObject({ kind: 'proxy', unixSockets: 'all' });
    expect(() => resolvePolicy({ network: { unixSockets: ['rel.sock'] } }, '/')).toThrow(/policy\.network\.unixSockets\[0\] must be an absolute path/);
    expect(() => resolvePolicy({ network: {} as never }, '/')).toThrow(/policy\.network\.proxy is required \(or unixSockets\)/);
  });

  it("protectPresets 'startup-files': root names even when missing, existing ones below (bounded, truncation reported)", () => {
    const w = mk('startup');
    fs.writeFileSync(path.join(w, '.bashrc'), '');
    mk('startup', 'a', 'b');
    fs.writeFileSync(path.join(w, 'a', 'b', '.zshrc'), '');
    mk('startup', 'a', '.vscode');
    mk('startup', 'nm', 'node_modules');
    fs.writeFileSync(path.join(w, 'nm', 'node_modules', '.profile'), '');
    const r = resolvePolicy({ filesystem: { write: [w], protectPresets: ['startup-files'] } }, '/');
    expect(r.readOnly).toEqual(
      expect.arrayContaining([
        path.join(w, '.bashrc'),
        path.join(w, '.profile'), // missing: held by a placeholder
        path.join(w, '.mcp.json'),
        path.join(w, '.vscode'),
        path.join(w, '.claude'), // first missing component of .claude/commands
        path.join(w, 'a', 'b', '.zshrc'),
        path.join(w, 'a', '.vscode'),
      ]),
    );
    expect(r.readOnly).not.toContain(path.join(w, 'nm', 'node_modules', '.profile'));
    expect(r.readOnly).not.toContain(path.join(w, 'a', '.idea')); // missing below the root: not held
    expect(r.gaps).toBeUndefined();
    // Without the preset none of this is protected.
    expect(resolvePolicy({ filesystem: { write: [w] } }, '/').readOnly).not.toContain(path.join(w, '.bashrc'));
    // Deeper than the search goes: reported.
    mk('startup', 'a', 'b', 'c', 'd');
    const deep = resolvePolicy({ filesystem: { write: [w], protectPresets: ['startup-files'] } }, '/');
    expect(deep.gaps).toEqual(expect.arrayContaining([expect.stringContaining("protectPresets 'startup-files': the search in")]));
    // The nested-repository search has the same depth, and says so too.
    expect(deep.gaps).toEqual(expect.arrayContaining([expect.stringContaining(`nested repositories in ${w} are searched 3 levels deep`)]));
    expect(() => resolvePolicy({ filesystem: { write: [w], protectPresets: ['dotfiles' as never] } }, '/')).toThrow(
      /policy\.filesystem\.protectPresets\[0\] must be one of 'startup-files'/,
    );
  });

  it('protected paths reached through symlinks also protect the links (.git, hooksPath, links on the way)', () => {
    const w = mk('links');
    mk('links', 'realgit', 'hooks');
    fs.writeFileSync(path.join(w, 'realgit', 'config'), '[core]\n\thooksPath = tools/hooks\n');
    fs.symlinkSync('realgit', path.join(w, '.git'));
    mk('links', 'realtools', 'hooks');
    fs.symlinkSync('realtools', path.join(w, 'tools'));
    const r = resolvePolicy({ filesystem: { write: [w] } }, '/');
    expect(r.readOnly).toEqual(
      expect.arrayContaining([
        path.join(w, '.git'),
        path.join(w, 'realgit', 'hooks'),
        path.join(w, 'realgit', 'config'),
        path.join(w, 'tools'),
        path.join(w, 'realtools', 'hooks'),
      ]),
    );
  });

  it('existing submodule gitdirs under .git/modules get the same protection', () => {
    const w = mk('mods');
    mk('mods', '.git', 'modules', 'lib', 'modules', 'inner');
    const r = resolvePolicy({ filesystem: { write: [w] } }, '/');
    expect(r.readOnly).toEqual(
      expect.arrayContaining([
        path.join(w, '.git', 'modules', 'lib', 'hooks'),
        path.join(w, '.git', 'modules', 'lib', 'config'),
        path.join(w, '.git', 'modules', 'lib', 'modules', 'inner', 'hooks'),
        path.join(w, '.git', 'modules', 'lib', 'modules', 'inner', 'config'),
      ]),
    );
  });

  it('user protect entries inside a writable root are kept, outside ones dropped', () => {
    const w = mk('prot');
    const r = resolvePolicy(
      { filesystem: { write: [w], protect: [path.join(w, 'Makefile'), path.join(tmp, 'elsewhere')] } },
      '/',
    );
    expect(r.readOnly).toContain(path.join(w, 'Makefile'));
    expect(r.readOnly).not.toContain(path.join(tmp, 'elsewhere'));
  });

  it('gitdir pointer (linked worktree): protects pointer, worktree gitdir and common dir', () => {
    const main = mk('wt', 'main');
    const gitdir = mk('wt', 'main', '.git', 'worktrees', 'feature');
    fs.writeFileSync(path.join(gitdir, 'commondir'), '../..\n');
    const wt = mk('wt', 'feature');
    fs.writeFileSync(path.join(wt, '.git'), `gitdir: ${gitdir}\n`);
    const onlyWt = resolvePolicy({ filesystem: { write: [wt] } }, '/');
    // The gitdirs live outside the only writable root: nothing to carve there, but the pointer is.
    expect(onlyWt.readOnly).toEqual([path.join(wt, '.agents'), path.join(wt, '.aws'), path.join(wt, '.codex'), path.join(wt, '.git')]);
    const both = resolvePolicy({ filesystem: { write: [wt, main] } }, '/');
    const gitFiles = (d: string) => ['config', 'config.worktree', 'hooks'].map((n) => path.join(d, n));
    expect(both.readOnly).toEqual(
      [
        path.join(main, '.agents'),
        path.join(main, '.aws'),
        path.join(main, '.codex'),
        ...gitFiles(path.join(main, '.git')),
        ...gitFiles(gitdir),
        path.join(gitdir, 'commondir'),
        path.join(wt, '.agents'),
        path.join(wt, '.aws'),
        path.join(wt, '.codex'),
        path.join(wt, '.git'),
      ].sort(),
    );
  });

  it('relative gitdir pointer (submodule) resolves against the pointer file', () => {
    const sup = mk('sub', 'super');
    const modgit = mk('sub', 'super', '.git', 'modules', 'lib');
    const lib = mk('sub', 'super', 'lib');
    fs.writeFileSync(path.join(lib, '.git'), 'gitdir: ../.git/modules/lib\n');
    const r = resolvePolicy({ filesystem: { write: [lib, sup] }, }, '/');
    expect(r.writeRoots).toEqual([sup]);
    expect(r.readOnly).toEqual(expect.arrayContaining([path.join(lib, '.git'), path.join(modgit, 'hooks'), path.join(modgit, 'config')]));
  });

  it("git: 'whole' protects the whole .git", () => {
    const w = mk('whole');
    const r = resolvePolicy({ filesystem: { write: [w], git: 'whole' } }, '/');
    expect(r.readOnly).toContain(path.join(w, '.git'));
    expect(r.readOnly).not.toContain(path.join(w, '.git', 'hooks'));
  });

  it('a writable root reached through a symlink inside another writable root is ESYMLINK_ROOT', () => {
    const outer = mk('sym', 'outer');
    const target = mk('sym', 'target');
    const link = path.join(outer, 'link');
    fs.symlinkSync(target, link);
    expectPolicyError(
      () => resolvePolicy({ filesystem: { write: [outer, link] } }, '/'),
      'ESYMLINK_ROOT',
      /^policy\.filesystem\.write\[1\]: writable root .* goes through the symlink .*link, which lies inside the writable root/,
    );
    // Positive control: the same symlink is fine when nothing writable contains it.
    const ok = resolvePolicy({ filesystem: { write: [link] } }, '/');
    expect(ok.writeRoots).toEqual([target]);
  });

  it('denyRead inside readable areas is kept; nested writable roots collapse', () => {
    const w = mk('nest');
    const inner = mk('nest', 'inner');
    const secret = mk('nest', 'secret');
    const r = resolvePolicy({ filesystem: { write: [w, inner], denyRead: [secret] } }, '/');
    expect(r.writeRoots).toEqual([w]);
    expect(r.denyRead).toEqual([secret]);
  });

  it('read-only roots: a denied path outside every readable root is dropped', () => {
    const a = mk('ro', 'a');
    const b = mk('ro', 'b');
    const r = resolvePolicy({ filesystem: { read: [a], denyRead: [b, path.join(a)] } }, '/');
    expect(r.readRoots).toEqual([]);
    expect(r.denyRead).toEqual([]);
    const r2 = resolvePolicy({ filesystem: { read: [tmp], denyRead: [b] } }, '/');
    expect(r2.readRoots).toEqual([tmp]);
    expect(r2.denyRead).toEqual([b]);
  });
});

describe('isSecretEnvName', () => {
  it.each(['GITHUB_TOKEN', 'NPM_TOKEN', 'OPENAI_API_KEY', 'aws_access_key_id', 'AWS_REGION', 'DB_PASSWORD', 'MY_SECRET', 'SSH_PRIVATE', 'GOOGLE_APPLICATION_CREDENTIALS', 'PGPASSWD', 'SIGNING_KEYS', 'gh_pat'])(
    '%s looks secret',
    (name) => expect(isSecretEnvName(name)).toBe(true),
  );
  it.each(['PATH', 'HOME', 'LANG', 'TERM', 'SHELL', 'USER', 'TMPDIR', 'NODE_OPTIONS', 'EDITOR'])(
    '%s does not',
    (name) => expect(isSecretEnvName(name)).toBe(false),
  );
});

describe('isLikelySandboxDenied', () => {
  it('never for sandbox none or success', () => {
    expect(isLikelySandboxDenied('none', 1, null, 'Permission denied')).toBe(false);
    expect(isLikelySandboxDenied('linuxSeccomp', 0, null, 'Permission denied')).toBe(false);
  });
  it('never for exit 2, 126, 127', () => {
    for (const code of [2, 126, 127]) expect(isLikelySandboxDenied('linuxSeccomp', code, null, 'permission denied')).toBe(false);
  });
  it('SIGSYS on linux', () => {
    expect(isLikelySandboxDenied('linuxSeccomp', 159, null, '')).toBe(true);
    expect(isLikelySandboxDenied('linuxSeccomp', null, 'SIGSYS', '')).toBe(true);
    expect(isLikelySandboxDenied('macosSeatbelt', 159, null, '')).toBe(false);
  });
  it('keywords, case-insensitive', () => {
    for (const text of ['Operation not permitted', 'bash: x: Permission denied', 'Read-only file system', 'seccomp', 'SANDBOX', 'landlock', 'Failed to write file']) {
      expect(isLikelySandboxDenied('linuxSeccomp', 1, null, text)).toBe(true);
    }
    expect(isLikelySandboxDenied('linuxSeccomp', 1, null, 'no such file or directory')).toBe(false);
  });
});

describe('writable file roots', () => {
  it('a writable file gets no metadata carve-outs', () => {
    const f = path.join(tmp, 'single-file.txt');
    fs.writeFileSync(f, '');
    expect(resolvePolicy({ filesystem: { write: [f] } }, '/')).toMatchObject({ writeRoots: [f], readOnly: [] });
  });
});

describe('contradictory entries are refused, not silently collapsed', () => {
  it('a protect entry equal to a writable root is refused (it used to be dropped while enforced)', () => {
    const w = mk('prot-root');
    expectPolicyError(
      () => resolvePolicy({ filesystem: { write: [w], protect: [w] } }, '/'),
      'EINVALID_POLICY',
      new RegExp(`^protect entry ${w} is the writable root ${w} \\(policy\\.filesystem\\.write\\[0\\]\\) itself.*Drop it from the writable roots`),
    );
    // A trailing slash or a symlink to the root is the same path.
    fs.symlinkSync(w, `${w}-link`);
    expectPolicyError(() => resolvePolicy({ filesystem: { write: [w], protect: [`${w}-link`] } }, '/'), 'EINVALID_POLICY', /is the writable root/);
    expectPolicyError(() => resolvePolicy({ filesystem: { write: [w], protect: [`${w}/`] } }, '/'), 'EINVALID_POLICY', /is the writable root/);
    // Controls: a path inside the root is a carve-out; the root alone is writable.
    mk('prot-root', 'sub');
    expect(resolvePolicy({ filesystem: { write: [w], protect: [`${w}/sub`] } }, '/').readOnly).toContain(`${w}/sub`);
    expect(resolvePolicy({ filesystem: { write: [w] } }, '/').writeRoots).toEqual([w]);
  });

  it('a path both writable and deny-read is refused, naming both entries', () => {
    const w = mk('wd-root');
    expectPolicyError(
      () => resolvePolicy({ filesystem: { write: [w], denyRead: [w] } }, '/'),
      'EINVALID_POLICY',
      new RegExp(`^${w} is both a writable root \\(policy\\.filesystem\\.write\\[0\\]\\) and deny-read \\(policy\\.filesystem\\.denyRead\\[0\\]\\).*Drop it from one of the two`),
    );
    // Controls: a deny inside the writable root, and a writable root inside a denied area, are valid.
    const inner = mk('wd-root', 'secret');
    expect(resolvePolicy({ filesystem: { write: [w], denyRead: [inner] } }, '/')).toMatchObject({ writeRoots: [w], denyRead: [inner] });
    expect(resolvePolicy({ filesystem: { write: [inner], denyRead: [w] } }, '/')).toMatchObject({ writeRoots: [inner], denyRead: [w] });
  });
});

describe('nested repositories under node_modules', () => {
  const repo = (dir: string) => {
    fs.mkdirSync(path.join(dir, '.git', 'hooks'), { recursive: true });
    fs.writeFileSync(path.join(dir, '.git', 'config'), '[core]\n');
  };
  it('node_modules/<pkg>/.git and node_modules/@scope/<pkg>/.git are found (one level), the rest is not entered', () => {
    const w = mk('nm-ws');
    repo(mk('nm-ws', 'node_modules', 'gitpkg'));
    repo(mk('nm-ws', 'node_modules', '@scope', 'scoped'));
    repo(mk('nm-ws', 'sub', 'node_modules', 'deeper'));
    mk('nm-ws', 'node_modules', 'plain');
    mk('nm-ws', 'node_modules', '.bin');
    repo(mk('nm-ws', 'node_modules', 'plain', 'node_modules', 'two-levels')); // not probed: one level only
    const r = resolvePolicy({ filesystem: { write: [w] } }, '/');
    for (const pkg of ['node_modules/gitpkg', 'node_modules/@scope/scoped', 'sub/node_modules/deeper']) {
      expect(r.readOnly, pkg).toEqual(expect.arrayContaining([`${w}/${pkg}/.git/hooks`, `${w}/${pkg}/.git/config`]));
    }
    expect(r.readOnly.join('\n')).not.toContain('two-levels');
    expect(r.readOnly.join('\n')).not.toContain('node_modules/plain');
    expect(r.gaps ?? []).toEqual([]);
  });

  it('a node_modules past the probe cap is reported as a gap', () => {
    const w = mk('nm-big');
    for (let i = 0; i < 1030; i++) fs.mkdirSync(path.join(w, 'node_modules', `p${i}`), { recursive: true });
    const r = resolvePolicy({ filesystem: { write: [w] } }, '/');
    expect(r.gaps).toEqual([
      `nested repositories in ${w}/node_modules are searched in the first 1024 packages only; a repository in a package past that keeps writable hooks and config`,
    ]);
    // Control: under the cap, no gap.
    fs.rmSync(path.join(w, 'node_modules'), { recursive: true });
    for (let i = 0; i < 10; i++) fs.mkdirSync(path.join(w, 'node_modules', `p${i}`), { recursive: true });
    expect(resolvePolicy({ filesystem: { write: [w] } }, '/').gaps).toBeUndefined();
  });
});
