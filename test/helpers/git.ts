/**
 * Running git on the host to set up a test's repositories: no system config, HOME a directory of
 * the test's own (the cwd unless given), a fixed identity and branch name. Returns its stdout.
 *
 *   git(ws, 'init', '-q');
 *   git({ cwd: ws, home: scene.root }, 'status', '--porcelain');
 */
import { execFileSync } from 'node:child_process';

import { BASE_ENV } from './sandbox';

export function git(where: string | { cwd: string; home: string }, ...args: string[]): string {
  const { cwd, home } = typeof where === 'string' ? { cwd: where, home: where } : where;
  return execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', '-c', 'init.defaultBranch=main', ...args], {
    cwd,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, HOME: home, GIT_CONFIG_NOSYSTEM: '1' },
  });
}

/** The environment a sandboxed git needs in a test: no system config, `home` as HOME, an identity. */
export function gitEnv(home: string): Record<string, string> {
  return {
    ...BASE_ENV,
    HOME: home,
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_NAME: 'a',
    GIT_AUTHOR_EMAIL: 'a@b',
    GIT_COMMITTER_NAME: 'a',
    GIT_COMMITTER_EMAIL: 'a@b',
  };
}
