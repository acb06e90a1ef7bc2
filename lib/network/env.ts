/**
 * The environment a sandboxed child gets when its network goes through the managed proxy.
 * The key set mirrors what Codex's network proxy injects, so tools that read any of the common
 * proxy variables (curl, git, npm, yarn, pip, bundler, docker, python, node) find our port.
 */
import * as fs from 'fs';
import * as path from 'path';

/** Keys set to the HTTP proxy URL. Both spellings where tools read both. */
export const HTTP_PROXY_URL_KEYS = [
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'http_proxy',
  'https_proxy',
  'WS_PROXY',
  'WSS_PROXY',
  'ws_proxy',
  'wss_proxy',
  'YARN_HTTP_PROXY',
  'YARN_HTTPS_PROXY',
  // npm reads `proxy` and `https-proxy`; it has no `http-proxy` and warns "Unknown env config" on
  // every command when one is set (a caller's npm_config_http_proxy is still stripped, below).
  'npm_config_proxy',
  'npm_config_https_proxy',
  'NPM_CONFIG_PROXY',
  'NPM_CONFIG_HTTPS_PROXY',
  'BUNDLE_HTTP_PROXY',
  'BUNDLE_HTTPS_PROXY',
  'PIP_PROXY',
  'DOCKER_HTTP_PROXY',
  'DOCKER_HTTPS_PROXY',
] as const;

/** Keys set to the SOCKS5 URL (`socks5h://`, so names are resolved by the proxy). */
export const SOCKS_PROXY_URL_KEYS = ['ALL_PROXY', 'all_proxy', 'FTP_PROXY', 'ftp_proxy'] as const;

export const NO_PROXY_KEYS = [
  'NO_PROXY',
  'no_proxy',
  'npm_config_noproxy',
  'NPM_CONFIG_NOPROXY',
  'YARN_NO_PROXY',
  'BUNDLE_NO_PROXY',
] as const;

export const NO_PROXY_LOCAL_VALUE = 'localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16';

const MANAGED_UPPER = new Set(
  [...HTTP_PROXY_URL_KEYS, ...SOCKS_PROXY_URL_KEYS, ...NO_PROXY_KEYS].map((k) => k.toUpperCase()),
);

/**
 * True for any variable that tells a tool where to send traffic: the keys we manage in any
 * spelling, plus the `*_PROXY` family generally (e.g. `RSYNC_PROXY`, `GIT_PROXY_COMMAND`,
 * `npm_config_https-proxy`). Such a value from the caller could point outside the proxy.
 */
export function isProxyEnvKey(key: string): boolean {
  const upper = key.toUpperCase();
  if (MANAGED_UPPER.has(upper)) return true;
  if (/(^|_)PROXY$/.test(upper)) return true;
  if (/^NPM_CONFIG_(HTTPS?[-_])?PROXY$/.test(upper) || upper === 'NPM_CONFIG_NOPROXY') return true;
  if (upper === 'GIT_PROXY_COMMAND' || upper === 'GIT_SSH_COMMAND_PROXY') return true;
  return false;
}

export interface ProxyEnvOptions {
  /** Put loopback and private ranges into NO_PROXY (the child reaches its own local services). */
  allowLocalBinding?: boolean;
  /** Proxy host as seen by the child. Default 127.0.0.1. */
  host?: string;
  /** The listener serves SOCKS5 too (default true). When false, ALL_PROXY gets the HTTP URL. */
  socks?: boolean;
  /**
   * Add `--require <fetch-preload.js>` to NODE_OPTIONS, so Node programs whose built-in fetch
   * ignores proxy variables (Node 18, 20, 22 < 22.21) use the proxy too. See fetch-preload.ts.
   * The preload file must be readable inside the sandbox (it is under the default `read: 'all'`).
   */
  nodeFetchPreload?: boolean;
}

/** Absolute path of the built fetch preload (dist/network/fetch-preload.js). */
export function nodeFetchPreloadPath(): string {
  const sibling = path.join(__dirname, 'fetch-preload.js');
  if (fs.existsSync(sibling)) return sibling;
  // Running from the TypeScript sources (tests): the build output next to them.
  return path.join(__dirname, '..', '..', 'dist', 'network', 'fetch-preload.js');
}

/**
 * The report's note for a proxied run (null when env's NODE_OPTIONS already has the preload):
 * an older Node's fetch goes around the proxy, and the sandbox refuses that connect with a bare
 * errno that does not say why.
 */
export function nodeFetchNote(env: Readonly<Record<string, string>>): string | null {
  const preload = nodeFetchPreloadPath();
  if ((env.NODE_OPTIONS ?? '').includes(preload)) return null;
  return (
    "Node's built-in fetch uses the proxy only in Node 22.21+ and 24+ (NODE_USE_ENV_PROXY=1 is set); " +
    'an older Node ignores HTTP(S)_PROXY and its fetch fails to connect (EACCES, ECONNREFUSED or a DNS error). ' +
    `To route it through the proxy, set env.NODE_OPTIONS to '--require ${preload}' ` +
    "(nodeFetchPreloadPath() from 'process-sandbox')"
  );
}

/**
 * Returns a new env: `baseEnv` minus every caller-supplied proxy variable, plus ours for `port`.
 * HTTP and SOCKS5 share the port (the proxy sniffs the first byte).
 */
export function buildProxyEnv(
  baseEnv: Record<string, string>,
  port: number,
  options: ProxyEnvOptions = {},
): Record<string, string> {
  if (!Number.isInteger(port) || port <= 0 || port > 65535) {
    throw new TypeError(`Expected port to be an integer in 1..65535, got ${String(port)}`);
  }
  const host = options.host ?? '127.0.0.1';
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(baseEnv)) {
    if (!isProxyEnvKey(key)) env[key] = value;
  }
  const httpUrl = `http://${host}:${port}`;
  const socksUrl = options.socks === false ? httpUrl : `socks5h://${host}:${port}`;
  for (const key of HTTP_PROXY_URL_KEYS) env[key] = httpUrl;
  for (const key of SOCKS_PROXY_URL_KEYS) env[key] = socksUrl;
  const noProxy = options.allowLocalBinding ? NO_PROXY_LOCAL_VALUE : '';
  for (const key of NO_PROXY_KEYS) env[key] = noProxy;
  env.ELECTRON_GET_USE_PROXY = 'true';
  env.NODE_USE_ENV_PROXY = '1';
  if (options.nodeFetchPreload) {
    const preload = nodeFetchPreloadPath();
    // NODE_OPTIONS takes double quotes around a value with spaces, and nothing can escape a quote.
    if (/["\\]/.test(preload)) throw new Error(`cannot quote ${preload} for NODE_OPTIONS`);
    const flag = `--require ${/\s/.test(preload) ? `"${preload}"` : preload}`;
    env.NODE_OPTIONS = env.NODE_OPTIONS ? `${env.NODE_OPTIONS} ${flag}` : flag;
  }
  return env;
}
