/** The spawn()/run() contract, run plainly (policy: null). */
import { defineSpawnContract } from './spawn-contract';
import { PLAIN } from './helpers';

defineSpawnContract(PLAIN);
