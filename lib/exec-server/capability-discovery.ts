/**
 * capabilities/discoverV2: the skills and plugins an agent on this executor may use, as Codex
 * 0.171's exec-server discovers them (compared side by side in test/exec-server/conformance.test.ts):
 * - skills: every SKILL.md at most 6 directories below `$CODEX_HOME/skills` (root id
 *   `codex-home-skills`) and `~/.agents/skills` (`user-agent-skills`), directory links followed,
 *   in path order; the YAML header gives `name`, `description` and `metadata.short-description`,
 *   `agents/openai.yaml` beside it gives `dependencies.tools` and `policy`. A skill whose header is
 *   missing or invalid is left out with one warning for its root.
 * - plugins: each `[plugins."NAME@MARKETPLACE"]` with `enabled = true` in `$CODEX_HOME/config.toml`
 *   whose copy is in `$CODEX_HOME/plugins/cache/MARKETPLACE/NAME/VERSION` (its manifest, `.mcp.json`,
 *   `.app.json`, and the skills under its `skills/`, named `NAME:skill`).
 *
 * The files are found and read by the `discoverFiles` fs operation, inside the request's `sandbox`
 * when it carries one (as every fs method), so a denied path is not read; bounded in directories
 * walked and bytes read. Headers are parsed by parseYamlSubset (block mappings and sequences,
 * plain, quoted and block scalars, flow sequences of scalars), bounded by the file size cap.
 *
 * Every call reads afresh. The reference keeps what it found (a skill changed, a new root or a
 * newly enabled plugin were not seen by later calls of the same server): the answers differ only
 * after the files change while a server runs, and then ours is the current one.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import * as fs from 'node:fs';
import { pathToFileUri } from '../permissions/uri';
import type { MethodContext } from './types';
import { decodeStruct, invalidParams } from './decode';
import { fsRunner, nativePath, sandboxOf } from './fs-methods';
import { runFs, type DiscoveredFiles } from './fs-ops';
import { checkSandboxGiven } from './sandbox-floor';

const BOUNDS = { maxDepth: 6, maxDirectories: 10_000, maxFileBytes: 256 * 1024, maxTotalBytes: 8 * 1024 * 1024 };
const METADATA_WARNING = 'some capability metadata could not be loaded; discovery may be incomplete';
/** Longer skill names are refused (as the reference). */
const MAX_NAME_CHARS = 64;
const LIMIT_WARNING = 'capability discovery size limit reached';

type Yaml = string | number | boolean | null | Yaml[] | { [k: string]: Yaml };

/**
 * A bounded YAML subset: block mappings and sequences by indentation, `#` comments, plain,
 * 'single' and "double" quoted scalars, `|` and `>` block scalars (with `-`/`+`), and flow
 * sequences of scalars. Anything else throws (the skill is then reported invalid).
 */
export function parseYamlSubset(text: string): Yaml {
  const lines = text.split(/\r?\n/);
  let i = 0;
  const indentOf = (l: string) => l.length - l.trimStart().length;
  const blank = (l: string) => l.trim() === '' || l.trimStart().startsWith('#');
  const skipBlank = () => {
    while (i < lines.length && blank(lines[i]!)) i++;
  };
  const stripComment = (v: string) => {
    let q: string | null = null;
    for (let k = 0; k < v.length; k++) {
      const c = v[k]!;
      if (q) {
        if (c === '\\' && q === '"') k++;
        else if (c === q) q = null;
      } else if ((c === '"' || c === "'") && (k === 0 || /\s/.test(v[k - 1]!))) q = c;
      else if (c === '#' && (k === 0 || /\s/.test(v[k - 1]!))) return v.slice(0, k).trimEnd();
    }
    return v.trimEnd();
  };
  const scalar = (raw: string): Yaml => {
    const v = raw.trim();
    if (v.startsWith('"')) {
      if (!v.endsWith('"') || v.length < 2) throw new Error('unterminated string');
      return doubleQuoted(v.slice(1, -1));
    }
    if (v.startsWith("'")) {
      if (!v.endsWith("'") || v.length < 2) throw new Error('unterminated string');
      return v.slice(1, -1).replace(/''/g, "'");
    }
    if (v.startsWith('[')) {
      if (!v.endsWith(']')) throw new Error('unsupported flow sequence');
      const inner = v.slice(1, -1).trim();
      return inner === '' ? [] : inner.split(',').map((x) => scalar(x));
    }
    if (v.startsWith('{')) {
      if (v === '{}') return {};
      throw new Error('unsupported flow mapping');
    }
    if (/^[&*!|>%@`]/.test(v)) throw new Error('unsupported YAML construct');
    if (v === '' || v === '~' || v === 'null' || v === 'Null' || v === 'NULL') return null;
    if (/^(true|True|TRUE)$/.test(v)) return true;
    if (/^(false|False|FALSE)$/.test(v)) return false;
    if (/^[-+]?[0-9]+$/.test(v)) return Number(v);
    if (/^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/.test(v)) return Number(v);
    return v;
  };
  const blockScalar = (head: string, parentIndent: number): string => {
    const folded = head.startsWith('>');
    const chomp = head.includes('-') ? 'strip' : head.includes('+') ? 'keep' : 'clip';
    const body: string[] = [];
    let ind = -1;
    while (i < lines.length) {
      const l = lines[i]!;
      if (l.trim() === '') {
        body.push('');
        i++;
        continue;
      }
      const n = indentOf(l);
      if (n <= parentIndent) break;
      if (ind < 0) ind = n;
      if (n < ind) break;
      body.push(l.slice(ind));
      i++;
    }
    let trailing = 0;
    while (body.length > 0 && body[body.length - 1] === '') {
      body.pop();
      trailing++;
    }
    let out = '';
    if (folded) {
      for (let k = 0; k < body.length; k++) {
        const cur = body[k]!;
        if (k === 0) out = cur;
        else if (cur === '' || body[k - 1] === '' || /^\s/.test(cur) || /^\s/.test(body[k - 1]!)) out += '\n' + cur;
        else out += ' ' + cur;
      }
      out = out.replace(/\n\n/g, '\n');
    } else out = body.join('\n');
    if (body.length === 0) return '';
    if (chomp === 'strip') return out;
    if (chomp === 'keep') return out + '\n'.repeat(trailing + 1);
    return out + '\n';
  };
  const valueAfter = (rest: string, indent: number): Yaml => {
    const v = stripComment(rest).trim();
    if (v === '' ) {
      skipBlank();
      if (i < lines.length) {
        const n = indentOf(lines[i]!);
        const t = lines[i]!.trimStart();
        if (n > indent || (n === indent && t.startsWith('- '))) return block(n);
      }
      return null;
    }
    if (/^[|>][-+]?$/.test(v)) return blockScalar(v, indent);
    if (!/^["'\[{]/.test(v)) {
      // A plain scalar may go on over more indented lines (folded with single spaces).
      let text = v;
      while (i < lines.length && !blank(lines[i]!) && indentOf(lines[i]!) > indent && !keyRe.test(lines[i]!.trim())) {
        text += ' ' + stripComment(lines[i]!.trim());
        i++;
      }
      return scalar(text);
    }
    return scalar(v);
  };
  // Linear: the plain key runs to the first `:` (trimmed after), no overlapping repetitions.
  const keyRe = /^("(?:[^"\\]|\\.)*"[ \t]*|'(?:[^']|'')*'[ \t]*|[^\s#'"][^:#]*):(?:\s+(.*))?$/;
  const block = (indent: number): Yaml => {
    skipBlank();
    const first = lines[i]!.trimStart();
    if (first === '-' || first.startsWith('- ')) {
      const seq: Yaml[] = [];
      while (i < lines.length) {
        skipBlank();
        if (i >= lines.length) break;
        const l = lines[i]!;
        const n = indentOf(l);
        const t = l.trimStart();
        if (n !== indent || !(t === '-' || t.startsWith('- '))) {
          if (n > indent) throw new Error('bad indentation');
          break;
        }
        const item = t.slice(1);
        const itemIndent = n + 1 + (item.length - item.trimStart().length);
        if (item.trim() === '') {
          i++;
          seq.push(valueAfter('', n));
        } else if (keyRe.test(item.trim()) && !/^["']/.test(item.trim()[0] ?? '') ) {
          // "- key: v" opens a mapping whose keys continue at the item's indentation.
          lines[i] = ' '.repeat(itemIndent) + item.trimStart();
          seq.push(block(itemIndent));
        } else {
          i++;
          seq.push(scalar(stripComment(item)));
        }
      }
      return seq;
    }
    const map: Record<string, Yaml> = {};
    while (i < lines.length) {
      skipBlank();
      if (i >= lines.length) break;
      const l = lines[i]!;
      const n = indentOf(l);
      if (n < indent) break;
      if (n > indent) throw new Error('bad indentation');
      const m = keyRe.exec(l.trim());
      if (!m) throw new Error('expected a mapping key');
      const rawKey = m[1]!.trim();
      const key = rawKey.startsWith('"') ? (JSON.parse(rawKey) as string) : rawKey.startsWith("'") ? rawKey.slice(1, -1).replace(/''/g, "'") : rawKey;
      if (Object.prototype.hasOwnProperty.call(map, key)) throw new Error(`duplicate key ${key}`);
      i++;
      map[key] = valueAfter(m[2] ?? '', n);
    }
    return map;
  };
  skipBlank();
  if (i >= lines.length) return null;
  const top = block(indentOf(lines[i]!));
  skipBlank();
  if (i < lines.length) throw new Error('unexpected content');
  return top;
}

const str = (v: Yaml | undefined): string | null => (typeof v === 'string' ? v : null);
const obj = (v: Yaml | undefined): Record<string, Yaml> | null => (v !== null && typeof v === 'object' && !Array.isArray(v) ? v : null);

/** The SKILL.md header (between `---` lines), or null when missing or invalid. */
function skillHeader(contents: string, dirName: string): { name: string; description: string; shortDescription: string | null } | null {
  const m = /^---[ \t]*\r?\n([\s\S]*?)\r?\n---[ \t]*(\r?\n|$)/.exec(contents.replace(/^\uFEFF/, ''));
  if (!m) return null;
  let y: Yaml;
  try {
    y = parseYamlSubset(m[1]!);
  } catch {
    return null;
  }
  const h = obj(y);
  if (!h) return null;
  // Scalars of any kind are text; whitespace runs become one space, as the reference shows them.
  const text = (v: Yaml | undefined) => (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' ? String(v).split(/\s+/).filter(Boolean).join(' ') : null);
  const name = h.name === undefined || h.name === null ? dirName : text(h.name);
  const description = text(h.description);
  if (!name || !description || [...name].length > MAX_NAME_CHARS) return null;
  const meta = obj(h.metadata);
  const short = meta ? text(meta['short-description']) : null;
  return { name, description, shortDescription: short || null };
}

/** A YAML double-quoted scalar's escapes. */
function doubleQuoted(body: string): string {
  let out = '';
  for (let k = 0; k < body.length; k++) {
    const c = body[k]!;
    if (c === '"') throw new Error('unescaped quote');
    if (c !== '\\') {
      out += c;
      continue;
    }
    const e = body[++k];
    const simple: Record<string, string> = { '0': '\0', a: '\x07', b: '\b', t: '\t', '\t': '\t', n: '\n', v: '\v', f: '\f', r: '\r', e: '\x1b', ' ': ' ', '"': '"', '/': '/', '\\': '\\', N: '\x85', _: '\xa0', L: '\u2028', P: '\u2029' };
    if (e !== undefined && simple[e] !== undefined) {
      out += simple[e];
      continue;
    }
    const n = e === 'x' ? 2 : e === 'u' ? 4 : e === 'U' ? 8 : 0;
    const hex = body.slice(k + 1, k + 1 + n);
    if (n === 0 || !/^[0-9A-Fa-f]+$/.test(hex) || hex.length !== n) throw new Error('invalid escape');
    const cp = parseInt(hex, 16);
    if (cp > 0x10ffff) throw new Error('invalid escape');
    out += String.fromCodePoint(cp);
    k += n;
  }
  return out;
}

/** agents/openai.yaml: dependencies and policy, in the reference's shapes; undefined when invalid. */
function skillMetadata(text: string | null): { dependencies: unknown; policy: unknown } | undefined {
  if (text === null) return { dependencies: null, policy: null };
  let y: Yaml;
  try {
    y = parseYamlSubset(text);
  } catch {
    return undefined;
  }
  const m = obj(y);
  if (y !== null && !m) return undefined;
  const deps = obj(m?.dependencies);
  const tools = deps && Array.isArray(deps.tools) ? deps.tools : null;
  const port = (v: Yaml | undefined) => (typeof v === 'number' ? v : null);
  const dependencies = tools
    ? {
        tools: tools.map((t) => {
          const o = obj(t) ?? {};
          return { type: str(o.type), value: str(o.value), description: str(o.description), transport: str(o.transport), command: str(o.command), url: str(o.url), oauthCallbackPort: port(o.oauth_callback_port) };
        }),
      }
    : null;
  const pol = obj(m?.policy);
  const policy = pol
    ? {
        allowImplicitInvocation: typeof pol.allow_implicit_invocation === 'boolean' ? pol.allow_implicit_invocation : null,
        products: Array.isArray(pol.products) ? pol.products.filter((x) => typeof x === 'string') : [],
      }
    : null;
  return { dependencies, policy };
}

function codexHome(): string {
  const env = process.env.CODEX_HOME;
  return env && path.isAbsolute(env) ? env : path.join(os.homedir(), '.codex');
}

/** `[plugins."NAME@MARKETPLACE"]` tables with `enabled = true` in the user's config.toml. */
function enabledPlugins(home: string): string[] {
  let text: string;
  try {
    const file = path.join(home, 'config.toml');
    if (fs.statSync(file).size > 4 * 1024 * 1024) return [];
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  const out: string[] = [];
  let current: string | null = null;
  for (const raw of text.split(/\r?\n/)) {
    const l = raw.replace(/\s+#.*$/, '').trim();
    const h = /^\[\s*plugins\s*\.\s*(?:"([^"\\]+)"|'([^']+)'|([A-Za-z0-9_-]+))\s*\]$/.exec(l);
    if (h) {
      current = h[1] ?? h[2] ?? h[3]!;
      continue;
    }
    if (l.startsWith('[')) current = null;
    else if (current !== null && /^enabled\s*=\s*true$/.test(l) && !out.includes(current)) out.push(current);
  }
  return out;
}

export async function capabilitiesDiscoverV2(ctx: MethodContext, params: unknown): Promise<unknown> {
  // The reference reads these params through a JSON value: a number is "number", and a short
  // sequence is refused by its length (as serde's visit_seq does).
  if (typeof params === 'number') throw invalidParams('invalid type: number, expected struct DiscoverV2CapabilitiesRequest');
  if (Array.isArray(params) && params.length < 2) throw invalidParams(`invalid length ${params.length}, expected struct DiscoverV2CapabilitiesRequest with 2 elements`);
  const p = decodeStruct(params, 'DiscoverV2CapabilitiesRequest', [
    { name: 'cwd', kind: 'uri', required: true },
    { name: 'sandbox', kind: 'sandbox' },
  ]);
  ctx.gate('capability discovery');
  nativePath(p.cwd as string);
  const sandbox = sandboxOf(p, ctx.options, p.cwd as string);
  checkSandboxGiven(ctx.options, 'capabilities/discoverV2', sandbox);
  const home = codexHome();
  const skillRoots = [
    { id: 'codex-home-skills', path: path.join(home, 'skills') },
    { id: 'user-agent-skills', path: path.join(os.homedir(), '.agents', 'skills') },
  ];
  // Plugin copies: the version directory of each enabled plugin (the last in byte order).
  const plugins: Array<{ id: string; name: string; root: string }> = [];
  for (const id of enabledPlugins(home)) {
    const at = id.lastIndexOf('@');
    if (at <= 0) continue;
    const [name, market] = [id.slice(0, at), id.slice(at + 1)];
    if (!/^[^/\\.][^/\\]*$/.test(name) || !/^[^/\\.][^/\\]*$/.test(market)) continue;
    const dir = path.join(home, 'plugins', 'cache', market, name);
    let versions: string[] = [];
    try {
      versions = fs.readdirSync(dir).filter((v) => !v.startsWith('.')).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    } catch {
      continue;
    }
    if (versions.length > 0) plugins.push({ id, name, root: path.join(dir, versions[versions.length - 1]!) });
  }
  const files = plugins.flatMap((pl) => ['.codex-plugin/plugin.json', '.mcp.json', '.app.json'].map((f) => path.join(pl.root, f)));
  const found = (await runFs(
    { op: 'discoverFiles', roots: [...skillRoots.map((r) => r.path), ...plugins.map((pl) => path.join(pl.root, 'skills'))], files, ...BOUNDS },
    sandbox,
    fsRunner(ctx, 'capabilities/discoverV2'),
  )) as DiscoveredFiles;
  const warnings: string[] = [];
  const warn = (w: string) => {
    warnings.push(w);
  };
  const skillsOf = (i: number) => {
    const r = found.roots[i]!;
    let bad = r.error !== null || r.unreadable > 0;
    const out: Array<{ header: NonNullable<ReturnType<typeof skillHeader>>; meta: { dependencies: unknown; policy: unknown }; path: string }> = [];
    for (const s of r.skills) {
      const header = skillHeader(s.contents, path.basename(path.dirname(s.path)));
      const meta = skillMetadata(s.metadata);
      if (!header || !meta) {
        bad = true;
        continue;
      }
      out.push({ header, meta, path: s.path });
    }
    if (bad) warn(METADATA_WARNING);
    return out;
  };
  const skills = skillRoots.flatMap((root, i) =>
    skillsOf(i).map((s) => ({
      name: s.header.name,
      description: s.header.description,
      shortDescription: s.header.shortDescription,
      path: pathToFileUri(s.path),
      discoveryRoot: { id: root.id, path: pathToFileUri(root.path) },
      dependencies: s.meta.dependencies,
      policy: s.meta.policy,
    })),
  );
  const pluginsOut: unknown[] = [];
  plugins.forEach((pl, k) => {
    const [manifestText, mcp, apps] = found.files.slice(3 * k, 3 * k + 3);
    let manifest: Record<string, unknown> | null = null;
    try {
      const m = JSON.parse(manifestText ?? 'null') as unknown;
      if (m !== null && typeof m === 'object' && !Array.isArray(m)) manifest = m as Record<string, unknown>;
    } catch {
      /* invalid manifest */
    }
    if (!manifest) {
      warn(METADATA_WARNING);
      return;
    }
    const file = (f: string, text: string | null | undefined) => (typeof text === 'string' ? { path: pathToFileUri(path.join(pl.root, f)), contents: text } : null);
    const iface = manifest.interface as Record<string, unknown> | undefined;
    pluginsOut.push({
      id: pl.id,
      displayName: typeof iface?.displayName === 'string' ? iface.displayName : typeof manifest.name === 'string' ? manifest.name : pl.name,
      remotePluginId: null,
      version: typeof manifest.version === 'string' ? manifest.version : path.basename(pl.root),
      root: pathToFileUri(pl.root),
      files: { manifest: file('.codex-plugin/plugin.json', manifestText), mcpConfig: file('.mcp.json', mcp), appsConfig: file('.app.json', apps) },
      skills: skillsOf(skillRoots.length + k).map((s) => ({
        name: `${pl.name}:${s.header.name}`,
        description: s.header.description,
        shortDescription: s.header.shortDescription,
        path: pathToFileUri(s.path),
        dependencies: s.meta.dependencies,
        policy: s.meta.policy,
      })),
    });
  });
  if (found.limited) warn(LIMIT_WARNING);
  return { plugins: pluginsOut, skills, warnings };
}
