import { defineConfig } from 'vitest/config';

// Most of the suite waits on sandboxed children rather than burning CPU, so test files run three at
// a time even on a 2-core machine (vitest's default there is one): the whole suite took about a
// third of the serial time in a side-by-side run. PSB_TEST_WORKERS overrides it (1 = serial, for
// bisecting an interaction between files).
const workers = Number.parseInt(process.env.PSB_TEST_WORKERS ?? '', 10);

export default defineConfig({
  test: {
    // Native addons and sandboxed children: every test file gets its own forked process.
    pool: 'forks',
    maxWorkers: Number.isInteger(workers) && workers > 0 ? workers : 3,
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    globalSetup: ['test/helpers/global-setup.ts'],
  },
});
