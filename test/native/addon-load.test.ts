/**
 * A missing or unloadable addon is SandboxError('EADDON_LOAD') from every entry point, naming the
 * platform tag it looked for and the fix. Each case runs the built dist/ in a fresh node process
 * with PREBUILDS_ONLY=1 (so build/Release is ignored) and PROCESS_SANDBOX_PREBUILD pointing at a
 * package root whose prebuilds/ is empty or holds a file that is not a loadable library.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { platformTag } from '../../lib/native';
import { requireBuilt } from '../contract/helpers';

const ROOT = path.resolve(__dirname, '..', '..');
const DIST = path.join(ROOT, 'dist', 'index.js');
const CLI = path.join(ROOT, 'dist', 'cli.js');

/** Calls every API entry point and reports how each failed. */
const SCRIPT = `
const p = require(${JSON.stringify(DIST)});
const out = {};
const grab = (e) => ({ name: e && e.name, code: e && e.code, isSandboxError: e instanceof p.SandboxError, message: e && e.message, detail: e && e.detail });
try { p.spawn('true', [], { policy: null }); out.spawn = 'no error'; } catch (e) { out.spawn = grab(e); }
try { p.spawn('true', []); out.spawnSandboxed = 'no error'; } catch (e) { out.spawnSandboxed = grab(e); }
try { p.spawnPrepared({ command: ['true'], cwd: '/', env: {}, sandboxType: 'none', rules: null }); out.spawnPrepared = 'no error'; } catch (e) { out.spawnPrepared = grab(e); }
p.run('true', [], { policy: null }).then(() => { out.run = 'resolved'; }, (e) => { out.run = grab(e); }).then(() => {
  const probe = p.probe();
  out.probe = { addonLoaded: probe.addonLoaded, addonError: probe.addonError, defaultMode: probe.defaultMode };
  console.log(JSON.stringify(out));
});
`;

function runWith(root: string, args: string[] = ['-e', SCRIPT]) {
  return spawnSync(process.execPath, args, {
    encoding: 'utf8',
    env: { ...process.env, PREBUILDS_ONLY: '1', PROCESS_SANDBOX_PREBUILD: root },
    timeout: 60_000,
  });
}

describe.runIf(process.platform === 'linux' || process.platform === 'win32')('EADDON_LOAD from every entry point', () => {
  let work: string;
  let emptyRoot: string;
  let brokenRoot: string;
  beforeAll(() => {
    requireBuilt('dist');
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-addon-load-'));
    emptyRoot = path.join(work, 'empty');
    fs.mkdirSync(path.join(emptyRoot, 'prebuilds'), { recursive: true });
    fs.writeFileSync(path.join(emptyRoot, 'package.json'), '{"name":"process-sandbox"}');
    brokenRoot = path.join(work, 'broken');
    const dir = path.join(brokenRoot, 'prebuilds', `${process.platform}-${process.arch}`);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(brokenRoot, 'package.json'), '{"name":"process-sandbox"}');
    fs.writeFileSync(path.join(dir, 'process-sandbox.node'), 'this is not a shared object\n');
  });
  afterAll(() => {
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('positive control: the development tree (build/Release) loads and spawns', () => {
    const env = { ...process.env };
    delete env.PREBUILDS_ONLY;
    delete env.PROCESS_SANDBOX_PREBUILD;
    const r = spawnSync(process.execPath, ['-e', SCRIPT], { encoding: 'utf8', env, timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(out.spawn).toBe('no error');
    expect(out.spawnPrepared).toBe('no error');
    expect(out.run).toBe('resolved');
    expect(out.probe.addonLoaded).toBe(true);
  });

  for (const [kind, reason] of [['empty', 'missing'], ['broken', 'unloadable']] as const) {
    it(`${kind} prebuilds/: spawn, run, spawnPrepared and probe all say EADDON_LOAD with the tag and a fix`, () => {
      const r = runWith(kind === 'empty' ? emptyRoot : brokenRoot);
      expect(r.status, r.stderr).toBe(0);
      const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
      const tag = platformTag();
      for (const entry of ['spawn', 'spawnSandboxed', 'spawnPrepared', 'run'] as const) {
        const e = out[entry];
        expect(e, entry).toMatchObject({ name: 'SandboxError', code: 'EADDON_LOAD', isSandboxError: true });
        expect(e.message, entry).toContain(tag);
        expect(e.message, entry).toMatch(/Fix: /);
        expect(e.detail, entry).toMatchObject({ platformTag: tag, reason });
      }
      if (reason === 'missing') expect(out.spawn.message).toMatch(/No native build was found for platform=/);
      expect(out.probe.addonLoaded).toBe(false);
      expect(out.probe.defaultMode).toBeNull();
      expect(out.probe.addonError).toBe(out.spawn.message);
    });
  }

  it('the CLI prints one line naming EADDON_LOAD\'s tag and exits 125', () => {
    const r = runWith(emptyRoot, [CLI, 'run', '--no-sandbox', '--', 'true']);
    expect(r.status).toBe(125);
    const lines = r.stderr.trim().split('\n');
    expect(lines.length, r.stderr).toBe(1);
    expect(lines[0]).toContain(platformTag());
    expect(lines[0]).toMatch(/^process-sandbox: the process-sandbox native addon for .* could not be loaded/);
  });
});
