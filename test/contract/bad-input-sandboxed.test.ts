/** Bad input and bad policies are refused before anything starts, with the default policy. */
import { defineBadInputContract, definePolicyValidation } from './bad-input-contract';
import { sandboxed } from './helpers';

const mode = sandboxed();
defineBadInputContract(mode);
definePolicyValidation(mode);
