/**
 * Per-sandbox cgroups (Linux): the process cap that holds as root (RLIMIT_NPROC does not bind
 * uid 0) and a memory cap covering the whole sandbox (tmpfs pages included).
 *
 *   const g = createSandboxCgroup({ pidsMax: 4096, memoryBytes });   // null: none usable here
 *   native.spawn({ ..., cgroupFds: g.procsFds });  // the command writes "0" to each before execve
 *   g.closeFds();                                  // right after the spawn
 *   ... on exit: g.remove()                        // empty: pooled for reuse; else kill (cgroup.kill on v2), rmdir
 *
 * Which hierarchy: cgroup v2 when a group of ours can get the pids controller (and memory when a
 * memory cap is asked for); else v1 pids (and memory) child groups under the host's own v1 cgroup
 * paths (hybrid hosts, like this project's CI); else none, and the caller reports what is left
 * uncapped. On v2 under systemd the groups go below the host's unit (.service or .scope) only when
 * systemd delegated it, and only with the controllers it delegated; the unit's processes first
 * move into <unit>/psb-host (the "no internal processes" rule, see moveToLeaf). Root in a unit
 * that delegates nothing (a login session) makes a group of its own at the top of the hierarchy,
 * <mount>/process-sandbox (rootOwnParent), since nothing else caps root's processes. Elsewhere (no
 * systemd unit above us) our own group, if its children can be joined. Only the command joins:
 * init shares the host's memory, so a memory cgroup's OOM killer must never be able to pick it.
 *
 * Group names carry the host pid (psb-<pid>-<thread>-<n><random>). The first use in each process removes groups
 * whose host is gone (killing what is left in them first).
 *
 * Synchronous, on the JS thread: a handful of mkdir/open/write calls on cgroupfs, which never
 * block on user data; under a systemd unit, once per process, one `systemctl show` (at most 5 s).
 */
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { threadId } from 'node:worker_threads';

import { loadLinuxNative } from '../../native';

export interface CgroupRequest {
  pidsMax: number;
  memoryBytes?: number;
}

export interface SandboxCgroup {
  kind: 'v2' | 'v1';
  pidsMax: number;
  /** Set when the group caps memory. */
  memoryBytes?: number;
  /** Open cgroup.procs (v2) / tasks (v1) files, one per group the command must join. */
  procsFds: number[];
  closeFds(): void;
  /** SIGKILLs every process in the groups (cgroup.kill on v2). */
  killAll(): void;
  /**
   * Kills whatever is left in the groups and removes them (retrying while they drain). An empty
   * pids-only group is kept for reuse instead, unless `reuse` is false (at exit).
   */
  remove(reuse?: boolean): void;
}

const PREFIX = 'psb-';

interface Hierarchies {
  /** The host's own v2 cgroup directory (absolute), if a cgroup2 mount holds it. */
  v2?: string;
  /** The host's own v1 cgroup directory per controller. */
  v1: Map<string, string>;
}

let hierarchies: Hierarchies | undefined;
/** Where this process's sandbox v2 groups go (null: nowhere), once decided. */
let v2ParentDir: string | null | undefined;
/** The controllers systemd delegated with that unit (undefined: no list, all it offers). */
let v2Delegated: Set<string> | undefined;
/** Where the cgroup2 file system holding our group is mounted. */
let v2Mount: string | undefined;
/** Set once a hierarchy refused us (EACCES, EROFS...): no retry per spawn. */
const unusable = new Set<string>();
const swept = new Set<string>();
let counter = 0;
/** Why the last attempt made no v2 group (for the report's gap text and tests), or undefined. */
let v2Refusal: string | undefined;

/** Why no cgroup v2 group could be made here, when that was the case. */
export function cgroupV2Refusal(): string | undefined {
  return v2Refusal;
}

/**
 * Emptied pids-only groups kept for reuse: mkdir and rmdir on cgroupfs take the kernel's global
 * cgroup mutex, and under concurrent spawns they cost more than the rest of a spawn's JS side. A
 * group is pooled only when nothing is left in it; the pool is removed when the process exits
 * (and by the next process's sweep if it crashed). Memory groups are never reused (page cache
 * charged to one stays charged).
 */
const POOL_MAX = 8;
interface Pooled {
  dir: string;
  kind: 'v1' | 'v2';
  /** Its tasks/cgroup.procs file, kept open. */
  fd: number;
  pidsMax: number;
}
const pool: Pooled[] = [];
let poolExitHook = false;
function isEmpty(dir: string): boolean {
  try {
    return fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').trim() === '';
  } catch {
    return false;
  }
}

function unescapeMount(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** From /proc/self/mountinfo and /proc/self/cgroup: where the host's own cgroups live. */
function findHierarchies(): Hierarchies {
  const out: Hierarchies = { v1: new Map() };
  let cgroupLines: string[];
  let mountLines: string[];
  try {
    cgroupLines = fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n');
    mountLines = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
  } catch {
    return out;
  }
  const own = new Map<string, string>(); // controller list ('' for v2) -> path
  for (const l of cgroupLines) {
    const m = /^\d+:([^:]*):(.*)$/.exec(l);
    if (m) own.set(m[1]!, m[2]!);
  }
  for (const l of mountLines) {
    // id parent major:minor root mountpoint options [optional...] - fstype source superoptions
    const sep = l.indexOf(' - ');
    if (sep < 0) continue;
    const left = l.slice(0, sep).split(' ');
    const right = l.slice(sep + 3).split(' ');
    const root = unescapeMount(left[3] ?? '');
    const mountPoint = unescapeMount(left[4] ?? '');
    const fstype = right[0];
    // A mount of a sub-tree (root != "/") holds our path relative to that root.
    const place = (cgPath: string | undefined): string | undefined => {
      if (cgPath === undefined) return undefined;
      if (root === '/') return path.join(mountPoint, cgPath);
      if (cgPath === root || cgPath.startsWith(root + '/')) return path.join(mountPoint, cgPath.slice(root.length));
      return undefined;
    };
    if (fstype === 'cgroup2') {
      if (out.v2 === undefined) {
        out.v2 = place(own.get(''));
        if (out.v2 !== undefined) v2Mount = mountPoint;
      }
    } else if (fstype === 'cgroup') {
      const opts = (right[2] ?? '').split(',');
      for (const ctrl of ['pids', 'memory']) {
        if (!opts.includes(ctrl) || out.v1.has(ctrl)) continue;
        const key = [...own.keys()].find((k) => k.split(',').includes(ctrl));
        const dir = place(key === undefined ? undefined : own.get(key));
        if (dir) out.v1.set(ctrl, dir);
      }
    }
  }
  return out;
}

function readText(p: string): string {
  try {
    return fs.readFileSync(p, 'utf8');
  } catch {
    return '';
  }
}

/**
 * What names of a host's leftovers carry besides its pid: its pid namespace. A pid says whether a
 * host is alive only in the namespace it was taken in: a host in another pid namespace sharing
 * this cgroup tree or /tmp (a container's, an `unshare --pid` one) sees other hosts' pids as
 * absent (ESRCH) and would remove their live groups and TMPDIRs. So a sweep judges only names
 * made in its own pid namespace (`n<inode>`), and leaves other namespaces' names to them. Names
 * without the tag (older versions) are judged by pid as before.
 */
export const PIDNS_TAG: string = (() => {
  try {
    const m = /^pid:\[(\d+)\]$/.exec(fs.readlinkSync('/proc/self/ns/pid'));
    return m ? `n${m[1]}` : 'n0';
  } catch {
    return 'n0';
  }
})();

/** Whether a leftover named `<pid>-<rest>` (its prefix taken off) is this pid namespace's to judge. */
export function ownPidNamespace(rest: string): boolean {
  const tag = rest.split('-')[1] ?? '';
  return !/^n\d+$/.test(tag) || tag === PIDNS_TAG;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function killMembers(dir: string, useKillFile = true): void {
  // v2: one write kills the whole group, race-free against forks.
  if (useKillFile) {
    try {
      fs.writeFileSync(path.join(dir, 'cgroup.kill'), '1');
      return;
    } catch {
      /* v1, or a v2 kernel before 5.14 */
    }
  }
  // Kill by pid. On v2 the group is frozen first (cgroup.freeze, 5.2+), so nothing in it forks
  // between reading the list and the kills (a fatal signal still ends a frozen task), then thawed
  // so a pooled group is not left frozen; on v1 pids.max bounds that race and remove() retries.
  const freeze = path.join(dir, 'cgroup.freeze');
  let frozen = false;
  try {
    fs.writeFileSync(freeze, '1');
    frozen = true;
  } catch {
    /* v1 */
  }
  for (const s of readText(path.join(dir, 'cgroup.procs')).split('\n')) {
    const pid = Number(s);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  if (frozen) {
    try {
      fs.writeFileSync(freeze, '0');
    } catch {
      /* removed meanwhile */
    }
  }
}

/** For tests: the kill path of kernels before 5.14 (no cgroup.kill), on any kernel. */
export function killGroupMembersForTest(dir: string, useKillFile: boolean): void {
  killMembers(dir, useKillFile);
}

function tryRemove(dir: string): boolean {
  try {
    fs.rmdirSync(dir);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** Removes a group, retrying for a while in the background while its last tasks exit. */
function removeGroup(dir: string, attempt = 0): void {
  if (tryRemove(dir)) return;
  killMembers(dir);
  if (tryRemove(dir) || attempt >= 50) return;
  setTimeout(() => removeGroup(dir, attempt + 1), 100).unref();
}

/** Once per parent directory and process: remove groups left by hosts that died. */
function sweep(parent: string): void {
  if (swept.has(parent)) return;
  swept.add(parent);
  let names: string[];
  try {
    names = fs.readdirSync(parent).filter((n) => n.startsWith(PREFIX));
  } catch {
    return;
  }
  for (const n of names) {
    const pid = Number(n.slice(PREFIX.length).split('-')[0]);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || !ownPidNamespace(n.slice(PREFIX.length)) || alive(pid)) continue;
    removeGroup(path.join(parent, n));
  }
}

/** Creates one group under `parent` with the given limit files; returns its dir or null. */
function makeGroup(parent: string, name: string, limits: Array<[string, string]>): string | null {
  const dir = path.join(parent, name);
  try {
    fs.mkdirSync(dir);
  } catch {
    return null;
  }
  try {
    for (const [file, value] of limits) fs.writeFileSync(path.join(dir, file), value);
    return dir;
  } catch {
    tryRemove(dir);
    return null;
  }
}

function v2Controllers(dir: string, file = 'cgroup.subtree_control'): Set<string> {
  return new Set(readText(path.join(dir, file)).split(/\s+/).filter(Boolean));
}

function procsOf(dir: string): number[] {
  return readText(path.join(dir, 'cgroup.procs'))
    .split('\n')
    .map(Number)
    .filter((n) => Number.isInteger(n) && n > 0);
}

/** The leaf a delegated unit's own processes move to, so that the unit can enable controllers. */
const HOST_LEAF = 'psb-host';

/** The systemd unit (a .service or .scope cgroup) that holds `dir`, if any, up to the mount. */
function unitOf(dir: string, mount: string): string | undefined {
  for (let d = dir; d.length > mount.length && d.startsWith(mount + '/'); d = path.dirname(d)) {
    const b = path.basename(d);
    if (b.endsWith('.service') || b.endsWith('.scope')) return d;
  }
  return undefined;
}

/**
 * What systemd delegated of the unit's cgroup: null when nothing; else the controllers it
 * delegated (undefined: not known, take what the unit's cgroup offers). The unit's own manager is
 * asked once per process (`systemctl show -p Delegate,DelegateControllers`), because only it knows
 * the list: a controller can be available in the unit's cgroup for systemd's own accounting
 * without being ours to enable. Without an answer, the "trusted.delegate" / "user.delegate" xattr
 * (the user manager of systemd 252 sets neither).
 */
function delegationOf(unit: string): { controllers?: Set<string> } | null {
  const m = /\/user@(\d+)\.service\/(?:.*\/)?([^/]+\.(?:scope|service))$/.exec(unit);
  const uid = process.getuid?.();
  const userUnit = m !== null && Number(m[1]) === uid;
  const r = spawnSync('systemctl', [...(userUnit ? ['--user'] : []), 'show', '--property=Delegate,DelegateControllers', path.basename(unit)], {
    env: userUnit ? { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? `/run/user/${uid}` } : process.env,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
    timeout: 5000,
  });
  if (r.status === 0 && /^Delegate=(yes|no)$/m.test(r.stdout ?? '')) {
    if (!/^Delegate=yes$/m.test(r.stdout)) return null;
    const list = /^DelegateControllers=(.*)$/m.exec(r.stdout)?.[1]?.trim();
    return { controllers: list ? new Set(list.split(/\s+/)) : undefined };
  }
  try {
    return loadLinuxNative().cgroupDelegated?.(unit) === true ? {} : null;
  } catch {
    return null;
  }
}

/**
 * The v2 "no internal processes" rule: a group that holds processes cannot hand domain
 * controllers (memory) to children, and enabling a threaded one (pids) there turns it into a
 * thread root whose domain children no process can join (EOPNOTSUPP). So a delegated unit's own
 * processes (this host and whatever else runs in the unit) move into <unit>/psb-host first, as
 * systemd's DelegateSubgroup= (254+) would have put them. Returns whether the unit is now empty.
 */
function moveToLeaf(unit: string): boolean {
  const leaf = path.join(unit, HOST_LEAF);
  try {
    fs.mkdirSync(leaf);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') return false;
  }
  // A few rounds: a process may fork into the unit while we move the others.
  for (let round = 0; round < 5; round++) {
    const pids = procsOf(unit);
    if (pids.length === 0) return true;
    for (const pid of pids) {
      try {
        fs.writeFileSync(path.join(leaf, 'cgroup.procs'), String(pid));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ESRCH') return false;
      }
    }
  }
  return procsOf(unit).length === 0;
}

/**
 * Which v2 group the sandbox groups go under, or null. Under systemd only a delegated unit's
 * sub-tree is ours (Delegate= on the service or scope; a session scope or an ordinary service is
 * systemd's). Without a systemd unit above us (a container's cgroup namespace, a hand-made tree),
 * our own group, which createV2 then checks can really have domain children.
 */
function refuse(why: string): null {
  v2Refusal = why;
  return null;
}

/**
 * Root outside a delegated unit (a login session, an ordinary service): RLIMIT_NPROC does not
 * bind uid 0, so without a group the sandbox has no process cap at all. Root may write the
 * cgroup2 root, so it makes a group of its own there, <mount>/process-sandbox, beside systemd's
 * slices (as container engines do with their own top-level groups), and the sandbox groups go
 * below it. The root group is exempt from the "no internal processes" rule, so pids (and memory)
 * can be handed down to it even though the root holds processes. Null where that cannot be done
 * (not root; a read-only cgroup file system, as root in a default container).
 */
const ROOT_OWN = 'process-sandbox';
function rootOwnParent(mount: string): string | null {
  if (process.getuid?.() !== 0) return null;
  const dir = path.join(mount, ROOT_OWN);
  try {
    fs.mkdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') return null;
  }
  const top = v2Controllers(mount);
  for (const c of ['pids', 'memory']) {
    if (top.has(c) || !v2Controllers(mount, 'cgroup.controllers').has(c)) continue;
    try {
      fs.writeFileSync(path.join(mount, 'cgroup.subtree_control'), `+${c}`);
    } catch {
      /* createV2 reports what is missing */
    }
  }
  return dir;
}

function v2Parent(own: string, mount: string): string | null {
  const unit = unitOf(own, mount);
  if (unit === undefined) return own;
  const rel = unit.slice(mount.length);
  const delegation = delegationOf(unit);
  if (!delegation) {
    const mine = rootOwnParent(mount);
    if (mine) return mine;
    return refuse(`the host's systemd unit ${rel} does not delegate its cgroup (Delegate=)`);
  }
  v2Delegated = delegation.controllers;
  if (procsOf(unit).length > 0 && !moveToLeaf(unit)) return refuse(`the processes of ${rel} could not move into ${rel}/${HOST_LEAF}`);
  return unit;
}

function createV2(own: string, name: string, req: CgroupRequest): SandboxCgroup | null {
  const mount = v2Mount ?? own;
  // Decided once per process: the delegation check may ask systemd, and the move is done once.
  if (v2ParentDir === undefined) v2ParentDir = v2Parent(own, mount);
  const parent = v2ParentDir;
  if (!parent) return null;
  const enabled: string[] = [];
  let ctl = v2Controllers(parent);
  const available = v2Controllers(parent, 'cgroup.controllers');
  if (v2Delegated) for (const c of available) if (!v2Delegated.has(c)) available.delete(c);
  const want = req.memoryBytes !== undefined ? ['pids', 'memory'] : ['pids'];
  // Never enable controllers in a group that holds processes (see moveToLeaf), except the root.
  const mayEnable = parent === mount || procsOf(parent).length === 0;
  for (const c of want) {
    if (ctl.has(c) || !available.has(c) || !mayEnable) continue;
    try {
      fs.writeFileSync(path.join(parent, 'cgroup.subtree_control'), `+${c}`);
      enabled.push(c);
    } catch {
      /* not delegated to us */
    }
  }
  ctl = v2Controllers(parent);
  // Enabled by someone else is not delegated to us either.
  if (v2Delegated) for (const c of ctl) if (!v2Delegated.has(c)) ctl.delete(c);
  const undo = () => {
    for (const c of enabled.reverse()) {
      try {
        fs.writeFileSync(path.join(parent, 'cgroup.subtree_control'), `-${c}`);
      } catch {
        /* in use by another group meanwhile */
      }
    }
  };
  if (!ctl.has('pids')) {
    undo();
    return refuse(`${parent.slice(mount.length) || '/'} cannot enable the pids controller (available: ${[...available].join(' ') || 'none'})`);
  }
  sweep(parent);
  const withMemory = req.memoryBytes !== undefined && ctl.has('memory');
  const limits: Array<[string, string]> = [['pids.max', String(req.pidsMax)]];
  if (withMemory) limits.push(['memory.max', String(req.memoryBytes)], ['memory.swap.max', '0']);
  let dir = makeGroup(parent, name, limits);
  // memory.swap.max is absent without swap accounting: the memory cap alone still holds.
  if (!dir && withMemory) dir = makeGroup(parent, name, limits.slice(0, 2));
  if (!dir) {
    undo();
    return refuse(`no group could be made under ${parent.slice(mount.length) || '/'}`);
  }
  // A group a process can join is a "domain"; "domain invalid" (a parent that is a thread root,
  // e.g. a cgroup namespace root holding processes) would fail every spawn at the join.
  if (readText(path.join(dir, 'cgroup.type')).trim() !== 'domain') {
    tryRemove(dir);
    undo();
    return refuse(`${parent.slice(mount.length) || '/'} holds processes: its groups cannot be joined`);
  }
  v2Refusal = undefined;
  return open([dir], 'v2', req, withMemory);
}

function open(dirs: string[], kind: 'v1' | 'v2', req: CgroupRequest, withMemory: boolean, reuseFd?: number): SandboxCgroup | null {
  const fds: number[] = reuseFd === undefined ? [] : [reuseFd];
  if (reuseFd === undefined) {
    try {
      // v1: "tasks" moves only the writing thread (the command has one), which lets the kernel
      // skip its global threadgroup lock. v2 has no such file for domain groups.
      const file = kind === 'v1' ? 'tasks' : 'cgroup.procs';
      for (const d of dirs) fds.push(fs.openSync(path.join(d, file), 'w'));
    } catch {
      for (const fd of fds) fs.closeSync(fd);
      for (const d of dirs) tryRemove(d);
      return null;
    }
  }
  let open = true;
  const poolable = dirs.length === 1 && !withMemory;
  const closeAll = () => {
    if (!open) return;
    open = false;
    for (const fd of fds) fs.closeSync(fd);
  };
  return {
    kind,
    pidsMax: req.pidsMax,
    memoryBytes: withMemory ? req.memoryBytes : undefined,
    procsFds: fds,
    closeFds() {
      // A poolable group keeps its fd for the next run (remove() decides).
      if (!poolable) closeAll();
    },
    killAll() {
      for (const d of dirs) killMembers(d);
    },
    remove(reuse = true) {
      if (reuse && poolable && open && pool.length < POOL_MAX && isEmpty(dirs[0]!)) {
        if (!poolExitHook) {
          poolExitHook = true;
          process.once('exit', () => {
            for (const g of pool.splice(0)) tryRemove(g.dir);
          });
        }
        open = false;
        pool.push({ dir: dirs[0]!, kind, fd: fds[0]!, pidsMax: req.pidsMax });
        return;
      }
      closeAll();
      for (const d of dirs) removeGroup(d);
    },
  };
}

/**
 * A fresh group (or v1 pair of groups) for one sandbox, or null when no hierarchy lets us make
 * one with the caps asked for. A memory cap that no memory controller can enforce does not fail
 * the pids group: the caller reports memory as per-process (RLIMIT_AS) only.
 */
export function createSandboxCgroup(req: CgroupRequest): SandboxCgroup | null {
  // PSB_CGROUP=off: as on a host where no group can be made (docs/development.md; tests).
  if (process.env.PSB_CGROUP === 'off') return null;
  hierarchies ??= findHierarchies();
  const h = hierarchies;
  while (req.memoryBytes === undefined && pool.length > 0) {
    const g = pool.pop()!;
    try {
      if (g.pidsMax !== req.pidsMax) fs.writeFileSync(path.join(g.dir, 'pids.max'), String(req.pidsMax));
    } catch {
      fs.closeSync(g.fd);
      removeGroup(g.dir);
      continue;
    }
    const reused = open([g.dir], g.kind, req, false, g.fd);
    if (reused) return reused;
  }
  // Worker threads load their own copy of this module: the thread id and a random tag keep names
  // apart; the pid and its namespace come first, for the sweep.
  const name = `${PREFIX}${process.pid}-${PIDNS_TAG}-${threadId}-${++counter}${crypto.randomBytes(3).toString('hex')}`;
  if (h.v2 && !unusable.has('v2')) {
    const made = createV2(h.v2, name, req);
    if (made) return made;
    unusable.add('v2');
  }
  const pidsParent = h.v1.get('pids');
  if (pidsParent && !unusable.has('v1-pids')) {
    sweep(pidsParent);
    const pidsDir = makeGroup(pidsParent, name, [['pids.max', String(req.pidsMax)]]);
    if (!pidsDir) {
      unusable.add('v1-pids');
      return null;
    }
    const dirs = [pidsDir];
    const memParent = h.v1.get('memory');
    let withMemory = false;
    if (req.memoryBytes !== undefined && memParent && !unusable.has('v1-memory')) {
      sweep(memParent);
      const memDir = makeGroup(memParent, name, [['memory.limit_in_bytes', String(req.memoryBytes)]]);
      if (memDir) {
        dirs.push(memDir);
        withMemory = true;
      } else {
        unusable.add('v1-memory');
      }
    }
    return open(dirs, 'v1', req, withMemory);
  }
  return null;
}
