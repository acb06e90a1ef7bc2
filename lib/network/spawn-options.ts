/**
 * The managed-network options of one spawn (spawn()'s `proxy` option, BackendSpawnRequest's
 * `network`): which proxy the command is attached to, or how the per-spawn one is made.
 */
import type { InterceptionOptions, ManagedProxyOptions } from './options';
import type { ManagedProxy } from './proxy';

export interface SpawnNetworkOptions {
  /** A running proxy to attach to (one proxy can serve many sandboxes); else one per spawn. */
  instance?: ManagedProxy;
  /** Called once per proxy decision (ignored when `instance` is given: it has its own). */
  onAudit?: ManagedProxyOptions['onAudit'];
  /** Consulted for allowlist misses (ignored when `instance` is given). */
  decider?: ManagedProxyOptions['decider'];
  deciderTimeoutMs?: number;
  /** Name resolution used by the proxy (default: the system resolver). */
  lookup?: ManagedProxyOptions['lookup'];
  /** Attribution of this process's requests in audit events (default: its pid). */
  processId?: string;
  /**
   * TLS interception for the per-spawn proxy (not with `instance`, which has its own): the
   * ManagedProxy `interception` options, `ca` defaulting to InterceptionCa.shared(). spawn()
   * wires the CA into the child (env, readable directory; see lib/network/interception-spawn.ts).
   */
  interception?: Omit<InterceptionOptions, 'ca'> & { ca?: InterceptionOptions['ca'] };
}
