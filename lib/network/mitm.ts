/**
 * The managed proxy's interception CA: one per host process, for TLS interception of the hosts
 * whose policy needs it (limited mode over HTTPS, credential injection).
 *
 *   const ca = InterceptionCa.create({ dir }); // key pair in memory; public cert + bundle on disk
 *   ca.certPath, ca.bundlePath               // what sandboxed clients are told to trust
 *   const { key, cert } = ca.leafFor('api.example.com');  // cached per host
 *   ca.dispose();                            // removes the files
 *   InterceptionCa.shared()                  // the host process's own, made on first use
 *
 * The private keys never touch the disk: only the CA certificate (and a bundle of the system's
 * roots plus it) are written, into a fresh 0755 directory that mkdtemp makes under `dir`
 * (default os.tmpdir(), fine for a CA that no sandbox uses). `dir` must stay outside every
 * sandbox's writable roots, so no sandbox can swap the file another one trusts, and visible to
 * the sandboxes (not /tmp, private in isolated mode): spawn() checks both and refuses the run
 * otherwise (lib/network/interception-spawn.ts). Certificates are built with node-forge (X.509
 * encoding) and signed with Node's native crypto (RSA-2048, SHA-256).
 * Leaves: one shared RSA key, SAN = the host, valid 7 days, cached (made anew a day before they
 * expire); the CA is valid 30 days (shared(): replaced a day before) and constrained to
 * serverAuth leaves (keyUsage keyCertSign, path length 0).
 */
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';

import type * as Forge from 'node-forge';

// Loaded on first use: a program that never intercepts never loads node-forge.
let forgeModule: typeof Forge | null = null;
function forge(): typeof Forge {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (forgeModule ??= require('node-forge') as typeof Forge);
}

/** The environment variables that tell common tools which CA bundle to trust (Codex's set). */
export const CUSTOM_CA_ENV_KEYS = [
  'CODEX_CA_CERTIFICATE',
  'SSL_CERT_FILE',
  'REQUESTS_CA_BUNDLE',
  'CURL_CA_BUNDLE',
  'NODE_EXTRA_CA_CERTS',
  'GIT_SSL_CAINFO',
  'PIP_CERT',
  'BUNDLE_SSL_CA_CERT',
  'npm_config_cafile',
  'NPM_CONFIG_CAFILE',
  'CARGO_HTTP_CAINFO',
] as const;

const MAX_LEAVES = 1024;
const CA_DAYS = 30;
const LEAF_DAYS = 7;
/** A cached leaf (or the shared CA) this close to its expiry is made anew. */
const RENEW_MS = 86_400_000;

const SYSTEM_BUNDLES = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/cert.pem'];

function randomSerial(): string {
  // Positive 16-byte serial (high bit clear), as hex.
  const b = crypto.randomBytes(16);
  b[0]! &= 0x7f;
  return b.toString('hex');
}

function toForgeKey(key: crypto.KeyObject): Forge.pki.PublicKey {
  return forge().pki.publicKeyFromPem(key.export({ type: 'spki', format: 'pem' }).toString());
}

/** Signs `cert` (forge object, everything but the signature set) with `signer` natively. */
function signNative(cert: Forge.pki.Certificate, signer: crypto.KeyObject): string {
  const oid = forge().pki.oids.sha256WithRSAEncryption!;
  const c = cert as unknown as { signatureOid: string; siginfo: { algorithmOid: string }; signature: string };
  c.signatureOid = oid;
  c.siginfo.algorithmOid = oid;
  // getTBSCertificate exists in node-forge, its typings just leave it out.
  const getTbs = (forge().pki as unknown as { getTBSCertificate(c: Forge.pki.Certificate): Forge.asn1.Asn1 }).getTBSCertificate;
  const tbs = forge().asn1.toDer(getTbs(cert)).getBytes();
  c.signature = crypto.sign('sha256', Buffer.from(tbs, 'binary'), signer).toString('binary');
  return forge().pki.certificateToPem(cert);
}

let sharedCa: InterceptionCa | null = null;

/**
 * Where InterceptionCa.shared() keeps its directories: `$XDG_CACHE_HOME/process-sandbox/interception`
 * when XDG_CACHE_HOME is an absolute path, else `~/.cache/process-sandbox/interception`
 * (os.homedir()). Override with PROCESS_SANDBOX_CA_DIR (absolute).
 */
export function sharedCaBaseDir(): string {
  const override = process.env.PROCESS_SANDBOX_CA_DIR;
  if (override && path.isAbsolute(override)) return override;
  const xdg = process.env.XDG_CACHE_HOME;
  const cache = xdg && path.isAbsolute(xdg) ? xdg : path.join(os.homedir(), '.cache');
  return path.join(cache, 'process-sandbox', 'interception');
}

/** Removes `psb-ca-<pid>-*` directories of processes that no longer exist (ours only). */
function sweepSharedDirs(base: string): void {
  let names: string[];
  try {
    names = fs.readdirSync(base).filter((n) => /^psb-ca-\d+-/.test(n));
  } catch {
    return;
  }
  const uid = process.getuid?.();
  for (const n of names) {
    const pid = Number(n.split('-')[2]);
    if (!(pid > 0) || pid === process.pid) continue;
    const dir = path.join(base, n);
    try {
      if (uid !== undefined && fs.lstatSync(dir).uid !== uid) continue;
      process.kill(pid, 0);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ESRCH') fs.rmSync(dir, { recursive: true, force: true });
    }
  }
}

export class InterceptionCa {
  readonly certPem: string;
  /** The CA certificate alone (for NODE_EXTRA_CA_CERTS-style variables that add to the store). */
  readonly certPath: string;
  /** The system's roots plus the CA (for SSL_CERT_FILE-style variables that replace the store). */
  readonly bundlePath: string;
  readonly dir: string;
  private readonly caKey: crypto.KeyObject;
  private readonly leafKeyPem: string;
  private readonly leafPublic: Forge.pki.PublicKey;
  private readonly subject: Forge.pki.CertificateField[];
  /** PEM and expiry (ms) per host. */
  private readonly leaves = new Map<string, { pem: string; notAfter: number }>();
  private readonly notAfter: number;
  private readonly bundleHash: string;
  private disposed = false;

  /** True once dispose() ran (the files are gone). */
  get isDisposed(): boolean {
    return this.disposed;
  }

  private constructor(dir: string, prefix = 'psb-ca-') {
    const ca = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
    const leaf = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
    this.caKey = ca.privateKey;
    this.leafKeyPem = leaf.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    this.leafPublic = toForgeKey(leaf.publicKey);
    this.subject = [
      { name: 'commonName', value: `process-sandbox interception CA ${crypto.randomBytes(4).toString('hex')}` },
      { name: 'organizationName', value: 'process-sandbox (this host process only)' },
    ];
    const cert = forge().pki.createCertificate();
    cert.publicKey = toForgeKey(ca.publicKey);
    cert.serialNumber = randomSerial();
    cert.validity.notBefore = new Date(Date.now() - 60_000);
    cert.validity.notAfter = new Date(Date.now() + CA_DAYS * 86_400_000);
    this.notAfter = cert.validity.notAfter.getTime();
    cert.setSubject(this.subject);
    cert.setIssuer(this.subject);
    cert.setExtensions([
      { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
      { name: 'subjectKeyIdentifier' },
    ]);
    this.certPem = signNative(cert, this.caKey);
    // Resolved once, here: the env names this path and spawn() checks this path. Left as given,
    // a symlink on the way (say in a sandbox's writable root) could be re-pointed by a sandbox
    // between another run's check and its exec, and that run would trust the sandbox's files.
    this.dir = fs.realpathSync(fs.mkdtempSync(path.join(dir, prefix)));
    fs.chmodSync(this.dir, 0o755);
    this.certPath = path.join(this.dir, 'ca.pem');
    this.bundlePath = path.join(this.dir, 'ca-bundle.pem');
    let system = '';
    for (const p of SYSTEM_BUNDLES) {
      try {
        system = fs.readFileSync(p, 'utf8');
        break;
      } catch {
        /* next */
      }
    }
    const bundle = `${system.trimEnd()}\n${this.certPem}`;
    fs.writeFileSync(this.certPath, this.certPem, { mode: 0o644, flag: 'wx' });
    fs.writeFileSync(this.bundlePath, bundle, { mode: 0o644, flag: 'wx' });
    this.bundleHash = crypto.createHash('sha256').update(bundle).digest('hex');
  }

  /**
   * Why the files on disk may no longer be the ones this CA wrote, or null. spawn() refuses a run
   * on any answer (EPROXY_CONFIG): the directory, the files and every ancestor must be owned by
   * root or this user and writable by no one else (ancestors: sticky directories such as /var/tmp,
   * and write for this user's primary group, aside), no symlinks, one link per file, and the
   * contents byte for byte what was written. Why at every spawn: Landlock does not govern chmod,
   * so a Landlock-mode sandbox can make these directories world-writable (for another local user
   * to swap the files before the next run).
   */
  verifyFiles(): string | null {
    if (this.disposed) return 'the CA was disposed';
    const uid = process.getuid?.();
    try {
      if (uid !== undefined) {
        for (let d = this.dir, self = true; ; d = path.dirname(d), self = false) {
          const st = fs.lstatSync(d);
          if (!st.isDirectory()) return `${d} is not a directory`;
          if (st.uid !== uid && (self || st.uid !== 0)) return `${d} is owned by uid ${st.uid}`;
          // Ancestors may be sticky (/var/tmp), or writable by this user's primary group only
          // (user-private-group systems make ~/.cache 0775 with the user's own group).
          const othersWrite = self ? st.mode & 0o022 : (st.mode & 0o1000) !== 0 ? 0 : st.mode & (st.gid === process.getgid?.() ? 0o002 : 0o022);
          if (othersWrite !== 0) return `${d} is writable by others (mode ${(st.mode & 0o7777).toString(8)})`;
          if (d === path.dirname(d)) break;
        }
      }
      for (const [p, want] of [
        [this.certPath, crypto.createHash('sha256').update(this.certPem).digest('hex')],
        [this.bundlePath, this.bundleHash],
      ] as const) {
        const st = fs.lstatSync(p);
        if (!st.isFile() || st.nlink !== 1) return `${p} is not the file written (a link, or not a regular file)`;
        if (uid !== undefined && (st.uid !== uid || (st.mode & 0o022) !== 0)) return `${p} is writable by others or not owned by this user`;
        if (crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex') !== want) return `${p} was changed`;
      }
    } catch (e) {
      return `cannot check the CA files: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
    }
    return null;
  }

  /** A new CA; its files go into a fresh directory under `dir` (default os.tmpdir()). */
  static create(opts: { dir?: string } = {}): InterceptionCa {
    return new InterceptionCa(opts.dir ?? os.tmpdir());
  }

  /**
   * The host process's shared CA, made on first use, for spawn-level proxies that ask for
   * interception without a CA of their own (`proxy: { interception: {} }`). Its files go into a
   * fresh `psb-ca-<pid>-XXXXXX` directory (0755) under sharedCaBaseDir(), removed when the process
   * exits; directories left by dead processes are removed on the next first use.
   *
   * Why there: the directory must be readable inside every sandbox and writable by none. /tmp
   * (os.tmpdir()) is private in isolated mode, so the sandbox would not see it; a per-user cache
   * directory in the home is visible under the default read-everything policy, is added to a
   * restricted `read` list by spawn(), and is outside the usual writable roots (a workspace, /tmp).
   * spawn() still refuses a run whose writable roots contain it (EPROXY_CONFIG).
   * Throws (an Error naming the directory) when the base cannot be made safely.
   */
  static shared(): InterceptionCa {
    // A shared CA whose files were changed (see verifyFiles) is replaced by a fresh one.
    // So is one about to expire (30 days; a long-lived host process).
    if (sharedCa && !sharedCa.disposed && sharedCa.verifyFiles() === null && sharedCa.notAfter - Date.now() >= RENEW_MS) return sharedCa;
    const base = sharedCaBaseDir();
    // 0700 for every directory made here: only this user may look inside or rename anything.
    fs.mkdirSync(base, { recursive: true, mode: 0o700 });
    const st = fs.lstatSync(base);
    const uid = process.getuid?.();
    if (!st.isDirectory() || (uid !== undefined && st.uid !== uid) || (st.mode & 0o022) !== 0) {
      throw new Error(`refusing to keep the interception CA in ${base}: it must be a directory owned by this user and writable by no one else`);
    }
    sweepSharedDirs(base);
    const ca = new InterceptionCa(base, `psb-ca-${process.pid}-`);
    sharedCa = ca;
    process.once('exit', () => ca.dispose());
    return ca;
  }

  /** Key and certificate (PEM) for `host` (a DNS name or an IP literal), made once and cached. */
  leafFor(host: string): { key: string; cert: string } {
    if (this.disposed) throw new Error('InterceptionCa is disposed');
    // A long-lived host process must not serve a leaf past its notAfter (7 days).
    let entry = this.leaves.get(host);
    if (entry && entry.notAfter - Date.now() < RENEW_MS) {
      this.leaves.delete(host);
      entry = undefined;
    }
    if (!entry) {
      const cert = forge().pki.createCertificate();
      cert.publicKey = this.leafPublic;
      cert.serialNumber = randomSerial();
      cert.validity.notBefore = new Date(Date.now() - 60_000);
      cert.validity.notAfter = new Date(Date.now() + LEAF_DAYS * 86_400_000);
      cert.setSubject([{ name: 'commonName', value: host.slice(0, 64) }]);
      cert.setIssuer(this.subject);
      const ip = net.isIP(host) !== 0;
      cert.setExtensions([
        { name: 'basicConstraints', cA: false, critical: true },
        { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
        { name: 'extKeyUsage', serverAuth: true },
        { name: 'subjectAltName', altNames: [ip ? { type: 7, ip: host } : { type: 2, value: host }] },
      ]);
      entry = { pem: signNative(cert, this.caKey), notAfter: cert.validity.notAfter.getTime() };
      // Bounded: a sandbox allowed `**.example.com` could ask for endless names.
      if (this.leaves.size >= MAX_LEAVES) this.leaves.delete(this.leaves.keys().next().value as string);
      this.leaves.set(host, entry);
    }
    return { key: this.leafKeyPem, cert: entry.pem };
  }

  /** Env entries pointing every CUSTOM_CA_ENV_KEYS variable at the right file. */
  env(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const k of CUSTOM_CA_ENV_KEYS) out[k] = k === 'NODE_EXTRA_CA_CERTS' ? this.certPath : this.bundlePath;
    return out;
  }

  /** Removes the files (the keys go with this object). */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.leaves.clear();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
