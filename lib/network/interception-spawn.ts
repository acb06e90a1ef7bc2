/**
 * spawn()/run() side of TLS interception: when a sandboxed command is attached to a proxy that
 * intercepts (an `instance` created with `interception`, or a per-spawn proxy asked for it with
 * `proxy: { interception: {...} }`), the command must trust the interception CA. This module
 *   - picks the CA (the instance's, the one given, or InterceptionCa.shared());
 *   - fails closed (SandboxError EPROXY_CONFIG, nothing starts) when the CA's files are not as
 *     written, or could be changed by another user (InterceptionCa.verifyFiles), or the directory would be
 *     writable by the sandbox (inside or containing a writable root, or a writable root that is,
 *     by inode, another path to it, an ancestor or its files, as a bind mount is: the sandbox
 *     could replace the certificate that it, and later runs, trust) or invisible to it (under or around a
 *     denyRead path; on Linux under /tmp or /dev/shm, which isolated mode replaces with private
 *     ones; `tmp: 'host'` makes /tmp writable);
 *   - adds the directory to a restricted `read` list (readRoots), so it stays readable;
 *   - merges InterceptionCa.env() (every CUSTOM_CA_ENV_KEYS variable) into the child's env.
 *     Ours wins over a value the caller gave for those keys: an intercepted host's certificate
 *     chains only to our CA, so a caller's bundle there would break exactly the hosts the policy
 *     intercepts (Codex's seed likewise strips and overrides the managed CA variables). Our
 *     SSL_CERT_FILE-style bundle holds the system roots too, so non-intercepted hosts keep working;
 *     a private root the caller relied on must be added some other way (a documented gap).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

import { SandboxError } from '../errors';
import { isWithin } from '../paths';
import type { SpawnNetworkOptions } from './spawn-options';
import type { ResolvedRules } from '../rules';
import { InterceptionCa } from './mitm';
import { ManagedProxy } from './proxy';

function caError(message: string, detail: Record<string, unknown>): SandboxError {
  return new SandboxError('EPROXY_CONFIG', message, { detail });
}

const FIX = 'create the CA with InterceptionCa.create({ dir }) in a directory outside every writable root and readable by the sandbox (or set PROCESS_SANDBOX_CA_DIR for the shared CA)';

/**
 * The refusals of a CA directory for these rules, and the rules with the directory readable.
 * `platform` decides whether /tmp and /dev/shm count as private (Linux).
 */
export function checkCaDirForRules(caDir: string, rules: ResolvedRules, platform: NodeJS.Platform = process.platform): ResolvedRules {
  let dir: string;
  try {
    dir = fs.realpathSync(caDir);
  } catch {
    throw caError(`the interception CA directory ${caDir} does not exist (was the CA disposed?)`, { caDir, conflict: 'missing' });
  }
  for (const w of rules.writeRoots) {
    if (isWithin(dir, w) || isWithin(w, dir)) {
      throw caError(
        `the interception CA directory ${dir} is ${isWithin(dir, w) ? 'inside' : 'around'} the writable root ${w}: the sandbox could replace the certificate it trusts; ${FIX}`,
        { caDir: dir, conflict: 'writable', root: w },
      );
    }
  }
  // The same directory (or file) under another path, a bind mount say, is compared by inode: a
  // writable root that is another name for the CA directory, one of its ancestors or its files
  // lets the sandbox rewrite them as surely as one containing the path.
  const ids = new Map<string, string>();
  const note = (p: string) => {
    try {
      const st = fs.statSync(p);
      ids.set(`${st.dev}:${st.ino}`, p);
    } catch {
      /* gone: the path checks above and verifyFiles() cover it */
    }
  };
  for (let d = dir; ; d = path.dirname(d)) {
    note(d);
    if (d === path.dirname(d)) break;
  }
  for (const f of ['ca.pem', 'ca-bundle.pem']) note(path.join(dir, f));
  for (const w of rules.writeRoots) {
    let id = '';
    try {
      const st = fs.statSync(w);
      id = `${st.dev}:${st.ino}`;
    } catch {
      continue;
    }
    const same = ids.get(id);
    if (same !== undefined) {
      throw caError(`the writable root ${w} is another path to ${same} (a bind mount or link), which holds the interception CA directory ${dir}: the sandbox could replace the certificate it trusts; ${FIX}`, {
        caDir: dir,
        conflict: 'writable',
        root: w,
      });
    }
  }
  if (platform === 'linux') {
    for (const t of ['/tmp', '/dev/shm']) {
      if (!isWithin(dir, t)) continue;
      if (t === '/tmp' && rules.tmp === 'none') continue;
      const why = t === '/tmp' && rules.tmp === 'host' ? 'writable by the sandbox (tmp: host)' : 'private inside the sandbox (isolated mode mounts its own)';
      throw caError(`the interception CA directory ${dir} is under ${t}, which is ${why}; ${FIX}`, { caDir: dir, conflict: t === '/tmp' && rules.tmp === 'host' ? 'writable' : 'private-tmp', root: t });
    }
  }
  for (const d of rules.denyRead) {
    if (isWithin(dir, d) || isWithin(d, dir)) {
      throw caError(`the interception CA directory ${dir} is ${isWithin(dir, d) ? 'under' : 'around'} the deny-read path ${d}, so the sandbox could not read it; ${FIX}`, { caDir: dir, conflict: 'unreadable', root: d });
    }
  }
  if (rules.readAll || rules.readRoots.some((r) => isWithin(dir, r))) return rules;
  return { ...rules, readRoots: [...rules.readRoots, dir] };
}

/**
 * Resolves `proxy.interception` (validated; `ca` defaulting to the shared CA) and, when the
 * command is attached to an intercepting proxy, returns the env and rules it needs. Throws
 * SandboxError (EINVALID_ARGUMENT for bad options, EPROXY_CONFIG for an unusable CA directory).
 */
export function wireInterception(
  rules: ResolvedRules | null,
  env: Record<string, string>,
  network: SpawnNetworkOptions | undefined,
): { rules: ResolvedRules | null; env: Record<string, string>; network: SpawnNetworkOptions | undefined } {
  let ca: InterceptionCa | null = null;
  if (network?.interception !== undefined) {
    const i = network.interception;
    if (i === null || typeof i !== 'object' || Array.isArray(i)) throw new SandboxError('EINVALID_ARGUMENT', 'options.proxy.interception must be an object');
    if (network.instance) {
      throw new SandboxError('EINVALID_ARGUMENT', 'options.proxy.interception applies to a per-spawn proxy: give the proxy in options.proxy.instance its own `interception`');
    }
    if (rules === null || rules.network.kind !== 'proxy') {
      throw new SandboxError('EINVALID_ARGUMENT', 'options.proxy.interception needs a sandbox policy with network: { proxy: {...} }');
    }
    if (i.ca !== undefined && !(i.ca instanceof InterceptionCa)) throw new SandboxError('EINVALID_ARGUMENT', 'options.proxy.interception.ca must be an InterceptionCa');
    if (i.ca === undefined) {
      try {
        ca = InterceptionCa.shared();
      } catch (e) {
        throw new SandboxError('EPROXY_CONFIG', `could not make the shared interception CA: ${(e as Error).message}; ${FIX}`, { cause: e });
      }
    } else {
      ca = i.ca;
    }
    const full = { ...i, ca };
    try {
      ManagedProxy.checkInterception(full);
    } catch (e) {
      throw new SandboxError('EINVALID_ARGUMENT', `options.proxy.interception: ${(e as Error).message}`, { cause: e });
    }
    network = { ...network, interception: full };
  } else {
    ca = network?.instance?.interceptionCa ?? null;
  }
  if (ca === null || rules === null || rules.network.kind !== 'proxy') return { rules, env, network };
  if (ca.isDisposed) throw caError('the interception CA was disposed; its files are gone', { caDir: ca.dir, conflict: 'missing' });
  const tampered = ca.verifyFiles();
  if (tampered !== null) {
    throw caError(`the interception CA's files are not as written: ${tampered}; a sandbox or another user may have changed what the command would trust; dispose this CA and make a new one`, {
      caDir: ca.dir,
      conflict: 'tampered',
    });
  }
  const checked = checkCaDirForRules(ca.dir, rules);
  return { rules: checked, env: { ...env, ...ca.env() }, network };
}

/** The child env of an unsandboxed launch attached to `instance` (no rules to check). */
export function interceptionEnv(env: Record<string, string>, ca: InterceptionCa | null): Record<string, string> {
  return ca && !ca.isDisposed ? { ...env, ...ca.env() } : env;
}

