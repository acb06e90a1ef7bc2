/** The spawn()/run() contract, sandboxed with the default policy (policy omitted). */
import { defineSpawnContract } from './spawn-contract';
import { sandboxed } from './helpers';

defineSpawnContract(sandboxed());
