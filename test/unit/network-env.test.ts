import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

import { SandboxError } from '../../lib/errors';
import {
  HTTP_PROXY_URL_KEYS,
  ManagedProxy,
  NO_PROXY_KEYS,
  SOCKS_PROXY_URL_KEYS,
  isProxyEnvKey,
  startManagedNetworkForExec,
  translateNetworkProxyConfig,
} from '../../lib/network';

describe('ManagedProxy.proxyEnv', () => {
  const base = {
    PATH: '/usr/bin',
    HOME: '/home/u',
    HTTP_PROXY: 'http://corp-proxy:8080',
    https_proxy: 'http://corp-proxy:8080',
    Https_Proxy: 'http://elsewhere:1',
    all_proxy: 'socks5://elsewhere:1080',
    no_proxy: '*',
    NPM_CONFIG_HTTPS_PROXY: 'http://elsewhere:2',
    'npm_config_https-proxy': 'http://elsewhere:3',
    RSYNC_PROXY: 'elsewhere:873',
    GIT_PROXY_COMMAND: '/usr/bin/corkscrew',
  };

  it('npm reads the proxy from what we inject, without "Unknown env config" warnings', () => {
    const env = ManagedProxy.proxyEnv({ ...base, npm_config_http_proxy: 'http://elsewhere:4', PATH: process.env.PATH ?? '/usr/bin', HOME: process.env.HOME ?? '/root' }, 4242);
    expect(env.npm_config_http_proxy).toBeUndefined();
    const r = spawnSync('npm', ['config', 'get', 'https-proxy'], { env, encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe('http://127.0.0.1:4242');
    expect(r.stderr).not.toMatch(/Unknown env config/);
    const proxy = spawnSync('npm', ['config', 'get', 'proxy'], { env, encoding: 'utf8', timeout: 60_000 });
    expect(proxy.stdout.trim()).toBe('http://127.0.0.1:4242');
  });

  it('points every proxy variable at the port and keeps the rest', () => {
    const env = ManagedProxy.proxyEnv(base, 4242);
    expect(env.PATH).toBe('/usr/bin');
    expect(env.HOME).toBe('/home/u');
    for (const k of ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy', 'PIP_PROXY', 'YARN_HTTP_PROXY', 'YARN_HTTPS_PROXY', 'npm_config_proxy', 'npm_config_https_proxy']) {
      expect(env[k], k).toBe('http://127.0.0.1:4242');
    }
    for (const k of HTTP_PROXY_URL_KEYS) expect(env[k], k).toBe('http://127.0.0.1:4242');
    for (const k of SOCKS_PROXY_URL_KEYS) expect(env[k], k).toBe('socks5h://127.0.0.1:4242');
    expect(env.ALL_PROXY).toBe('socks5h://127.0.0.1:4242');
    expect(env.all_proxy).toBe('socks5h://127.0.0.1:4242');
    for (const k of NO_PROXY_KEYS) expect(env[k], k).toBe('');
    expect(env.NODE_USE_ENV_PROXY).toBe('1');
  });

  it('strips caller-supplied proxy variables that point elsewhere', () => {
    const env = ManagedProxy.proxyEnv(base, 4242);
    expect(env.Https_Proxy).toBeUndefined();
    expect(env['npm_config_https-proxy']).toBeUndefined();
    expect(env.RSYNC_PROXY).toBeUndefined();
    expect(env.GIT_PROXY_COMMAND).toBeUndefined();
    expect(Object.values(env).some((v) => v.includes('elsewhere') || v.includes('corp-proxy'))).toBe(false);
    // Input not mutated.
    expect(base.HTTP_PROXY).toBe('http://corp-proxy:8080');
  });

  it('puts local ranges into NO_PROXY only when local binding is allowed', () => {
    const env = ManagedProxy.proxyEnv({}, 4242, { allowLocalBinding: true });
    expect(env.NO_PROXY).toBe('localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16');
    expect(env.no_proxy).toBe(env.NO_PROXY);
  });

  it('uses the HTTP URL for ALL_PROXY when SOCKS5 is off', () => {
    expect(ManagedProxy.proxyEnv({}, 7, { socks: false }).ALL_PROXY).toBe('http://127.0.0.1:7');
  });

  it('rejects a bad port', () => {
    expect(() => ManagedProxy.proxyEnv({}, 0)).toThrow(TypeError);
    expect(() => ManagedProxy.proxyEnv({}, 70000)).toThrow(TypeError);
  });

  it('classifies proxy keys', () => {
    expect(isProxyEnvKey('hTTp_PrOxY')).toBe(true);
    expect(isProxyEnvKey('PATH')).toBe(false);
    expect(isProxyEnvKey('PROXYCHAINS_CONF')).toBe(false);
  });
});

describe('Codex networkProxy translation', () => {
  const launch = (proxy: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    proxy: {
      enabled: true,
      enableSocks5: true,
      enableSocks5Udp: false,
      allowUpstreamProxy: false,
      dangerouslyAllowAllUnixSockets: false,
      mode: 'full',
      allowLocalBinding: false,
      ...proxy,
    },
    ...extra,
  });

  it('translates domains, mode, local binding and unix sockets', () => {
    const { options, managedNetwork } = translateNetworkProxyConfig(
      launch({
        mode: 'limited',
        allowLocalBinding: true,
        domains: { 'example.com': 'allow', '**.npmjs.org': 'allow', 'bad.example.com': 'deny', 'ignored.example': 'none' },
        unixSockets: { '/run/docker.sock': 'allow', '/run/other.sock': 'deny' },
      }),
    );
    expect(options.policy).toEqual({
      allow: ['example.com', '**.npmjs.org'],
      deny: ['bad.example.com'],
      allowLocal: true,
      mode: 'limited',
    });
    expect(options.decider).toBeUndefined();
    expect(managedNetwork).toEqual({
      loopbackPorts: [],
      allowLocalBinding: true,
      allowUnixSockets: ['/run/docker.sock'],
      dangerouslyAllowAllUnixSockets: false,
    });
  });

  it('wires the decider only when policyDecisionTimeoutMs is set', async () => {
    const decider = async () => ({ decision: 'allow' as const });
    expect(translateNetworkProxyConfig(launch({}), { decider }).options.decider).toBeUndefined();
    const withTimeout = translateNetworkProxyConfig(launch({}, { policyDecisionTimeoutMs: 1500 }), { decider });
    expect(withTimeout.options.decider).toBe(decider);
    expect(withTimeout.options.deciderTimeoutMs).toBe(1500);
  });

  const invalid: Array<[string, unknown, RegExp]> = [
    ['a disabled proxy', launch({ enabled: false }), /executor-local network proxy launch requires an enabled proxy/],
    ['a missing proxy', {}, /missing field `proxy`/],
    ['a non-object', 'x', /expected an object/],
    ['an unknown mode', launch({ mode: 'open' }), /unknown variant `open`/],
    ['a deny-all wildcard', launch({ domains: { '*': 'deny' } }), /unsupported global wildcard/],
    ['an unknown permission', launch({ domains: { 'a.com': 'maybe' } }), /unknown variant `maybe`/],
    ['a relative unix socket', launch({ unixSockets: { 'rel.sock': 'allow' } }), /allow_unix_sockets\[0\]: expected a NUL-free absolute path/],
    ['a zero decision timeout', launch({}, { policyDecisionTimeoutMs: 0 }), /must be non-zero/],
  ];
  it.each(invalid)('rejects %s with the seed error text', async (_name, config, pattern) => {
    let caught: unknown;
    try {
      await startManagedNetworkForExec(config);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(SandboxError);
    const err = caught as SandboxError;
    expect(err.code).toBe('EPROXY_CONFIG');
    expect(err.message.startsWith('invalid network proxy config: ')).toBe(true);
    expect(err.message).toMatch(pattern);
    expect(err.detail).toEqual({ rpcCode: -32602 });
  });

  it('returns null without a networkProxy', async () => {
    expect(await startManagedNetworkForExec(undefined)).toBeNull();
  });

  it('starts a proxy whose env and managedNetwork carry the attached port', async () => {
    const managed = (await startManagedNetworkForExec(launch({ domains: { 'example.com': 'allow' } })))!;
    try {
      const { port } = await managed.attach('codex-proc');
      expect(managed.managedNetwork.loopbackPorts).toEqual([port]);
      const env = managed.env({ CODEX_NETWORK_PROXY_ATTRIBUTION: 'secret', HTTP_PROXY: 'http://x:1', KEEP: '1' }, port);
      expect(env.HTTP_PROXY).toBe(`http://127.0.0.1:${port}`);
      expect(env.ALL_PROXY).toBe(`socks5h://127.0.0.1:${port}`);
      expect(env.CODEX_NETWORK_PROXY_ATTRIBUTION).toBeUndefined();
      expect(env.CODEX_NETWORK_PROXY_ACTIVE).toBe('1');
      expect(env.CODEX_NETWORK_ALLOW_LOCAL_BINDING).toBe('0');
      expect(env.KEEP).toBe('1');
    } finally {
      await managed.proxy.close();
    }
  });
});
