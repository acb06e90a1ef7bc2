/**
 * For `vi.mock('../../lib/platform/linux/plan', ...)` in the tests that change the filesystem
 * between planning and the mounts: the module as it is, except that planLinux calls `after(plan)`
 * once each plan is made, before the addon runs it.
 */
import type * as LinuxPlan from '../../lib/platform/linux/plan';

export function planLinuxThen(orig: typeof LinuxPlan, after: (plan: ReturnType<typeof LinuxPlan.planLinux>) => void): typeof LinuxPlan {
  return {
    ...orig,
    planLinux: (input) => {
      const plan = orig.planLinux(input);
      after(plan);
      return plan;
    },
  };
}
