/** Resource hygiene, sandboxed with the default policy. */
import { defineStressContract } from './stress-contract';
import { sandboxed } from './helpers';

defineStressContract(sandboxed());
