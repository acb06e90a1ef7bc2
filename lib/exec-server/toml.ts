/**
 * A small TOML 1.0 reader and writer for environmentConfig/read, so the user's config.toml is
 * returned as Codex 0.171 returns it: parsed, filtered to the asked key paths, and written back in
 * the `toml` crate's format (top-level values first, then `[table]` and `[[array]]` sections in
 * document order, each string in the first of basic, literal, multi-line basic, multi-line literal
 * that needs no escape, integers in decimal, floats as Rust prints them, inline tables only inside
 * mixed arrays). Bounded: the input is capped by the caller, nesting by MAX_DEPTH.
 */

export type TomlValue =
  | { t: 'string'; v: string }
  | { t: 'integer'; v: bigint }
  | { t: 'float'; v: number }
  | { t: 'boolean'; v: boolean }
  | { t: 'datetime'; v: string }
  | { t: 'array'; v: TomlValue[]; tables?: boolean }
  | TomlTable;

export interface TomlTable {
  t: 'table';
  v: Map<string, TomlValue>;
  /** How it came to be: a [header], a dotted key or a header's parent, an inline table. */
  how: 'header' | 'implicit' | 'dotted' | 'inline';
}

const MAX_DEPTH = 64;

export class TomlError extends Error {
  constructor(
    message: string,
    readonly line: number,
    readonly column: number,
  ) {
    super(message);
  }
}

const newTable = (how: TomlTable['how']): TomlTable => ({ t: 'table', v: new Map(), how });

/** Parses a TOML document; throws TomlError (with a 1-based line and column) when it is not valid. */
export function parseToml(src: string): TomlTable {
  let i = 0;
  const root = newTable('header');
  const fail = (msg: string, at = i): never => {
    const before = src.slice(0, at);
    const line = before.split('\n').length;
    throw new TomlError(msg, line, at - before.lastIndexOf('\n'));
  };
  const peek = (n = 0) => src[i + n] ?? '';
  const ws = () => {
    while (peek() === ' ' || peek() === '\t') i++;
  };
  const comment = () => {
    if (peek() === '#') {
      while (i < src.length && peek() !== '\n') {
        const c = src.charCodeAt(i);
        if ((c < 0x20 && c !== 9) || c === 0x7f) fail('control characters are not allowed in comments');
        i++;
      }
    }
  };
  const newline = (): boolean => {
    if (peek() === '\n') {
      i++;
      return true;
    }
    if (peek() === '\r' && peek(1) === '\n') {
      i += 2;
      return true;
    }
    return false;
  };
  const endOfLine = () => {
    ws();
    comment();
    if (i < src.length && !newline()) fail('expected newline, `#`');
  };
  const wsCommentNewlines = () => {
    for (;;) {
      ws();
      comment();
      if (!newline()) return;
    }
  };
  const hex = (n: number): string => {
    const h = src.slice(i, i + n);
    if (!new RegExp(`^[0-9A-Fa-f]{${n}}$`).test(h)) fail('invalid unicode escape');
    i += n;
    const cp = parseInt(h, 16);
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) fail('invalid unicode scalar value');
    return String.fromCodePoint(cp);
  };
  const escape = (): string => {
    i++; // the backslash
    const c = peek();
    i++;
    switch (c) {
      case 'b':
        return '\b';
      case 't':
        return '\t';
      case 'n':
        return '\n';
      case 'f':
        return '\f';
      case 'r':
        return '\r';
      case '"':
        return '"';
      case '\\':
        return '\\';
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      default:
        return fail('invalid escape sequence', i - 1);
    }
  };
  const checkChar = (c: string, multiline: boolean) => {
    const code = c.charCodeAt(0);
    if ((code < 0x20 && code !== 9 && !(multiline && (code === 10 || code === 13))) || code === 0x7f) fail('invalid character in string');
    if (multiline && code === 13 && peek(1) !== '\n') fail('invalid character in string');
  };
  const basicString = (): string => {
    if (src.startsWith('"""', i)) {
      i += 3;
      newline();
      let out = '';
      for (;;) {
        if (i >= src.length) fail('unterminated multi-line basic string');
        if (src.startsWith('"""', i)) {
          let q = 3;
          while (peek(q) === '"' && q < 5) q++;
          out += '"'.repeat(q - 3);
          i += q;
          return out;
        }
        const c = peek();
        if (c === '\\') {
          // A line-ending backslash trims the newline and the whitespace after it.
          let j = i + 1;
          while (src[j] === ' ' || src[j] === '\t') j++;
          if (src[j] === '\n' || (src[j] === '\r' && src[j + 1] === '\n')) {
            i = j;
            while (peek() === ' ' || peek() === '\t' || peek() === '\n' || (peek() === '\r' && peek(1) === '\n')) i++;
            continue;
          }
          out += escape();
          continue;
        }
        checkChar(c, true);
        out += c;
        i++;
      }
    }
    i++;
    let out = '';
    for (;;) {
      const c = peek();
      if (c === '' || c === '\n') fail('unterminated basic string');
      if (c === '"') {
        i++;
        return out;
      }
      if (c === '\\') {
        out += escape();
        continue;
      }
      checkChar(c, false);
      out += c;
      i++;
    }
  };
  const literalString = (): string => {
    if (src.startsWith("'''", i)) {
      i += 3;
      newline();
      const start = i;
      for (;;) {
        if (i >= src.length) fail('unterminated multi-line literal string');
        if (src.startsWith("'''", i)) {
          let q = 3;
          while (peek(q) === "'" && q < 5) q++;
          const out = src.slice(start, i) + "'".repeat(q - 3);
          i += q;
          return out;
        }
        checkChar(peek(), true);
        i++;
      }
    }
    i++;
    const start = i;
    for (;;) {
      const c = peek();
      if (c === '' || c === '\n') fail('unterminated literal string');
      if (c === "'") {
        i++;
        return src.slice(start, i - 1);
      }
      checkChar(c, false);
      i++;
    }
  };
  const simpleKey = (): string => {
    const c = peek();
    if (c === '"') {
      if (src.startsWith('"""', i)) fail('multi-line strings are not allowed for key');
      return basicString();
    }
    if (c === "'") {
      if (src.startsWith("'''", i)) fail('multi-line strings are not allowed for key');
      return literalString();
    }
    const m = /^[A-Za-z0-9_-]+/.exec(src.slice(i, i + 4096));
    if (!m) return fail('invalid key');
    i += m[0].length;
    return m[0];
  };
  const key = (): string[] => {
    const parts = [simpleKey()];
    for (;;) {
      ws();
      if (peek() !== '.') return parts;
      i++;
      ws();
      parts.push(simpleKey());
      if (parts.length > MAX_DEPTH) fail('key has too many parts');
    }
  };
  const number = (): TomlValue => {
    const rest = src.slice(i, i + 1024);
    const special = /^[+-]?(inf|nan)(?![A-Za-z0-9_])/.exec(rest);
    if (special) {
      i += special[0].length;
      const neg = special[0].startsWith('-');
      return { t: 'float', v: special[1] === 'nan' ? (neg ? -NaN : NaN) : neg ? -Infinity : Infinity };
    }
    const radix = /^0([xob])([0-9A-Fa-f_]+)/.exec(rest);
    if (radix) {
      const digits = radix[2]!;
      const valid = { x: /^[0-9A-Fa-f]+(_[0-9A-Fa-f]+)*$/, o: /^[0-7]+(_[0-7]+)*$/, b: /^[01]+(_[01]+)*$/ }[radix[1] as 'x' | 'o' | 'b'];
      if (!valid.test(digits)) fail('invalid integer');
      i += radix[0].length;
      const v = BigInt(`0${radix[1]}${digits.replace(/_/g, '')}`);
      if (v > 9223372036854775807n) fail('number too large to fit in target type');
      return { t: 'integer', v };
    }
    const dec = /^[+-]?(0|[1-9](_?[0-9])*)(\.[0-9](_?[0-9])*)?([eE][+-]?[0-9](_?[0-9])*)?(?![A-Za-z0-9_.:+-])/.exec(rest);
    if (!dec) return fail('invalid number');
    i += dec[0].length;
    const text = dec[0].replace(/_/g, '');
    if (dec[3] === undefined && dec[5] === undefined) {
      const v = BigInt(text);
      if (v > 9223372036854775807n || v < -9223372036854775808n) fail('number too large to fit in target type');
      return { t: 'integer', v };
    }
    return { t: 'float', v: Number(text) };
  };
  const DATETIME =
    /^(\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?)?|\d{2}:\d{2}:\d{2}(\.\d+)?)(?![A-Za-z0-9_:.+-])/;
  const value = (depth: number): TomlValue => {
    if (depth > MAX_DEPTH) fail('nesting too deep');
    const c = peek();
    if (c === '"') return { t: 'string', v: basicString() };
    if (c === "'") return { t: 'string', v: literalString() };
    if (c === '[') {
      i++;
      const items: TomlValue[] = [];
      for (;;) {
        wsCommentNewlines();
        if (peek() === ']') {
          i++;
          return { t: 'array', v: items };
        }
        items.push(value(depth + 1));
        wsCommentNewlines();
        if (peek() === ',') {
          i++;
          continue;
        }
        if (peek() === ']') {
          i++;
          return { t: 'array', v: items };
        }
        fail('expected `,`, `]`');
      }
    }
    if (c === '{') {
      i++;
      const table = newTable('inline');
      ws();
      if (peek() === '}') {
        i++;
        return table;
      }
      for (;;) {
        ws();
        const at = i;
        const k = key();
        ws();
        if (peek() !== '=') fail('expected `=`');
        i++;
        ws();
        assign(table, k, value(depth + 1), at, true);
        ws();
        if (peek() === ',') {
          i++;
          continue;
        }
        if (peek() === '}') {
          i++;
          return table;
        }
        fail('expected `,`, `}`');
      }
    }
    if (src.startsWith('true', i) && !/[A-Za-z0-9_-]/.test(peek(4))) {
      i += 4;
      return { t: 'boolean', v: true };
    }
    if (src.startsWith('false', i) && !/[A-Za-z0-9_-]/.test(peek(5))) {
      i += 5;
      return { t: 'boolean', v: false };
    }
    const dt = DATETIME.exec(src.slice(i, i + 64));
    if (dt) {
      i += dt[0].length;
      return { t: 'datetime', v: dt[0].replace(/^(\d{4}-\d{2}-\d{2})[Tt ]/, '$1T').replace(/z$/, 'Z') };
    }
    if (/^[+-]?[0-9]|^[+-]?(inf|nan)/.test(src.slice(i, i + 4))) return number();
    return fail('string values must be quoted, expected literal string');
  };
  // Assigns `value` at the dotted key `k` below `table`.
  const assign = (table: TomlTable, k: string[], v: TomlValue, at: number, inInline: boolean) => {
    let t = table;
    for (const seg of k.slice(0, -1)) {
      const cur = t.v.get(seg);
      if (cur === undefined) {
        const n = newTable('dotted');
        t.v.set(seg, n);
        t = n;
      } else if (cur.t === 'table' && (cur.how === 'dotted' || (cur.how === 'implicit' && !inInline))) {
        if (cur.how === 'implicit') cur.how = 'dotted';
        t = cur;
      } else return fail('duplicate key', at);
    }
    const last = k[k.length - 1]!;
    if (t.v.has(last)) fail('duplicate key', at);
    t.v.set(last, v);
  };
  let current = root;
  wsCommentNewlines();
  while (i < src.length) {
    const at = i;
    if (peek() === '[') {
      const aot = peek(1) === '[';
      i += aot ? 2 : 1;
      ws();
      const k = key();
      ws();
      if (aot ? !src.startsWith(']]', i) : peek() !== ']') fail(aot ? 'expected `]]`' : 'expected `]`');
      i += aot ? 2 : 1;
      endOfLine();
      let t = root;
      for (const seg of k.slice(0, -1)) {
        const cur = t.v.get(seg);
        if (cur === undefined) {
          const n = newTable('implicit');
          t.v.set(seg, n);
          t = n;
        } else if (cur.t === 'table' && cur.how !== 'inline') t = cur;
        else if (cur.t === 'array' && cur.tables) t = cur.v[cur.v.length - 1] as TomlTable;
        else fail('duplicate key', at);
      }
      const last = k[k.length - 1]!;
      const cur = t.v.get(last);
      if (aot) {
        const n = newTable('header');
        if (cur === undefined) t.v.set(last, { t: 'array', v: [n], tables: true });
        else if (cur.t === 'array' && cur.tables) cur.v.push(n);
        else fail('duplicate key', at);
        current = n;
      } else {
        if (cur === undefined) {
          const n = newTable('header');
          t.v.set(last, n);
          current = n;
        } else if (cur.t === 'table' && cur.how === 'implicit') {
          cur.how = 'header';
          current = cur;
        } else fail('duplicate key', at);
      }
    } else {
      const k = key();
      ws();
      if (peek() !== '=') fail('expected `.`, `=`');
      i++;
      ws();
      assign(current, k, value(0), at, false);
      endOfLine();
    }
    wsCommentNewlines();
  }
  return root;
}

/** The asked key paths of `table`, in document order: a path ending at (or running into) a non-table value takes it whole. */
export function filterTable(table: TomlTable, paths: string[][]): TomlTable {
  const out = newTable(table.how);
  for (const [k, v] of table.v) {
    const tails = paths.filter((p) => p[0] === k);
    if (tails.length === 0) continue;
    if (v.t !== 'table' || tails.some((p) => p.length === 1)) out.v.set(k, v);
    else out.v.set(k, filterTable(v, tails.map((p) => p.slice(1))));
  }
  return out;
}

/** A string in the `toml` crate's choice of form. */
function tomlString(s: string, multilineAllowed = true): string {
  let controls = false;
  let newline = false;
  let backslash = false;
  let maxDq = 0;
  let maxSq = 0;
  let dq = 0;
  let sq = 0;
  for (const ch of s) {
    dq = ch === '"' ? dq + 1 : 0;
    sq = ch === "'" ? sq + 1 : 0;
    maxDq = Math.max(maxDq, dq);
    maxSq = Math.max(maxSq, sq);
    if (ch === '\n') newline = true;
    else if (ch === '\\') backslash = true;
    else if (ch !== '\t' && (ch < ' ' || ch === '\x7f')) controls = true;
  }
  const lead = newline ? '\n' : '';
  if (!controls && !backslash && maxDq === 0 && !newline) return `"${s}"`;
  if (!controls && maxSq === 0 && !newline) return `'${s}'`;
  if (multilineAllowed) {
    if (!controls && !backslash && maxDq <= 2 && !s.endsWith('"')) return `"""${lead}${s}"""`;
    if (!controls && maxSq <= 2 && !s.endsWith("'")) return `'''${lead}${s}'''`;
  }
  const esc = (ch: string) => {
    switch (ch) {
      case '"':
        return '\\"';
      case '\\':
        return '\\\\';
      case '\b':
        return '\\b';
      case '\f':
        return '\\f';
      case '\r':
        return '\\r';
      case '\n':
        return newline && multilineAllowed ? '\n' : '\\n';
      case '\t':
        return '\t';
      default:
        return ch < ' ' || ch === '\x7f' ? `\\u${ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}` : ch;
    }
  };
  const body = Array.from(s, esc).join('');
  return newline && multilineAllowed ? `"""\n${body}"""` : `"${body}"`;
}

function tomlKey(k: string): string {
  return /^[A-Za-z0-9_-]+$/.test(k) ? k : tomlString(k, false);
}

/** A float as Rust's Display prints an f64 (no exponent; `.0` when integral). */
function rustFloat(v: number): string {
  if (Number.isNaN(v)) return Object.is(v, -NaN) && 1 / v < 0 ? '-nan' : 'nan';
  if (v === Infinity) return 'inf';
  if (v === -Infinity) return '-inf';
  if (Object.is(v, -0)) return '-0.0';
  let s = String(v);
  const m = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(s);
  if (m) {
    const [, sign, d, frac = '', e] = m;
    const exp = Number(e);
    const digits = d! + frac;
    if (exp >= 0) s = sign + (digits.length <= exp + 1 ? digits + '0'.repeat(exp + 1 - digits.length) : `${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`);
    else s = `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  }
  return s.includes('.') ? s : `${s}.0`;
}

function inlineValue(v: TomlValue): string {
  switch (v.t) {
    case 'string':
      return tomlString(v.v);
    case 'integer':
      return v.v.toString();
    case 'float':
      return rustFloat(v.v);
    case 'boolean':
      return String(v.v);
    case 'datetime':
      return v.v;
    case 'array':
      return `[${v.v.map(inlineValue).join(', ')}]`;
    case 'table':
      return v.v.size === 0 ? '{}' : `{ ${[...v.v].map(([k, x]) => `${tomlKey(k)} = ${inlineValue(x)}`).join(', ')} }`;
  }
}

const isTableArray = (v: TomlValue): v is { t: 'array'; v: TomlTable[] } => v.t === 'array' && v.v.length > 0 && v.v.every((x) => x.t === 'table');

/** Writes a table as the `toml` crate does (see the header); '' for an empty root. */
export function writeToml(root: TomlTable): string {
  const sections: string[] = [];
  const emit = (t: TomlTable, keys: string[], header: string | null) => {
    const lines: string[] = [];
    for (const [k, v] of t.v) if (v.t !== 'table' && !isTableArray(v)) lines.push(`${tomlKey(k)} = ${inlineValue(v)}`);
    const children = [...t.v].filter(([, v]) => v.t === 'table' || isTableArray(v));
    // A header is written for a table with values of its own, or with nothing at all.
    if (header === null) {
      if (lines.length > 0) sections.push(lines.join('\n') + '\n');
    } else if (lines.length > 0 || children.length === 0 || header.startsWith('[[')) {
      sections.push([header, ...lines].join('\n') + '\n');
    }
    for (const [k, v] of children) {
      const path = [...keys, k];
      const name = path.map(tomlKey).join('.');
      if (v.t === 'table') emit(v, path, `[${name}]`);
      else for (const item of (v as { v: TomlTable[] }).v) emit(item, path, `[[${name}]]`);
    }
  };
  emit(root, [], null);
  return sections.join('\n');
}
