/**
 * The environment variables a managed network proxy injects into children (Codex
 * `apply_proxy_env_overrides`), so that a native Windows launch can strip them again
 * (`strip_managed_proxy_env`) and so the managed CA bundle can be found.
 */
import * as path from 'node:path';

import { CUSTOM_CA_ENV_KEYS } from '../network/mitm';

// One list: the managed proxy's interception CA sets exactly these.
export { CUSTOM_CA_ENV_KEYS };

const both = (names: string[]): string[] => names.flatMap((n) => [n, n.toLowerCase()]);

export const MANAGED_PROXY_ENV_KEYS: readonly string[] = [
  'CODEX_NETWORK_PROXY_ACTIVE',
  'CODEX_NETWORK_ALLOW_LOCAL_BINDING',
  'CODEX_NETWORK_PROXY_ATTRIBUTION',
  'CODEX_WINDOWS_SANDBOX_PROXY_PORTS',
  ...both(['HTTP_PROXY', 'HTTPS_PROXY', 'WS_PROXY', 'WSS_PROXY', 'ALL_PROXY', 'FTP_PROXY', 'NO_PROXY']),
  'YARN_HTTP_PROXY',
  'YARN_HTTPS_PROXY',
  'yarn_http_proxy',
  'yarn_https_proxy',
  'YARN_NO_PROXY',
  'npm_config_http_proxy',
  'npm_config_https_proxy',
  'npm_config_proxy',
  'NPM_CONFIG_HTTP_PROXY',
  'NPM_CONFIG_HTTPS_PROXY',
  'NPM_CONFIG_PROXY',
  'npm_config_noproxy',
  'NPM_CONFIG_NOPROXY',
  'BUNDLE_HTTP_PROXY',
  'BUNDLE_HTTPS_PROXY',
  'BUNDLE_NO_PROXY',
  'PIP_PROXY',
  'DOCKER_HTTP_PROXY',
  'DOCKER_HTTPS_PROXY',
  'ELECTRON_GET_USE_PROXY',
  'NODE_USE_ENV_PROXY',
];

/**
 * Default test for "this path is a managed MITM trust bundle": a `ca*.pem` / `ca-bundle*` file in a
 * directory named `proxy` (where the managed proxy writes its public CA material).
 */
export function isManagedCaBundlePath(p: string): boolean {
  if (!path.isAbsolute(p)) return false;
  const base = path.basename(p);
  return path.basename(path.dirname(p)) === 'proxy' && (/^ca.*\.pem$/.test(base) || base.startsWith('ca-bundle'));
}

/** Remove the managed proxy variables (and CA keys pointing at a managed bundle). */
export function stripManagedProxyEnv(
  env: Record<string, string>,
  isManagedCa: (p: string) => boolean = isManagedCaBundlePath,
): Record<string, string> {
  const out: Record<string, string> = { ...env };
  for (const k of MANAGED_PROXY_ENV_KEYS) delete out[k];
  if (out.GIT_SSH_COMMAND?.startsWith('CODEX_PROXY_GIT_SSH_COMMAND=1')) delete out.GIT_SSH_COMMAND;
  for (const k of CUSTOM_CA_ENV_KEYS) {
    const v = out[k];
    if (v !== undefined && isManagedCa(v)) delete out[k];
  }
  return out;
}
