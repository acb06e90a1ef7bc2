/**
 * What the srt drop-in's SandboxManager and its CLI share: the proxy hooks that give srt's
 * resolved-address rule and ask callback, and the spawn of one command under mapped settings.
 */
import * as dns from 'node:dns';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as os from 'node:os';
import { isIP } from 'node:net';
import { spawn as psbSpawn, type SandboxedProcess as PsbProcess, type SpawnOptions } from '../index';
import type { AuditEvent, Decider, DeciderRequest } from '../network';
import { inRange, ipBytes, parseRange, type MappedConfig } from './config';

export type SandboxAskCallback = (params: { host: string; port: number | undefined }) => Promise<boolean | { allow: false; reason: string }>;

// srt's built-in denied set for what an allowed NAME may resolve to (its "Resolved-address check").
const BUILTIN_DENIED = [
  '127.0.0.0/8', '::1/128', '0.0.0.0/8', '::/128', '169.254.0.0/16', 'fe80::/10', '224.0.0.0/4', 'ff00::/8',
  '255.255.255.255/32', '100.100.100.200/32', '168.63.129.16/32', '192.0.0.192/32', 'fd00:ec2::/32',
  'fd20:ce::254/128', 'fd00:c1::a9fe:a9fe/128', 'fd00:42::42/128',
].map((r) => parseRange(r)!);

function ownAddresses(): number[][] {
  const out: number[][] = [];
  for (const list of Object.values(os.networkInterfaces())) {
    for (const a of list ?? []) {
      const b = ipBytes(a.address);
      if (b) out.push(b);
    }
  }
  return out;
}

/** IPv4 carried in NAT64 (64:ff9b::/96) and 6to4 (2002::/16) is judged as that IPv4 address. */
function embedded(b: number[]): number[] {
  if (b.length !== 16) return b;
  if (b[0] === 0 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && b.slice(4, 12).every((x) => x === 0)) return b.slice(12);
  if (b[0] === 0x20 && b[1] === 0x02) return b.slice(2, 6);
  return b;
}

type AddressRules = Pick<MappedConfig, 'deniedRanges' | 'allowedLiterals'> & Partial<Pick<MappedConfig, 'allowedLiteralPorts'>>;

/**
 * Whether an allowed name may be dialed at `address` (on `port`): not into srt's denied set
 * (loopback, link-local, multicast, unspecified, cloud metadata, this host's own addresses,
 * deniedDomains IP literals, deniedResolvedAddresses), unless that literal is itself allow-listed,
 * without a port or with this one (`127.0.0.1:3000` opens a name to 127.0.0.1 on port 3000 only,
 * as srt's per-port rule sets do).
 */
export function addressAllowed(address: string, m: AddressRules, port?: number): boolean {
  const raw = ipBytes(address);
  if (!raw) return false;
  const b = embedded(raw);
  const eq = (x: number[]) => x.length === b.length && x.every((v, i) => v === b[i]);
  if (m.allowedLiterals.some(eq)) return true;
  if (port !== undefined && m.allowedLiteralPorts?.some((l) => l.port === port && eq(l.bytes))) return true;
  if (BUILTIN_DENIED.some((r) => inRange(b, r))) return false;
  if (m.deniedRanges.some((r) => inRange(b, r))) return false;
  if (ownAddresses().some(eq)) return false;
  return true;
}

/** The proxy's resolver under srt's rule: names answer only with addresses that pass. */
export function srtLookup(m: AddressRules & Pick<MappedConfig, 'refusedLiterals'>, resolve: (host: string) => Promise<Array<{ address: string; family: number }>> = (h) => dns.promises.lookup(h, { all: true, verbatim: true })) {
  // dns.lookup (getaddrinfo): /etc/hosts and nsswitch count, as for srt and for any client.
  return async (host: string, port?: number): Promise<Array<{ address: string; family: 4 | 6 }>> => {
    // srt: `localhost` and names under `.localhost` are loopback, and may reach it once listed
    // (an IP literal in deniedDomains still refuses it).
    if (host === 'localhost' || host.endsWith('.localhost')) {
      return [{ address: '127.0.0.1', family: 4 as const }, { address: '::1', family: 6 as const }].filter(
        (a) => !m.refusedLiterals.some((r) => inRange(ipBytes(a.address)!, r)),
      );
    }
    const answers = await resolve(host);
    return answers
      .filter((a) => addressAllowed(a.address, m, port))
      .map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
  };
}

/** srt's ask callback as our decider: only `true` allows; `{ allow: false, reason }` names why. */
export function askDecider(ask: SandboxAskCallback, m: Pick<MappedConfig, 'deniedRanges' | 'allowedLiterals'>): Decider {
  return async (req: DeciderRequest) => {
    // An IP literal the lists did not allow never reaches a local address through a prompt.
    if (isIP(req.host) !== 0 && !addressAllowed(req.host, m)) return { decision: 'deny', reason: 'resolved to a denied address' };
    let answer: unknown;
    try {
      answer = await ask({ host: req.host, port: req.port });
    } catch {
      return { decision: 'deny', reason: 'user denied' };
    }
    if (answer === true) return { decision: 'allow' };
    if (typeof answer === 'object' && answer !== null && (answer as { allow?: unknown }).allow === false) {
      const r = (answer as { reason?: unknown }).reason;
      if (typeof r === 'string') {
        const clean = r.replace(/[\u0000-\u001f\u007f\u200b-\u200f\u202a-\u202e\u2060-\u2064]+/g, ' ').replace(/[<>]/g, '').trim().slice(0, 500);
        if (clean) return { decision: 'deny', reason: clean };
      }
    }
    return { decision: 'deny', reason: 'user denied' };
  };
}

/**
 * The decider for allowlist misses: the ask callback where srt would ask, else a refusal. Always
 * present, so an empty allow list still has a proxy that refuses and reports every request, as
 * srt's does (our policy check wants a decider for an empty list).
 */
export function missDecider(ask: SandboxAskCallback | undefined, m: Pick<MappedConfig, 'deniedRanges' | 'allowedLiterals' | 'askAllowed'>): Decider {
  if (ask && m.askAllowed) return askDecider(ask, m);
  return async () => ({ decision: 'deny', reason: 'not_allowed' });
}

/** srt's violation line for a proxy refusal. */
export function violationLine(e: AuditEvent): string {
  return `deny network-outbound ${e.host}:${e.port} (${e.reason})`;
}

export interface RunMapped {
  command: string;
  binShell?: string;
  cwd: string;
  env: Record<string, string | undefined>;
  stdio: SpawnOptions['stdio'];
  mapped: MappedConfig;
  ask?: SandboxAskCallback;
  onDeny?: (line: string) => void;
}

/**
 * What runs first inside the sandbox, where the proxy's port is known (`$HTTP_PROXY`): srt's
 * NO_PROXY (local names and private ranges meet the sandbox's own loopback, as with srt), then
 * the tool-specific proxy settings srt sets (gRPC, rsync, gcloud, the JVM's system properties; our
 * proxy takes no credential, so the JVM needs no agent) and `GIT_SSH_COMMAND`, which tunnels ssh
 * through the proxy with ssh-connect.js. `$1` NO_PROXY, `$2` the ProxyCommand prefix (empty: no
 * GIT_SSH_COMMAND), then the command's argv, exec'd (the pid stays the command's).
 */
const PROLOGUE = [
  'export NO_PROXY="$1" no_proxy="$1"',
  'case ${HTTP_PROXY-} in http://127.0.0.1:[0-9]*)',
  '  p=${HTTP_PROXY##*:}',
  '  export GRPC_PROXY="$HTTP_PROXY" grpc_proxy="$HTTP_PROXY" RSYNC_PROXY="127.0.0.1:$p"',
  '  export CLOUDSDK_PROXY_TYPE=http CLOUDSDK_PROXY_ADDRESS=127.0.0.1 CLOUDSDK_PROXY_PORT="$p"',
  '  export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:+$JAVA_TOOL_OPTIONS }-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=$p -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=$p"',
  '  if [ -n "$2" ]; then export GIT_SSH_COMMAND="ssh -o ControlMaster=no -o ControlPath=none -o \'ProxyCommand=$2 127.0.0.1 $p %h %p\'"; fi',
  'esac',
  'shift 2',
  'exec "$@"',
].join('\n');

/** The built ssh-connect.js (dist/srt), from the sources (tests) too. */
function sshConnectPath(): string {
  const sibling = path.join(__dirname, 'ssh-connect.js');
  return fs.existsSync(sibling) ? sibling : path.join(__dirname, '..', '..', 'dist', 'srt', 'ssh-connect.js');
}

/**
 * ssh's ProxyCommand up to its arguments: Node (Electron's binary acts as Node with
 * ELECTRON_RUN_AS_NODE) running ssh-connect.js. Empty when a path would need quoting inside
 * GIT_SSH_COMMAND's own quotes: then git over ssh is not tunnelled (and is refused, not opened).
 */
export function sshProxyCommand(): string {
  const parts = [process.execPath, sshConnectPath()];
  if (!parts.every((p) => /^[A-Za-z0-9_@%+=:,./-]+$/.test(p))) return '';
  return `env ELECTRON_RUN_AS_NODE=1 ${parts.join(' ')}`;
}

/** Starts `binShell -c command` (bash by default, as srt) in our sandbox under mapped settings. */
export function spawnMapped(o: RunMapped): PsbProcess {
  const env: Record<string, string | undefined> = { ...o.env };
  for (const k of o.mapped.unsetEnv) delete env[k];
  env.SANDBOX_RUNTIME = '1';
  const shell = o.binShell ?? 'bash';
  const decider = missDecider(o.ask, o.mapped);
  return psbSpawn('/bin/sh', ['-c', PROLOGUE, 'srt-env', o.mapped.noProxy, sshProxyCommand(), shell, '-c', o.command], {
    cwd: o.cwd,
    env,
    stdio: o.stdio,
    policy: o.mapped.policy,
    proxy: {
      lookup: srtLookup(o.mapped),
      decider,
      onAudit: (e) => {
        if (e.decision === 'deny') o.onDeny?.(violationLine(e));
      },
    },
  });
}

/** srt's CLI and spawnSandboxed report a signal death as 128+N where a number is needed. */
export function statusOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const n = signal ? os.constants.signals[signal] : undefined;
  return n ? 128 + n : 1;
}
