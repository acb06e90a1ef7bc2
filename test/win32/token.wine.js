'use strict';
// Token hardening (issue #14): on an elevated host the child gets no administrator groups and no
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
