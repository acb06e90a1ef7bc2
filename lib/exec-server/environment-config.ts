/**
 * environmentConfig/read, capabilityRoots/discoverV1: what the executor
 * tells a Codex client about its own configuration, in the reference's shapes.
 *
 * environmentConfig/read returns the user layer ($CODEX_HOME/config.toml, default ~/.codex)
 * filtered to the asked key paths, so nothing else in the file leaves the machine. As the
 * reference, the file is parsed (toml.ts, bounded) and the asked paths are written back in the
 * `toml` crate's format: comments and layout are not kept. Project and system layers are not read.
 *
 * capabilityRoots/discoverV1 finds plugins and skills in the given roots as the reference does
 * (discoverRoot), outside any sandbox (it takes no sandbox context, so environment/info does not
 * claim capabilityDiscoverySandbox). capabilities/discoverV2 is in capability-discovery.ts.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileUri } from '../permissions/uri';
import type { MethodContext } from './types';
import { decodeStruct, invalidParams, RpcError } from './decode';
import { nativePath } from './fs-methods';
import { osErrorText } from './fs-ops';
import { refuseWithoutSandboxField } from './sandbox-floor';
import { filterTable, parseToml, TomlError, writeToml } from './toml';

type KeyPath = string[];

function decodePaths(v: unknown): KeyPath[] {
  if (!Array.isArray(v)) throw invalidParams(`invalid type: ${v === null ? 'null' : typeof v === 'string' ? `string ${JSON.stringify(v)}` : 'map'}, expected a sequence`);
  return v.map((p) => {
    if (!Array.isArray(p)) throw invalidParams(`invalid type: ${typeof p === 'string' ? `string ${JSON.stringify(p)}` : 'map'}, expected a sequence`);
    for (const s of p) if (typeof s !== 'string') throw invalidParams('invalid type: map, expected a string');
    if (p.length === 0) throw invalidParams('TOML paths must contain at least one key segment');
    return p as string[];
  });
}

function codexHome(): string {
  const env = process.env.CODEX_HOME;
  return env && path.isAbsolute(env) ? env : path.join(os.homedir(), '.codex');
}

/** config.toml larger than this is refused rather than parsed. */
const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

/** The asked key paths of a config file, written back in the reference's format ('' when none is there). */
export function filterToml(text: string, wanted: KeyPath[]): string {
  const filtered = filterTable(parseToml(text), wanted);
  return filtered.v.size === 0 ? '' : writeToml(filtered);
}

export async function environmentConfigRead(ctx: MethodContext, params: unknown): Promise<unknown> {
  const p = decodeStruct(params, 'EnvironmentConfigReadParams', [
    { name: 'cwd', kind: 'uri', required: true },
    { name: 'configPaths', kind: 'any', required: true },
    { name: 'requirementsPaths', kind: 'any', required: true },
  ]);
  const configPaths = decodePaths(p.configPaths);
  const requirementsPaths = decodePaths(p.requirementsPaths);
  ctx.gate('environment config');
  refuseWithoutSandboxField(ctx.options, 'environmentConfig/read', 'read $CODEX_HOME/config.toml with fs/readFile and a `sandbox` instead');
  if (configPaths.length === 0 && requirementsPaths.length === 0) throw invalidParams('at least one config or requirements path is required');
  nativePath(p.cwd as string);
  const home = codexHome();
  const file = path.join(home, 'config.toml');
  const layers: unknown[] = [];
  let text: string | null = null;
  try {
    if (fs.statSync(file).size > MAX_CONFIG_BYTES) throw new RpcError(-32603, `failed to load executor-local config: ${file}: larger than ${MAX_CONFIG_BYTES} bytes`);
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if (e instanceof RpcError) throw e;
    /* no user config */
  }
  if (text !== null && configPaths.length > 0) {
    let toml: string;
    try {
      toml = filterToml(text, configPaths);
    } catch (e) {
      if (!(e instanceof TomlError)) throw e;
      throw new RpcError(-32603, `failed to load executor-local config: ${file}:${e.line}:${e.column}: ${e.message}`);
    }
    if (toml !== '') layers.push({ source: `user (${file})`, baseDir: pathToFileUri(home), toml });
  }
  return {
    userHomeDir: pathToFileUri(os.homedir()),
    codexHomeDir: pathToFileUri(home),
    hostname: os.hostname(),
    config: { layers, cloudInsertionIndex: 0 },
    requirements: { layers: [], cloudInsertionIndex: 0 },
  };
}

const DISCOVERY = { maxDirectories: 10_000, maxDepth: 16, maxFiles: 256, maxFileBytes: 256 * 1024, maxTotalBytes: 8 * 1024 * 1024 };

/**
 * One capability root, as the reference discovers it: a plugin (`.codex-plugin/plugin.json`, with
 * `.mcp.json` and `.app.json` beside it) and every SKILL.md below the root (with its
 * `agents/openai.yaml` metadata), in path order. Bounded (DISCOVERY): past a bound the walk stops
 * with the reference's warning. Symlinks are not followed.
 */
function discoverRoot(root: string): { plugin: unknown; skills: unknown[]; namespaceManifests: unknown[]; warnings: string[]; error: string | null } {
  let total = 0;
  let files = 0;
  const warnings: string[] = [];
  const limit = () => {
    if (!warnings.includes('capability discovery size limit reached')) warnings.push('capability discovery size limit reached');
  };
  const textFile = (p: string): { path: string; contents: string } | null => {
    try {
      const st = fs.lstatSync(p);
      if (!st.isFile()) return null;
      if (st.size > DISCOVERY.maxFileBytes || total + st.size > DISCOVERY.maxTotalBytes || files >= DISCOVERY.maxFiles) {
        limit();
        return null;
      }
      total += st.size;
      files++;
      return { path: pathToFileUri(p), contents: fs.readFileSync(p, 'utf8') };
    } catch {
      return null;
    }
  };
  try {
    if (!fs.statSync(root).isDirectory()) return { plugin: null, skills: [], namespaceManifests: [], warnings, error: null };
  } catch (e) {
    const code = String((e as NodeJS.ErrnoException).code);
    return { plugin: null, skills: [], namespaceManifests: [], warnings, error: `failed to inspect capability root ${pathToFileUri(root)}: ${osErrorText(code)}` };
  }
  const manifest = textFile(path.join(root, '.codex-plugin', 'plugin.json'));
  const plugin = manifest ? { manifest, mcpConfig: textFile(path.join(root, '.mcp.json')), appsConfig: textFile(path.join(root, '.app.json')) } : null;
  const skillFiles: string[] = [];
  const queue: Array<[string, number]> = [[root, 0]];
  let dirs = 0;
  while (queue.length > 0) {
    if (++dirs > DISCOVERY.maxDirectories) {
      limit();
      break;
    }
    const [dir, depth] = queue.shift()!;
    let names: fs.Dirent[];
    try {
      names = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const d of names) {
      const full = path.join(dir, d.name);
      if (d.isDirectory() && depth < DISCOVERY.maxDepth) queue.push([full, depth + 1]);
      else if (d.isFile() && d.name === 'SKILL.md') skillFiles.push(full);
    }
  }
  skillFiles.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const skills: unknown[] = [];
  for (const f of skillFiles) {
    const instructions = textFile(f);
    if (instructions) skills.push({ instructions, metadata: textFile(path.join(path.dirname(f), 'agents', 'openai.yaml')) });
  }
  return { plugin, skills, namespaceManifests: manifest ? [manifest] : [], warnings, error: null };
}

export async function capabilityRootsDiscoverV1(ctx: MethodContext, params: unknown): Promise<unknown> {
  const p = decodeStruct(params, 'CapabilityRootsDiscoverParams', [{ name: 'roots', kind: 'any', required: true }]);
  if (!Array.isArray(p.roots)) throw invalidParams('invalid type: map, expected a sequence');
  const roots = p.roots.map((r) =>
    decodeStruct(r, 'WireCapabilityRootDiscoverRequest', [
      { name: 'id', kind: 'string', required: true },
      { name: 'path', kind: 'uri', required: true },
    ]),
  );
  ctx.gate('capability discovery');
  refuseWithoutSandboxField(ctx.options, 'capabilityRoots/discoverV1', 'use capabilities/discoverV2 with a `sandbox` instead');
  return { roots: roots.map((r) => ({ id: r.id, path: r.path, ...discoverRoot(nativePath(r.path as string)) })) };
}
