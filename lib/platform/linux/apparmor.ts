/**
 * Ubuntu's restriction on unprivileged user namespaces (23.10 and later, on by default in 24.04):
 * with `kernel.apparmor_restrict_unprivileged_userns=1`, an unconfined process may create a user
 * namespace, but AppArmor moves it into a profile that holds no capabilities there, so the mounts
 * isolated mode makes inside fail (the probe sees EPERM) and auto mode falls back to Landlock mode.
 * Ubuntu lets chosen programs (bwrap, browsers) keep the old behaviour through a profile that
 * grants `userns`; Node has none. `process-sandbox apparmor-profile` prints such a profile for the
 * Node binary in use, and refusals name the sysctl and that command instead of a bare errno.
 *
 * What the profile grants: every program run by that Node binary (not only this package), for
 * every local user, may make user namespaces with capabilities inside them, as on a host without
 * the restriction. On a shared /usr/bin/node that reopens host-wide what Ubuntu's restriction
 * closed, so the header and the help say so first and recommend a binary only the application
 * runs (an Electron app's executable, a Node copy at a path of the application's own, `--node`).
 * It is the trade Ubuntu makes for bwrap and Chrome; an operator who will not make it keeps
 * Landlock mode.
 */
import * as fs from 'node:fs';

const SYSCTL = '/proc/sys/kernel/apparmor_restrict_unprivileged_userns';

/** Whether AppArmor restricts unprivileged user namespaces on this host (the sysctl reads 1). */
export function apparmorRestrictsUserns(sysctl = SYSCTL): boolean {
  try {
    return fs.readFileSync(sysctl, 'utf8').trim() === '1';
  } catch {
    return false; // no AppArmor, or not Ubuntu's patch: nothing restricts user namespaces this way
  }
}

/** The clause refusals add when the restriction is on: what it is and the two ways out. */
export function apparmorHint(): string {
  return (
    "AppArmor restricts unprivileged user namespaces here (kernel.apparmor_restrict_unprivileged_userns=1: " +
    'a namespace can be made but holds no capabilities, so its mounts fail); ' +
    "run 'process-sandbox apparmor-profile' for a profile that lets this Node binary use them, " +
    'or set the sysctl to 0'
  );
}

/** A file name AppArmor accepts for a profile attached to `binary`. */
function profileName(binary: string): string {
  return 'process-sandbox-' + binary.replace(/^\/+/, '').replace(/[^A-Za-z0-9_.-]+/g, '.');
}

/**
 * Whether the profile may use `userns` (and `abi <abi/4.0>`, which declares it): AppArmor 4's
 * parser ships /etc/apparmor.d/abi/4.0. An older one (Debian 12's 3.0) has only abi/3.0 and
 * refuses both ("Could not open 'abi/4.0'"; `userns,` a syntax error). Its kernels mediate no
 * user namespaces either (the restriction needs Ubuntu's patch or Linux 6.7's userns_create
 * hook), so there the profile is only an unconfined one: it replaces a profile that confined
 * this binary, which is all a restriction can be on such a host. With no parser at all the
 * AppArmor 4 text is printed (Ubuntu's, where the restriction is real).
 */
export function apparmorParserKnowsUserns(abiDir = '/etc/apparmor.d/abi'): boolean {
  return fs.existsSync(`${abiDir}/4.0`) || !fs.existsSync(`${abiDir}/3.0`);
}

/**
 * The AppArmor profile confining this process, as the kernel names it ("name (mode)"), or null
 * when it is unconfined or AppArmor is absent. A confined Node (a snap, or a profile an operator
 * attached) gets user namespaces only if that profile allows them and their capabilities.
 */
export function apparmorConfinement(files = ['/proc/self/attr/apparmor/current', '/proc/self/attr/current']): string | null {
  for (const f of files) {
    let label: string;
    try {
      label = fs.readFileSync(f, 'utf8').replace(/\0/g, '').trim();
    } catch {
      continue; // the first is 5.8+, the second is shared with other LSMs on older kernels
    }
    // attr/current holds another LSM's label where AppArmor is not the one (SELinux: a:b:c:d).
    // A profile in mode unconfined (as `apparmor-profile` prints) confines nothing.
    if (!/^[^:\s]\S* \((enforce|complain|kill|user)\)$/.test(label)) return null;
    return label;
  }
  return null;
}

/**
 * The clause a refusal adds when this process is confined by an AppArmor profile. Worded as a
 * possibility: in a container (Docker's docker-default) the profile is seldom the cause, and
 * nothing can be loaded from inside one.
 */
export function apparmorConfinedHint(label: string): string {
  return (
    `this Node runs confined by the AppArmor profile ${label}, which may refuse them (or the capabilities ` +
    "isolated mode needs in them); if it does and this is not a container, load the profile " +
    "'process-sandbox apparmor-profile' prints for this Node binary in its place"
  );
}

/**
 * What the profile opens, said before anything else about it (the profile's header, the help):
 * the right goes with the binary, not with this package.
 */
export const WIDE_GRANT = [
  'WARNING: every program this binary runs, for every user of this host, gets the same right:',
  "for that binary, the profile undoes Ubuntu's restriction host-wide. Attach it to a binary only",
  "your application runs (an Electron app's own executable, or a copy of Node at a path only the",
  'application uses: --node /opt/myapp/bin/node), not to a Node shared by the host (/usr/bin/node).',
];

/**
 * The profile text for `binary` (a real path: AppArmor attaches by the executable's path after
 * symlinks), with the commands that install it as comments at its top, so the whole output can be
 * piped into the file it names. `userns`: whether the parser knows the rule (see above).
 */
export function apparmorProfile(binary: string, userns = apparmorParserKnowsUserns()): string {
  if (!binary.startsWith('/') || /[\s"#,{}]/.test(binary)) {
    throw new Error(`cannot write an AppArmor profile for ${JSON.stringify(binary)}: the path must be absolute, without spaces, quotes, '#', ',' or braces`);
  }
  const name = profileName(binary);
  const file = `/etc/apparmor.d/${name}`;
  return [
    `# AppArmor profile: lets ${binary} create user namespaces with capabilities inside them,`,
    "# so process-sandbox's isolated mode works under kernel.apparmor_restrict_unprivileged_userns=1",
    '# (Ubuntu 23.10 and later). It confines nothing else (flags=(unconfined)), as the profiles',
    '# Ubuntu ships for bwrap and browsers.',
    ...WIDE_GRANT.map((l) => `# ${l}`),
    ...(userns
      ? []
      : [
          "# This host's AppArmor parser predates the userns rule (no abi/4.0), and its kernel has no",
          '# user-namespace mediation to grant it for: the profile is only an unconfined one for this',
          '# binary, in place of any profile that confined it (unload that one first).',
        ]),
    '# Install (as root), then check that `process-sandbox probe` says "default mode: isolated":',
    `#   process-sandbox apparmor-profile | sudo tee ${file} >/dev/null`,
    `#   sudo apparmor_parser -r ${file}`,
    `# Remove: sudo apparmor_parser -R ${file} && sudo rm ${file}`,
    userns ? 'abi <abi/4.0>,' : 'abi <abi/3.0>,',
    'include <tunables/global>',
    '',
    `profile ${name} ${binary} flags=(unconfined) {`,
    ...(userns ? ['  userns,', ''] : []),
    `  include if exists <local/${name}>`,
    '}',
    '',
  ].join('\n');
}
