/**
 * Capability SIDs, persisted per writable root so repeated runs reuse the same ACL grants (and do
 * not pile up a new ACE on every run). Stored as JSON in
 * %LOCALAPPDATA%\process-sandbox\capabilities.json:
 *   { "version": 1, "roots": { "<lower-cased root>": "S-1-5-21-a-b-c-d" }, "readonly": "S-1-5-21-..." }
 * The SIDs are random S-1-5-21-x-x-x-x values that match no real account, as Codex's are.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { winKey } from '../paths';

interface CapFile {
  version: 1;
  roots: Record<string, string>;
  readonly?: string;
}

export function defaultStateDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.LOCALAPPDATA || path.join(os.homedir(), 'AppData', 'Local');
  return path.join(base, 'process-sandbox');
}

export function randomCapabilitySid(): string {
  const b = crypto.randomBytes(16);
  return `S-1-5-21-${b.readUInt32LE(0)}-${b.readUInt32LE(4)}-${b.readUInt32LE(8)}-${b.readUInt32LE(12)}`;
}

const SID_RE = /^S-1-5-21-\d{1,10}-\d{1,10}-\d{1,10}-\d{1,10}$/;

export class CapabilityStore {
  readonly file: string;

  constructor(readonly stateDir: string) {
    this.file = path.join(stateDir, 'capabilities.json');
  }

  private load(): CapFile {
    try {
      const data = JSON.parse(fs.readFileSync(this.file, 'utf8')) as CapFile;
      if (data && data.version === 1 && typeof data.roots === 'object' && data.roots !== null) return data;
    } catch {
      // Missing or unreadable: start afresh. Old grants stay on disk but are simply not reused.
    }
    return { version: 1, roots: {} };
  }

  private save(data: CapFile): void {
    fs.mkdirSync(this.stateDir, { recursive: true });
    const tmp = `${this.file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`;
    fs.writeFileSync(tmp, JSON.stringify(data, null, 2));
    fs.renameSync(tmp, this.file);
  }

  /** The SID for each root (created and persisted on first use), in the order given. */
  sidsForRoots(roots: string[]): string[] {
    const data = this.load();
    let dirty = false;
    const out = roots.map((root) => {
      const key = winKey(root);
      let sid = data.roots[key];
      if (typeof sid !== 'string' || !SID_RE.test(sid)) {
        sid = randomCapabilitySid();
        data.roots[key] = sid;
        dirty = true;
      }
      return sid;
    });
    if (dirty) this.save(data);
    return out;
  }

  /** The SID read-only runs (no writable roots) put in their token. */
  readonlySid(): string {
    const data = this.load();
    if (typeof data.readonly === 'string' && SID_RE.test(data.readonly)) return data.readonly;
    data.readonly = randomCapabilitySid();
    this.save(data);
    return data.readonly;
  }
}
