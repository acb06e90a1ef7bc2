import type { ResolvedRules } from '../../lib/rules';

/** ResolvedRules for planner tests: read everything, write nothing, no network, unless overridden. */
export function makeRules(over: Partial<ResolvedRules> = {}): ResolvedRules {
  return {
    readAll: true,
    readRoots: [],
    writeRoots: [],
    readOnly: [],
    denyRead: [],
    tmp: 'none',
    network: { kind: 'none' },
    mode: 'auto',
    degraded: false,
    limits: {},
    ...over,
  };
}
