/**
 * isWithin / isStrictlyWithin (lib/paths.ts): the planner asks them for every
 * pair of rules on every spawn, so normalised paths take a string comparison; anything else goes
 * through path.relative. Both must agree with the path module's own answer.
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';

import { isStrictlyWithin, isWithin } from '../../lib/paths';

/** The meaning, spelled with path.relative: equal, or below without climbing out. */
function reference(child: string, parent: string): boolean {
  if (child === parent) return true;
  const rel = path.relative(parent, child);
  return rel !== '' && rel !== '..' && !rel.startsWith('../') && !path.isAbsolute(rel);
}

describe('isWithin', () => {
  it('answers the obvious cases', () => {
    expect(isWithin('/a/b', '/a')).toBe(true);
    expect(isWithin('/a', '/a')).toBe(true);
    expect(isWithin('/ab', '/a')).toBe(false);
    expect(isWithin('/a', '/a/b')).toBe(false);
    expect(isWithin('/anything', '/')).toBe(true);
    expect(isStrictlyWithin('/a', '/a')).toBe(false);
    expect(isStrictlyWithin('/a/b', '/a')).toBe(true);
  });

  it('a name that begins with dots is inside; .. itself is not', () => {
    expect(isWithin('/ws/..cache', '/ws')).toBe(true);
    expect(isWithin('/ws/...', '/ws')).toBe(true);
    expect(isWithin('/ws/../etc', '/ws')).toBe(false);
    expect(isWithin('/ws/a/../../etc', '/ws')).toBe(false);
    expect(isWithin('/ws/./a', '/ws')).toBe(true);
  });

  it('Windows paths (path.win32, the path module on Windows): a sibling on the same drive is not inside', () => {
    const w = path.win32;
    // path.win32.relative writes '..\\etc' here, which must read as climbing out.
    expect(isWithin('C:\\etc', 'C:\\ws', w)).toBe(false);
    expect(isWithin('C:\\ws\\.codex', 'C:\\ws\\.git', w)).toBe(false);
    expect(isWithin('D:\\ws\\a', 'C:\\ws', w)).toBe(false);
    // Positive controls: below, equal, another spelling of the same drive and case.
    expect(isWithin('C:\\ws\\a\\b', 'C:\\ws', w)).toBe(true);
    expect(isWithin('C:\\ws', 'C:\\ws', w)).toBe(true);
    expect(isWithin('c:\\WS\\a', 'C:\\ws', w)).toBe(true);
    expect(isWithin('C:\\ws\\..cache', 'C:\\ws', w)).toBe(true);
  });

  it('agrees with path.relative on 200000 random pairs, normalised or not', () => {
    const parts = ['a', 'b', 'ab', '..', '.', '...', '..a', 'a..', '', 'x y', 'é'];
    let seed = 42;
    const rnd = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const gen = () => {
      let s = '';
      for (let i = rnd(5); i > 0; i--) s += '/' + parts[rnd(parts.length)];
      if (rnd(10) === 0) s += '/';
      return s || '/';
    };
    const wrong: string[] = [];
    for (let i = 0; i < 200_000; i++) {
      const c = gen();
      const p = gen();
      if (isWithin(c, p) !== reference(c, p)) wrong.push(`${c} in ${p}`);
    }
    expect(wrong.slice(0, 5)).toEqual([]);
  });
});
