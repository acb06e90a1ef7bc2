/**
 * Destination address classification for the managed proxy.
 *
 * The proxy refuses every non-public destination unless the policy allows local access
 * (`allowLocal`) or the exact IP literal is on the allow list. Cloud metadata endpoints are refused
 * even with `allowLocal`: only an exact literal allow entry reaches them.
 */
import { isIP } from 'net';

export type AddressClass =
  | 'public'
  | 'loopback'
  | 'private'
  | 'linkLocal'
  | 'uniqueLocal'
  | 'cgnat'
  | 'metadata'
  | 'unspecified'
  | 'multicast'
  | 'reserved';

/**
 * Parse an IPv4 address with inet_aton(3) rules, which is what resolvers and the kernel's
 * callers accept: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x), the last part
 * filling the remaining bytes. So `2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1` and
 * `127.000.000.001` are all 127.0.0.1: every spelling must meet the same policy as the dotted quad.
 * Returns 4 bytes, or null when `text` is not an IPv4 address in any of these forms.
 */
export function parseIPv4(text: string): number[] | null {
  if (text === '' || text.length > 64) return null;
  // Fast rejection of host names (this runs several times per proxied request): every part below
  // is made of [0-9a-fA-FxX] only, so any other character but the dots can never parse.
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i) | 0x20; // ASCII lower case (digits and '.' keep their class)
    if (!((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || c === 0x78 || c === 0x2e)) return null;
  }
  const parts = text.split('.');
  if (parts.length > 4) return null;
  const nums: number[] = [];
  for (const part of parts) {
    let n: number;
    if (/^0[xX][0-9a-fA-F]*$/.test(part)) n = part.length === 2 ? 0 : parseInt(part.slice(2), 16);
    else if (/^0[0-7]*$/.test(part)) n = parseInt(part, 8);
    else if (/^[1-9][0-9]*$/.test(part)) n = parseInt(part, 10);
    else return null;
    if (!Number.isSafeInteger(n)) return null;
    nums.push(n);
  }
  const last = nums.pop()!;
  if (nums.some((n) => n > 255)) return null;
  const rest = 4 - nums.length;
  if (last >= 2 ** (8 * rest)) return null;
  const bytes = [...nums];
  for (let i = rest - 1; i >= 0; i--) bytes.push(Math.floor(last / 2 ** (8 * i)) % 256);
  return bytes;
}

/**
 * True when `host` ends in a numeric label (decimal, or 0x hex) and so can only be an IPv4
 * address: such a name that parseIPv4 rejects (`1.2.3.4.5`, `0x1g`, `256.1.1.1`) is invalid,
 * never a host name to look up (WHATWG URL rules; resolvers disagree on what they do with it).
 */
export function looksNumericHost(host: string): boolean {
  const labels = host.replace(/\.$/, '').split('.');
  return /^(?:0[xX][0-9a-fA-F]*|[0-9]+)$/.test(labels[labels.length - 1] ?? '');
}

/** Parse an IPv6 literal (no brackets, optional %zone) into 16 bytes, or null. */
export function parseIPv6(text: string): number[] | null {
  const zone = text.indexOf('%');
  const bare = zone >= 0 ? text.slice(0, zone) : text;
  // Every IPv6 literal has a colon: host names skip isIP's large regex.
  if (!bare.includes(':') || isIP(bare) !== 6) return null;
  let head = bare;
  let tailV4: number[] | null = null;
  const lastColon = bare.lastIndexOf(':');
  const last = bare.slice(lastColon + 1);
  if (last.includes('.')) {
    tailV4 = parseIPv4(last);
    if (!tailV4) return null;
    head = bare.slice(0, lastColon + 1) + '0:0';
  }
  const halves = head.split('::');
  const parseGroups = (s: string): number[] => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
  const left = parseGroups(halves[0]);
  const right = halves.length > 1 ? parseGroups(halves[1]) : [];
  const fill = 8 - left.length - right.length;
  const groups = halves.length > 1 ? [...left, ...new Array<number>(fill).fill(0), ...right] : left;
  if (groups.length !== 8) return null;
  const bytes: number[] = [];
  for (const g of groups) bytes.push((g >> 8) & 0xff, g & 0xff);
  if (tailV4) bytes.splice(12, 4, ...tailV4);
  return bytes;
}

function inV4(b: number[], base: [number, number, number, number], prefix: number): boolean {
  const ip = ((b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]) >>> 0;
  const net = ((base[0] << 24) | (base[1] << 16) | (base[2] << 8) | base[3]) >>> 0;
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return (ip & mask) >>> 0 === (net & mask) >>> 0;
}

/**
 * Cloud instance metadata and platform endpoints. Refused whatever `allowLocal` says (only an
 * exact IP literal on the allow list reaches one): all of link-local 169.254.0.0/16 (AWS, GCP,
 * Azure, OpenStack and ECS task metadata live there), Alibaba's 100.100.100.200, Oracle's
 * 192.0.0.192, Azure's wire server 168.63.129.16, and AWS's IPv6 fd00:ec2::/64.
 */
const METADATA_V4: ReadonlyArray<[number, number, number, number]> = [
  [100, 100, 100, 200],
  [192, 0, 0, 192],
  [168, 63, 129, 16],
];

function classifyV4(b: number[]): AddressClass {
  if (b[0] === 169 && b[1] === 254) return 'metadata';
  if (METADATA_V4.some((m) => m.every((x, i) => x === b[i]))) return 'metadata';
  if (b[0] === 127) return 'loopback';
  if (inV4(b, [0, 0, 0, 0], 8)) return 'unspecified';
  if (b[0] === 10 || inV4(b, [172, 16, 0, 0], 12) || inV4(b, [192, 168, 0, 0], 16)) return 'private';
  if (inV4(b, [100, 64, 0, 0], 10)) return 'cgnat';
  if (inV4(b, [224, 0, 0, 0], 4)) return 'multicast';
  if (
    inV4(b, [240, 0, 0, 0], 4) || // reserved + broadcast
    inV4(b, [192, 0, 0, 0], 24) || // IETF protocol assignments
    inV4(b, [192, 0, 2, 0], 24) || // TEST-NET-1
    inV4(b, [198, 18, 0, 0], 15) || // benchmarking
    inV4(b, [198, 51, 100, 0], 24) || // TEST-NET-2
    inV4(b, [203, 0, 113, 0], 24) // TEST-NET-3
  ) {
    return 'reserved';
  }
  return 'public';
}

function classifyV6(b: number[]): AddressClass {
  const zeroUpTo = (n: number) => b.slice(0, n).every((x) => x === 0);
  // ::ffff:a.b.c.d (mapped), ::a.b.c.d (compatible, deprecated) and 64:ff9b::/96 (NAT64) all
  // carry an IPv4 destination that the kernel or a translator will reach: judge that address.
  const mapped = zeroUpTo(10) && b[10] === 0xff && b[11] === 0xff;
  const compat = zeroUpTo(12) && !(b[12] === 0 && b[13] === 0 && b[14] === 0 && b[15] <= 1);
  const nat64 = b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && b.slice(4, 12).every((x) => x === 0);
  if (mapped || compat || nat64) return classifyV4(b.slice(12, 16));
  if (zeroUpTo(15) && b[15] === 1) return 'loopback';
  if (zeroUpTo(16)) return 'unspecified';
  // fd00:ec2::/64 (AWS IMDS and its neighbours over IPv6)
  const imds = [0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0];
  if (imds.every((x, i) => x === b[i])) return 'metadata';
  if ((b[0] & 0xfe) === 0xfc) return 'uniqueLocal';
  if (b[0] === 0xfe && (b[1] & 0xc0) === 0x80) return 'linkLocal';
  if (b[0] === 0xfe && (b[1] & 0xc0) === 0xc0) return 'private'; // deprecated site-local fec0::/10
  if (b[0] === 0xff) return 'multicast';
  if (b[0] === 0x20 && b[1] === 0x01 && b[2] === 0x0d && b[3] === 0xb8) return 'reserved'; // documentation
  if (b[0] === 0x01 && zeroUpTo(8)) return 'reserved'; // discard-only 100::/64
  return 'public';
}

/** Classify an IP literal. Throws TypeError when `ip` is not an IP address. */
export function classifyAddress(ip: string): AddressClass {
  const v4 = parseIPv4(ip);
  if (v4) return classifyV4(v4);
  const v6 = parseIPv6(stripBrackets(ip));
  if (v6) return classifyV6(v6);
  throw new TypeError(`Expected an IP address, got ${JSON.stringify(ip)}`);
}

/** True for every class that is not globally routable. */
export function isNonPublicAddress(ip: string): boolean {
  return classifyAddress(ip) !== 'public';
}

export function stripBrackets(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/**
 * Canonical text of an IP literal (IPv4 as a dotted quad whatever its spelling, IPv6 fully
 * expanded, lowercase; zone kept), or null. Bracketed text is only ever IPv6.
 */
export function canonicalIp(text: string): string | null {
  const trimmed = text.trim();
  const bracketed = trimmed.startsWith('[');
  const bare = stripBrackets(trimmed);
  const v4 = bracketed ? null : parseIPv4(bare);
  if (v4) return v4.join('.');
  const v6 = parseIPv6(bare);
  if (!v6) return null;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((v6[i] << 8) | v6[i + 1]).toString(16));
  const zone = bare.indexOf('%');
  return groups.join(':') + (zone >= 0 ? bare.slice(zone).toLowerCase() : '');
}
