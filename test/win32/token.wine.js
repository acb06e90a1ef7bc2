'use strict';
// Token hardening: on an elevated host the child gets no administrator groups and no
// High integrity; the report lists what the token does not stop (other processes' memory, the
// default desktop). Wine runs as an elevated administrator at High integrity, so the elevated path's
// calls (CreateRestrictedToken with SidsToDisable, SetTokenInformation(TokenIntegrityLevel)) run here;
// wine does not apply them to the child, so what the child really gets needs real Windows.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');

async function facts(rules) {
  const { stdout, child, exit } = await h.runBackend({ file: h.probeChild, argv: [h.probeChild, 'report', '0'], rules });
  assert.equal(exit.code, 0);
  return { f: h.parseReport(stdout), child };
}

test('the report lists other processes\' memory and the default desktop as gaps', { timeout: 60000 }, async () => {
  const { child } = await facts(h.rules());
  assert.ok(child.enforcement.gaps.some((g) => /other processes' memory readable/.test(g)), child.enforcement.gaps.join('\n'));
  assert.ok(child.enforcement.gaps.some((g) => /default desktop/.test(g)));
  assert.notEqual(child.enforcement.guarantees.processIsolation, 'enforced');
});

test('an elevated host (as wine is): admin groups are disabled and the integrity is lowered for the child', { timeout: 60000 }, async () => {
  const host = (await facts(null)).f; // positive control: the plain child has the host's token
  const { child } = await facts(h.rules());
  const m = child.enforcement.mechanisms;
  const hostHigh = parseInt(host.integrity, 16) > 0x2000;
  assert.equal(m.integrity.includes('lowered'), hostHigh, `host integrity ${host.integrity}, report ${m.integrity}`);
  if (host.admin === '1') assert.ok(m.adminGroupsDisabled >= 1, `admin host, ${m.adminGroupsDisabled} groups disabled`);
  else assert.equal(m.adminGroupsDisabled, 0);
});

test('isolation: the child runs at Medium integrity or below and without Administrators', { skip: h.NEEDS_REAL_WINDOWS, timeout: 60000 }, async () => {
  const host = (await facts(null)).f;
  const { f } = await facts(h.rules());
  assert.ok(parseInt(f.integrity, 16) <= 0x2000, `child integrity ${f.integrity} (host ${host.integrity})`);
  assert.equal(f.admin, '0', `child admin membership (host ${host.admin})`);
  assert.equal(f.restricted, '1');
});

// The FILE_DELETE_CHILD self-test (Codex's LEGACY_RESTRICTED_TOKEN_UNSAFE_DELETE_ERROR): under wine
// the sandboxed del really deletes (wine enforces nothing), which is the positive control that the
// probe detects a kernel that does not restrict deletes; on real Windows the file must survive.
test('the FILE_DELETE_CHILD self-test runs a sandboxed del and looks from outside', { timeout: 60000 }, () => {
  const fs = require('node:fs');
  const path = require('node:path');
  const dir = h.tmpDir('selftest');
  const victim = path.join(dir, 'victim.txt');
  fs.writeFileSync(victim, 'x');
  const r = h.native.winDeleteChildProbe(dir, victim, 'S-1-5-21-1-2-3-4');
  assert.equal(r.deleted, h.wine !== null, `deleted=${r.deleted} exit=${r.exitCode}`);
  assert.equal(fs.existsSync(victim), !r.deleted);
});

test('a failed self-test refuses sandboxed runs unless degraded (and says so in the report)', { timeout: 60000 }, async () => {
  // The addon as a kernel with the Codex-described bug would answer: wine hidden, the del succeeds.
  const fake = Object.create(h.native);
  fake.winWineVersion = () => null;
  fake.winDeleteChildProbe = () => ({ deleted: true, exitCode: 0 });
  const backend = h.win32.createWin32Backend(fake, { stateDir: h.stateDir });
  const req = (degraded) => ({ file: h.probeChild, argv: [h.probeChild, 'report', '0'], env: h.baseEnv(), cwd: process.cwd(), stdio: ['ignore', 'ignore', 'ignore'], rules: h.rules({ degraded }) });
  assert.throws(() => backend.spawn(req(false)), (e) => e instanceof h.SandboxError && e.code === 'ENOT_ENFORCED' && /FILE_DELETE_CHILD/.test(e.message));
  // wine's CreateProcessAsUserW failed once in about ten CI runs with error 1359 (an internal
  // error of wine's; this test is about the report, not process creation): one retry for that
  // error alone, under wine alone.
  const spawnDone = async (b, r) => {
    for (let attempt = 0; ; attempt++) {
      const c = b.spawn(r);
      try {
        await c.exited;
        return c;
      } catch (e) {
        if (attempt > 0 || h.wine === null || !(e instanceof h.SandboxError) || !/error 1359\b/.test(e.message)) throw e;
      }
    }
  };
  const child = await spawnDone(backend, req(true));
  assert.equal(child.enforcement.mechanisms.deleteChildSelfTest, 'failed');
  assert.equal(child.enforcement.guarantees.filesystemWrite, 'not-enforced');
  assert.ok(child.enforcement.gaps.some((g) => /self-test failed/.test(g)));
  // Control: a passing self-test leaves the guarantee as planned.
  const good = Object.create(h.native);
  good.winWineVersion = () => null;
  good.winDeleteChildProbe = () => ({ deleted: false, exitCode: 0 });
  const ok = await spawnDone(h.win32.createWin32Backend(good, { stateDir: h.stateDir }), req(false));
  assert.equal(ok.enforcement.mechanisms.deleteChildSelfTest, 'passed');
  assert.equal(ok.enforcement.guarantees.filesystemWrite, 'partial');
});
