// The generated Seatbelt profile, checked as text on every OS: it reads as balanced
// S-expressions, every (param "X") it uses is defined and every definition is used, and no path
// from the rules ever appears inside the profile text.
import { describe, expect, it } from 'vitest';
import { buildSeatbeltProfile, loadProfileFile } from '../../lib/platform/darwin-profile';
import { readSbpl, referencedParams, stringLiterals, SbplSyntaxError } from '../../lib/platform/darwin-sbpl';
import type { ResolvedRules } from '../../lib/rules';
import { makeRules } from '../helpers/rules';

const rules = (over: Partial<ResolvedRules> = {}): ResolvedRules => makeRules(over);

const W = '/Users/dev/proj';
const ODD = [
  `/Users/dev/it's "quoted"`,
  '/Users/dev/with space/and (parens)',
  '/Users/dev/ünïcødé/日本語',
  '/Users/dev/semi;colon/#hash/back\\slash',
  '/Users/dev/new\nline',
  '/Users/dev/a=b',
];

const SHAPES: Array<[string, ResolvedRules, Parameters<typeof buildSeatbeltProfile>[1]]> = [
  ['read-only, full read', rules(), {}],
  ['read-only, restricted read', rules({ readAll: false, readRoots: ['/opt/tools'] }), {}],
  [
    'workspace-write with protected paths',
    rules({ writeRoots: [W], readOnly: [`${W}/.git/hooks`, `${W}/.git/config`, `${W}/.codex`, `${W}/.agents`] }),
    {},
  ],
  ['deny-read files and dirs', rules({ writeRoots: [W], denyRead: [`${W}/.env`, '/Users/dev/.ssh'] }), {}],
  [
    'deny-read with restricted read',
    rules({ readAll: false, readRoots: ['/Users/dev'], writeRoots: [W], denyRead: ['/Users/dev/.ssh', `${W}/secret`] }),
    {},
  ],
  ['deny globs', rules({ writeRoots: [W] }), { denyReadGlobs: ['/Users/dev/**/*.pem', `${W}/{a,b}/[!x]?.key`] }],
  ['network full', rules({ network: { kind: 'full' } }), {}],
  ['network proxy with ports', rules({ network: { kind: 'proxy', proxy: { allow: ['example.com'] } } }), { proxyPorts: [43128, 48081] }],
  ['network proxy without ports', rules({ network: { kind: 'proxy', proxy: { allow: ['example.com'] } } }), {}],
  ['tmp host', rules({ tmp: 'host', writeRoots: [W] }), { hostTmpDir: '/var/folders/xy/abc/T' }],
  ['tmp private', rules({ tmp: 'private' }), { privateTmpDir: '/private/var/folders/xy/abc/T/ps-1' }],
  ['startup-files preset', rules({ writeRoots: [W, '/Users/dev/other'], protectPresets: ['startup-files'] }), {}],
  ['unix sockets by path', rules({ network: { kind: 'none', unixSockets: ['/Users/dev/.docker/run/docker.sock', '/tmp/agent.sock'] } }), {}],
  ['unix sockets all, with a proxy', rules({ network: { kind: 'proxy', proxy: { allow: ['example.com'] }, unixSockets: 'all' } }), { proxyPorts: [43128] }],
  ['restricted read with the executable outside the roots', rules({ readAll: false, readRoots: [W] }), { executable: '/opt/homebrew/Cellar/node/22/bin/node' }],
  [
    'odd path characters in the new rules',
    rules({ readAll: false, writeRoots: ODD, protectPresets: ['startup-files'], network: { kind: 'none', unixSockets: ODD.map((p) => `${p}/s.sock`) } }),
    { executable: `${ODD[0]}x/bin/tool` },
  ],
  [
    'odd path characters everywhere',
    rules({ readAll: false, readRoots: ODD, writeRoots: ODD, readOnly: ODD.map((p) => `${p}/.git/hooks`), denyRead: ODD.map((p) => `${p}/.env`) }),
    { denyReadGlobs: ODD.map((p) => `${p}/**/*.key`) },
  ],
];

describe('SBPL reader', () => {
  it('reads lists, strings with escapes, regex literals and comments', () => {
    const forms = readSbpl('(version 1) ; c (\n(allow file-read* (literal "a\\"b)") (regex #"^/x\\.y$"))');
    expect(forms).toHaveLength(2);
    expect(stringLiterals(forms)).toEqual(['a"b)', '^/x\\.y$']);
  });

  it('finds every (param ...) use', () => {
    const forms = readSbpl('(allow file-read* (require-all (subpath (param "A")) (require-not (literal (param "B")))))');
    expect(referencedParams(forms)).toEqual(['A', 'B']);
  });

  it.each([
    ['(allow file-read*', /unclosed/],
    ['(allow file-read*))', /unbalanced/],
    ['(allow file-read* (literal "x))', /unterminated string/],
    [')(', /unbalanced/],
  ])('rejects %j', (text, message) => {
    expect(() => readSbpl(text)).toThrow(SbplSyntaxError);
    expect(() => readSbpl(text)).toThrow(message);
  });
});

describe('static profile files', () => {
  it('base.sb starts with (version 1) then (deny default), and names no parameter', () => {
    const base = loadProfileFile('base.sb');
    const forms = readSbpl(base);
    expect(forms[0]).toEqual({ kind: 'list', items: [{ kind: 'symbol', value: 'version' }, { kind: 'symbol', value: '1' }] });
    expect(forms[1]).toEqual({ kind: 'list', items: [{ kind: 'symbol', value: 'deny' }, { kind: 'symbol', value: 'default' }] });
    expect(referencedParams(forms)).toEqual([]);
  });

  it.each(['network.sb', 'platform-read.sb'] as const)('%s is balanced, static and has no (deny default) of its own', (name) => {
    const forms = readSbpl(loadProfileFile(name));
    expect(forms.length).toBeGreaterThan(0);
    expect(referencedParams(forms)).toEqual([]);
    expect(loadProfileFile(name)).not.toContain('(version');
  });

  it('base.sb allows what os.cpus(), semaphores and preferences need', () => {
    const base = loadProfileFile('base.sb');
    for (const needle of [
      '(sysctl-name "hw.ncpu")',
      '(sysctl-name "hw.activecpu")',
      '(sysctl-name "hw.model")',
      '(sysctl-name-prefix "machdep.cpu.")',
      '(sysctl-name-prefix "hw.perflevel")',
      '(sysctl-name "kern.osproductversion")',
      '(allow ipc-posix-sem)',
      '(allow user-preference-read)',
      '(allow process-exec)',
      '(allow process-fork)',
      '(allow signal (target same-sandbox))',
      '(allow process-info* (target same-sandbox))',
      '(literal "/dev/null")',
    ]) {
      expect(base, needle).toContain(needle);
    }
  });

  it('base.sb grants no file reads or writes beyond devices, no network, and runs nothing unsandboxed', () => {
    const base = loadProfileFile('base.sb');
    expect(base).not.toMatch(/\(allow network/);
    expect(base).not.toMatch(/no-sandbox/);
    expect(base).not.toMatch(/\(allow file-read\*\)/);
    expect(base).not.toMatch(/\(allow file-write\*\s*\)/);
    expect(base).not.toMatch(/\(allow (default|mach-lookup\)|mach\*|sysctl\*|iokit\*)/);
  });
});

describe.each(SHAPES)('generated profile: %s', (_name, r, opts) => {
  const { profile, params } = buildSeatbeltProfile(r, opts);
  const forms = readSbpl(profile);

  it('parses as balanced S-expressions and starts with (version 1) (deny default)', () => {
    expect(forms.length).toBeGreaterThan(2);
    expect(profile.startsWith('(version 1)')).toBe(true);
    expect(profile.indexOf('(deny default)')).toBeLessThan(profile.indexOf('(allow'));
  });

  it('defines every parameter it references, and references every parameter it defines', () => {
    const used = referencedParams(forms).sort();
    expect(used).toEqual(Object.keys(params).sort());
  });

  it('never splices a path from the rules into the profile text', () => {
    const literals = new Set(stringLiterals(forms));
    const userPaths = [
      ...r.readRoots,
      ...r.writeRoots,
      ...r.readOnly,
      ...r.denyRead,
      ...(opts?.denyReadGlobs ?? []),
      ...(r.network.kind !== 'full' && Array.isArray(r.network.unixSockets) ? r.network.unixSockets : []),
      ...(opts?.executable !== undefined ? [opts.executable] : []),
    ];
    for (const p of userPaths) {
      expect(profile.includes(p), p).toBe(false);
      expect(literals.has(p)).toBe(false);
    }
    for (const value of Object.values(params)) {
      if (value === '/') continue;
      expect(profile.includes(value), value).toBe(false);
    }
  });
});
