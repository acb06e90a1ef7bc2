/**
 * The error codes are listed once in native/error_codes.def and mirrored by lib/errors.ts
 * ERROR_CODES. Both are append-only; the addon's `errorCodes` export, the TS list and the .def
 * file must agree name for name and in order.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, SandboxError, exitStatusForError } from '../../lib/errors';
import { loadNative } from '../../lib/native';
import { requireBuilt } from '../contract/helpers';

const DEF = path.resolve(__dirname, '..', '..', 'native', 'error_codes.def');

function defCodes(): string[] {
  const out: string[] = [];
  for (const line of fs.readFileSync(DEF, 'utf8').split('\n')) {
    const t = line.trim();
    if (t === '' || t.startsWith('//')) continue;
    const m = /^PSB_ERROR\(\s*([A-Z0-9_]+)\s*,\s*"([^"]+)"\s*\)$/.exec(t);
    if (!m) throw new Error(`native/error_codes.def: unexpected line: ${line}`);
    out.push(m[1]);
  }
  return out;
}

describe('error codes', () => {
  it('the addon list equals lib/errors.ts ERROR_CODES, in order', () => {
    requireBuilt('addon');
    expect(loadNative().errorCodes).toEqual([...ERROR_CODES]);
  });

  it('native/error_codes.def lists the same codes, in the same order', () => {
    expect(defCodes()).toEqual([...ERROR_CODES]);
  });

  it('every .def entry carries a description, and every line is an entry or a comment', () => {
    // defCodes() throws on any other line shape.
    expect(defCodes().length).toBe(ERROR_CODES.length);
  });

  it('codes are unique UPPER_SNAKE names starting with E', () => {
    expect(new Set(ERROR_CODES).size).toBe(ERROR_CODES.length);
    for (const c of ERROR_CODES) expect(c).toMatch(/^E[A-Z0-9_]+$/);
  });

  it('the codes the API contract names exist', () => {
    for (const c of ['EINVALID_ARGUMENT', 'EINVALID_POLICY', 'ENOT_FOUND', 'ENOT_EXECUTABLE', 'ENOT_ENFORCED', 'EMAXBUFFER', 'EABORTED']) {
      expect(ERROR_CODES).toContain(c);
    }
  });

  it('SandboxError carries code, syscall, errno and is an Error', () => {
    const e = new SandboxError('ESPAWN', 'clone(2) failed: EAGAIN', { syscall: 'clone', errno: 11 });
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('SandboxError');
    expect(e).toMatchObject({ code: 'ESPAWN', syscall: 'clone', errno: 11, platform: process.platform });
    expect(e.message).toBe('clone(2) failed: EAGAIN');
  });

  it('CLI exit statuses for errors: 127 not found, 126 not executable, 125 otherwise', () => {
    expect(exitStatusForError(new SandboxError('ENOT_FOUND', 'x'))).toBe(127);
    expect(exitStatusForError(new SandboxError('ENOT_EXECUTABLE', 'x'))).toBe(126);
    expect(exitStatusForError(new SandboxError('EUNSUPPORTED_POLICY', 'x'))).toBe(125);
    expect(exitStatusForError(new Error('x'))).toBe(125);
  });
});
