/**
 * A small reader for the subset of SBPL (Seatbelt profile language, a Scheme dialect) that our
 * profiles use: lists, symbols, numbers, "strings" with backslash escapes, #"regex" literals and
 * `;` line comments. It exists so that a generated profile can be checked, here on any OS, for
 * balance and for the parameters it references; macOS itself is the only real parser.
 *
 *   const forms = readSbpl(text);             // throws SbplSyntaxError on imbalance
 *   const names = referencedParams(forms);    // every X in (param "X")
 */

export type SbplAtom =
  | { kind: 'symbol'; value: string }
  | { kind: 'string'; value: string }
  | { kind: 'regex'; value: string };
export type SbplNode = SbplAtom | { kind: 'list'; items: SbplNode[] };

export class SbplSyntaxError extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(`${message} at offset ${offset}`);
    this.name = 'SbplSyntaxError';
  }
}

function readQuoted(text: string, start: number, raw: boolean): { value: string; end: number } {
  // `start` points just past the opening quote. In a #"regex" literal a backslash still protects
  // the next character from ending the literal, but is kept: it belongs to the regex.
  let out = '';
  let i = start;
  while (i < text.length) {
    const ch = text[i];
    if (ch === '\\') {
      if (i + 1 >= text.length) break;
      out += raw ? text.slice(i, i + 2) : text[i + 1];
      i += 2;
      continue;
    }
    if (ch === '"') return { value: out, end: i + 1 };
    out += ch;
    i += 1;
  }
  throw new SbplSyntaxError('unterminated string', start - 1);
}

/** Parses a whole profile into its top-level forms. */
export function readSbpl(text: string): SbplNode[] {
  const stack: SbplNode[][] = [[]];
  const opens: number[] = [];
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    if (ch === ';') {
      const nl = text.indexOf('\n', i);
      i = nl === -1 ? text.length : nl + 1;
      continue;
    }
    if (ch === ' ' || ch === '\t' || ch === '\n' || ch === '\r') {
      i += 1;
      continue;
    }
    if (ch === '(') {
      stack.push([]);
      opens.push(i);
      i += 1;
      continue;
    }
    if (ch === ')') {
      if (stack.length === 1) throw new SbplSyntaxError('unbalanced ")"', i);
      const items = stack.pop()!;
      opens.pop();
      stack[stack.length - 1].push({ kind: 'list', items });
      i += 1;
      continue;
    }
    if (ch === '"') {
      const { value, end } = readQuoted(text, i + 1, false);
      stack[stack.length - 1].push({ kind: 'string', value });
      i = end;
      continue;
    }
    if (ch === '#' && text[i + 1] === '"') {
      const { value, end } = readQuoted(text, i + 2, true);
      stack[stack.length - 1].push({ kind: 'regex', value });
      i = end;
      continue;
    }
    let j = i;
    while (j < text.length && !/[\s()";]/.test(text[j])) j += 1;
    stack[stack.length - 1].push({ kind: 'symbol', value: text.slice(i, j) });
    i = j;
  }
  if (stack.length !== 1) throw new SbplSyntaxError('unclosed "("', opens[opens.length - 1]);
  return stack[0];
}

/** Every parameter name that appears as (param "NAME"), in order of first use. */
export function referencedParams(forms: SbplNode[]): string[] {
  const seen = new Set<string>();
  const walk = (node: SbplNode): void => {
    if (node.kind !== 'list') return;
    const [head, arg] = node.items;
    if (
      node.items.length === 2 &&
      head.kind === 'symbol' &&
      head.value === 'param' &&
      arg.kind === 'string'
    ) {
      seen.add(arg.value);
      return;
    }
    node.items.forEach(walk);
  };
  forms.forEach(walk);
  return [...seen];
}

/** Every string literal in the profile (used by tests to prove no user path was spliced in). */
export function stringLiterals(forms: SbplNode[]): string[] {
  const out: string[] = [];
  const walk = (node: SbplNode): void => {
    if (node.kind === 'list') node.items.forEach(walk);
    else if (node.kind === 'string' || node.kind === 'regex') out.push(node.value);
  };
  forms.forEach(walk);
  return out;
}
