/**
 * A host inside an SQLite write transaction keeps it through every class of call its sandboxes'
 * supervision answers (native/linux/supervisor/supervisor.cc, Confinement): the case SQLite
 * documents as corruption is another writer committing while the transaction is open, which is
 * what a supervisor that closed a copy of the database's fd in the host's fd table would allow
 * (POSIX record locks belong to the table and go with ANY close of the file).
 * test/linux/supervisor-confined.test.ts checks the raw fcntl locks; this is the same question
 * asked of a real SQLite (better-sqlite3 in the host, python3's sqlite3 as the other writer).
 *
 * The host is a node process of its own on the built package (one row runs it under a container
 * runtime's seccomp profile, where the supervision reaches the command through procfs). Its agent
 * state database lives outside the workspace (every call on it refused) and a second one inside
 * (the calls carried out). After each sandboxed step an outside writer tries BEGIN IMMEDIATE with
 * no wait: "database is locked" while the host's transaction holds. Controls: the checker sees a
 * lock the host dropped itself (opening and closing another fd of the file, the POSIX rule), and
 * after the host commits it takes the lock and reads the host's rows.
 */
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { caps, MODES } from '../helpers/capabilities';
import { LOCK_HOSTS, lockHostSkip, ptraceFilterSkip, runLockHost, usePtraceFilter } from '../helpers/ptrace-filter';
import { hostScript, makeScene, PYTHON, type Scene } from '../helpers/sandbox';

const require = createRequire(import.meta.url);
function sqliteModule(): { path?: string; skip?: string } {
  try {
    const p = require.resolve('better-sqlite3');
    const Db = require(p) as new (f: string) => { close(): void };
    new Db(':memory:').close();
    return { path: p };
  } catch (e) {
    return { skip: `better-sqlite3 (a devDependency) does not load here: ${String((e as Error).message).split('\n')[0]}` };
  }
}
const sqlite = sqliteModule();
const pythonSqlite = caps.python && spawnSync(caps.python, ['-c', 'import sqlite3'], { stdio: 'ignore' }).status === 0;
const landlockSkip = caps.metadataSupervisor ? undefined : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode has no supervisors';
const outsideSkip = pythonSqlite ? undefined : "no python3 with its sqlite3 module (the outside writer)";
// eslint-disable-next-line no-console
for (const r of [sqlite.skip, landlockSkip, outsideSkip, ptraceFilterSkip]) if (r) console.warn(`[supervisor-sqlite] SKIPPING cases: ${r}`);

// The other writer: 'held' when BEGIN IMMEDIATE finds the database locked, 'free' when it got the
// write lock (then rolled back: it never writes). With a second argument, the rows it reads.
const WRITER = `import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
try:
    c.execute('BEGIN IMMEDIATE')
    print('free', c.execute('SELECT count(*) FROM t').fetchone()[0]); c.execute('ROLLBACK')
except sqlite3.OperationalError as e:
    print('held' if 'locked' in str(e) else 'error ' + str(e))`;

// The command's side: each class of supervised call on the two databases ($OUT outside the
// writable roots, $IN inside), none of which changes their content.
const PY_FD = `import os, sys
for p, mode in ((sys.argv[1], os.O_RDONLY), (sys.argv[2], os.O_RDWR)):
    fd = os.open(p, mode)
    for name, f in (('fchmod', lambda: os.fchmod(fd, 0o644)), ('futimens', lambda: os.utime(fd))):
        try:
            f(); print(name, 'ok')
        except OSError as e:
            print(name, e.errno)
    os.close(fd)`;
const PY_READ = `import sqlite3, sys
for p in sys.argv[1:]:
    c = sqlite3.connect('file:' + p + '?mode=ro', uri=True, timeout=0)
    try:
        print('rows', c.execute('SELECT count(*) FROM t').fetchone()[0])
    except sqlite3.OperationalError as e:
        print('read', e)
    c.close()`;
const STEPS: Array<[string, string]> = [
  ['fchmod and futimens on an fd (refused outside, done inside)', `${PYTHON} -c "$PY_FD" "$OUT" "$IN"`],
  ['chmod and touch by name', 'chmod 644 "$OUT"; touch "$OUT"; chmod 644 "$IN"; touch "$IN"; echo done'],
  ['reads of the files', 'cat "$OUT" "$IN" >/dev/null && echo read'],
  ['an SQLite reader in the sandbox', `${PYTHON} -c "$PY_READ" "$OUT" "$IN"`],
  ['a write-open (nothing written)', ': >> "$IN" && echo opened'],
  ['a rename and back', 'mv "$IN" moved.db && mv moved.db "$IN" && echo moved'],
  ['listings', 'ls -l "$(dirname "$OUT")" . >/dev/null && echo listed'],
];

const HOST = `
const fs = require('fs');
const { execFileSync } = require('child_process');
const Database = require(process.env.SQLITE_MODULE);
const [mode, ws, outDb, inDb, controlDb] = process.argv.slice(2);
const { STEPS, WRITER, PY_FD, PY_READ, PYTHON } = JSON.parse(process.env.CASE);
const policy = { mode, ...(mode === 'landlock' ? { degraded: true, procPrivacy: true } : {}), filesystem: { write: [ws] } };
const writer = (f) => execFileSync(PYTHON, ['-c', WRITER, f], { encoding: 'utf8' }).trim();
// The agent's own state: each database in an open write transaction (a RESERVED lock on the file).
const open = (f) => { const d = new Database(f); d.exec('CREATE TABLE IF NOT EXISTS t (x)'); d.exec('BEGIN IMMEDIATE'); d.prepare('INSERT INTO t VALUES (?)').run('host'); return d; };
(async () => {
  const out = { outputs: {}, lost: {} };
  // Control: the checker sees a lock lost the POSIX way (the host closes another fd of the file).
  const control = open(controlDb);
  out.controlBefore = writer(controlDb);
  fs.closeSync(fs.openSync(controlDb, 'r'));
  out.controlDropped = writer(controlDb);
  control.exec('ROLLBACK'); control.close();
  const dbs = [outDb, inDb].map(open);
  out.first = [outDb, inDb].map(writer);
  for (const [what, script] of STEPS) {
    const r = await lib.run('/bin/sh', ['-c', script], { cwd: ws, policy, timeout: 30000,
      env: { PATH: '/usr/bin:/bin', PY_FD, PY_READ, OUT: outDb, IN: inDb } });
    out.outputs[what] = (r.code + ' ' + r.stdout + r.stderr).trim();
    [outDb, inDb].forEach((f, i) => { const s = writer(f); if (s !== 'held') out.lost[what + ': ' + (i ? 'inside' : 'outside')] = s; });
  }
  out.mechanisms = (await lib.run('/bin/true', [], { policy, env: { PATH: '/usr/bin:/bin' } })).enforcement.mechanisms;
  // The host commits: the outside writer now takes the lock and reads the host's row.
  dbs.forEach((d) => { d.exec('COMMIT'); d.close(); });
  out.after = [outDb, inDb].map(writer);
  console.log(JSON.stringify(out));
})().catch((e) => console.log(JSON.stringify({ error: String(e && e.stack) })));
`;

describe.runIf(caps.linux)("the host's SQLite write transaction outlives its sandboxes' supervised calls", () => {
  const filterPath = usePtraceFilter();

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    beforeAll(() => {
      scene = makeScene(`sqlite-${mode}`);
    });
    afterAll(() => scene?.cleanup());

    const whyNot = (filtered: boolean, inProcess: boolean) =>
      skip ?? sqlite.skip ?? outsideSkip ?? (mode === 'landlock' ? landlockSkip : undefined) ?? lockHostSkip(mode, { filtered, inProcess });
    for (const { host, filtered, inProcess } of LOCK_HOSTS) {
      it.skipIf(whyNot(filtered, inProcess))(`${host}: no other writer gets in through any class of call; after the commit it does`, () => {
        const tag = `${filtered ? 'f' : 'p'}${inProcess ? 's' : 't'}`;
        const outDb = path.join(scene.out, `state-${tag}.db`);
        const inDb = path.join(scene.ws, `work-${tag}.db`);
        const controlDb = path.join(scene.out, `control-${tag}.db`);
        const script = hostScript(scene.root, `sqlite-${tag}.js`, HOST);
        const out = runLockHost({ filtered, inProcess }, filterPath(), script, [mode, scene.ws, outDb, inDb, controlDb], {
          SQLITE_MODULE: sqlite.path,
          CASE: JSON.stringify({ STEPS, WRITER, PY_FD, PY_READ, PYTHON }),
        });
        // The checker can tell: a transaction holds it off, a lock the host dropped lets it in.
        expect(out.controlBefore).toBe('held');
        expect(out.controlDropped).toBe('free 0');
        expect(out.first).toEqual(['held', 'held']);
        expect(out.lost, JSON.stringify(out.outputs, null, 1)).toEqual({});
        // The commands did make their calls: refused outside, carried out inside.
        expect(out.outputs['fchmod and futimens on an fd (refused outside, done inside)']).toMatch(/^0 fchmod (1|13|30)\nfutimens (1|13|30)\nfchmod ok\nfutimens ok$/);
        expect(out.outputs['reads of the files']).toMatch(/read$/);
        // The committed-before state of each database is empty; the host's row is not visible yet.
        expect(out.outputs['an SQLite reader in the sandbox']).toMatch(/^0 rows 0\nrows 0$/);
        expect(out.outputs['a write-open (nothing written)']).toMatch(/opened$/);
        expect(out.outputs['a rename and back']).toMatch(/moved$/);
        expect(out.outputs['listings']).toMatch(/listed$/);
        if (mode === 'landlock') expect(out.mechanisms.pathSupervisor).toBe('seccomp-user-notif');
        // Positive control: committed, the other writer takes the lock and reads the host's row.
        expect(out.after).toEqual(['free 1', 'free 1']);
      }, 240_000);
    }
  });
});
