// Real runs under /usr/bin/sandbox-exec with profiles from lib/platform/darwin-profile.ts.
// macOS only: on every other host the whole file is skipped, loudly, by describe.runIf.
// Each denial is paired with a positive control that runs the same probe where it is allowed,
// and the outside state is checked after every attempt.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { darwinProbe, isNestedSandboxFailure, planDarwinSpawn, type DarwinPlanOptions } from '../../lib/platform/darwin';
import type { ResolvedRules } from '../../lib/rules';
import { makeRules } from '../helpers/rules';

const onMac = process.platform === 'darwin';
const probe = onMac ? darwinProbe() : undefined;
const usable = probe?.defaultMode === 'seatbelt';

const rules = (over: Partial<ResolvedRules> = {}): ResolvedRules => makeRules(over);

interface Result {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `sh -c script` under the plan for `r`, or plainly when `r` is null (the control). */
function sh(r: ResolvedRules | null, script: string, cwd: string, opts: DarwinPlanOptions = {}, args: string[] = []): Result {
  const plan = planDarwinSpawn(
    { file: '/bin/sh', argv: ['sh', '-c', script, 'sh', ...args], env: { PATH: '/usr/bin:/bin:/usr/sbin:/sbin', HOME: os.homedir() }, cwd, stdio: ['ignore', 'pipe', 'pipe'], rules: r },
    opts,
  );
  const res = spawnSync(plan.file, plan.argv.slice(1), { argv0: plan.argv[0], cwd, env: plan.env, encoding: 'utf8', timeout: 30_000 });
  return { status: res.status, stdout: res.stdout ?? '', stderr: res.stderr ?? '' };
}

/** Runs this same Node binary with `-e code` under the plan for `r`. */
function node(r: ResolvedRules, code: string, cwd: string, opts: DarwinPlanOptions = {}): Result {
  return sh(r, 'exec "$1" -e "$2"', cwd, opts, [process.execPath, code]);
}

describe.runIf(onMac)('Seatbelt end to end (macOS only; skipped on other hosts)', () => {
  let base: string;
  let ws: string;
  let outside: string;

  beforeAll(() => {
    base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'ps-seatbelt-')));
    ws = path.join(base, 'ws');
    outside = path.join(base, 'outside');
    fs.mkdirSync(path.join(ws, '.git', 'hooks'), { recursive: true });
    fs.writeFileSync(path.join(ws, '.git', 'config'), '[core]\n');
    fs.mkdirSync(outside);
    fs.writeFileSync(path.join(ws, 'public.txt'), 'public\n');
    fs.writeFileSync(path.join(ws, 'secret.txt'), 'secret\n');
    fs.mkdirSync(path.join(ws, 'keys'));
    fs.writeFileSync(path.join(ws, 'keys', 'id.pem'), 'pem\n');
    fs.writeFileSync(path.join(ws, 'keys', 'id.pub'), 'pub\n');
  });
  afterAll(() => fs.rmSync(base, { recursive: true, force: true }));

  const ws_rules = (over: Partial<ResolvedRules> = {}): ResolvedRules =>
    rules({ writeRoots: [ws], readOnly: [path.join(ws, '.git', 'hooks'), path.join(ws, '.git', 'config'), path.join(ws, '.codex')], ...over });

  it.skipIf(!usable)('sandbox-exec is usable here (not nested, profile applies)', () => {
    expect(probe?.features.sandboxExec).toBe(true);
    const r = sh(rules(), 'echo ok', base);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('ok\n');
  });

  describe.skipIf(!usable)('filesystem', () => {
    it('writes inside the writable root are allowed', () => {
      const r = sh(ws_rules(), 'echo hi > "$PWD/new.txt" && mkdir -p src/a && echo x > src/a/b', ws);
      expect(r.status, r.stderr).toBe(0);
      expect(fs.readFileSync(path.join(ws, 'new.txt'), 'utf8')).toBe('hi\n');
    });

    it('writes outside the writable root are denied (control: allowed unsandboxed)', () => {
      const target = path.join(outside, 'escape.txt');
      expect(sh(ws_rules(), 'echo x > "$1"', ws, {}, [target]).status).not.toBe(0);
      expect(fs.existsSync(target)).toBe(false);
      expect(sh(null, 'echo x > "$1"', ws, {}, [target]).status).toBe(0);
      fs.rmSync(target);
    });

    it('read-only policy: no write anywhere, reads work', () => {
      const r = sh(rules(), 'cat public.txt && echo x > "$PWD/ro.txt"', ws);
      expect(r.stdout).toBe('public\n');
      expect(r.status).not.toBe(0);
      expect(fs.existsSync(path.join(ws, 'ro.txt'))).toBe(false);
    });

    it('protected paths cannot be written, created (in any letter case) or renamed away', () => {
      const attempts = [
        'echo evil > .git/hooks/pre-commit',
        'echo evil >> .git/config',
        'mkdir .codex',
        'mkdir .CODEX',
        'mv .git .git-moved',
        'mv .git/hooks .git/hooks-moved',
        'rm -rf .git/hooks',
      ];
      for (const attempt of attempts) {
        expect(sh(ws_rules(), attempt, ws).status, attempt).not.toBe(0);
      }
      expect(fs.readdirSync(path.join(ws, '.git', 'hooks'))).toEqual([]);
      expect(fs.readFileSync(path.join(ws, '.git', 'config'), 'utf8')).toBe('[core]\n');
      expect(fs.existsSync(path.join(ws, '.codex'))).toBe(false);
      expect(fs.readdirSync(ws).map((n) => n.toLowerCase())).not.toContain('.codex');
      // Control: the same kind of write elsewhere in .git works.
      expect(sh(ws_rules(), 'echo ok > .git/HEAD', ws).status).toBe(0);
    });

    it('a prepared directory cannot be renamed into the place of a missing protected ancestor', () => {
      const r = ws_rules({ readOnly: [path.join(ws, '.jj', 'hooks')] });
      expect(sh(r, 'mkdir -p prep/hooks && echo evil > prep/hooks/post && mv prep .jj', ws).status).not.toBe(0);
      expect(fs.existsSync(path.join(ws, '.jj'))).toBe(false);
      expect(sh(r, 'mv prep .JJ', ws).status).not.toBe(0);
      expect(fs.readdirSync(ws).map((n) => n.toLowerCase())).not.toContain('.jj');
      // Control: the same rename to an unprotected name works.
      expect(sh(r, 'mv prep renamed && rm -rf renamed', ws).status).toBe(0);
    });

    it('deny-read files are unreadable, also through another spelling (control: readable without the rule)', () => {
      const denied = ws_rules({ denyRead: [path.join(ws, 'secret.txt')] });
      expect(sh(denied, 'cat secret.txt', ws).status).not.toBe(0);
      expect(sh(denied, 'cat SECRET.TXT', ws).status).not.toBe(0);
      expect(sh(denied, 'mv secret.txt moved.txt', ws).status).not.toBe(0);
      expect(fs.existsSync(path.join(ws, 'secret.txt'))).toBe(true);
      expect(sh(denied, 'cat public.txt', ws).stdout).toBe('public\n');
      expect(sh(ws_rules(), 'cat secret.txt', ws).stdout).toBe('secret\n');
    });

    it('deny-read directories cover their contents and cannot be renamed away', () => {
      const denied = ws_rules({ denyRead: [path.join(ws, 'keys')] });
      expect(sh(denied, 'cat keys/id.pub', ws).status).not.toBe(0);
      expect(sh(denied, 'mv keys other', ws).status).not.toBe(0);
      expect(fs.existsSync(path.join(ws, 'keys', 'id.pub'))).toBe(true);
      expect(sh(ws_rules(), 'cat keys/id.pub', ws).stdout).toBe('pub\n');
    });

    it('deny globs cover existing and new matching files only', () => {
      const opts = { denyReadGlobs: [path.join(ws, '**', '*.pem')] };
      expect(sh(ws_rules(), 'cat keys/id.pem', ws, opts).status).not.toBe(0);
      expect(sh(ws_rules(), 'cat keys/id.pub', ws, opts).stdout).toBe('pub\n');
      fs.writeFileSync(path.join(ws, 'later.pem'), 'later\n');
      expect(sh(ws_rules(), 'cat later.pem', ws, opts).status).not.toBe(0);
      expect(sh(ws_rules(), 'cat later.pem', ws).stdout).toBe('later\n');
    });

    it('restricted read: only the roots and platform defaults are readable', () => {
      const home = fs.realpathSync(os.homedir());
      const r = rules({ readAll: false, readRoots: [ws, path.dirname(path.dirname(process.execPath))] });
      expect(sh(r, 'cat public.txt && /bin/ls / >/dev/null', ws).stdout).toBe('public\n');
      expect(sh(r, 'ls "$1"', ws, {}, [home]).status).not.toBe(0);
      expect(sh(null, 'ls "$1" >/dev/null', ws, {}, [home]).status).toBe(0);
    });

    it('a private tmp directory makes mktemp work and nothing else in /tmp writable', () => {
      const tmp = path.join(base, 'private-tmp');
      fs.mkdirSync(tmp);
      const r = sh(rules({ tmp: 'private' }), 'f=$(mktemp) && echo ok > "$f" && cat "$f"', base, { privateTmpDir: tmp });
      expect(r.stdout, r.stderr).toBe('ok\n');
      expect(sh(rules({ tmp: 'private' }), 'echo x > /tmp/ps-seatbelt-escape', base, { privateTmpDir: tmp }).status).not.toBe(0);
      expect(fs.existsSync('/tmp/ps-seatbelt-escape')).toBe(false);
    });
  });

  describe.skipIf(!usable)('network', () => {
    let server: net.Server;
    let other: net.Server;
    let port = 0;
    let otherPort = 0;
    beforeAll(async () => {
      server = net.createServer((s) => s.end('hello\n'));
      other = net.createServer((s) => s.end('other\n'));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
      port = (server.address() as net.AddressInfo).port;
      otherPort = (other.address() as net.AddressInfo).port;
    });
    afterAll(() => {
      server.close();
      other.close();
    });

    const connect = (p: number): string =>
      `const s=require('net').connect(${p},'127.0.0.1');s.on('data',d=>{process.stdout.write(d);process.exit(0)});s.on('error',e=>{console.error(e.code);process.exit(3)})`;

    it('none: no connection, even to loopback (control: full connects)', () => {
      expect(node(rules(), connect(port), base).status).toBe(3);
      expect(node(rules({ network: { kind: 'full' } }), connect(port), base).stdout).toBe('hello\n');
    });

    it('proxy: only the proxy port is reachable', () => {
      const r = rules({ network: { kind: 'proxy', proxy: { allow: ['example.com'] } } });
      expect(node(r, connect(port), base, { proxyPorts: [port] }).stdout).toBe('hello\n');
      expect(node(r, connect(otherPort), base, { proxyPorts: [port] }).status).toBe(3);
      expect(node(r, connect(port), base, { proxyPorts: [] }).status).toBe(3);
    });
  });

  describe.skipIf(!usable)('protected names, start-up files, unix sockets and restricted reads', () => {
    it('missing .git/.aws cannot be created, in any case (no placeholder on the host); control: another name can', () => {
      const fresh = path.join(base, 'fresh');
      fs.mkdirSync(fresh);
      const r = rules({ writeRoots: [fresh], readOnly: [path.join(fresh, '.git'), path.join(fresh, '.aws')] });
      for (const attempt of ['git init -q .', 'mkdir .git', 'mkdir .GIT', 'mkdir -p .aws && echo k > .aws/credentials', 'mkdir prep && mv prep .git']) {
        expect(sh(r, attempt, fresh).status, attempt).not.toBe(0);
      }
      const names = fs.readdirSync(fresh).map((n) => n.toLowerCase());
      expect(names).not.toContain('.git');
      expect(names).not.toContain('.aws');
      expect(sh(r, 'mkdir .other', fresh).status).toBe(0);
    });

    it('startup-files: denied at depth and by rename; control: the same writes without the preset succeed', () => {
      const ws2 = path.join(base, 'startup');
      fs.mkdirSync(path.join(ws2, 'a', 'b', 'c', 'd'), { recursive: true });
      const on = rules({ writeRoots: [ws2], protectPresets: ['startup-files'] });
      const attempts = [
        'echo evil > .bashrc',
        'echo evil > a/b/c/d/.zshrc',
        'mkdir -p a/b/c/d/.vscode',
        'mkdir -p a/x/commands && mv a/x a/.claude',
        'mkdir -p a/.claude/commands',
        'echo evil > a/b/.BASHRC',
      ];
      for (const attempt of attempts) expect(sh(on, attempt, ws2).status, attempt).not.toBe(0);
      expect(fs.existsSync(path.join(ws2, '.bashrc'))).toBe(false);
      expect(fs.existsSync(path.join(ws2, 'a', 'b', 'c', 'd', '.zshrc'))).toBe(false);
      expect(fs.existsSync(path.join(ws2, 'a', '.claude'))).toBe(false);
      const off = rules({ writeRoots: [ws2] });
      expect(sh(off, 'echo ok > a/b/c/d/.zshrc && rm a/b/c/d/.zshrc', ws2).status).toBe(0);
    });

    it('hard links to protected or outside files cannot be made in a writable root (control: a link to a workspace file can)', () => {
      const hl = path.join(base, 'hl');
      fs.mkdirSync(path.join(hl, '.git'), { recursive: true });
      fs.writeFileSync(path.join(hl, '.git', 'config'), '[core]\n');
      fs.writeFileSync(path.join(outside, 'host.rc'), 'host\n');
      fs.writeFileSync(path.join(hl, 'plain.txt'), 'plain\n');
      const r = rules({ writeRoots: [hl], readOnly: [path.join(hl, '.git', 'config')] });
      expect(sh(r, 'ln .git/config alias && echo evil >> alias', hl).status).not.toBe(0);
      expect(sh(r, 'ln "$1" alias2 && echo evil >> alias2', hl, {}, [path.join(outside, 'host.rc')]).status).not.toBe(0);
      expect(fs.readFileSync(path.join(hl, '.git', 'config'), 'utf8')).toBe('[core]\n');
      expect(fs.readFileSync(path.join(outside, 'host.rc'), 'utf8')).toBe('host\n');
      expect(sh(r, 'ln plain.txt plain2 && rm plain2', hl).status).toBe(0);
    });

    it('a symlinked .git: the link cannot be replaced; control: another link in the root can', () => {
      const sl = path.join(base, 'sl');
      const repo = path.join(outside, 'repo.git');
      fs.mkdirSync(sl);
      fs.mkdirSync(path.join(repo, 'hooks'), { recursive: true });
      fs.symlinkSync(repo, path.join(sl, '.git'));
      fs.symlinkSync(repo, path.join(sl, 'other'));
      const r = rules({ writeRoots: [sl], readOnly: [path.join(sl, '.git')] });
      expect(sh(r, 'rm .git && mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit', sl).status).not.toBe(0);
      expect(sh(r, 'mv .git moved', sl).status).not.toBe(0);
      expect(fs.lstatSync(path.join(sl, '.git')).isSymbolicLink()).toBe(true);
      expect(sh(r, 'rm other', sl).status).toBe(0);
    });

    it('unixSockets: a listed socket connects, an unlisted one does not; control: none allows neither, all allows both', async () => {
      const dir = fs.mkdtempSync('/tmp/psb-us-');
      const a = path.join(dir, 'a.sock');
      const b = path.join(dir, 'b.sock');
      const servers = [a, b].map((p) => net.createServer((c) => c.end('hello\n')).listen(p));
      await Promise.all(servers.map((srv) => new Promise((res) => srv.once('listening', res))));
      try {
        const conn = (p: string) => `const s=require('net').connect(${JSON.stringify(p)});s.on('data',d=>{process.stdout.write(d);process.exit(0)});s.on('error',e=>{console.error(e.code);process.exit(3)})`;
        const list = rules({ network: { kind: 'none', unixSockets: [a] } });
        expect(node(list, conn(a), base).stdout).toBe('hello\n');
        expect(node(list, conn(b), base).status).toBe(3);
        expect(node(rules(), conn(a), base).status).toBe(3);
        const all = rules({ network: { kind: 'none', unixSockets: 'all' } });
        expect(node(all, conn(b), base).stdout).toBe('hello\n');
        // bind stays denied even with 'all'.
        expect(node(all, `require('net').createServer().listen(${JSON.stringify(path.join(dir, 'c.sock'))}).on('error',()=>process.exit(3)).on('listening',()=>process.exit(0))`, base).status).toBe(3);
      } finally {
        servers.forEach((srv) => srv.close());
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    it('restricted read: /etc/master.passwd and sudoers stay unreadable, /etc/hosts readable, the program runs', () => {
      const r = rules({ readAll: false, readRoots: [ws] });
      expect(sh(r, 'cat /etc/hosts >/dev/null', base).status).toBe(0);
      expect(sh(r, 'cat /etc/sudoers', base).status).not.toBe(0);
      // Control: sudoers exists (readable or not by this user unsandboxed, it is not in the set).
      expect(fs.existsSync('/etc/sudoers')).toBe(true);
    });
  });

  describe.skipIf(!usable)('processes and system information', () => {
    it('os.cpus() is not empty and os info works inside', () => {
      const r = node(rules(), 'const os=require("os");console.log(os.cpus().length>0, os.release().length>0)', base);
      expect(r.stdout, r.stderr).toBe('true true\n');
    });

    it('signals reach only processes of the same sandbox', () => {
      expect(sh(rules(), 'kill -0 $$', base).status).toBe(0);
      expect(sh(rules(), 'kill -0 "$1"', base, {}, [String(process.pid)]).status).not.toBe(0);
      expect(sh(null, 'kill -0 "$1"', base, {}, [String(process.pid)]).status).toBe(0);
    });

    it('a nested sandbox-exec inside the sandbox fails and is recognised', () => {
      const r = sh(rules(), '/usr/bin/sandbox-exec -p "(version 1)(allow default)" /usr/bin/true', base);
      expect(r.status).not.toBe(0);
      expect(isNestedSandboxFailure(r.stderr)).toBe(true);
    });

    it('LaunchServices and Apple Events are unreachable (control: the same tools exist)', () => {
      expect(fs.existsSync('/usr/bin/open')).toBe(true);
      expect(sh(rules(), '/usr/bin/open -a Calculator', base).status).not.toBe(0);
      expect(sh(rules(), `/usr/bin/osascript -e 'tell application "Finder" to get name'`, base).status).not.toBe(0);
    });
  });
});
