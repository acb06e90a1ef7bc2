/** Bad input is refused before anything starts, for a plain run (policy: null). */
import { defineBadInputContract } from './bad-input-contract';
import { PLAIN } from './helpers';

defineBadInputContract(PLAIN);
