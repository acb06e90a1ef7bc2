/** Resource hygiene, run plainly (policy: null). */
import { defineStressContract } from './stress-contract';
import { PLAIN } from './helpers';

defineStressContract(PLAIN);
