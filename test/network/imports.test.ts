/**
 * lib/network's files import one way (no circle, type-only imports included), so each mechanism
 * can be read on its own; the rules.ts <-> permissions/resolve.ts circle stays gone; and lib/exec-server's
 * method files import the connection's types from types.ts, never connection.ts or index.ts; and no
 * module of lib/ imports a module of a parent directory that imports the importer's directory back
 * (an import that "runs back up"). Parsed from the sources: relative `import ... from` /
 * `export ... from` lines.
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

/** Every .ts file under `dir`, recursively. */
function tree(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? tree(p) : e.name.endsWith('.ts') ? [p] : [];
  });
}

/**
 * The imports that run back up: `file -> parent` where `parent` lies in an ancestor directory of
 * `file` and what `parent` imports, transitively, reaches `file`'s directory again.
 */
function runsBackUp(files: string[], root: string): string[] {
  const found: string[] = [];
  const closure = (start: string): Set<string> => {
    const seen = new Set<string>();
    const todo = [start];
    while (todo.length) for (const d of importsOf(todo.pop()!)) if (!seen.has(d)) (seen.add(d), todo.push(d));
    return seen;
  };
  for (const f of files) {
    const dir = path.dirname(f);
    for (const d of importsOf(f)) {
      if (!dir.startsWith(path.dirname(d) + path.sep)) continue;
      if ([...closure(d)].some((x) => x === dir || x.startsWith(dir + path.sep))) {
        found.push(`${path.relative(root, f)} -> ${path.relative(root, d)}`);
      }
    }
  }
  return found;
}

describe('import structure', () => {
  it('no module of lib/ imports a parent module that imports its directory back', () => {
    const files = tree(LIB);
    expect(files.some((f) => f.startsWith(path.join(LIB, 'cli') + path.sep))).toBe(true); // the CLI's wing is read
    expect(runsBackUp(files, LIB)).toEqual([]);
  });

  it('the check finds an import that runs back up (positive control)', () => {
    const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'psb-backup-'));
    try {
      fs.mkdirSync(path.join(dir, 'sub'));
      fs.writeFileSync(path.join(dir, 'top.ts'), "import type { A } from './sub/a';\nexport type T = A;\n");
      fs.writeFileSync(path.join(dir, 'sub', 'a.ts'), 'export type A = number;\n');
      fs.writeFileSync(path.join(dir, 'sub', 'b.ts'), "import type { T } from '../top';\nexport type B = T;\n");
      expect(runsBackUp(tree(dir), dir)).toEqual([path.join('sub', 'b.ts') + ' -> top.ts']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

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
