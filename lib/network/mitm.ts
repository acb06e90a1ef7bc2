/**
 * The managed proxy's interception CA: one per host process, for TLS interception of the hosts
 * whose policy needs it (limited mode over HTTPS, credential injection).
 *
 *   const ca = InterceptionCa.create();      // key pair in memory; public cert + bundle on disk
 *   ca.certPath, ca.bundlePath               // what sandboxed clients are told to trust
 *   const { key, cert } = ca.leafFor('api.example.com');  // cached per host
 *   ca.dispose();                            // removes the files
 *
 * The private keys never touch the disk: only the CA certificate (and a bundle of the system's
 * roots plus it) are written, into a fresh 0755 directory that mkdtemp makes under `dir`
 * (default os.tmpdir()); the caller must keep `dir` outside every sandbox's writable roots, so no
 * sandbox can swap the file another one trusts. Certificates are built with node-forge (X.509
 * encoding) and signed with Node's native crypto (RSA-2048, SHA-256).
 * Leaves: one shared RSA key, SAN = the host, valid 7 days, cached; the CA is valid 30 days and
 * constrained to serverAuth leaves (keyUsage keyCertSign, path length 0).
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
  private readonly leaves = new Map<string, string>();
  private disposed = false;

  private constructor(dir: string) {
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
    cert.validity.notAfter = new Date(Date.now() + 30 * 86_400_000);
    cert.setSubject(this.subject);
    cert.setIssuer(this.subject);
    cert.setExtensions([
      { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
      { name: 'subjectKeyIdentifier' },
    ]);
    this.certPem = signNative(cert, this.caKey);
    this.dir = fs.mkdtempSync(path.join(dir, 'psb-ca-'));
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
    fs.writeFileSync(this.certPath, this.certPem, { mode: 0o644, flag: 'wx' });
    fs.writeFileSync(this.bundlePath, `${system.trimEnd()}\n${this.certPem}`, { mode: 0o644, flag: 'wx' });
  }

  /** A new CA; its files go into a fresh directory under `dir` (default os.tmpdir()). */
  static create(opts: { dir?: string } = {}): InterceptionCa {
    return new InterceptionCa(opts.dir ?? os.tmpdir());
  }

  /** Key and certificate (PEM) for `host` (a DNS name or an IP literal), made once and cached. */
  leafFor(host: string): { key: string; cert: string } {
    if (this.disposed) throw new Error('InterceptionCa is disposed');
    let pem = this.leaves.get(host);
    if (!pem) {
      const cert = forge().pki.createCertificate();
      cert.publicKey = this.leafPublic;
      cert.serialNumber = randomSerial();
      cert.validity.notBefore = new Date(Date.now() - 60_000);
      cert.validity.notAfter = new Date(Date.now() + 7 * 86_400_000);
      cert.setSubject([{ name: 'commonName', value: host.slice(0, 64) }]);
      cert.setIssuer(this.subject);
      const ip = net.isIP(host) !== 0;
      cert.setExtensions([
        { name: 'basicConstraints', cA: false, critical: true },
        { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
        { name: 'extKeyUsage', serverAuth: true },
        { name: 'subjectAltName', altNames: [ip ? { type: 7, ip: host } : { type: 2, value: host }] },
      ]);
      pem = signNative(cert, this.caKey);
      // Bounded: a sandbox allowed `**.example.com` could ask for endless names.
      if (this.leaves.size >= MAX_LEAVES) this.leaves.delete(this.leaves.keys().next().value as string);
      this.leaves.set(host, pem);
    }
    return { key: this.leafKeyPem, cert: pem };
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
