import { describe, expect, it } from 'vitest';
import { SandboxError } from '../../lib/errors';
import { applyEnvPolicy, parseEnvPolicy, withoutSecretEnv } from '../../lib/permissions';

const base = {
  PATH: '/usr/bin:/bin',
  HOME: '/home/u',
  USER: 'u',
  SHELL: '/bin/bash',
  TMPDIR: '/tmp',
  LANG: 'C.UTF-8',
  GITHUB_TOKEN: 'ghp_x',
  OPENAI_API_KEY: 'sk-x',
  MY_SECRET: 's',
  DB_PASSWORD: 'p',
  AWS_REGION: 'eu-west-1',
  EDITOR: 'vi',
};

describe('envPolicy (Codex ShellEnvironmentPolicy semantics)', () => {
  it('defaults: inherit all, default excludes (*KEY*, *SECRET*, *TOKEN*) applied', () => {
    const env = applyEnvPolicy(base, parseEnvPolicy({}));
    expect(env).toEqual({
      PATH: '/usr/bin:/bin',
      HOME: '/home/u',
      USER: 'u',
      SHELL: '/bin/bash',
      TMPDIR: '/tmp',
      LANG: 'C.UTF-8',
      DB_PASSWORD: 'p',
      AWS_REGION: 'eu-west-1',
      EDITOR: 'vi',
    });
  });

  it('ignoreDefaultExcludes keeps secret-looking names', () => {
    const env = applyEnvPolicy(base, parseEnvPolicy({ ignoreDefaultExcludes: true }));
    expect(env.GITHUB_TOKEN).toBe('ghp_x');
    expect(env.OPENAI_API_KEY).toBe('sk-x');
  });

  it('inherit core keeps only the core variables', () => {
    expect(Object.keys(applyEnvPolicy(base, parseEnvPolicy({ inherit: 'core' }), 'linux')).sort()).toEqual(['HOME', 'PATH', 'SHELL', 'TMPDIR', 'USER']);
  });

  it('inherit core on Windows matches names case-insensitively and keeps the Windows core set', () => {
    const env = applyEnvPolicy({ Path: 'C:\\Windows', SystemRoot: 'C:\\Windows', FOO: '1' }, parseEnvPolicy({ inherit: 'core' }), 'win32');
    expect(env).toEqual({ Path: 'C:\\Windows', SystemRoot: 'C:\\Windows' });
  });

  it('inherit none starts empty; set adds', () => {
    expect(applyEnvPolicy(base, parseEnvPolicy({ inherit: 'none', set: { A: '1' } }))).toEqual({ A: '1' });
  });

  it('exclude (case-insensitive wildcard), then set, then includeOnly', () => {
    const env = applyEnvPolicy(
      base,
      parseEnvPolicy({ exclude: ['aws_*', 'ED?TOR'], set: { EXTRA: 'x', MY_TOKEN: 'set-wins' }, includeOnly: ['PATH', 'extra', 'MY_*'] }),
    );
    // set runs after the default excludes, so MY_TOKEN survives; includeOnly runs last.
    expect(env).toEqual({ PATH: '/usr/bin:/bin', EXTRA: 'x', MY_TOKEN: 'set-wins' });
  });

  it('rejects malformed policies', () => {
    expect(() => parseEnvPolicy({ inherit: 'some' })).toThrow(SandboxError);
    expect(() => parseEnvPolicy({ inherit: 'some' })).toThrow("envPolicy.inherit must be 'all', 'core' or 'none'");
    expect(() => parseEnvPolicy({ exclude: 'X' })).toThrow('envPolicy.exclude must be an array of strings');
    expect(() => parseEnvPolicy({ set: { A: 1 } })).toThrow('envPolicy.set.A must be a string');
    expect(() => parseEnvPolicy({ includeonly: [] })).toThrow('envPolicy.includeonly is not a known field');
  });
});

describe('withoutSecretEnv (the CLI default env)', () => {
  it('drops names that look like secrets, keeps the rest', () => {
    expect(withoutSecretEnv(base)).toEqual({
      PATH: '/usr/bin:/bin',
      HOME: '/home/u',
      USER: 'u',
      SHELL: '/bin/bash',
      TMPDIR: '/tmp',
      LANG: 'C.UTF-8',
      EDITOR: 'vi',
    });
  });
});
