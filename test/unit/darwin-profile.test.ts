// What the Seatbelt generator emits for each policy shape (pure text; runs on every OS).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  buildSeatbeltProfile,
  caseInsensitiveSubtreeRegex,
  globAncestorRegexes,
  globToSeatbeltRegex,
  normaliseDarwinPath,
  seatbeltArgs,
} from '../../lib/platform/darwin-profile';
import { SandboxError } from '../../lib/errors';
import type { ResolvedRules } from '../../lib/rules';
import { makeRules } from '../helpers/rules';

const rules = (over: Partial<ResolvedRules> = {}): ResolvedRules => makeRules(over);

const W = '/Users/dev/proj';

/** The parameter name whose value is `value` (each test asserts on rules through names). */
function paramFor(params: Record<string, string>, value: string): string {
  const hit = Object.entries(params).find(([, v]) => v === value);
  if (!hit) throw new Error(`no parameter with value ${value}: ${JSON.stringify(params)}`);
  return hit[0];
}

function thrown(fn: () => unknown): SandboxError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SandboxError);
    return err as SandboxError;
  }
  throw new Error('expected a SandboxError');
}

describe('path normalisation', () => {
  it.each([
    ['/tmp', '/private/tmp'],
    ['/tmp/x', '/private/tmp/x'],
    ['/var/folders/ab/T/', '/private/var/folders/ab/T'],
    ['/etc/hosts', '/private/etc/hosts'],
    ['/tmpfoo', '/tmpfoo'],
    ['/private/tmp/x', '/private/tmp/x'],
    ['//Users//dev/', '/Users/dev'],
    ['/', '/'],
  ])('%s → %s', (input, expected) => {
    expect(normaliseDarwinPath(input)).toBe(expected);
  });

  it.each(['relative/path', '', '/a/../b', '/a/./b', '/a\0b'])('rejects %j', (input) => {
    expect(thrown(() => normaliseDarwinPath(input)).code).toBe('EINVALID_POLICY');
  });

  it('normalises rule paths before they become parameters', () => {
    const { params } = buildSeatbeltProfile(rules({ writeRoots: ['/tmp/work'], denyRead: ['/etc/master.passwd'] }));
    expect(Object.values(params)).toContain('/private/tmp/work');
    expect(Object.values(params)).toContain('/private/etc/master.passwd');
    expect(Object.values(params)).not.toContain('/tmp/work');
  });
});

describe('reads', () => {
  it('full read with no denials is one unconditional allow', () => {
    const { profile, params } = buildSeatbeltProfile(rules());
    expect(profile).toContain('(allow file-read* file-map-executable)\n');
    expect(params).toEqual({});
    expect(profile).not.toContain('(path-ancestors "/System/Volumes/Data/private")'); // no platform defaults
  });

  it('full read with denials excludes each denied path with require-not', () => {
    const { profile, params } = buildSeatbeltProfile(rules({ denyRead: ['/Users/dev/.ssh', '/Users/dev/.aws/credentials'] }));
    const ssh = paramFor(params, '/Users/dev/.ssh');
    const aws = paramFor(params, '/Users/dev/.aws/credentials');
    expect(profile).toMatch(
      new RegExp(
        String.raw`\(allow file-read\* file-map-executable\s+\(require-all\s+\(subpath "/"\)\s+\(require-not \(subpath \(param "${ssh}"\)\)\)\s+\(require-not \(subpath \(param "${aws}"\)\)\)`,
      ),
    );
    expect(profile).not.toContain('(allow file-read* file-map-executable)\n');
  });

  it('restricted read allows each root (writable roots included) plus ancestor metadata and platform defaults', () => {
    const { profile, params } = buildSeatbeltProfile(rules({ readAll: false, readRoots: ['/opt/tools'], writeRoots: [W] }));
    for (const root of ['/opt/tools', W]) {
      const name = paramFor(params, root);
      expect(name).toMatch(/^READABLE_ROOT_\d+$/);
      expect(profile).toContain(`(allow file-read* file-map-executable (subpath (param "${name}")))`);
      expect(profile).toContain(`(allow file-read-metadata file-test-existence (path-ancestors (param "${name}")))`);
    }
    expect(profile).toContain('(subpath "/usr/lib")');
    expect(profile).not.toContain('(allow file-read* file-map-executable)\n');
  });

  it('restricted read excludes denied paths inside a root and denies them again at the end', () => {
    const { profile, params } = buildSeatbeltProfile(
      rules({ readAll: false, readRoots: ['/Users/dev'], denyRead: ['/Users/dev/.ssh'] }),
    );
    const root = paramFor(params, '/Users/dev');
    const ssh = paramFor(params, '/Users/dev/.ssh');
    expect(profile).toMatch(
      new RegExp(String.raw`\(subpath \(param "${root}"\)\)\s+\(require-not \(subpath \(param "${ssh}"\)\)\)`),
    );
    const denyAt = profile.indexOf(`(deny file-read* file-map-executable file-write* (subpath (param "${ssh}")))`);
    expect(denyAt).toBeGreaterThan(profile.indexOf('(subpath "/usr/lib")')); // after the platform defaults
  });
});

describe('deny-read files and directories', () => {
  const { profile, params } = buildSeatbeltProfile(
    rules({ writeRoots: [W], denyRead: [`${W}/.env`, `${W}/secrets`, '/Users/dev/.ssh'] }),
  );

  it('denies read, mmap-exec and write of each path and its subtree, in exact and case-folded spelling', () => {
    for (const p of [`${W}/.env`, `${W}/secrets`, '/Users/dev/.ssh']) {
      const name = paramFor(params, p);
      expect(params[`${name}_CI`]).toBe(caseInsensitiveSubtreeRegex(p));
      expect(profile).toContain(`(deny file-read* file-map-executable file-write* (subpath (param "${name}")))`);
      expect(profile).toContain(`(deny file-read* file-map-executable file-write* (regex (param "${name}_CI")))`);
    }
  });

  it('keeps denied paths inside a writable root out of its write allowance', () => {
    const env = paramFor(params, `${W}/.env`);
    expect(profile).toContain(`(require-not (subpath (param "${env}")))`);
  });

  it('freezes the directories between a denied path and its writable root (no rename-away)', () => {
    const { profile: p2, params: q2 } = buildSeatbeltProfile(rules({ writeRoots: [W], denyRead: [`${W}/conf/keys/id`] }));
    for (const a of [`${W}/conf/keys`, `${W}/conf`]) {
      expect(p2).toContain(`(deny file-write-unlink (literal (param "${paramFor(q2, a)}")))`);
      expect(p2).toContain(`(deny file-write-unlink (regex (param "${paramFor(q2, a)}_CI")))`);
    }
  });

  it('case-folded regexes match other spellings of the same path only', () => {
    const re = new RegExp(caseInsensitiveSubtreeRegex('/Users/dev/.SSH'));
    expect(re.test('/users/DEV/.ssh')).toBe(true);
    expect(re.test('/Users/dev/.ssh/id_rsa')).toBe(true);
    expect(re.test('/Users/dev/.sshx')).toBe(false);
    expect(re.test('/Users/dev/xssh')).toBe(false);
  });
});

describe('workspace-write with protected paths', () => {
  const ro = [`${W}/.git/hooks`, `${W}/.git/config`, `${W}/.codex`, `${W}/.agents`];
  const { profile, params } = buildSeatbeltProfile(rules({ writeRoots: [W], readOnly: ro }));
  const root = paramFor(params, W);

  it('allows writes under the root except each protected path (literal, subtree and case-folded)', () => {
    expect(root).toBe('WRITABLE_ROOT_0');
    const allow = profile.slice(profile.indexOf('(allow file-write*\n'), profile.indexOf('; ---- network'));
    expect(allow).toContain(`(subpath (param "${root}"))`);
    for (const p of ro) {
      const name = paramFor(params, p);
      expect(allow).toContain(`(require-not (literal (param "${name}")))`);
      expect(allow).toContain(`(require-not (subpath (param "${name}")))`);
      expect(allow).toContain(`(require-not (regex (param "${name}_CI")))`);
      expect(profile).toContain(`(deny file-write* (subpath (param "${name}")))`);
    }
  });

  it('a protected path that does not exist yet cannot be created under another letter case', () => {
    const re = new RegExp(params[`${paramFor(params, `${W}/.codex`)}_CI`]);
    expect(re.test(`${W}/.CODEX`)).toBe(true);
    expect(re.test(`${W}/.Codex/config.toml`)).toBe(true);
    expect(re.test(`${W}/.codexx`)).toBe(false);
  });

  it('neither the protected paths nor their ancestors up to the root can be unlinked or renamed away', () => {
    expect(profile).toContain(`(deny file-write-create file-write-unlink (literal (param "${paramFor(params, `${W}/.git`)}")))`);
    expect(profile).toContain(`(deny file-write-unlink (require-all (literal (param "${root}")) (vnode-type DIRECTORY)))`);
    // The root's own parent is outside every writable root: nothing is emitted for it.
    expect(Object.values(params)).not.toContain('/Users/dev');
  });

  it('protected paths outside every writable root add nothing', () => {
    const r2 = buildSeatbeltProfile(rules({ writeRoots: [W], readOnly: ['/Users/dev/other/.git/hooks'] }));
    expect(Object.keys(r2.params)).toEqual(['WRITABLE_ROOT_0']);
  });

  it('a protected path that contains a writable root wins over it', () => {
    const r2 = buildSeatbeltProfile(rules({ writeRoots: [`${W}/.git/hooks/sub`], readOnly: [`${W}/.git/hooks`] }));
    expect(r2.profile).toContain(`(require-not (subpath (param "${paramFor(r2.params, `${W}/.git/hooks`)}")))`);
  });

  it('directories above a protected path cannot be created, so a prepared tree cannot be renamed into place', () => {
    const r2 = buildSeatbeltProfile(rules({ writeRoots: [W], readOnly: [`${W}/.jj/repo/hooks`] }));
    for (const a of [`${W}/.jj/repo`, `${W}/.jj`]) {
      const name = paramFor(r2.params, a);
      expect(r2.profile).toContain(`(deny file-write-create file-write-unlink (literal (param "${name}")))`);
      expect(r2.profile).toContain(`(deny file-write-create file-write-unlink (regex (param "${name}_CI")))`);
      const re = new RegExp(r2.params[`${name}_CI`]);
      expect(re.test(a.toUpperCase())).toBe(true);
      expect(re.test(`${a}/x`)).toBe(false); // only the directory itself; its other contents stay writable
    }
    expect(r2.gaps).toEqual([]);
  });

  it('directories above a denied path may be created (they exist) but not renamed away', () => {
    const r2 = buildSeatbeltProfile(rules({ writeRoots: [W], denyRead: [`${W}/conf/key`] }));
    const name = paramFor(r2.params, `${W}/conf`);
    expect(r2.profile).toContain(`(deny file-write-unlink (literal (param "${name}")))`);
    expect(r2.profile).not.toContain(`(deny file-write-create file-write-unlink (literal (param "${name}")))`);
  });
});

describe('writable roots through symlinks', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ps-darwin-'));
  fs.mkdirSync(path.join(dir, 'real'));
  fs.symlinkSync(path.join(dir, 'real'), path.join(dir, 'link'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('a real directory is accepted (positive control)', () => {
    expect(() => buildSeatbeltProfile(rules({ writeRoots: [path.join(dir, 'real')] }))).not.toThrow();
  });

  it.each([['link'], ['link/sub']])('a root reached through a symlink (%s) is ESYMLINK_ROOT', (rel) => {
    const err = thrown(() => buildSeatbeltProfile(rules({ writeRoots: [path.join(dir, rel)] })));
    expect(err.code).toBe('ESYMLINK_ROOT');
    expect(err.message).toContain('symlinked writable roots are not supported');
    expect(err.message).toContain(path.join(dir, 'link'));
  });

  it('a symlinked private tmp directory is refused as well', () => {
    const r = rules({ tmp: 'private' });
    expect(thrown(() => buildSeatbeltProfile(r, { privateTmpDir: path.join(dir, 'link') })).code).toBe('ESYMLINK_ROOT');
  });
});

describe('network', () => {
  it('none: no network rule at all', () => {
    const { profile } = buildSeatbeltProfile(rules());
    expect(profile).not.toMatch(/\(allow network/);
    expect(profile).not.toMatch(/\(allow system-socket/);
    expect(profile).not.toContain('com.apple.SystemConfiguration.DNSConfiguration');
  });

  it('full: outbound, inbound, bind, sockets and the network services', () => {
    const { profile } = buildSeatbeltProfile(rules({ network: { kind: 'full' } }));
    for (const rule of ['(allow network-outbound)', '(allow network-inbound)', '(allow network-bind)', '(allow system-socket)']) {
      expect(profile).toContain(rule);
    }
    expect(profile).toContain('com.apple.trustd.agent');
  });

  it('proxy: outbound only to the proxy loopback ports; no blanket outbound, bind, inbound or DNS', () => {
    const { profile } = buildSeatbeltProfile(rules({ network: { kind: 'proxy', proxy: { allow: ['example.com'] } } }), {
      proxyPorts: [48081, 43128, 43128],
    });
    const allows = profile.match(/\(allow network[^\n]*/g) ?? [];
    expect(allows).toEqual([
      '(allow network-outbound (remote ip "localhost:43128"))',
      '(allow network-outbound (remote ip "localhost:48081"))',
    ]);
    expect(profile).not.toContain(':53"');
    expect(profile).not.toMatch(/\(allow system-socket\)/);
    expect(profile).toContain('com.apple.trustd.agent'); // TLS through CONNECT still verifies certificates
  });

  it('proxy without ports: no network at all (fail closed)', () => {
    const { profile } = buildSeatbeltProfile(rules({ network: { kind: 'proxy', proxy: { allow: ['example.com'] } } }), {
      proxyPorts: [],
    });
    expect(profile).not.toMatch(/\(allow network/);
    expect(profile).not.toContain('com.apple.trustd.agent');
  });

  it('proxy ports are ignored unless the rules ask for proxy mode', () => {
    const { profile } = buildSeatbeltProfile(rules(), { proxyPorts: [43128] });
    expect(profile).not.toMatch(/\(allow network/);
  });

  it.each([0, 65536, 1.5, Number.NaN])('rejects proxy port %s', (port) => {
    const r = rules({ network: { kind: 'proxy', proxy: { allow: [] } } });
    expect(thrown(() => buildSeatbeltProfile(r, { proxyPorts: [port] })).code).toBe('EPROXY_CONFIG');
  });
});

describe('tmp', () => {
  it('host: /private/tmp, /private/var/tmp and the given TMPDIR are writable', () => {
    const { params } = buildSeatbeltProfile(rules({ tmp: 'host' }), { hostTmpDir: '/var/folders/ab/cd/T/' });
    const writable = Object.entries(params)
      .filter(([k]) => /^WRITABLE_ROOT_\d+$/.test(k))
      .map(([, v]) => v);
    expect(writable).toEqual(['/private/tmp', '/private/var/tmp', '/private/var/folders/ab/cd/T']);
  });

  it('none: nothing temporary is writable', () => {
    const { params, gaps } = buildSeatbeltProfile(rules({ tmp: 'none' }), { hostTmpDir: '/var/folders/x' });
    expect(params).toEqual({});
    expect(gaps).toEqual([]);
  });

  it('private: only the per-run directory; without one, a gap says tmp is not writable', () => {
    const withDir = buildSeatbeltProfile(rules({ tmp: 'private' }), { privateTmpDir: '/private/var/folders/ab/T/ps-7' });
    expect(withDir.params).toEqual({ WRITABLE_ROOT_0: '/private/var/folders/ab/T/ps-7' });
    const without = buildSeatbeltProfile(rules({ tmp: 'private' }));
    expect(without.params).toEqual({});
    expect(without.gaps.join()).toMatch(/^tmp: /);
  });
});

describe('paths with quotes, spaces, parentheses and non-ASCII survive as parameters', () => {
  const odd = [
    `/Users/dev/it's "quoted"`,
    '/Users/dev/with space/and (parens)',
    '/Users/dev/ünïcødé/日本語',
    '/Users/dev/semi;colon #hash back\\slash',
    '/Users/dev/new\nline',
    '/Users/dev/a=b',
  ];

  it.each(odd)('%j', (p) => {
    const args = seatbeltArgs(rules({ writeRoots: [p], denyRead: [`${p}/.env`] }), ['/bin/echo', 'hi']);
    expect(args).toContain(`-DWRITABLE_ROOT_0=${p}`);
    expect(args).toContain(`-DDENY_READ_0=${p}/.env`);
    const ci = args.find((a) => a.startsWith('-DDENY_READ_0_CI='))!;
    const re = new RegExp(ci.slice('-DDENY_READ_0_CI='.length));
    expect(re.test(`${p}/.env`)).toBe(true);
    expect(re.test(`${p}/.env/x`)).toBe(true);
    expect(re.test(`${p}/.envy`)).toBe(false);
    expect(args[1].includes(p)).toBe(false);
  });
});

describe('seatbeltArgs', () => {
  it('is -p <profile>, one -DNAME=value per parameter, --, then argv unchanged', () => {
    const argv = ['/bin/sh', '-c', 'echo "$1"', '--', '-p'];
    const args = seatbeltArgs(rules({ writeRoots: [W] }), argv);
    expect(args[0]).toBe('-p');
    expect(args[1].startsWith('(version 1)')).toBe(true);
    expect(args[2]).toBe(`-DWRITABLE_ROOT_0=${W}`);
    expect(args[3]).toBe('--');
    expect(args.slice(4)).toEqual(argv);
  });
});

describe('globToSeatbeltRegex', () => {
  const cases: Array<[string, string[], string[]]> = [
    ['/w/*.pem', ['/w/a.pem', '/w/.pem', '/w/a.pem/inner'], ['/w/a/b.pem', '/w/a.pemx', '/x/a.pem']],
    ['/w/**/*.pem', ['/w/a.pem', '/w/a/b/c.pem'], ['/w.pem', '/v/a.pem', '/w/a.pem.bak']],
    ['/w/**', ['/w/a', '/w/a/b'], ['/w', '/wx/a']],
    ['/w/?.key', ['/w/a.key'], ['/w/ab.key', '/w//.key']],
    ['/w/[abc].txt', ['/w/a.txt', '/w/c.txt'], ['/w/d.txt', '/w/A.txt']],
    ['/w/[!abc].txt', ['/w/d.txt'], ['/w/a.txt']],
    ['/w/[a-c]x', ['/w/bx'], ['/w/dx']],
    ['/w/{a,b/c}.env', ['/w/a.env', '/w/b/c.env'], ['/w/b.env', '/w/c.env']],
    ['/w/a.b+c(d)$^|', ['/w/a.b+c(d)$^|'], ['/w/aXb+c(d)$^|']],
    ['/w/\\*literal', ['/w/*literal'], ['/w/xliteral']],
    ['/w/secret', ['/w/secret', '/w/secret/x'], ['/w/secrets']],
    ['/w/a**b', ['/w/axxb'], ['/w/a/b']],
    ['/tmp/*.sock', ['/private/tmp/x.sock'], ['/tmp/x.sock']],
    ['/w/[unclosed', ['/w/[unclosed'], ['/w/u']],
  ];

  it.each(cases)('%s', (glob, yes, no) => {
    const re = globToSeatbeltRegex(glob);
    expect(re.startsWith('^')).toBe(true);
    expect(re.endsWith('$')).toBe(true);
    const rx = new RegExp(re);
    for (const p of yes) expect(rx.test(p), `${glob} should match ${p} (${re})`).toBe(true);
    for (const p of no) expect(rx.test(p), `${glob} should not match ${p} (${re})`).toBe(false);
  });

  it('negated classes never match the separator', () => {
    expect(new RegExp(globToSeatbeltRegex('/w/a[!x]b')).test('/w/a/b')).toBe(false);
    expect(thrown(() => globToSeatbeltRegex('/w/a[!]]b')).code).toBe('EINVALID_POLICY');
    expect(thrown(() => globToSeatbeltRegex('/w/a[]]b')).code).toBe('EINVALID_POLICY');
    expect(new RegExp(globToSeatbeltRegex('/w/a[!-]b')).test('/w/a.b')).toBe(true);
    expect(new RegExp(globToSeatbeltRegex('/w/a[!-]b')).test('/w/a-b')).toBe(false);
  });

  it('caseInsensitive folds ASCII letters, including inside classes', () => {
    const rx = new RegExp(globToSeatbeltRegex('/w/**/[a-c]*.PEM', { caseInsensitive: true }));
    expect(rx.test('/W/x/B1.pem')).toBe(true);
    expect(rx.test('/w/x/d1.pem')).toBe(false);
  });

  it('rejects relative and empty globs', () => {
    expect(thrown(() => globToSeatbeltRegex('**/.env')).code).toBe('EINVALID_POLICY');
    expect(thrown(() => globToSeatbeltRegex('')).code).toBe('EINVALID_POLICY');
  });

  it('ancestors: exact directories above the match, stopping at the first **', () => {
    expect(globAncestorRegexes('/w/secrets/*.key')).toEqual(['^/w$', '^/w/secrets$']);
    expect(globAncestorRegexes('/w/*/id')).toEqual(['^/w$', '^/w/[^/]*$']);
    expect(globAncestorRegexes('/w/**/deep/*.key')).toEqual(['^/w$']);
  });

  it('deny globs become read and write denials plus directory unlink denials for their ancestors', () => {
    const { profile, params } = buildSeatbeltProfile(rules({ writeRoots: [W] }), { denyReadGlobs: [`${W}/keys/*.pem`] });
    expect(params.DENY_GLOB_0).toBe(globToSeatbeltRegex(`${W}/keys/*.pem`, { caseInsensitive: true }));
    expect(profile).toContain('(deny file-read* file-map-executable file-write* (regex (param "DENY_GLOB_0")))');
    const ancestors = Object.keys(params).filter((k) => k.startsWith('DENY_GLOB_0_ANCESTOR_'));
    expect(ancestors.length).toBe(4); // /Users, /Users/dev, /Users/dev/proj, /Users/dev/proj/keys
    for (const a of ancestors) {
      expect(profile).toContain(`(deny file-write-unlink (require-all (vnode-type DIRECTORY) (regex (param "${a}"))))`);
    }
    expect(new RegExp(params[ancestors[3]]).test(`${W}/keys`)).toBe(true);
  });
});

describe('denials come after every allowance', () => {
  it('the last allow precedes the first generated deny', () => {
    const { profile } = buildSeatbeltProfile(
      rules({ readAll: false, readRoots: ['/opt'], writeRoots: [W], readOnly: [`${W}/.codex`], denyRead: [`${W}/.env`], network: { kind: 'full' } }),
      { denyReadGlobs: [`${W}/**/*.pem`] },
    );
    const denials = profile.indexOf('; ---- denials');
    expect(denials).toBeGreaterThan(0);
    expect(profile.lastIndexOf('(allow ')).toBeLessThan(denials);
    expect(profile.trimEnd().endsWith('(deny system-fcntl (fcntl-command 80 110))')).toBe(true);
    expect(profile).toContain('(deny mach-lookup (xpc-service-name-prefix ""))');
  });
});
