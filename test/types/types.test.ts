/**
 * The published declarations, as a TypeScript consumer compiles against them: tsc runs over a
 * scratch project whose node_modules/process-sandbox is the built package (package.json + dist),
 * under moduleResolution node16, nodenext, bundler and node10, each with and without
 * skipLibCheck.
 *
 * Every consumer file holds `@ts-expect-error` lines that are errors only when the types are
 * real: if the declarations failed to resolve and degraded to `any` (what skipLibCheck hides),
 * the directive itself is reported unused (TS2578) and the case fails.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireBuilt } from '../contract/helpers';

const ROOT = path.resolve(__dirname, '..', '..');
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');

/** Uses the API in ways that type-check only against the real declarations. */
const BODY = `
const r = run('true', [], { timeout: 1000, policy: { filesystem: { write: ['/tmp'] } } });
void r.then((x) => {
  const out: string = x.stdout;
  const timedOut: boolean = x.timedOut;
  const e: EnforcementReport = x.enforcement;
  void out; void timedOut; void e;
  // @ts-expect-error stdout is a string, not a number
  const n: number = x.stdout;
  void n;
});
const child = spawn('sh', ['-c', 'echo'], { stdio: 'pipe' });
child.on('exit', (code: number | null) => void code);
// @ts-expect-error an unknown option is rejected
spawn('true', [], { notAnOption: 1 });
const preload: string = nodeFetchPreloadPath();
void preload;
const notes: string[] | undefined = child.enforcement.notes;
void notes;
const err = new SandboxError('EINVALID_ARGUMENT', 'x');
const code: SandboxErrorCode = err.code;
// @ts-expect-error codes are a closed union
const bogus: SandboxErrorCode = 'ENOPE';
void code; void bogus;
`;

const ESM = `import { run, spawn, SandboxError, nodeFetchPreloadPath, type EnforcementReport, type SandboxErrorCode } from 'process-sandbox';
import ps from 'process-sandbox';
${BODY}
void ps.probe();
// @ts-expect-error the default export is the module, with no such member
ps.notExported();
export {};
`;

const CJS_REQUIRE = `import ps = require('process-sandbox');
import { run, spawn, SandboxError, nodeFetchPreloadPath, type EnforcementReport, type SandboxErrorCode } from 'process-sandbox';
${BODY}
void ps.probe();
// @ts-expect-error no such member
ps.notExported();
export {};
`;

/** The srt drop-in's subpath (not for node10 resolution, which has no "exports"). */
const SRT_BODY = `
const cfg: SandboxRuntimeConfig = { network: { allowedDomains: ['example.com'], deniedDomains: [] }, filesystem: { denyRead: [], allowWrite: ['.'], denyWrite: [] } };
void SandboxManager.initialize(cfg).then(async () => {
  const cmd: string = await SandboxManager.wrapWithSandbox('true');
  const r: { exitCode: number; timedOut: boolean } = await (await spawnSandboxed('true')).wait();
  void cmd; void r;
});
// @ts-expect-error network is required
const bad: SandboxRuntimeConfig = { filesystem: { denyRead: [], allowWrite: [], denyWrite: [] } };
void bad;
export {};
`;
const SRT_ESM = `import { SandboxManager, spawnSandboxed, type SandboxRuntimeConfig } from 'process-sandbox/srt';\n${SRT_BODY}`;
const SRT_CJS = `import srt = require('process-sandbox/srt');\nconst { SandboxManager, spawnSandboxed } = srt;\ntype SandboxRuntimeConfig = srt.SandboxRuntimeConfig;\n${SRT_BODY}`;

interface Case {
  name: string;
  compilerOptions: Record<string, unknown>;
  files: Record<string, string>;
  /** package.json "type" of the consumer project */
  type?: 'module' | 'commonjs';
}

const CASES: Case[] = [
  { name: 'node16', compilerOptions: { module: 'node16', moduleResolution: 'node16' }, files: { 'esm.mts': ESM, 'cjs.cts': CJS_REQUIRE, 'srt.mts': SRT_ESM, 'srt-cjs.cts': SRT_CJS } },
  { name: 'node16 (type: module, .ts)', type: 'module', compilerOptions: { module: 'node16', moduleResolution: 'node16' }, files: { 'index.ts': ESM } },
  { name: 'nodenext', compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext' }, files: { 'esm.mts': ESM, 'cjs.cts': CJS_REQUIRE, 'srt.mts': SRT_ESM, 'srt-cjs.cts': SRT_CJS } },
  { name: 'bundler (module esnext)', compilerOptions: { module: 'esnext', moduleResolution: 'bundler' }, files: { 'index.ts': ESM, 'srt.ts': SRT_ESM } },
  { name: 'bundler (module preserve)', compilerOptions: { module: 'preserve', moduleResolution: 'bundler' }, files: { 'index.ts': ESM, 'cjs.cts': CJS_REQUIRE } },
  { name: 'node10', compilerOptions: { module: 'commonjs', moduleResolution: 'node10', esModuleInterop: true }, files: { 'index.ts': ESM.replace("import ps from 'process-sandbox';", "import * as ps from 'process-sandbox';"), 'req.ts': CJS_REQUIRE } },
];

describe('published type declarations compile for every module system', () => {
  let work: string;
  beforeAll(() => {
    requireBuilt('dist');
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-types-'));
  });
  afterAll(() => {
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  /** A consumer project with the package installed as npm would lay it out (files: dist + package.json). */
  function project(c: Case, skipLibCheck: boolean): string {
    const dir = path.join(work, `${c.name.replace(/\W+/g, '-')}-${skipLibCheck ? 'skip' : 'check'}`);
    const pkg = path.join(dir, 'node_modules', 'process-sandbox');
    fs.mkdirSync(pkg, { recursive: true });
    fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(pkg, 'package.json'));
    fs.cpSync(path.join(ROOT, 'dist'), path.join(pkg, 'dist'), { recursive: true });
    fs.mkdirSync(path.join(dir, 'node_modules', '@types'), { recursive: true });
    fs.symlinkSync(path.join(ROOT, 'node_modules', '@types', 'node'), path.join(dir, 'node_modules', '@types', 'node'));
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true, ...(c.type ? { type: c.type } : {}) }));
    for (const [f, text] of Object.entries(c.files)) fs.writeFileSync(path.join(dir, f), text);
    fs.writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'es2022', strict: true, noEmit: true, types: ['node'], skipLibCheck, ...c.compilerOptions },
        files: Object.keys(c.files),
      }),
    );
    return dir;
  }

  for (const c of CASES) {
    for (const skipLibCheck of [false, true]) {
      // Checking @types/node (skipLibCheck false) takes tsc over a minute on a loaded 2-core host.
      it(`${c.name}, skipLibCheck ${skipLibCheck}`, { timeout: 600_000 }, () => {
        const dir = project(c, skipLibCheck);
        const r = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.json', '--pretty', 'false'], { cwd: dir, encoding: 'utf8', timeout: 590_000 });
        expect(`${r.stdout}${r.stderr}`.trim()).toBe('');
        expect(r.status).toBe(0);
      });
    }
  }

  it('negative control: the old declaration copy (extensionless imports in .d.mts) fails under node16', { timeout: 600_000 }, () => {
    const c = CASES[0];
    const dir = project({ ...c, name: 'old-copy' }, false);
    fs.copyFileSync(path.join(dir, 'node_modules', 'process-sandbox', 'dist', 'index.d.ts'), path.join(dir, 'node_modules', 'process-sandbox', 'dist', 'index.d.mts'));
    const r = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.json', '--pretty', 'false'], { cwd: dir, encoding: 'utf8', timeout: 590_000 });
    expect(r.status).not.toBe(0);
    expect(r.stdout).toMatch(/TS2835|TS2834|TS2578/);
  });
});
