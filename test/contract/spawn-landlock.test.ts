/**
 * The spawn()/run() contract in forced Landlock mode with degraded enforcement accepted: the path
 * hosts without unprivileged user namespaces take. setsid() teardown is not promised there.
 */
import { defineSpawnContract } from './spawn-contract';
import { landlockDegraded } from './helpers';

defineSpawnContract(landlockDegraded());
