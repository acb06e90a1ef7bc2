import { describe, expect, it } from 'vitest';
import { SandboxError } from '../../lib/errors';
import { applyEnvPolicy, hasCredentialUrl, isSecretEnvEntry, isSecretEnvName, parseEnvPolicy, withoutSecretEnv } from '../../lib/permissions';

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

describe('withoutSecretEnv remembers answers per name only with their value', () => {
  it('judges a variable afresh when its value changes between calls', () => {
    const safe = 'https://mirror.example/simple';
    const secret = 'https://user:pw@mirror.example/simple';
    expect(withoutSecretEnv({ PIP_MIRROR: safe })).toEqual({ PIP_MIRROR: safe });
    expect(withoutSecretEnv({ PIP_MIRROR: secret })).toEqual({});
    expect(withoutSecretEnv({ PIP_MIRROR: safe })).toEqual({ PIP_MIRROR: safe });
    expect(withoutSecretEnv({ PIP_MIRROR: secret, LANG: 'C' })).toEqual({ LANG: 'C' });
  });
});

describe('secret scrubbing beyond *KEY*/*SECRET*/*TOKEN*', () => {
  it.each([
    'NPM_CONFIG__AUTH',
    'npm_config__auth',
    'npm_config__authToken',
    'SSH_AUTH_SOCK',
    'ssh_auth_sock',
    'BASIC_AUTH',
    'PROXY_AUTHORIZATION',
    'X_AUTH_HEADER',
    'AUTH',
    'AUTH_HEADER',
    'Authorization',
    'SENTRY_DSN',
    'database_dsn',
    'DSN',
  ])('%s is scrubbed (names compare case-insensitively)', (name) => {
    expect(isSecretEnvName(name)).toBe(true);
  });

  it.each(['GIT_AUTHOR_NAME', 'GIT_AUTHOR_EMAIL', 'GIT_AUTHOR_DATE', 'git_author_name', 'AUTHOR', 'PATH', 'OAUTHLIB_DEBUG_LEVEL_NAME_X', 'DSNAME', 'EDITOR'])(
    '%s is kept (positive control: identity, not credentials)',
    (name) => {
      expect(isSecretEnvName(name)).toBe(false);
    },
  );

  it.each([
    ['DATABASE_URL', 'postgres://app:hunter2@db.internal:5432/app'],
    ['REDIS_URL', 'redis://:onlypass@cache:6379'],
    ['PIP_INDEX_URL', 'https://user:p%40ss@pypi.example.com/simple'],
    ['HTTPS_PROXY', 'http://me:pw@proxy.corp:3128'],
    ['GIT_REMOTE', 'https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r.git'],
    ['DATABASE', 'mysql://root:x@localhost/db'],
    ['MIRRORS', 'https://a.example/ https://u:p@b.example/'],
  ])('%s=%s is scrubbed: the value holds a URL with credentials', (name, value) => {
    expect(hasCredentialUrl(value)).toBe(true);
    expect(isSecretEnvEntry(name, value)).toBe(true);
    expect(withoutSecretEnv({ [name]: value, LANG: 'C' })).toEqual({ LANG: 'C' });
  });

  it.each([
    ['DATABASE_URL', 'postgres://db.internal:5432/app'],
    ['HOMEPAGE_URL', 'https://example.com/@user/page'],
    ['GIT_URL', 'ssh://git@github.com/o/r.git'],
    ['HTTP_PROXY', 'http://proxy.corp:3128'],
    ['NOTE', 'mail me at a@b.example: ok'],
    ['PATH', '/usr/local/bin:/usr/bin:/bin'],
  ])('%s=%s is kept: no credentials in the URL (positive control)', (name, value) => {
    expect(hasCredentialUrl(value)).toBe(false);
    expect(withoutSecretEnv({ [name]: value })).toEqual({ [name]: value });
  });
});
