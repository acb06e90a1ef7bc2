import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SandboxError } from '../../lib/errors';
import { pathToFileUri, readOnlyProfile, workspaceWriteProfile, permissionProfileToJson } from '../../lib/permissions';
import {
  prepareExecRequest,
  prepareRequest,
  selectSandbox,
  toJsonRpcError,
  invalidParams,
  internalError,
  type ExecParams,
  discardPrepared,
  type PrepareRuntime,
} from '../../lib/prepare';
import { ManagedProxy } from '../../lib/network';

const GOLDEN = path.join(__dirname, '..', 'fixtures', 'golden');
const golden = <T>(name: string): T => JSON.parse(fs.readFileSync(path.join(GOLDEN, name), 'utf8')) as T;

let tmp: string;
let ws: string;
beforeAll(() => {
  tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'ps-prep-')));
  ws = path.join(tmp, 'ws');
  fs.mkdirSync(ws);
});
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** Run prepareExecRequest expecting a failure; return the JSON-RPC error object. */
async function rpcFailure(params: unknown, runtime: PrepareRuntime = {}): Promise<{ code: number; message: string }> {
  let err: unknown;
  try {
    await prepareExecRequest(params as ExecParams, runtime);
  } catch (e) {
    err = e;
  }
  expect(err, 'prepareExecRequest should have failed').toBeInstanceOf(SandboxError);
  const rpc = toJsonRpcError(err);
  expect((err as SandboxError).message).toBe(rpc.message);
  expect((err as SandboxError).code).toBe(rpc.code === -32602 ? 'EREQUEST_INVALID' : 'EREQUEST_INTERNAL');
  return rpc;
}

function sandboxed(overrides: Partial<ExecParams> = {}, sandbox: Record<string, unknown> = {}): ExecParams {
  return {
    processId: 'p1',
    argv: ['/bin/sh', '-c', 'true'],
    cwd: pathToFileUri(ws),
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    pipeStdin: false,
    sandbox: {
      permissions: permissionProfileToJson(workspaceWriteProfile(), { uriPaths: true }),
      cwd: pathToFileUri(ws),
      workspaceRoots: [pathToFileUri(ws)],
      windowsSandboxLevel: 'disabled',
      useLegacyLandlock: false,
      ...sandbox,
    },
    enforceManagedNetwork: false,
    ...overrides,
  };
}

describe('golden ExecParams shapes are accepted', () => {
  it('native', async () => {
    const prepared = await prepareExecRequest(golden<ExecParams>('exec-params-native.json'), { platform: 'linux' });
    // native_request_preserves_native_launch_fields
    expect(prepared).toEqual({
      processId: 'proc-1',
      command: ['/bin/sh', '-c', 'echo hi'],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' },
      arg0: 'sh',
      sandboxType: 'none',
      rules: null,
      tty: false,
      pipeStdin: true,
    });
  });

  it('workspace-write (camelCase sandbox context, envPolicy, managedNetwork)', async () => {
    const params = golden<ExecParams>('exec-params-workspace-write.json');
    // Point the golden's /work/project at a real directory on this host.
    const text = JSON.stringify(params).split('file:///work/project').join(pathToFileUri(ws));
    const prepared = await prepareExecRequest(JSON.parse(text) as ExecParams, {
      platform: 'linux',
      baseEnv: { PATH: '/usr/bin', HOME: '/home/u', AWS_REGION: 'x', LANG: 'C' },
    });
    expect(prepared.sandboxType).toBe('linuxSeccomp');
    expect(prepared.env).toEqual({ PATH: '/usr/bin:/bin', HOME: '/home/u', CI: '1' });
    expect(prepared.managedNetwork).toEqual(params.managedNetwork);
    expect(prepared.rules?.writeRoots).toContain(ws);
    // A prepared managed network is proxy-only: fail closed to no direct network. Its unix socket
    // list is not a grant on Linux (Codex keeps AF_UNIX refused there); the report names it.
    expect(prepared.rules?.network).toEqual({ kind: 'none', unixSocketsRefused: ['/tmp/agent.sock'] });
  });

  it('windows mxc golden parses and hits the MXC gate off Windows', async () => {
    expect(await rpcFailure(golden('exec-params-windows-mxc.json'), { platform: 'linux' })).toEqual({
      code: -32602,
      message: 'native MXC is unavailable on this executor',
    });
  });
});

describe('sandbox_request_wraps_native_argv_on_executor (re-expressed)', () => {
  it('linux: linuxSeccomp, argv and cwd preserved, rules = workspace_write materialised with [cwd]', async () => {
    const prepared = await prepareExecRequest(sandboxed({}, { workspaceRoots: [] }), { platform: 'linux', tmpdir: '' });
    expect(prepared.sandboxType).toBe('linuxSeccomp');
    expect(prepared.command).toEqual(['/bin/sh', '-c', 'true']);
    expect(prepared.cwd).toBe(ws);
    const rules = prepared.rules!;
    expect(rules.readAll).toBe(true);
    expect(rules.writeRoots.some((w) => ws === w || ws.startsWith(w + '/'))).toBe(true);
    // No .git yet: the profile's `.git` entry is skipped (missing_path_behavior: skip), and our own
    // protected metadata still keeps .git (and so hooks/config) from being created.
    expect(rules.readOnly).toEqual(expect.arrayContaining([path.join(ws, '.git'), path.join(ws, '.codex'), path.join(ws, '.agents')]));
    expect(rules.network).toEqual({ kind: 'none' });
  });

  it('runtime.protectPresets reaches the resolver (start-up files in the workspace root)', async () => {
    const prepared = await prepareExecRequest(sandboxed({}, { workspaceRoots: [] }), { platform: 'linux', tmpdir: '', protectPresets: ['startup-files'] });
    expect(prepared.rules!.readOnly).toEqual(expect.arrayContaining([path.join(ws, '.bashrc'), path.join(ws, '.vscode')]));
    const plain = await prepareExecRequest(sandboxed({}, { workspaceRoots: [] }), { platform: 'linux', tmpdir: '' });
    expect(plain.rules!.readOnly).not.toContain(path.join(ws, '.bashrc'));
  });

  it("an existing .git is read-only as a whole under Codex's workspace_write", async () => {
    const repo = path.join(tmp, 'repo');
    fs.mkdirSync(path.join(repo, '.git'), { recursive: true });
    const p = await prepareExecRequest(sandboxed({ cwd: pathToFileUri(repo) }, { cwd: pathToFileUri(repo), workspaceRoots: [pathToFileUri(repo)] }), {
      platform: 'linux',
    });
    expect(p.rules?.readOnly).toContain(path.join(repo, '.git'));
  });

  it('macOS: macosSeatbelt', async () => {
    expect((await prepareExecRequest(sandboxed(), { platform: 'darwin' })).sandboxType).toBe('macosSeatbelt');
  });

  it('selecting MXC off Windows fails with "native MXC is unavailable on this executor"', async () => {
    expect(await rpcFailure(sandboxed({}, { windowsSandboxLevel: 'mxc' }), { platform: 'linux' })).toEqual({
      code: -32602,
      message: 'native MXC is unavailable on this executor',
    });
  });

  it('MXC with a custom arg0 or a private desktop is refused first', async () => {
    const msg = { code: -32602, message: 'MXC custom argv0 and private-desktop launches are not supported' };
    expect(await rpcFailure(sandboxed({ arg0: 'x' }, { windowsSandboxLevel: 'mxc' }), { mxcAvailable: () => true })).toEqual(msg);
    expect(await rpcFailure(sandboxed({}, { windowsSandboxLevel: 'mxc', windowsSandboxPrivateDesktop: true }), { mxcAvailable: () => true })).toEqual(msg);
  });

  it('MXC when available selects windowsMxc', async () => {
    const p = await prepareExecRequest(sandboxed({}, { windowsSandboxLevel: 'mxc' }), { platform: 'linux', mxcAvailable: () => true });
    expect(p.sandboxType).toBe('windowsMxc');
  });
});

describe('the sandbox decision (prepareRequest): what a floor judges, decided once', () => {
  it('a managed profile confines; disabled, external and an unrestricted file system with the network on confine nothing', async () => {
    const confines = await prepareRequest(sandboxed(), { platform: 'linux' });
    expect(confines.decision).toEqual({ requested: true, confines: true });
    expect(confines.prepared.sandboxType).toBe('linuxSeccomp');
    for (const permissions of [{ type: 'disabled' }, { type: 'external', network: 'enabled' }, { type: 'managed', file_system: { type: 'unrestricted' }, network: 'enabled' }]) {
      const d = await prepareRequest(sandboxed({}, { permissions }), { platform: 'linux' });
      // Still prepared and sandboxed (the `require` preference): only a floor refuses it.
      expect(d.decision, JSON.stringify(permissions)).toEqual({ requested: true, confines: false });
      expect(d.prepared.sandboxType).toBe('linuxSeccomp');
    }
  });

  it('enforceManagedNetwork makes any profile confine; a request without a sandbox context is not one', async () => {
    const managedNet = await prepareRequest(sandboxed({ enforceManagedNetwork: true }, { permissions: { type: 'disabled' } }), { platform: 'linux' });
    expect(managedNet.decision).toEqual({ requested: true, confines: true });
    const plain = await prepareRequest(sandboxed({ sandbox: null }));
    expect(plain.decision).toEqual({ requested: false, confines: false });
    expect(plain.prepared.sandboxType).toBe('none');
  });
});

describe('custom arg0 (no helper re-exec: passed through)', () => {
  it('arg0 is kept on the prepared request and argv is untouched', async () => {
    const p = await prepareExecRequest(sandboxed({ arg0: 'custom-arg0' }), { platform: 'linux' });
    expect(p.arg0).toBe('custom-arg0');
    expect(p.command).toEqual(['/bin/sh', '-c', 'true']);
  });
});

describe('fail closed and error texts', () => {
  it('argv must not be empty (native and sandboxed)', async () => {
    expect(await rpcFailure(sandboxed({ argv: [], sandbox: null }))).toEqual({ code: -32602, message: 'argv must not be empty' });
    expect(await rpcFailure(sandboxed({ argv: [] }), { platform: 'linux' })).toEqual({ code: -32602, message: 'argv must not be empty' });
  });

  it('a host without a usable sandbox: "sandbox intent cannot be enforced on this executor"', async () => {
    const expected = { code: -32602, message: 'sandbox intent cannot be enforced on this executor' };
    expect(await rpcFailure(sandboxed(), { platform: 'linux', sandboxSupported: () => false })).toEqual(expected);
    expect(await rpcFailure(sandboxed(), { platform: 'freebsd' })).toEqual(expected);
  });

  it('Windows with the sandbox disabled cannot enforce a sandbox context', async () => {
    const params = sandboxed({ cwd: 'file:///C:/p' }, { cwd: 'file:///C:/p', workspaceRoots: [], permissions: { type: 'disabled' } });
    expect(await rpcFailure(params, { platform: 'win32' })).toEqual({ code: -32602, message: 'sandbox intent cannot be enforced on this executor' });
  });

  it('invalid sandbox permission path URI: …', async () => {
    const permissions = {
      type: 'managed',
      network: 'restricted',
      file_system: { type: 'restricted', entries: [{ path: { type: 'path', path: 'file:///C:/x' }, access: 'read' }] },
    };
    expect(await rpcFailure(sandboxed({}, { permissions }), { platform: 'linux' })).toEqual({
      code: -32602,
      message:
        'invalid sandbox permission path URI: permissions.file_system.entries[0].path.path: `file:///C:/x`: Windows drive path `C:` is not an absolute path on this host',
    });
  });

  it('labelled URI errors for cwd, sandbox cwd and workspace roots', async () => {
    const msg = (label: string, uri: string, why: string) => ({
      code: -32602,
      message: `${label} URI \`${uri}\` is not valid on this exec-server host: ${why}`,
    });
    expect(await rpcFailure(sandboxed({}, { cwd: 'file:///D:/x' }), { platform: 'linux' })).toEqual(
      msg('sandbox cwd', 'file:///D:/x', 'Windows drive path `D:` is not an absolute path on this host'),
    );
    expect(await rpcFailure(sandboxed({}, { workspaceRoots: ['http://x/y'] }), { platform: 'linux' })).toEqual(
      msg('sandbox workspace root', 'http://x/y', 'unsupported URI scheme `http`; expected `file`'),
    );
    expect(await rpcFailure(sandboxed({ cwd: 'file://srv/share/x', sandbox: null }), { platform: 'linux' })).toEqual(
      msg('cwd', 'file://srv/share/x', 'UNC host `srv` is not supported on this host'),
    );
  });

  it('resolver failures: "failed to prepare process sandbox: …"', async () => {
    const missing = path.join(tmp, 'missing-root');
    const permissions = {
      type: 'managed',
      network: 'restricted',
      file_system: {
        type: 'restricted',
        entries: [{ path: { type: 'path', path: pathToFileUri(missing) }, access: 'write', missing_path_behavior: 'error' }],
      },
    };
    expect(await rpcFailure(sandboxed({}, { permissions }), { platform: 'linux' })).toEqual({
      code: -32602,
      message: `failed to prepare process sandbox: permissions.file_system.entries[0]: writable root ${missing} does not exist`,
    });
  });

  it('a workspace root reached through a symlink the sandbox could rewrite is refused', async () => {
    const outer = path.join(tmp, 'outer');
    const target = path.join(tmp, 'target');
    fs.mkdirSync(outer);
    fs.mkdirSync(target);
    fs.symlinkSync(target, path.join(outer, 'link'));
    const rpc = await rpcFailure(
      sandboxed({}, { workspaceRoots: [pathToFileUri(outer), pathToFileUri(path.join(outer, 'link'))] }),
      { platform: 'linux' },
    );
    expect(rpc.code).toBe(-32602);
    expect(rpc.message).toMatch(/^failed to prepare process sandbox: permissions\.file_system\.entries\[\d+\]: writable root .*link goes through the symlink .*link, which lies inside the writable root /);
  });

  it('runtime.protect adds carve-outs', async () => {
    const extra = path.join(ws, 'Makefile');
    const p = await prepareExecRequest(sandboxed(), { platform: 'linux', protect: [extra] });
    expect(p.rules?.readOnly).toContain(extra);
  });

  it('malformed params are -32602', async () => {
    expect((await rpcFailure({ processId: 'x', argv: 'ls', cwd: 'file:///' })).message).toBe('invalid params: argv must be an array of strings');
    expect((await rpcFailure({ processId: 'x', argv: ['a\0b'], cwd: 'file:///' })).message).toBe('invalid params: argv must not contain NUL bytes');
    expect((await rpcFailure(sandboxed({}, { windowsSandboxLevel: 'admin' }))).message).toMatch(/^invalid params: sandbox\.windowsSandboxLevel must be/);
    expect((await rpcFailure(sandboxed({}, { permissions: { type: 'weird' } }), { platform: 'linux' })).message).toBe(
      'invalid params: sandbox.permissions.type must be "managed", "disabled" or "external", got "weird"',
    );
  });
});

describe('Windows restricted token', () => {
  const win = (level: string, extra: Partial<ExecParams> = {}) =>
    sandboxed(
      { cwd: 'file:///C:/Users/dev/project', ...extra },
      {
        cwd: 'file:///C:/Users/dev/project',
        workspaceRoots: ['file:///C:/Users/dev/project', 'file://fileserver/share/lib'],
        permissions: { type: 'disabled' },
        windowsSandboxLevel: level,
      },
    );

  it('restricted-token: windows request with level, proxy settings mode and native workspace roots', async () => {
    const p = await prepareExecRequest(win('restricted-token'), { platform: 'win32' });
    expect(p.sandboxType).toBe('windowsRestrictedToken');
    expect(p.cwd).toBe('C:\\Users\\dev\\project');
    expect(p.windows).toEqual({
      level: 'restricted-token',
      proxySettingsMode: 'reconcile',
      workspaceRoots: ['C:\\Users\\dev\\project', '\\\\fileserver\\share\\lib'],
    });
  });

  it('managed_network_honors_windows_sandbox_level', async () => {
    expect(await rpcFailure(win('restricted-token', { enforceManagedNetwork: true }), { platform: 'win32' })).toEqual({
      code: -32602,
      message: 'failed to prepare process sandbox: managed networking requires the elevated Windows sandbox backend',
    });
    const p = await prepareExecRequest(win('elevated', { enforceManagedNetwork: true }), { platform: 'win32' });
    expect(p.windows?.level).toBe('elevated');
  });

  it('native Windows launches strip the managed proxy env and start no proxy', async () => {
    let started = false;
    const p = await prepareExecRequest(
      sandboxed(
        {
          sandbox: null,
          cwd: 'file:///C:/x',
          networkProxy: { config: {} },
          env: { PATH: 'C:\\bin', HTTP_PROXY: 'http://127.0.0.1:1', https_proxy: 'http://127.0.0.1:1', CODEX_NETWORK_PROXY_ACTIVE: '1', SSL_CERT_FILE: '/h/.codex/proxy/ca-bundle.pem', NODE_EXTRA_CA_CERTS: '/mine/ca.pem' },
        },
      ),
      {
        platform: 'win32',
        startManagedNetwork: async () => {
          started = true;
          throw new Error('must not be called');
        },
      },
    );
    expect(started).toBe(false);
    expect(p.env).toEqual({ PATH: 'C:\\bin', NODE_EXTRA_CA_CERTS: '/mine/ca.pem' });
    expect(p.sandboxType).toBe('none');
  });
});

describe('managed network preparation', () => {
  const proxyParams = (extra: Partial<ExecParams> = {}, sandbox: Record<string, unknown> = {}) =>
    sandboxed({ networkProxy: { config: { enabled: true } }, ...extra }, sandbox);

  it('with the proxy facility switched off (startManagedNetwork: null): -32603, not available', async () => {
    expect(await rpcFailure(proxyParams(), { platform: 'linux', startManagedNetwork: null })).toEqual({
      code: -32603,
      message: 'failed to build executor network proxy: a managed network proxy is not available on this executor',
    });
  });

  it('a disabled proxy config is -32602 "invalid network proxy config: …"', async () => {
    const runtime: PrepareRuntime = {
      platform: 'linux',
      startManagedNetwork: async () => {
        throw new SandboxError('EPROXY_CONFIG', 'executor-local network proxy launch requires an enabled proxy');
      },
    };
    expect(await rpcFailure(proxyParams(), runtime)).toEqual({
      code: -32602,
      message: 'invalid network proxy config: executor-local network proxy launch requires an enabled proxy',
    });
  });

  it('start failures are -32603', async () => {
    const fail = (e: Error): PrepareRuntime => ({ platform: 'linux', startManagedNetwork: async () => { throw e; } });
    expect(await rpcFailure(proxyParams(), fail(new SandboxError('EPROXY_START', 'bind: address in use')))).toEqual({
      code: -32603,
      message: 'failed to start executor network proxy: bind: address in use',
    });
    expect(await rpcFailure(proxyParams(), fail(new Error('boom')))).toEqual({ code: -32603, message: 'failed to build executor network proxy: boom' });
  });

  it('managedNetwork unix socket grants reach the rules: all sockets, or on Linux a list kept refused as Codex does', async () => {
    const params = golden<ExecParams>('exec-params-workspace-write.json');
    const text = JSON.stringify(params).split('file:///work/project').join(pathToFileUri(ws));
    const withUnix = (mn: Record<string, unknown>) => ({ ...(JSON.parse(text) as ExecParams), managedNetwork: mn }) as ExecParams;
    const list = await prepareExecRequest(withUnix({ allowUnixSockets: ['/run/docker.sock'] }), { platform: 'linux' });
    // Codex on Linux keeps AF_UNIX refused under a managed network whatever the list says.
    expect(list.rules?.network).toEqual({ kind: 'none', unixSocketsRefused: ['/run/docker.sock'] });
    const mac = await prepareExecRequest(withUnix({ allowUnixSockets: ['/run/docker.sock'] }), { platform: 'darwin' });
    expect(mac.rules?.network).toEqual({ kind: 'none', unixSockets: ['/run/docker.sock'] });
    const all = await prepareExecRequest(withUnix({ dangerouslyAllowAllUnixSockets: true }), { platform: 'linux' });
    expect(all.rules?.network).toEqual({ kind: 'none', unixSockets: 'all' });
    expect(await rpcFailure(withUnix({ allowUnixSockets: ['relative.sock'] }), { platform: 'linux' })).toEqual({
      code: -32602,
      message: 'managedNetwork.allowUnixSockets must be an array of absolute paths',
    });
  });

  it('native (non-Windows) requests start the proxy too and keep sandbox none', async () => {
    const p = await prepareExecRequest(proxyParams({ sandbox: null, env: { PATH: '/bin', HTTP_PROXY: 'http://upstream:1' } }), {
      platform: 'linux',
      startManagedNetwork: async (req) => ({
        env: { ...req.env, HTTP_PROXY: 'http://127.0.0.1:5555' },
        managedNetwork: { loopbackPorts: [5555] },
      }),
    });
    expect(p.sandboxType).toBe('none');
    expect(p.rules).toBeNull();
    expect(p.env).toEqual({ PATH: '/bin', HTTP_PROXY: 'http://127.0.0.1:5555' });
    expect(p.managedNetwork).toEqual({ loopbackPorts: [5555] });
  });

  it('MXC routes the proxy through dedicated listeners', async () => {
    let routing = '';
    await prepareExecRequest(proxyParams({}, { windowsSandboxLevel: 'mxc' }), {
      platform: 'linux',
      mxcAvailable: () => true,
      startManagedNetwork: async (req) => {
        routing = req.routing;
        return { env: req.env, managedNetwork: {} };
      },
    });
    expect(routing).toBe('dedicatedListeners');
  });

  it('a started proxy rewrites env, yields the context, and its CA bundle becomes readable', async () => {
    const caDir = path.join(tmp, 'codexhome', 'proxy');
    fs.mkdirSync(caDir, { recursive: true });
    const bundle = path.join(caDir, 'ca-bundle-abc.pem');
    fs.writeFileSync(bundle, 'pem');
    const permissions = {
      type: 'managed',
      network: 'restricted',
      file_system: {
        type: 'restricted',
        entries: [
          { path: { type: 'special', value: { kind: 'minimal' } }, access: 'read' },
          { path: { type: 'special', value: { kind: 'project_roots' } }, access: 'write' },
        ],
      },
    };
    let routing = '';
    const p = await prepareExecRequest(proxyParams({}, { permissions }), {
      platform: 'linux',
      startManagedNetwork: async (req) => {
        routing = req.routing;
        return {
          env: { ...req.env, HTTP_PROXY: 'http://127.0.0.1:43123', SSL_CERT_FILE: bundle },
          managedNetwork: { loopbackPorts: [43123], allowLocalBinding: false },
        };
      },
    });
    expect(routing).toBe('sharedIngress');
    expect(p.env.HTTP_PROXY).toBe('http://127.0.0.1:43123');
    expect(p.managedNetwork).toEqual({ loopbackPorts: [43123], allowLocalBinding: false });
    expect(p.rules?.readAll).toBe(false);
    expect(p.rules?.readRoots).toContain(bundle);
    expect(p.rules?.network).toEqual({ kind: 'none' });
  });
});

describe('managed network with the default proxy (no startManagedNetwork hook)', () => {
  const launch = (proxy: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ proxy: { enabled: true, ...proxy }, ...extra });
  // A closed server leaves the active-resource list once libuv has run its close callback (a
  // loop turn or so after server.close() reports done), so let the loop settle before counting.
  const listeners = async () => {
    await new Promise((r) => setTimeout(r, 50));
    return process.getActiveResourcesInfo().filter((r) => r === 'TCPServerWrap').length;
  };

  it('a sandboxed request routes the network to our proxy: rules, managedProxy and env', async () => {
    const before = await listeners();
    const p = await prepareExecRequest(
      sandboxed({
        networkProxy: launch({ domains: { 'allowed.test': 'allow', '**.blocked.test': 'deny', 'ignored.test': 'none' }, allowLocalBinding: true }),
        env: { PATH: '/usr/bin:/bin', HTTP_PROXY: 'http://elsewhere:3128', all_proxy: 'socks5://elsewhere:1080', CODEX_NETWORK_PROXY_ATTRIBUTION: 'tok', KEEP: '1' },
      }),
      { platform: 'linux' },
    );
    try {
      expect(p.sandboxType).toBe('linuxSeccomp');
      expect(p.rules?.network).toEqual({ kind: 'proxy', proxy: { allow: ['allowed.test'], deny: ['**.blocked.test'], allowLocal: true, mode: 'full' } });
      expect(p.rules?.mode).toBe('auto');
      expect(p.managedProxy?.instance).toBeInstanceOf(ManagedProxy);
      expect(p.managedProxy?.processId).toBe('p1');
      expect(p.managedProxy?.attachment).toBeUndefined();
      // The port is only known at spawn (the listener is made inside the sandbox's namespace):
      // foreign proxy variables and the attribution token are gone, the Codex markers are set.
      expect(p.env).toEqual({ PATH: '/usr/bin:/bin', KEEP: '1', CODEX_NETWORK_PROXY_ACTIVE: '1', CODEX_NETWORK_ALLOW_LOCAL_BINDING: '1' });
      expect(p.managedNetwork).toEqual({ loopbackPorts: [], allowLocalBinding: true, allowUnixSockets: [], dangerouslyAllowAllUnixSockets: false });
      // Nothing listens until the command is spawned.
      expect(p.managedProxy?.instance.attachedProcessIds).toEqual([]);
      expect(await listeners()).toBe(before);
    } finally {
      await discardPrepared(p);
    }
    expect(p.managedProxy?.instance.closed).toBe(true);
  });

  it('enforceManagedNetwork with useLegacyLandlock still lets the mode be chosen (a proxy needs the isolated mode or degraded)', async () => {
    const p = await prepareExecRequest(sandboxed({ networkProxy: launch({ domains: { 'a.test': 'allow' } }), enforceManagedNetwork: true }, { useLegacyLandlock: true }), {
      platform: 'linux',
    });
    expect(p.rules?.mode).toBe('auto');
    expect(p.rules?.network.kind).toBe('proxy');
    await discardPrepared(p);
  });

  it('a native (plain) launch gets a host listener now: HTTP_PROXY rewritten, CONNECT to an unlisted name is 403, audited', async () => {
    const events: Array<{ processId: string; host: string; decision: string }> = [];
    const p = await prepareExecRequest(
      sandboxed({ sandbox: null, networkProxy: launch({ domains: { 'allowed.test': 'allow' } }), env: { PATH: '/bin', HTTP_PROXY: 'http://upstream:1', CODEX_NETWORK_PROXY_ATTRIBUTION: 'tok' } }),
      { platform: 'linux', network: { onAudit: (e) => events.push(e) } },
    );
    try {
      expect(p.sandboxType).toBe('none');
      expect(p.rules).toBeNull();
      const port = p.managedProxy!.attachment!.port;
      expect(p.env.HTTP_PROXY).toBe(`http://127.0.0.1:${port}`);
      expect(p.env.ALL_PROXY).toBe(`socks5h://127.0.0.1:${port}`);
      expect(p.env.CODEX_NETWORK_PROXY_ACTIVE).toBe('1');
      expect(p.env.CODEX_NETWORK_PROXY_ATTRIBUTION).toBeUndefined();
      expect(p.managedNetwork).toMatchObject({ loopbackPorts: [port], allowLocalBinding: false });
      const head = await new Promise<string>((resolve, reject) => {
        const s = net.connect(port, '127.0.0.1', () => s.write('CONNECT blocked.example:443 HTTP/1.1\r\nHost: blocked.example:443\r\n\r\n'));
        let buf = '';
        s.on('data', (b) => (buf += b.toString()));
        s.on('close', () => resolve(buf));
        s.on('error', reject);
      });
      expect(head).toMatch(/^HTTP\/1\.1 403/);
      expect(head.toLowerCase()).toContain('x-proxy-error: blocked-by-allowlist');
      expect(events).toEqual([expect.objectContaining({ processId: 'p1', host: 'blocked.example', decision: 'deny' })]);
    } finally {
      await discardPrepared(p);
    }
    expect(p.managedProxy!.instance.closed).toBe(true);
  });

  it('bad launch configs are -32602 "invalid network proxy config: …" and start nothing', async () => {
    const before = await listeners();
    expect(await rpcFailure(sandboxed({ networkProxy: { proxy: { enabled: false } } }), { platform: 'linux' })).toEqual({
      code: -32602,
      message: 'invalid network proxy config: executor-local network proxy launch requires an enabled proxy',
    });
    expect(await rpcFailure(sandboxed({ networkProxy: { config: {} } }), { platform: 'linux' })).toEqual({
      code: -32602,
      message: 'invalid network proxy config: missing field `proxy`',
    });
    const bad = await rpcFailure(sandboxed({ networkProxy: launch({ domains: { 'a.test': 'maybe' } }) }), { platform: 'linux' });
    expect(bad.code).toBe(-32602);
    expect(bad.message).toMatch(/^invalid network proxy config: unknown variant `maybe`/);
    expect(await listeners()).toBe(before);
  });

  it('a failure after the proxy started closes it (no listener left behind)', async () => {
    const before = await listeners();
    // A plain launch attaches a host listener first; the empty argv is refused afterwards.
    expect(await rpcFailure(sandboxed({ sandbox: null, argv: [], networkProxy: launch({ domains: { 'a.test': 'allow' } }) }), { platform: 'linux' })).toEqual({
      code: -32602,
      message: 'argv must not be empty',
    });
    expect(await listeners()).toBe(before);
  });

  it('a caller-provided context without a proxy we can route keeps the network closed', async () => {
    const p = await prepareExecRequest(sandboxed({ managedNetwork: { loopbackPorts: [3128] } }), { platform: 'linux' });
    expect(p.rules?.network).toEqual({ kind: 'none' });
    expect(p.managedProxy).toBeUndefined();
    const q = await prepareExecRequest(sandboxed({ enforceManagedNetwork: true }), { platform: 'linux' });
    expect(q.rules?.network).toEqual({ kind: 'none' });
  });
});

describe('sandbox manager selection (manager_tests re-expressed)', () => {
  const disabled = { type: 'disabled' } as const;
  it('danger-full-access (disabled) under auto → none without network requirements', () => {
    expect(selectSandbox({ platform: 'linux', profile: disabled, windowsSandboxLevel: 'disabled', enforceManagedNetwork: false, preference: 'auto' }).sandboxType).toBe('none');
  });
  it('disabled under auto with managed-network requirements → platform sandbox', () => {
    expect(selectSandbox({ platform: 'linux', profile: disabled, windowsSandboxLevel: 'disabled', enforceManagedNetwork: true, preference: 'auto' }).sandboxType).toBe('linuxSeccomp');
  });
  it('restricted file system under auto → platform sandbox', () => {
    expect(selectSandbox({ platform: 'darwin', profile: readOnlyProfile(), windowsSandboxLevel: 'disabled', enforceManagedNetwork: false, preference: 'auto' }).sandboxType).toBe('macosSeatbelt');
  });
  it('exec-server preference is require: even disabled is sandboxed on Linux', () => {
    expect(selectSandbox({ platform: 'linux', profile: disabled, windowsSandboxLevel: 'disabled', enforceManagedNetwork: false }).sandboxType).toBe('linuxSeccomp');
  });
  it('explicit MXC overrides the Windows sandbox; forbid → none', () => {
    expect(selectSandbox({ platform: 'win32', profile: disabled, windowsSandboxLevel: 'mxc', enforceManagedNetwork: false }).sandboxType).toBe('windowsMxc');
    expect(selectSandbox({ platform: 'linux', profile: readOnlyProfile(), windowsSandboxLevel: 'disabled', enforceManagedNetwork: false, preference: 'forbid' }).sandboxType).toBe('none');
  });
});

describe('SandboxError ↔ JSON-RPC mapping', () => {
  it('maps codes', () => {
    expect(toJsonRpcError(invalidParams('x'))).toEqual({ code: -32602, message: 'x' });
    expect(toJsonRpcError(internalError('y'))).toEqual({ code: -32603, message: 'y' });
    expect(toJsonRpcError(new SandboxError('EINVALID_POLICY', 'bad'))).toEqual({ code: -32602, message: 'bad' });
    expect(toJsonRpcError(new SandboxError('ESPAWN', 'spawn failed'))).toEqual({ code: -32603, message: 'spawn failed' });
    expect(toJsonRpcError(new Error('z'))).toEqual({ code: -32603, message: 'z' });
  });
});
