import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // Native addons and sandboxed children: every test file gets its own forked process.
    pool: 'forks',
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    globalSetup: ['test/helpers/global-setup.ts'],
  },
});
