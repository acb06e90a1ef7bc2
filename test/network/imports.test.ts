/**
 * lib/network's files import one way (no circle, type-only imports included), so each mechanism
 * can be read on its own; the rules.ts <-> permissions/resolve.ts circle stays gone; and lib/exec-server's
 * method files import the connection's types from types.ts, never connection.ts or index.ts. Parsed
 * from the sources: relative `import ... from` / `export ... from` lines.
 */
import * as fs from 'fs';
import * as path from 'path';
import { describe, expect, it } from 'vitest';

const LIB = path.resolve(__dirname, '..', '..', 'lib');

function importsOf(file: string): string[] {
  const out: string[] = [];
  for (const m of fs.readFileSync(file, 'utf8').matchAll(/^(?:import|export)\s[^;]*?from\s+['"](\.[^'"]+)['"]/gm)) {
    const base = path.resolve(path.dirname(file), m[1]!);
    const hit = [`${base}.ts`, path.join(base, 'index.ts')].find((c) => fs.existsSync(c));
    if (hit) out.push(hit);
  }
  return out;
}

/** Every import circle reachable from `files` (as lists of paths relative to lib/). */
function circles(files: string[]): string[] {
  const state = new Map<string, 1 | 2>();
  const stack: string[] = [];
  const found: string[] = [];
  const visit = (f: string) => {
    state.set(f, 1);
    stack.push(f);
    for (const d of importsOf(f)) {
      if (state.get(d) === 1) found.push(stack.slice(stack.indexOf(d)).map((x) => path.relative(LIB, x)).join(' -> '));
      else if (!state.has(d)) visit(d);
    }
    stack.pop();
    state.set(f, 2);
  };
  for (const f of files) if (!state.has(f)) visit(f);
  return found;
}

describe('import structure', () => {
  it('lib/network has no import circle', () => {
    const dir = path.join(LIB, 'network');
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.ts')).map((f) => path.join(dir, f));
    expect(files.length).toBeGreaterThan(10); // positive control: the split files are there
    expect(circles(files)).toEqual([]);
  });

  it('lib/rules.ts and lib/permissions have no import circle', () => {
    const dir = path.join(LIB, 'permissions');
    expect(circles([path.join(LIB, 'rules.ts'), ...fs.readdirSync(dir).filter((f) => f.endsWith('.ts')).map((f) => path.join(dir, f))])).toEqual([]);
  });

  it('lib/exec-server and lib/index.ts have no import circle', () => {
    const dir = path.join(LIB, 'exec-server');
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.ts')).map((f) => path.join(dir, f));
    expect(files.length).toBeGreaterThan(10); // positive control: the method files are there
    expect(circles([path.join(LIB, 'index.ts'), ...files])).toEqual([]);
  });

  it('the check finds a circle where there is one (positive control)', () => {
    const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'psb-circle-'));
    try {
      fs.writeFileSync(path.join(dir, 'a.ts'), "import { b } from './b';\nexport const a = b;\n");
      fs.writeFileSync(path.join(dir, 'b.ts'), "import type { a } from './a';\nexport const b = 1 as unknown as typeof a;\n");
      expect(circles([path.join(dir, 'a.ts')])).toHaveLength(1);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
