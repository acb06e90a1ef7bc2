'use strict';
// The addon itself: loads, SIDs, token, desktop, ACL edits and their error codes.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');

test('the Windows addon loads and exports the Windows functions and the error table', () => {
  assert.equal(h.native.platform, 'win32');
  for (const fn of ['winSpawn', 'winSpawnCheck', 'winKill', 'winRelease', 'winSidNormalize', 'winAclEdit', 'winAclBatch', 'winDesktopProbe']) {
    assert.equal(typeof h.native[fn], 'function', fn);
  }
  const { ERROR_CODES } = require(path.join(h.root, '.win', 'dist', 'errors.js'));
  assert.deepEqual([...h.native.errorCodes], [...ERROR_CODES]);
});

test('SID string round trips', () => {
  for (const s of ['S-1-1-0', 'S-1-5-32-545', 'S-1-5-21-1-2-3-4', 'S-1-16-4096']) {
    assert.equal(h.native.winSidNormalize(s), s);
  }
  const sids = h.native.winTokenSids();
  assert.match(sids.user, /^S-1-5-/);
  assert.match(sids.logon, /^S-1-5-5-\d+-\d+$/);
  assert.equal(sids.world, 'S-1-1-0');
  assert.equal(h.native.winSidNormalize(sids.logon), sids.logon);
});

test('SID lookups by SID and by name', () => {
  const users = h.native.winSidLookup('S-1-5-32-545');
  assert.equal(users.name, 'Users');
  assert.equal(users.domain, 'BUILTIN');
  assert.equal(users.use, 4); // SidTypeAlias
  assert.equal(h.native.winSidFromName('Everyone'), 'S-1-1-0');
});

test('a malformed SID string fails with ESID_LOOKUP and winError 1337 (ERROR_INVALID_SID)', () => {
  assert.throws(
    () => h.native.winSidNormalize('S-1-banana'),
    (e) => e instanceof h.SandboxError && e.code === 'ESID_LOOKUP' && e.winError === 1337 &&
      e.syscall === 'ConvertStringSidToSidW' && /ConvertStringSidToSidW failed, error 1337/.test(e.message),
  );
});

test('unknown accounts fail with ESID_LOOKUP and winError 1332 (ERROR_NONE_MAPPED)', () => {
  assert.throws(
    () => h.native.winSidFromName('process-sandbox-no-such-user-7f3a'),
    (e) => e.code === 'ESID_LOOKUP' && e.winError === 1332 && e.syscall === 'LookupAccountNameW',
  );
  assert.throws(
    () => h.native.winSidLookup('S-1-5-21-1-2-3-4'),
    (e) => e.code === 'ESID_LOOKUP' && e.winError === 1332 && e.syscall === 'LookupAccountSidW',
  );
});

test('a NUL inside a string argument is refused before any Win32 call', () => {
  assert.throws(() => h.native.winSidNormalize('S-1-1-0\0x'), (e) => e.code === 'EINVALID_ARGUMENT');
});

test('a write-restricted token is created (with and without capability SIDs)', () => {
  assert.equal(h.native.winTokenProbe([]).created, true);
  assert.equal(h.native.winTokenProbe(['S-1-5-21-11-22-33-44', 'S-1-5-21-55-66-77-88']).created, true);
});

test('the restricted token really is restricted', { skip: h.NEEDS_REAL_WINDOWS }, () => {
  assert.equal(h.native.winTokenProbe(['S-1-5-21-11-22-33-44']).restricted, true);
});

test('a private desktop is created with a random name and is gone once closed', () => {
  const a = h.native.winDesktopProbe();
  const b = h.native.winDesktopProbe();
  assert.match(a.name, /^process-sandbox-[0-9a-f]{24}$/);
  assert.notEqual(a.name, b.name);
  assert.ok(a.startupName.endsWith(`\\${a.name}`));
  assert.equal(a.openWhileHeld, true, 'positive control: the desktop opens while we hold it');
  assert.equal(a.openAfterClose, false);
  assert.equal(a.errorAfterClose, 2); // ERROR_FILE_NOT_FOUND from OpenDesktopW
});

test('ACL edits on a directory succeed; a missing path fails with EACL_EDIT and the Win32 code', () => {
  const dir = h.tmpDir('acl');
  const sid = 'S-1-5-21-101-202-303-404';
  h.native.winAclEdit('grant-write', dir, sid);
  fs.mkdirSync(path.join(dir, 'sub'));
  h.native.winAclEdit('deny-write', path.join(dir, 'sub'), sid);
  h.native.winAclEdit('revoke', dir, sid);
  assert.equal(typeof h.native.winAclSddl(dir), 'string');
  assert.throws(
    () => h.native.winAclEdit('grant-write', path.join(dir, 'missing', 'deeper'), sid),
    (e) => e.code === 'EACL_EDIT' && (e.winError === 2 || e.winError === 3) && e.syscall === 'GetNamedSecurityInfoW',
  );
});

test('ACL grants persist and are idempotent', { skip: h.NEEDS_REAL_WINDOWS }, () => {
  const dir = h.tmpDir('acl2');
  const sid = 'S-1-5-21-101-202-303-405';
  assert.equal(h.native.winAclEdit('grant-write', dir, sid), true);
  assert.equal(h.native.winAclEdit('grant-write', dir, sid), false, 'second grant is a no-op');
  assert.ok(h.native.winAclSddl(dir).includes(sid));
  h.native.winAclEdit('revoke', dir, sid);
  assert.ok(!h.native.winAclSddl(dir).includes(sid));
});

test('probe() reports the restricted-token mode and what cannot be enforced', () => {
  const p = h.backend.probe();
  assert.equal(p.platform, 'win32');
  assert.equal(p.addonLoaded, true);
  assert.equal(p.defaultMode, 'restricted-token');
  assert.equal(p.features.networkEnforcement, false);
  assert.equal(p.features.denyRead, false);
  assert.equal(p.features.wine, h.wine);
});

test('node-gyp-build finds the prebuild (prebuilds/win32-x64/process-sandbox.node)', () => {
  const load = require(path.join(h.root, 'node_modules', 'node-gyp-build'));
  const resolved = load.resolve(h.root);
  assert.equal(path.basename(resolved), 'process-sandbox.node');
  assert.equal(path.basename(path.dirname(resolved)), 'win32-x64');
  assert.equal(load(h.root), h.native, 'the same module instance');
});
