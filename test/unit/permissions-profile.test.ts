import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SandboxError } from '../../lib/errors';
import {
  expandGlob,
  hasFullDiskReadAccess,
  materializeProjectRoots,
  parsePermissionProfile,
  permissionProfileToJson,
  ProfileError,
  readOnlyProfile,
  resolveProfile,
  resolvePolicy,
  resolveEntries,
  withAdditionalReadableRoots,
  workspaceWriteProfile,
  type PermissionProfile,
} from '../../lib/permissions';

const GOLDEN = path.join(__dirname, '..', 'fixtures', 'golden');
const golden = (name: string): unknown => JSON.parse(fs.readFileSync(path.join(GOLDEN, name), 'utf8'));

let tmp: string;
beforeAll(() => {
  tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'ps-prof-')));
});
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});
function mk(...parts: string[]): string {
  const p = path.join(tmp, ...parts);
  fs.mkdirSync(p, { recursive: true });
  return p;
}

describe('PermissionProfile golden JSON (snake_case, as Codex writes it)', () => {
  it.each([
    'permission-profile-read-only.json',
    'permission-profile-workspace-write.json',
    'permission-profile-disabled.json',
    'permission-profile-external.json',
    'permission-profile-managed-unrestricted.json',
    'permission-profile-all-entry-shapes.json',
  ])('%s round-trips exactly', (name) => {
    const json = golden(name);
    const parsed = parsePermissionProfile(json, { flavor: 'posix' });
    expect(permissionProfileToJson(parsed, { uriPaths: true, flavor: 'posix' })).toEqual(json);
  });

  it('presets serialise to the golden vectors', () => {
    expect(permissionProfileToJson(readOnlyProfile())).toEqual(golden('permission-profile-read-only.json'));
    expect(permissionProfileToJson(workspaceWriteProfile())).toEqual(golden('permission-profile-workspace-write.json'));
  });

  it('"none" is read as deny, a missing network is restricted, unknown special kinds are kept', () => {
    const parsed = parsePermissionProfile(golden('permission-profile-none-alias.input.json'), { flavor: 'posix' });
    expect(permissionProfileToJson(parsed, { uriPaths: true, flavor: 'posix' })).toEqual(
      golden('permission-profile-none-alias.expected.json'),
    );
  });

  it('path entries decode URIs (Windows forms with win32 rules) and accept absolute native paths', () => {
    const p = parsePermissionProfile(
      {
        type: 'managed',
        network: 'restricted',
        file_system: {
          type: 'restricted',
          entries: [
            { path: { type: 'path', path: 'file:///C:/Users/dev' }, access: 'write' },
            { path: { type: 'path', path: 'file://srv/share/x' }, access: 'read' },
            { path: { type: 'path', path: 'D:\\data' }, access: 'read' },
          ],
        },
      },
      { flavor: 'win32' },
    );
    expect(p.type === 'managed' && p.file_system.type === 'restricted' && p.file_system.entries.map((e) => e.path)).toEqual([
      { type: 'path', path: 'C:\\Users\\dev' },
      { type: 'path', path: '\\\\srv\\share\\x' },
      { type: 'path', path: 'D:\\data' },
    ]);
  });

  const bad: Array<[string, unknown, 'shape' | 'uri', RegExp]> = [
    ['unknown type', { type: 'sometimes' }, 'shape', /permissions\.type must be "managed", "disabled" or "external"/],
    ['bad fs type', { type: 'managed', file_system: { type: 'partial' } }, 'shape', /permissions\.file_system\.type must be/],
    ['bad access', { type: 'managed', file_system: { type: 'restricted', entries: [{ path: { type: 'special', value: { kind: 'root' } }, access: 'rw' }] } }, 'shape', /entries\[0\]\.access must be one of "read", "write", "deny" \(or "none"\)/],
    ['glob not deny', { type: 'managed', file_system: { type: 'restricted', entries: [{ path: { type: 'glob_pattern', pattern: '/x/*' }, access: 'read' }] } }, 'shape', /must be "deny" for a glob_pattern entry/],
    ['relative path', { type: 'managed', file_system: { type: 'restricted', entries: [{ path: { type: 'path', path: 'rel' }, access: 'read' }] } }, 'uri', /`rel` is not an absolute path or file URI/],
    ['windows URI on posix', { type: 'managed', file_system: { type: 'restricted', entries: [{ path: { type: 'path', path: 'file:///C:/x' }, access: 'read' }] } }, 'uri', /entries\[0\]\.path\.path: `file:\/\/\/C:\/x`: Windows drive path `C:` is not an absolute path on this host/],
    ['absolute subpath', { type: 'managed', file_system: { type: 'restricted', entries: [{ path: { type: 'special', value: { kind: 'project_roots', subpath: '/etc' } }, access: 'read' }] } }, 'shape', /subpath must be a relative path/],
    ['dotdot subpath', { type: 'managed', file_system: { type: 'restricted', entries: [{ path: { type: 'special', value: { kind: 'tmpdir', subpath: '../x' } }, access: 'read' }] } }, 'shape', /must not contain '\.\.'/],
    ['bad missing behaviour', { type: 'managed', file_system: { type: 'restricted', entries: [{ path: { type: 'special', value: { kind: 'root' } }, access: 'read', missing_path_behavior: 'ignore' }] } }, 'shape', /missing_path_behavior must be "skip" or "error"/],
    ['bad depth', { type: 'managed', file_system: { type: 'restricted', entries: [], glob_scan_max_depth: 0 } }, 'shape', /glob_scan_max_depth must be a positive integer/],
    ['bad network', { type: 'external', network: 'open' }, 'shape', /permissions\.network must be "restricted" or "enabled"/],
  ];
  it.each(bad)('rejects %s', (_n, json, kind, re) => {
    let err: unknown;
    try {
      parsePermissionProfile(json, { flavor: 'posix' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ProfileError);
    expect((err as ProfileError).kind).toBe(kind);
    expect((err as ProfileError).message).toMatch(re);
  });
});

describe('materialisation and readable roots', () => {
  it('project roots become one path entry per workspace root, keeping access and missing behaviour', () => {
    const m = materializeProjectRoots(workspaceWriteProfile(), ['/w1', '/w2'], '/cwd');
    const json = permissionProfileToJson(m, { flavor: 'posix' }) as { file_system: { entries: unknown[] } };
    expect(json.file_system.entries).toEqual([
      { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
      { path: { type: 'path', path: '/w1' }, access: 'write' },
      { path: { type: 'path', path: '/w2' }, access: 'write' },
      { path: { type: 'special', value: { kind: 'slash_tmp' } }, access: 'write' },
      { path: { type: 'special', value: { kind: 'tmpdir' } }, access: 'write' },
      { path: { type: 'path', path: '/w1/.git' }, access: 'read', missing_path_behavior: 'skip' },
      { path: { type: 'path', path: '/w2/.git' }, access: 'read', missing_path_behavior: 'skip' },
      { path: { type: 'path', path: '/w1/.agents' }, access: 'read', missing_path_behavior: 'skip' },
      { path: { type: 'path', path: '/w2/.agents' }, access: 'read', missing_path_behavior: 'skip' },
      { path: { type: 'path', path: '/w1/.codex' }, access: 'read', missing_path_behavior: 'skip' },
      { path: { type: 'path', path: '/w2/.codex' }, access: 'read', missing_path_behavior: 'skip' },
    ]);
  });

  it('an empty workspace-root list falls back to the policy cwd', () => {
    const m = materializeProjectRoots(readOnlyProfileWith('project_roots', 'write'), [], '/policy/cwd');
    expect((permissionProfileToJson(m) as { file_system: { entries: unknown[] } }).file_system.entries).toEqual([
      { path: { type: 'path', path: '/policy/cwd' }, access: 'write' },
    ]);
  });

  it('globs starting with a project-roots token expand per root', () => {
    const p: PermissionProfile = {
      type: 'managed',
      network: 'restricted',
      file_system: { type: 'restricted', entries: [{ path: { type: 'glob_pattern', pattern: ':workspace_roots/**/*.env' }, access: 'deny' }] },
    };
    const m = materializeProjectRoots(p, ['/a', '/b'], '/c');
    expect(m.type === 'managed' && m.file_system.type === 'restricted' && m.file_system.entries.map((e) => e.path)).toEqual([
      { type: 'glob_pattern', pattern: '/a/**/*.env' },
      { type: 'glob_pattern', pattern: '/b/**/*.env' },
    ]);
  });

  it('disabled and external profiles pass through unchanged', () => {
    const d: PermissionProfile = { type: 'disabled' };
    const e: PermissionProfile = { type: 'external', network: 'enabled' };
    expect(materializeProjectRoots(d, ['/x'], '/y')).toBe(d);
    expect(materializeProjectRoots(e, ['/x'], '/y')).toBe(e);
  });

  it('with_additional_readable_roots is a no-op under full-disk read', () => {
    const ro = readOnlyProfile();
    expect(hasFullDiskReadAccess(ro)).toBe(true);
    expect(withAdditionalReadableRoots(ro, ['/opt/ca.pem'])).toBe(ro);
  });

  it('with_additional_readable_roots appends roots not yet readable', () => {
    const p = readOnlyProfileWith('minimal', 'read');
    const withPath: PermissionProfile = {
      type: 'managed',
      network: 'restricted',
      file_system: {
        type: 'restricted',
        entries: [
          ...(p.type === 'managed' && p.file_system.type === 'restricted' ? p.file_system.entries : []),
          { path: { type: 'path', path: '/opt' }, access: 'read' },
        ],
      },
    };
    expect(hasFullDiskReadAccess(withPath)).toBe(false);
    const out = withAdditionalReadableRoots(withPath, ['/opt/already', '/srv/ca.pem']);
    expect(out.type === 'managed' && out.file_system.type === 'restricted' && out.file_system.entries.length).toBe(3);
    expect(JSON.stringify(out)).toContain('/srv/ca.pem');
    expect(JSON.stringify(out)).not.toContain('/opt/already');
  });

  it('a deny entry means no full-disk read (Codex semantics)', () => {
    const p = parsePermissionProfile(golden('permission-profile-none-alias.input.json'), { flavor: 'posix' });
    expect(hasFullDiskReadAccess(p)).toBe(false);
  });
});

function readOnlyProfileWith(kind: 'project_roots' | 'minimal', access: 'read' | 'write'): PermissionProfile {
  return {
    type: 'managed',
    network: 'restricted',
    file_system: { type: 'restricted', entries: [{ path: { type: 'special', value: { kind } }, access }] },
  };
}

describe('resolution table: most specific wins; deny > write > read for equal paths', () => {
  const base = { protect: [], git: 'hooks-and-config' as const, tmp: 'none' as const, network: { kind: 'none' as const }, mode: 'auto' as const, degraded: false, limits: {}, protectMetadata: false };
  const entry = (p: string, access: 'read' | 'write' | 'deny') => ({ path: p, access, missing: 'default' as const, source: `entry ${p}` });

  it('equal paths: write beats read, deny beats read; write and deny together are refused', () => {
    const d = mk('eq');
    expect(resolveEntries({ ...base, root: 'read', entries: [entry(d, 'write'), entry(d, 'read')] }).writeRoots).toEqual([d]);
    const r = resolveEntries({ ...base, root: 'read', entries: [entry(d, 'read'), entry(d, 'deny')] });
    expect(r.writeRoots).toEqual([]);
    expect(r.denyRead).toEqual([d]);
    // Deny would silently win over the write and leave the root unusable: a contradiction to fix.
    expect(() => resolveEntries({ ...base, root: 'read', entries: [entry(d, 'read'), entry(d, 'deny'), entry(d, 'write')] })).toThrow(
      new RegExp(`${d} is both a writable root \\(entry ${d}\\) and deny-read \\(entry ${d}\\)`),
    );
  });

  it('a more specific read inside a writable root is a read-only carve-out', () => {
    const w = mk('spec');
    const sub = mk('spec', 'docs');
    const r = resolveEntries({ ...base, root: 'read', entries: [entry(w, 'write'), entry(sub, 'read')] });
    expect(r).toMatchObject({ readAll: true, writeRoots: [w], readOnly: [sub] });
  });

  it('a more specific write inside a read-only area is a writable root', () => {
    const ro = mk('ro2');
    const w = mk('ro2', 'out');
    const r = resolveEntries({ ...base, root: null, entries: [entry(ro, 'read'), entry(w, 'write')] });
    expect(r).toMatchObject({ readAll: false, readRoots: [ro], writeRoots: [w], readOnly: [] });
  });

  it('a more specific write inside a denied area stays writable (masks first, then nested roots)', () => {
    const d = mk('den');
    const w = mk('den', 'proj');
    const r = resolveEntries({ ...base, root: 'read', entries: [entry(d, 'deny'), entry(w, 'write')] });
    expect(r).toMatchObject({ denyRead: [d], writeRoots: [w] });
  });

  it('a write nested in a write collapses into the outer root', () => {
    const w = mk('ww');
    const inner = mk('ww', 'in');
    expect(resolveEntries({ ...base, root: 'read', entries: [entry(w, 'write'), entry(inner, 'write')] }).writeRoots).toEqual([w]);
  });

  it('root write gives writeRoots ["/"]', () => {
    expect(resolveEntries({ ...base, root: 'write', entries: [] })).toMatchObject({ readAll: true, writeRoots: ['/'] });
  });

  it('ergonomic policy and profile compile to the same rules', () => {
    const w = mk('same');
    const fromPolicy = resolvePolicy({ filesystem: { write: [w], tmp: 'none' } }, w);
    const profile: PermissionProfile = {
      type: 'managed',
      network: 'restricted',
      file_system: {
        type: 'restricted',
        entries: [
          { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
          { path: { type: 'special', value: { kind: 'project_roots' } }, access: 'write' },
        ],
      },
    };
    const fromProfile = resolveProfile(materializeProjectRoots(profile, [w], w), { cwd: w });
    expect(fromProfile).toEqual(fromPolicy);
  });
});

describe('profile → rules', () => {
  it('workspace_write: project root writable, .git/.agents/.codex read-only, /tmp and TMPDIR writable', () => {
    const w = mk('ws');
    mk('ws', '.git', 'hooks');
    const t = mk('tmpdir-target');
    const r = resolveProfile(materializeProjectRoots(workspaceWriteProfile(), [w], w), { cwd: w, tmpdir: t });
    const realTmp = fs.realpathSync('/tmp');
    expect(r.readAll).toBe(true);
    expect(r.writeRoots).toEqual([realTmp, t, w].sort().filter((x, i, a) => a.indexOf(x) === i && !a.some((y) => y !== x && x.startsWith(y + '/'))));
    expect(r.readOnly).toEqual(expect.arrayContaining([path.join(w, '.git'), path.join(w, '.agents'), path.join(w, '.codex')]));
    expect(r.tmp).toBe('host');
    expect(r.network).toEqual({ kind: 'none' });
  });

  it('read_only: nothing writable, /tmp read-only, network none', () => {
    expect(resolveProfile(readOnlyProfile(), { cwd: '/' })).toMatchObject({ readAll: true, writeRoots: [], tmp: 'none', network: { kind: 'none' } });
  });

  it('disabled: everything, network full', () => {
    expect(resolveProfile({ type: 'disabled' }, { cwd: '/' })).toMatchObject({ readAll: true, writeRoots: ['/'], readOnly: [], network: { kind: 'full' } });
  });

  it('external / unrestricted: full file system, network as given', () => {
    expect(resolveProfile({ type: 'external', network: 'restricted' }, { cwd: '/' })).toMatchObject({ writeRoots: ['/'], network: { kind: 'none' } });
    expect(resolveProfile({ type: 'managed', file_system: { type: 'unrestricted' }, network: 'enabled' }, { cwd: '/' })).toMatchObject({ writeRoots: ['/'], network: { kind: 'full' } });
  });

  it('missing write entry: skipped (as Codex does), an error only with missing_path_behavior error', () => {
    const missing = path.join(tmp, 'nope');
    const present = path.join(tmp, 'present-root');
    fs.mkdirSync(present, { recursive: true });
    const mkp = (mpb?: 'skip' | 'error'): PermissionProfile => ({
      type: 'managed',
      network: 'restricted',
      file_system: {
        type: 'restricted',
        entries: [
          { path: { type: 'path', path: missing }, access: 'write', ...(mpb ? { missing_path_behavior: mpb } : {}) },
          { path: { type: 'path', path: present }, access: 'write' },
        ],
      },
    });
    expect(() => resolveProfile(mkp('error'), { cwd: '/' })).toThrow(`permissions.file_system.entries[0]: writable root ${missing} does not exist`);
    expect(resolveProfile(mkp('skip'), { cwd: '/' }).writeRoots).toEqual([fs.realpathSync(present)]);
    expect(resolveProfile(mkp(), { cwd: '/' }).writeRoots).toEqual([fs.realpathSync(present)]);
  });

  it('unknown special tokens are ignored and reported', () => {
    const ignored: string[] = [];
    const p = parsePermissionProfile(golden('permission-profile-none-alias.input.json'), { flavor: 'posix' });
    resolveProfile(p, { cwd: '/', ignored });
    expect(ignored).toEqual([':home_dir']);
  });

  it('git mode is configurable for our own carve-outs', () => {
    const w = mk('gitmode');
    const profile = materializeProjectRoots(readOnlyProfileWith('project_roots', 'write'), [w], w);
    expect(resolveProfile(profile, { cwd: w, git: 'whole' }).readOnly).toContain(path.join(w, '.git'));
    // No .git yet: held whole either way; with one, the default protects hooks and config.
    expect(resolveProfile(profile, { cwd: w }).readOnly).toContain(path.join(w, '.git'));
    mk('gitmode', '.git');
    expect(resolveProfile(profile, { cwd: w }).readOnly).toContain(path.join(w, '.git', 'hooks'));
  });
});

describe('glob deny expansion', () => {
  it('expands to concrete paths, with ** and depth cap', () => {
    const g = mk('glob');
    mk('glob', 'a', 'b', 'c');
    for (const f of ['x.env', 'a/y.env', 'a/b/z.env', 'a/b/c/deep.env', 'a/keep.txt']) fs.writeFileSync(path.join(g, f), '');
    expect(expandGlob(path.join(g, '**/*.env'))).toEqual(
      ['a/b/c/deep.env', 'a/b/z.env', 'a/y.env', 'x.env'].map((f) => path.join(g, f)).sort(),
    );
    // Depth counts like a directory walk: entries directly in the base are at depth 1.
    expect(expandGlob(path.join(g, '**/*.env'), { maxDepth: 2 })).toEqual(['a/y.env', 'x.env'].map((f) => path.join(g, f)).sort());
    expect(expandGlob(path.join(g, '**/*.env'), { maxDepth: 3 })).toEqual(['a/b/z.env', 'a/y.env', 'x.env'].map((f) => path.join(g, f)).sort());
    expect(expandGlob(path.join(g, 'a/{keep,y}.*'))).toEqual([path.join(g, 'a/keep.txt'), path.join(g, 'a/y.env')]);
    expect(expandGlob(path.join(g, 'a/[xy].env'))).toEqual([path.join(g, 'a/y.env')]);
  });

  it('the match cap fails closed instead of truncating', () => {
    const g = mk('cap');
    for (let i = 0; i < 5; i++) fs.writeFileSync(path.join(g, `f${i}`), '');
    expect(() => expandGlob(path.join(g, '*'), { maxMatches: 3 })).toThrow(SandboxError);
    expect(() => expandGlob(path.join(g, '*'), { maxMatches: 3 })).toThrow(/matches more than 3 paths/);
    expect(expandGlob(path.join(g, '*'), { maxMatches: 5 })).toHaveLength(5);
  });

  it('profile glob entries become denyRead paths (glob_scan_max_depth applies)', () => {
    const g = mk('pglob');
    mk('pglob', 'sub', 'deeper');
    fs.writeFileSync(path.join(g, 'sub', 'a.env'), '');
    fs.writeFileSync(path.join(g, 'sub', 'deeper', 'b.env'), '');
    const profile = (depth?: number): PermissionProfile => ({
      type: 'managed',
      network: 'restricted',
      file_system: {
        type: 'restricted',
        entries: [
          { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
          { path: { type: 'glob_pattern', pattern: '**/*.env' }, access: 'deny' },
        ],
        ...(depth ? { glob_scan_max_depth: depth } : {}),
      },
    });
    expect(resolveProfile(profile(), { cwd: g }).denyRead).toEqual([path.join(g, 'sub', 'a.env'), path.join(g, 'sub', 'deeper', 'b.env')]);
    expect(resolveProfile(profile(2), { cwd: g }).denyRead).toEqual([path.join(g, 'sub', 'a.env')]);
    expect(resolveProfile(profile(1), { cwd: g }).denyRead).toEqual([]);
  });
});

describe('carve-out hygiene', () => {
  it('carve-outs nested in another carve-out are dropped (a whole .git covers .git/hooks)', () => {
    const w = mk('nestcarve');
    mk('nestcarve', '.git');
    const r = resolveProfile(materializeProjectRoots(workspaceWriteProfile(), [w], w), { cwd: w, tmpdir: '' });
    expect(r.readOnly).toContain(path.join(w, '.git'));
    expect(r.readOnly.filter((p) => p.startsWith(path.join(w, '.git') + path.sep))).toEqual([]);
  });

  it('a writable root between two carve-outs keeps the inner one', () => {
    const w = mk('between');
    const docs = mk('between', 'docs');
    const out = mk('between', 'docs', 'out');
    const profile: PermissionProfile = {
      type: 'managed',
      network: 'restricted',
      file_system: {
        type: 'restricted',
        entries: [
          { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
          { path: { type: 'path', path: w }, access: 'write' },
          { path: { type: 'path', path: docs }, access: 'read' },
          { path: { type: 'path', path: out }, access: 'write' },
        ],
      },
    };
    const r = resolveProfile(profile, { cwd: w });
    expect(r.writeRoots).toEqual([w, out]);
    expect(r.readOnly).toContain(docs);
    expect(r.readOnly).toContain(path.join(out, '.codex'));
  });

  it('/tmp and $TMPDIR roots only protect metadata that already exists', () => {
    const t = mk('scratch-tmpdir');
    mk('scratch-tmpdir', '.codex');
    const profile: PermissionProfile = {
      type: 'managed',
      network: 'restricted',
      file_system: {
        type: 'restricted',
        entries: [
          { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
          { path: { type: 'special', value: { kind: 'tmpdir' } }, access: 'write' },
        ],
      },
    };
    const r = resolveProfile(profile, { cwd: '/', tmpdir: t });
    expect(r.writeRoots).toEqual([t]);
    expect(r.readOnly).toEqual([path.join(t, '.codex')]);
  });
});
