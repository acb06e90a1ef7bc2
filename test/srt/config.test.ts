/**
 * srt settings: validation as srt validates, the mapping onto our policy, every setting we cannot
 * enforce refused by name (never dropped), and srt's resolved-address rule for the proxy resolver.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SandboxError } from '../../lib/errors';
import { toPolicy, validateConfig } from '../../lib/srt/config';
import { srtLookup } from '../../lib/srt/runtime';

const dir = fs.mkdtempSync(path.join('/var/tmp', 'psb-srt-cfg-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const cfg = (over: Record<string, any> = {}) => ({
  ...over,
  network: { allowedDomains: [], deniedDomains: [], ...(over.network ?? {}) },
  filesystem: { denyRead: [], allowWrite: [], denyWrite: [], ...(over.filesystem ?? {}) },
});
const map = (c: object, cwd = dir) => toPolicy(validateConfig(c), cwd);

describe('validation (srt rules)', () => {
  it.each([
    [{}, /network: Required; filesystem: Required/],
    [{ network: { allowedDomains: [] }, filesystem: { denyRead: [], allowWrite: [], denyWrite: [] } }, /network\.deniedDomains: Expected array/],
    [cfg({ network: { allowedDomains: ['*.com'] } }), /network\.allowedDomains\.0: Invalid domain pattern/],
    [cfg({ network: { allowedDomains: ['example.com:0'] } }), /network\.allowedDomains\.0/],
    [cfg({ network: { allowedDomains: ['2001:db8::1:443'] } }), /network\.allowedDomains\.0/],
    [cfg({ network: { allowedDomains: ['https://example.com'] } }), /network\.allowedDomains\.0/],
    [cfg({ filesystem: { allowWrite: [''] } }), /filesystem\.allowWrite\.0: Path cannot be empty/],
    [cfg({ filesystem: { denyRead: ['/data/*/'] } }), /filesystem\.denyRead\.0: A deny glob must not end in a separator/],
    [cfg({ mandatoryDenySearchDepth: 11 }), /mandatoryDenySearchDepth: Expected an integer from 1 to 10/],
    [cfg({ bwrapPath: 'bwrap' }), /bwrapPath: Binary path must be absolute/],
  ])('refuses %j', (c, re) => {
    expect(() => validateConfig(c)).toThrow(re);
    try {
      validateConfig(c);
    } catch (e) {
      expect((e as SandboxError).code).toBe('EINVALID_POLICY');
    }
  });

  it('accepts what srt accepts: ports, bracketed IPv6, deny-all, literal path entries', () => {
    expect(() =>
      validateConfig(
        cfg({
          network: { allowedDomains: ['example.com', '*.example.com:8443', '[::1]:3000', '127.0.0.1', 'localhost'], deniedDomains: ['*'] },
          filesystem: { allowWrite: [{ path: '/x/*.env', literal: true }] },
        }),
      ),
    ).not.toThrow();
  });
});

describe('mapping onto our policy', () => {
  it('allowWrite/denyWrite/denyRead resolve ~ and relative paths as srt does; the mandatory deny set is on by default', () => {
    fs.mkdirSync(path.join(dir, 'src'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'src', '.env'), 'x');
    fs.writeFileSync(path.join(dir, 'secret'), 'x');
    const m = map(cfg({ filesystem: { allowWrite: ['.', 'src/**', '/nonexistent-srt-path'], denyWrite: ['src/.env'], denyRead: ['./secret', '~/nonexistent-srt-home-path'] } }));
    expect(m.policy.filesystem).toEqual({
      write: [dir, path.join(dir, 'src')],
      protect: [path.join(dir, 'src', '.env')],
      denyRead: [path.join(dir, 'secret')],
      protectPresets: ['startup-files'],
      git: 'hooks-and-config',
    });
    expect(m.noProxy).toBe('localhost,127.0.0.1,::1,169.254.0.0/16,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16');
    const home = map(cfg({ filesystem: { allowWrite: ['~'] } }));
    expect(home.policy.filesystem!.write).toEqual([os.homedir()]);
  });

  it('allowRead inside a denyRead is carved out of it, level by level, and a more specific deny inside it stays', () => {
    const d = path.join(dir, 'carve');
    fs.mkdirSync(path.join(d, 'a', 'keep', 'inner'), { recursive: true });
    fs.mkdirSync(path.join(d, 'b'), { recursive: true });
    fs.writeFileSync(path.join(d, 'a', 'sibling'), 'x');
    fs.writeFileSync(path.join(d, 'a', 'keep', 'inner', 'k'), 'x');
    const m = map(cfg({ filesystem: { denyRead: [d, path.join(d, 'a', 'keep', 'inner')], allowRead: [path.join(d, 'a', 'keep')] } }));
    expect([...m.policy.filesystem!.denyRead!].sort()).toEqual([path.join(d, 'a', 'keep', 'inner'), path.join(d, 'a', 'sibling'), path.join(d, 'b')].sort());
  });

  it('denyRead patterns expand to what exists now (git-style: **, *, ?, sets), each denied where it really is', () => {
    const g = path.join(dir, 'glob');
    for (const f of ['.env', 'a/.env', 'a/b/c/.env', 'a/keep.txt', 'x/build/out.o', 'x/y/build/z', 'k1.pem', 'k2.pem', 'k10.pem', '[WIP]/n.txt']) {
      fs.mkdirSync(path.dirname(path.join(g, f)), { recursive: true });
      fs.writeFileSync(path.join(g, f), 'x');
    }
    fs.symlinkSync(path.join(g, 'a'), path.join(g, 'link-to-a'));
    const sorted = (c: object) => [...(map(c, g).policy.filesystem!.denyRead ?? [])].sort();
    expect(sorted(cfg({ filesystem: { denyRead: ['**/.env'] } }))).toEqual([path.join(g, '.env'), path.join(g, 'a/.env'), path.join(g, 'a/b/c/.env')].sort());
    expect(sorted(cfg({ filesystem: { denyRead: ['**/build/**'] } }))).toEqual([path.join(g, 'x/build'), path.join(g, 'x/y/build')].sort());
    expect(sorted(cfg({ filesystem: { denyRead: ['k?.pem'] } }))).toEqual([path.join(g, 'k1.pem'), path.join(g, 'k2.pem')].sort());
    expect(sorted(cfg({ filesystem: { denyRead: ['k[0-9]*.pem'] } }))).toEqual([path.join(g, 'k1.pem'), path.join(g, 'k10.pem'), path.join(g, 'k2.pem')].sort());
    expect(sorted(cfg({ filesystem: { denyRead: ['[WIP]/*'] } }))).toEqual([path.join(g, '[WIP]/n.txt')]);
    expect(sorted(cfg({ filesystem: { denyRead: ['link-to-a/*.txt'] } }))).toEqual([path.join(g, 'a/keep.txt')]);
  });

  it('deniedDomains "*" denies everything; network lists keep their ports', () => {
    expect((map(cfg({ network: { allowedDomains: ['example.com'], deniedDomains: ['*'] } })).policy.network as any).proxy.allow).toEqual([]);
    expect((map(cfg({ network: { allowedDomains: ['example.com:443'] } })).policy.network as any).proxy).toEqual({ allow: ['example.com:443'], deny: [], allowLocal: true });
  });

  it.each([
    [cfg({ filesystem: { allowGitConfig: true } }), 'filesystem.allowGitConfig'],
    [cfg({ filesystem: { disabled: true } }), 'filesystem.disabled'],
    [cfg({ allowNestedUserNamespaces: true }), 'allowNestedUserNamespaces'],
    [cfg({ mandatoryDenySearchDepth: 5 }), 'mandatoryDenySearchDepth'],
    [cfg({ network: { httpProxyPort: 8080 } }), 'network.httpProxyPort'],
    [cfg({ network: { socksProxyPort: 1080 } }), 'network.socksProxyPort'],
    [cfg({ network: { mitmProxy: { socketPath: '/x', domains: ['a.com'] } } }), 'network.mitmProxy'],
    [cfg({ network: { tlsTerminate: {} } }), 'network.tlsTerminate'],
    [cfg({ network: { parentProxy: { http: 'http://p:3128' } } }), 'network.parentProxy'],
    [cfg({ network: { deniedDomains: ['*:22'] } }), 'network.deniedDomains "*:22"'],
    [cfg({ network: { allowedDomains: ['*.co.uk'] } }), 'network.allowedDomains "*.co.uk"'],
    [cfg({ filesystem: { denyRead: ['/**/*.pem'] } }), 'filesystem.denyRead "/**/*.pem"'],
    [cfg({ filesystem: { allowWrite: ['.'], denyWrite: ['*.pem'] } }), 'filesystem.denyWrite "*.pem"'],
    [cfg({ credentials: { envVars: [{ name: 'TOKEN', mode: 'mask' }] } }), 'credentials.envVars "TOKEN" mode "mask"'],
    [cfg({ credentials: { files: [{ path: '~/.npmrc', mode: 'mask' }] } }), 'credentials.files "~/.npmrc" mode "mask"'],
    [cfg({ credentials: { awsPairs: [] } }), 'credentials.awsPairs'],
  ])('refuses what it cannot enforce, by name: %j', (c, name) => {
    let err: unknown;
    try {
      map(c);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('EUNSUPPORTED_POLICY');
    expect((err as SandboxError).message).toContain(`srt setting ${name} is not supported`);
  });

  it('credentials with mode "deny": the variable is withheld, the file is read-denied', () => {
    fs.writeFileSync(path.join(dir, '.npmrc'), 'x');
    const m = map(cfg({ credentials: { envVars: [{ name: 'NPM_TOKEN', mode: 'deny' }], files: [{ path: './.npmrc', mode: 'deny' }] } }));
    expect(m.unsetEnv).toEqual(['NPM_TOKEN']);
    expect(m.policy.filesystem!.denyRead).toEqual([path.join(dir, '.npmrc')]);
  });
});

describe("srt's resolved-address rule, as our proxy's resolver", () => {
  const answers: Record<string, string[]> = {
    'loop.corp.example': ['127.0.0.1'],
    'mixed.corp.example': ['93.184.216.34', '127.0.0.1'],
    'meta.corp.example': ['169.254.169.254'],
    'intranet.corp.example': ['10.1.2.3'],
    'mapped.corp.example': ['::ffff:127.0.0.1'],
    'nat64.corp.example': ['64:ff9b::7f00:1'],
  };
  const resolve = async (h: string) => (answers[h] ?? []).map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  const lookup = (allowedDomains: string[], extra: Record<string, unknown> = {}) =>
    srtLookup(map(cfg({ network: { allowedDomains, ...extra } })), resolve);
  const names = async (l: ReturnType<typeof lookup>, h: string) => (await l(h)).map((a) => a.address);

  it('an allowed name resolving to loopback, link-local or metadata gets no address (refused), embedded IPv4 included', async () => {
    const l = lookup(['*.corp.example']);
    expect(await names(l, 'loop.corp.example')).toEqual([]);
    expect(await names(l, 'meta.corp.example')).toEqual([]);
    expect(await names(l, 'mapped.corp.example')).toEqual([]);
    expect(await names(l, 'nat64.corp.example')).toEqual([]);
    expect(await names(l, 'mixed.corp.example')).toEqual(['93.184.216.34']);
  });
  it('... unless that IP literal is itself allow-listed', async () => {
    expect(await names(lookup(['*.corp.example', '127.0.0.1']), 'loop.corp.example')).toEqual(['127.0.0.1']);
  });
  it('a literal listed with a port opens a name to it on that port only, as srt\'s per-port rules do', async () => {
    const l = lookup(['*.corp.example', '127.0.0.1:3000']);
    expect((await l('loop.corp.example', 3000)).map((a) => a.address)).toEqual(['127.0.0.1']);
    expect((await l('loop.corp.example', 3001)).map((a) => a.address)).toEqual([]);
    expect(await names(l, 'loop.corp.example')).toEqual([]);
  });
  it('private ranges pass, as with srt, unless deniedResolvedAddresses lists them', async () => {
    expect(await names(lookup(['*.corp.example']), 'intranet.corp.example')).toEqual(['10.1.2.3']);
    expect(await names(lookup(['*.corp.example'], { deniedResolvedAddresses: ['10.0.0.0/8'] }), 'intranet.corp.example')).toEqual([]);
  });
  it('localhost is loopback and only loopback; a deniedDomains literal still refuses it', async () => {
    expect(await names(lookup(['localhost']), 'localhost')).toEqual(['127.0.0.1', '::1']);
    expect(await names(lookup(['localhost'], { deniedDomains: ['127.0.0.1'] }), 'localhost')).toEqual(['::1']);
  });
});
