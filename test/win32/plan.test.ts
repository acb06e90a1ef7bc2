// Windows planning, pure: runs under vitest on every OS (the wine suite covers the native side).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SandboxError } from '../../lib/errors';
import type { ResolvedRules } from '../../lib/rules';
import {
  buildBatchCommandLine,
  buildCommandLine,
  isBatchFile,
  DEAD_PROXY_ENV,
  mapWindowsSandboxLevel,
  mergeEnvCaseInsensitive,
  planWindowsSandbox,
  quoteWindowsArg,
  unsandboxedReport,
} from '../../lib/platform/win32-plan';
import { CapabilityStore, defaultStateDir, randomCapabilitySid } from '../../lib/platform/win32-caps';
import { isWithinWin32 } from '../../lib/paths';
import { makeRules } from '../helpers/rules';

const rules = (over: Partial<ResolvedRules> = {}): ResolvedRules => makeRules({ network: { kind: 'full' }, ...over });

const ctx = (over: Partial<Parameters<typeof planWindowsSandbox>[1]> = {}) => ({
  wine: null,
  hostTmp: 'C:\\Users\\me\\AppData\\Local\\Temp',
  exists: () => true,
  ...over,
});

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(SandboxError);
    return (e as SandboxError).code;
  }
  return undefined;
}

describe('mapWindowsSandboxLevel', () => {
  it('maps disabled and restricted-token', () => {
    expect(mapWindowsSandboxLevel('disabled')).toEqual({ sandboxed: false, mode: 'none' });
    expect(mapWindowsSandboxLevel('restricted-token')).toEqual({ sandboxed: true, mode: 'restricted-token' });
  });
  it('refuses elevated and mxc with precise errors, and unknown levels as invalid', () => {
    expect(() => mapWindowsSandboxLevel('elevated')).toThrow(/elevated Windows sandbox backend/);
    expect(codeOf(() => mapWindowsSandboxLevel('elevated'))).toBe('ENOT_ENFORCED');
    expect(() => mapWindowsSandboxLevel('mxc')).toThrow('native MXC is unavailable on this executor');
    expect(codeOf(() => mapWindowsSandboxLevel('sandboxie'))).toBe('EINVALID_POLICY');
  });
});

describe('planWindowsSandbox', () => {
  it('plans a workspace-write run: grants, carve-outs, job, report', () => {
    const plan = planWindowsSandbox(
      rules({
        writeRoots: ['C:\\work\\repo'],
        readOnly: ['C:\\work\\repo\\.git\\hooks', 'C:\\work\\repo\\.codex', 'D:\\elsewhere\\.git'],
        limits: { maxProcesses: 64, memoryBytes: 1 << 30 },
      }),
      ctx({ exists: (p) => !p.endsWith('.codex') }),
    );
    expect(plan.writeRoots).toEqual(['C:\\work\\repo']);
    expect(plan.protectedPaths).toEqual([{ path: 'C:\\work\\repo\\.git\\hooks', roots: ['C:\\work\\repo'] }]);
    // A missing carve-out is held by a placeholder, not left creatable.
    expect(plan.placeholders).toEqual([{ path: 'C:\\work\\repo\\.codex', type: 'dir', roots: ['C:\\work\\repo'] }]);
    expect(plan.missingProtectedPaths).toEqual([]);
    // .git cannot be renamed away (DELETE on it, FILE_DELETE_CHILD on the root), nor the root moved.
    expect(plan.denyDelete.map((d) => d.path)).toEqual(['C:\\work\\repo', 'C:\\work\\repo\\.git']);
    expect(plan.denyDeleteChild.map((d) => d.path).sort()).toEqual(['C:\\work\\repo', 'C:\\work\\repo\\.git']);
    expect(plan.job).toEqual({ uiRestrictions: true, activeProcessLimit: 64, processMemoryLimit: 1 << 30 });
    expect(plan.envOverrides).toEqual({});
    expect(plan.report.mode).toBe('restricted-token');
    expect(plan.report.guarantees).toMatchObject({
      filesystemRead: 'not-requested',
      filesystemWrite: 'partial',
      protectedPaths: 'enforced',
      denyRead: 'not-requested',
      network: 'not-requested',
      treeTeardown: 'enforced',
    });
    expect(plan.report.gaps.some((g) => g.includes('.codex'))).toBe(false);
  });

  it('network none (the default) is refused unless degraded, with a message that says how to get enforcement', () => {
    let err: unknown;
    try {
      planWindowsSandbox(rules({ network: { kind: 'none' } }), ctx());
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('ENETWORK_NOT_ENFORCEABLE');
    expect((err as SandboxError).message).toMatch(/elevated Windows sandbox backend/);
    expect((err as SandboxError).message).toMatch(/degraded: true/);
    // Positive control: the same rules with the network allowed plan fine.
    expect(planWindowsSandbox(rules({ network: { kind: 'full' } }), ctx()).report.guarantees.network).toBe('not-requested');
  });

  it('network none with unixSockets, degraded: the unix socket list is a gap too', () => {
    const plan = planWindowsSandbox(rules({ network: { kind: 'none', unixSockets: ['C:\\x\\s.sock'] }, degraded: true }), ctx());
    expect(plan.report.gaps.some((g) => g.startsWith('network.unixSockets'))).toBe(true);
  });

  it('network none, degraded: dead proxy env and a report that says not enforced', () => {
    const plan = planWindowsSandbox(rules({ network: { kind: 'none' }, degraded: true }), ctx());
    expect(plan.envOverrides).toEqual(DEAD_PROXY_ENV);
    expect(plan.envOverrides.HTTPS_PROXY).toBe('http://127.0.0.1:9');
    expect(plan.report.guarantees.network).toBe('not-enforced');
    expect(plan.report.gaps.some((g) => g.startsWith('network:'))).toBe(true);
  });

  it('refuses what it cannot enforce', () => {
    expect(codeOf(() => planWindowsSandbox(rules({ denyRead: ['C:\\secret'] }), ctx()))).toBe('EUNSUPPORTED_POLICY');
    expect(codeOf(() => planWindowsSandbox(rules({ denyRead: ['C:\\secret'], degraded: true }), ctx()))).toBe(
      'EUNSUPPORTED_POLICY',
    );
    expect(
      codeOf(() => planWindowsSandbox(rules({ network: { kind: 'proxy', proxy: { allow: ['example.com'] } } }), ctx())),
    ).toBe('ENETWORK_NOT_ENFORCEABLE');
    expect(codeOf(() => planWindowsSandbox(rules({ readAll: false, readRoots: ['C:\\x'] }), ctx()))).toBe(
      'EUNSUPPORTED_POLICY',
    );
    expect(codeOf(() => planWindowsSandbox(rules({ mode: 'isolated' }), ctx()))).toBe('EUNSUPPORTED_POLICY');
    expect(codeOf(() => planWindowsSandbox(rules(), ctx({ wine: '8.0' })))).toBe('ENOT_ENFORCED');
  });

  it('degraded mode runs read-restricted policies and lists the gap', () => {
    const plan = planWindowsSandbox(rules({ readAll: false, readRoots: ['C:\\x'], degraded: true }), ctx());
    expect(plan.report.guarantees.filesystemRead).toBe('not-enforced');
    expect(plan.report.gaps.some((g) => g.startsWith('filesystemRead:'))).toBe(true);
  });

  it('under wine (degraded) every token/ACL guarantee is reported as not enforced', () => {
    const plan = planWindowsSandbox(rules({ degraded: true, writeRoots: ['C:\\w'], readOnly: ['C:\\w\\.git'] }), ctx({ wine: '8.0' }));
    expect(plan.report.guarantees.filesystemWrite).toBe('not-enforced');
    expect(plan.report.guarantees.protectedPaths).toBe('not-enforced');
    expect(plan.report.mechanisms.wine).toBe('8.0');
  });

  it("tmp 'host': a temporary grant for read-only runs, a kept root for workspace-write; 'private' asks for a per-run dir", () => {
    const ro = planWindowsSandbox(rules({ tmp: 'host' }), ctx());
    expect(ro.writeRoots).toEqual([]);
    expect(ro.temporaryRoots).toEqual(['C:\\Users\\me\\AppData\\Local\\Temp']); // read-only run: revoked at exit
    const ww = planWindowsSandbox(rules({ tmp: 'host', writeRoots: ['C:\\w'] }), ctx());
    expect(ww.writeRoots).toEqual(['C:\\w', 'C:\\Users\\me\\AppData\\Local\\Temp']);
    expect(ww.temporaryRoots).toEqual([]);
    const p = planWindowsSandbox(rules({ tmp: 'private', writeRoots: ['C:\\a', 'c:\\A\\'] }), ctx());
    expect(p.privateTmp).toBe(true);
    expect(p.writeRoots).toEqual(['C:\\a']);
  });
});

describe('command lines and env', () => {
  // The MSVC runtime / CommandLineToArgvW rules for arguments after argv[0].
  function parseArgs(cmd: string): string[] {
    const args: string[] = [];
    let i = 0;
    while (i < cmd.length) {
      while (cmd[i] === ' ' || cmd[i] === '\t') i++;
      if (i >= cmd.length) break;
      let arg = '';
      let inQuotes = false;
      while (i < cmd.length) {
        const c = cmd[i]!;
        if (!inQuotes && (c === ' ' || c === '\t')) break;
        if (c === '\\') {
          let n = 0;
          while (cmd[i] === '\\') {
            n++;
            i++;
          }
          if (cmd[i] === '"') {
            arg += '\\'.repeat(n >> 1);
            if (n % 2 === 1) {
              arg += '"';
              i++;
            }
          } else {
            arg += '\\'.repeat(n);
          }
          continue;
        }
        if (c === '"') {
          inQuotes = !inQuotes;
          i++;
          continue;
        }
        arg += c;
        i++;
      }
      args.push(arg);
    }
    return args;
  }

  it('quotes only when needed', () => {
    expect(quoteWindowsArg('plain')).toBe('plain');
    expect(quoteWindowsArg('C:\\dir\\')).toBe('C:\\dir\\');
    expect(quoteWindowsArg('')).toBe('""');
    expect(quoteWindowsArg('a b')).toBe('"a b"');
    expect(quoteWindowsArg('a b\\')).toBe('"a b\\\\"');
    expect(quoteWindowsArg('say "hi"')).toBe('"say \\"hi\\""');
  });

  it('round-trips awkward arguments through the CommandLineToArgvW rules', () => {
    const awkward = ['', ' ', 'a b', 'a"b', 'a\\"b', 'a\\\\"b', 'trail\\', 'trail \\', '\\\\server\\share\\x y', '"', '\\', 'é ü', '\t'];
    const line = buildCommandLine(['prog.exe', ...awkward]);
    expect(parseArgs(line).slice(1)).toEqual(awkward);
  });

  it('env overrides replace names case-insensitively', () => {
    const env = mergeEnvCaseInsensitive({ https_proxy: 'http://real:3128', Path: 'C:\\bin' }, { HTTPS_PROXY: 'http://127.0.0.1:9' });
    expect(env).toEqual([
      ['HTTPS_PROXY', 'http://127.0.0.1:9'],
      ['Path', 'C:\\bin'],
    ]);
  });

  it('isWithinWin32 compares Windows paths case-insensitively and on component boundaries', () => {
    expect(isWithinWin32('c:\\work\\x', 'C:\\Work')).toBe(true);
    expect(isWithinWin32('C:\\Work', 'C:\\Work')).toBe(true);
    expect(isWithinWin32('C:\\Workshop', 'C:\\Work')).toBe(false);
  });

  it('the unsandboxed report says so', () => {
    expect(unsandboxedReport()).toMatchObject({ sandboxed: false, mode: 'none' });
  });
});

describe('CapabilityStore', () => {
  it('persists one SID per root (case-insensitive) and a read-only SID', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-caps-'));
    try {
      const store = new CapabilityStore(dir);
      const [a, b] = store.sidsForRoots(['C:\\Work\\A', 'C:\\Work\\B']);
      expect(a).toMatch(/^S-1-5-21-\d+-\d+-\d+-\d+$/);
      expect(a).not.toBe(b);
      expect(new CapabilityStore(dir).sidsForRoots(['c:\\work\\a\\'])).toEqual([a]);
      const ro = store.readonlySid();
      expect(new CapabilityStore(dir).readonlySid()).toBe(ro);
      expect(JSON.parse(fs.readFileSync(path.join(dir, 'capabilities.json'), 'utf8')).version).toBe(1);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('lives under LOCALAPPDATA and mints random S-1-5-21 SIDs', () => {
    expect(defaultStateDir({ LOCALAPPDATA: 'C:\\Users\\me\\AppData\\Local' })).toMatch(/process-sandbox$/);
    expect(randomCapabilitySid()).not.toBe(randomCapabilitySid());
  });
});

describe('one list of native sources', () => {
  const root = path.resolve(__dirname, '..', '..');
  const sources = JSON.parse(fs.readFileSync(path.join(root, 'native', 'sources.json'), 'utf8')) as Record<string, string[]>;

  it('every native/win/*.cc is in the "win" list, and every listed file exists', () => {
    const onDisk = fs
      .readdirSync(path.join(root, 'native', 'win'))
      .filter((f) => f.endsWith('.cc'))
      .map((f) => `native/win/${f}`)
      .sort();
    expect([...sources.win!, ...(sources.win_mingw ?? [])].sort()).toEqual(onDisk);
    for (const f of [...sources.common!, ...sources.win!, ...(sources.win_mingw ?? [])]) expect(fs.existsSync(path.join(root, f))).toBe(true);
  });

  it('CMakeLists.txt and binding.gyp both read native/sources.json (no second list)', () => {
    const cmake = fs.readFileSync(path.join(root, 'CMakeLists.txt'), 'utf8');
    expect(cmake).toContain('native/sources.json');
    expect(cmake).not.toMatch(/native\/win\/\w+\.cc/);
    expect(fs.readFileSync(path.join(root, 'binding.gyp'), 'utf8')).toContain("sources.json').win");
  });
});

describe('.git rename and replant', () => {
  const R = 'C:\\work\\repo';
  it('a missing .git is held by a directory placeholder; deep missing carve-outs by their highest missing ancestor', () => {
    const plan = planWindowsSandbox(
      rules({ writeRoots: [R], readOnly: [`${R}\\.git`, `${R}\\sub\\deep\\.codex`, `${R}\\.git\\config`] }),
      ctx({ exists: (p) => p === R }),
    );
    expect(plan.placeholders).toEqual([
      { path: `${R}\\.git`, type: 'dir', roots: [R] },
      { path: `${R}\\sub`, type: 'dir', roots: [R] },
    ]);
    expect(plan.report.guarantees.protectedPaths).toBe('enforced');
  });
  it('file-like names get file placeholders', () => {
    const plan = planWindowsSandbox(rules({ writeRoots: [R], readOnly: [`${R}\\.git\\config`] }), ctx({ exists: (p) => !p.endsWith('config') }));
    expect(plan.placeholders).toEqual([{ path: `${R}\\.git\\config`, type: 'file', roots: [R] }]);
  });
  it("opted-in gaps (git: 'allow-init') are reported and make protection partial", () => {
    const plan = planWindowsSandbox(
      { ...rules({ writeRoots: [R], readOnly: [`${R}\\.codex`] }), gaps: ["git: 'allow-init': C:\\work\\repo\\.git can be created"] } as ResolvedRules,
      ctx(),
    );
    expect(plan.report.gaps).toContain("git: 'allow-init': C:\\work\\repo\\.git can be created");
    expect(plan.report.guarantees.protectedPaths).toBe('partial');
  });
  it('a protected path reached through a link is refused unless degraded', () => {
    const over = { writeRoots: [R], readOnly: [`${R}\\.git\\hooks`] };
    const isLink = (p: string) => p === `${R}\\.git`;
    expect(codeOf(() => planWindowsSandbox(rules(over), ctx({ isLink })))).toBe('EUNSUPPORTED_POLICY');
    const plan = planWindowsSandbox(rules({ ...over, degraded: true }), ctx({ isLink }));
    expect(plan.report.guarantees.protectedPaths).toBe('partial');
  });
});

describe('batch files through cmd.exe (BatBadBut)', () => {
  it('recognises .bat and .cmd the way Win32 does (case, trailing dots and spaces)', () => {
    for (const f of ['C:\\x\\t.bat', 'C:\\x\\NPM.CMD', 'C:\\x\\t.bat.', 'C:\\x\\t.Bat  ', 'C:\\x\\t.cmd::$DATA']) {
      expect(isBatchFile(f)).toBe(true);
    }
    for (const f of ['C:\\x\\t.exe', 'C:\\x\\bat', 'C:\\x\\t.bat.exe', 'C:\\x\\t.cmdx']) expect(isBatchFile(f)).toBe(false);
  });

  it('runs cmd.exe itself with AutoRun and delayed expansion off, every non-plain argument quoted', () => {
    const r = buildBatchCommandLine('C:\\my tools\\t.bat', ['t', 'plain', 'two words', '', 'a&b|c<d>e^f(g)', 'x;y,z=w'], 'C:\\Windows');
    expect(r.application).toBe('C:\\Windows\\System32\\cmd.exe');
    expect(r.commandLine).toBe(
      '"C:\\Windows\\System32\\cmd.exe" /d /e:ON /v:OFF /s /c ""C:\\my tools\\t.bat" plain "two words" "" "a&b|c<d>e^f(g)" "x;y,z=w""',
    );
  });

  it("refuses what cmd.exe interprets even inside quotes: '\"', '%', line breaks", () => {
    for (const bad of ['"&echo INJECTED', '%PATH%', '100%', 'a\nb', 'a\rb', 'a\x1ab']) {
      expect(codeOf(() => buildBatchCommandLine('C:\\x\\t.bat', ['t', 'ok', bad], 'C:\\Windows'))).toBe('EINVALID_ARGUMENT');
    }
    expect(() => buildBatchCommandLine('C:\\x\\t.bat', ['t', '"&calc'], 'C:\\Windows')).toThrow(/argv\[1\].*BatBadBut/);
    expect(codeOf(() => buildBatchCommandLine('C:\\100%\\t.bat', ['t'], 'C:\\Windows'))).toBe('EINVALID_ARGUMENT');
    // '!' is literal with /v:OFF; a tab is fine inside quotes.
    expect(buildBatchCommandLine('C:\\x\\t.bat', ['t', '!x!', 'a\tb'], 'C:\\Windows').commandLine).toContain('"!x!" "a\tb"');
  });
});
