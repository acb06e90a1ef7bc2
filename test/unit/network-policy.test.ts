import { describe, expect, it } from 'vitest';

import {
  DomainMatcher,
  canonicalIp,
  classifyAddress,
  isIpLiteral,
  isNonPublicAddress,
  normalizeHost,
  parseIPv4,
  parseIPv6,
} from '../../lib/network';

describe('DomainMatcher', () => {
  it('matches an exact host case-insensitively, ignoring a trailing dot and a port', () => {
    const m = new DomainMatcher(['Example.COM.']);
    expect(m.evaluate('example.com').verdict).toBe('allowed');
    expect(m.evaluate('EXAMPLE.com.').verdict).toBe('allowed');
    expect(m.evaluate('example.com:443').verdict).toBe('allowed');
    expect(m.evaluate('api.example.com').verdict).toBe('notAllowed');
    expect(m.evaluate('notexample.com').verdict).toBe('notAllowed');
  });

  it('*.x matches subdomains only', () => {
    const m = new DomainMatcher(['*.example.com']);
    expect(m.evaluate('api.example.com').verdict).toBe('allowed');
    expect(m.evaluate('a.b.example.com').verdict).toBe('allowed');
    expect(m.evaluate('example.com').verdict).toBe('notAllowed');
    expect(m.evaluate('evilexample.com').verdict).toBe('notAllowed');
    expect(m.evaluate('example.com.evil.org').verdict).toBe('notAllowed');
  });

  it('**.x matches the apex and subdomains', () => {
    const m = new DomainMatcher(['**.example.com']);
    expect(m.evaluate('example.com').verdict).toBe('allowed');
    expect(m.evaluate('api.example.com').verdict).toBe('allowed');
    expect(m.evaluate('deep.api.example.com').verdict).toBe('allowed');
    expect(m.evaluate('badexample.com').verdict).toBe('notAllowed');
  });

  it('a wildcard inside a label stays inside that label', () => {
    const m = new DomainMatcher(['region*.v2.tunnel.example']);
    expect(m.evaluate('region1.v2.tunnel.example').verdict).toBe('allowed');
    expect(m.evaluate('region.v2.tunnel.example').verdict).toBe('allowed');
    expect(m.evaluate('xregion1.v2.tunnel.example').verdict).toBe('notAllowed');
    expect(m.evaluate('region1.evil.v2.tunnel.example').verdict).toBe('notAllowed');
    expect(m.evaluate('foo.region1.v2.tunnel.example').verdict).toBe('notAllowed');
  });

  it('deny wins over allow', () => {
    const m = new DomainMatcher(['**.example.com'], ['secret.example.com', '*.internal.example.com']);
    expect(m.evaluate('www.example.com').verdict).toBe('allowed');
    expect(m.evaluate('secret.example.com').verdict).toBe('denied');
    expect(m.evaluate('db.internal.example.com').verdict).toBe('denied');
    expect(m.evaluate('internal.example.com').verdict).toBe('allowed');
  });

  it('blocks everything when there are no allow entries', () => {
    const m = new DomainMatcher([]);
    expect(m.hasAllowEntries).toBe(false);
    for (const h of ['example.com', 'localhost', '1.2.3.4', '::1']) expect(m.evaluate(h).verdict).toBe('notAllowed');
  });

  it('IP literals need an exact entry: wildcards never match them', () => {
    // (Wildcards over numeric labels, `*.0.0.1`, are refused outright: see pattern validation.)
    expect(() => new DomainMatcher(['*.0.0.1'])).toThrow(/numeric name/);
    const m = new DomainMatcher(['*', '**.example.org']);
    expect(m.evaluate('example.org').verdict).toBe('allowed');
    expect(m.evaluate('127.0.0.1').verdict).toBe('notAllowed');
    expect(m.evaluate('192.168.1.1').verdict).toBe('notAllowed');
    expect(m.evaluate('::1').verdict).toBe('notAllowed');
    const exact = new DomainMatcher(['10.1.2.3', '[::1]', '2001:DB8::0:1']);
    expect(exact.evaluate('10.1.2.3').verdict).toBe('allowed');
    expect(exact.evaluate('10.1.2.4').verdict).toBe('notAllowed');
    expect(exact.evaluate('[0:0:0:0:0:0:0:1]').verdict).toBe('allowed');
    expect(exact.evaluate('2001:db8::1').verdict).toBe('allowed');
    expect(exact.isExplicitlyAllowedIp('::1')).toBe(true);
    expect(exact.isExplicitlyAllowedIp('10.9.9.9')).toBe(false);
  });

  it('compares internationalised names in punycode', () => {
    const m = new DomainMatcher(['bücher.example', '*.straße.example']);
    expect(m.evaluate('xn--bcher-kva.example').verdict).toBe('allowed');
    expect(m.evaluate('BÜCHER.example').verdict).toBe('allowed');
    expect(m.evaluate('shop.xn--strae-oqa.example').verdict).toBe('allowed');
    expect(m.evaluate('bucher.example').verdict).toBe('notAllowed');
  });

  it('refuses patterns that would match unrelated owners or are malformed', () => {
    for (const bad of ['*.com', '**.com', '*.co.uk', '**.com.au', '*example.com', 'exam*.com', '*.', '**.', 'a..b.com', '.example.com',
      `${'a'.repeat(64)}.com`, `${'a.'.repeat(130)}com`, '1.2.3.4.5', '*.0.0.1', 'ex?mple.com']) {
      expect(() => new DomainMatcher([bad]), bad).toThrow(/invalid domain pattern/);
    }
    // Controls: scoped wildcards under a registrable name, label wildcards left of it, private suffixes.
    for (const good of ['*.example.com', '**.example.co.uk', 'region*.s3.example.com', '*.localhost', '**.internal', 'localhost', 'example.com', 'co.uk']) {
      expect(() => new DomainMatcher([good]), good).not.toThrow();
    }
  });

  it('the global * is accepted in the allow list and rejected in the deny list', () => {
    expect(() => new DomainMatcher(['*'])).not.toThrow();
    expect(() => new DomainMatcher([], ['*'])).toThrow(/unsupported global wildcard domain pattern "\*"/);
    expect(() => new DomainMatcher([''])).toThrow(/allow entry is empty/);
    expect(() => new DomainMatcher(['http://x.com/'])).toThrow(/invalid domain pattern/);
  });
});

describe('host normalisation', () => {
  it('normalises names and IP literals', () => {
    expect(normalizeHost(' Example.COM. ')).toBe('example.com');
    expect(normalizeHost('[::1]:443')).toBe('0:0:0:0:0:0:0:1');
    expect(normalizeHost('10.0.0.1:80')).toBe('10.0.0.1');
    expect(isIpLiteral('::ffff:127.0.0.1')).toBe(true);
    expect(isIpLiteral('example.com')).toBe(false);
    expect(canonicalIp('fe80::1%eth0')).toBe('fe80:0:0:0:0:0:0:1%eth0');
  });

  it('canonicalises every inet_aton spelling of an IPv4 address', () => {
    for (const spelling of ['2130706433', '0x7f.1', '0177.0.0.1', '127.1', '127.000.000.001', '0x7f000001', '127.0.1', '0x7F.0.0.0x1']) {
      expect(normalizeHost(spelling), spelling).toBe('127.0.0.1');
      expect(isIpLiteral(spelling), spelling).toBe(true);
    }
    expect(normalizeHost('0251.0376.0251.0376')).toBe('169.254.169.254');
    expect(normalizeHost('2852039166')).toBe('169.254.169.254');
    expect(normalizeHost('[::ffff:0x7f.1]')).not.toBe('127.0.0.1'); // brackets are IPv6 only
    // Not IPv4 in any spelling: stays a name (and the proxy refuses numeric-looking names).
    for (const bad of ['256.1.1.1', '1.2.3.4.5', '0x1g', '4294967296', '08.1.1.1']) expect(parseIPv4(bad), bad).toBeNull();
    expect(parseIPv4('4294967295')).toEqual([255, 255, 255, 255]);
    expect(parseIPv4('1.2.65535')).toEqual([1, 2, 255, 255]);
  });

  it('parses IPv6 forms', () => {
    expect(parseIPv6('::')).toEqual(new Array(16).fill(0));
    expect(parseIPv6('::ffff:10.1.2.3')!.slice(10)).toEqual([0xff, 0xff, 10, 1, 2, 3]);
    expect(parseIPv6('1::2:3')!.slice(0, 2)).toEqual([0, 1]);
    expect(parseIPv6('not-an-ip')).toBeNull();
  });
});

describe('classifyAddress', () => {
  const cases: Array<[string, string]> = [
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['::1', 'loopback'],
    ['10.0.0.1', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    // All of 169.254.0.0/16 is metadata territory (refused even with allowLocal).
    ['169.254.1.1', 'metadata'],
    ['169.254.170.2', 'metadata'],
    ['100.100.100.200', 'metadata'],
    ['192.0.0.192', 'metadata'],
    ['168.63.129.16', 'metadata'],
    ['fd00:ec2::23', 'metadata'],
    ['fd00:ec2:0:0:1::1', 'metadata'],
    ['fd00:ec2:1::1', 'uniqueLocal'],
    ['fe80::1', 'linkLocal'],
    ['febf::1', 'linkLocal'],
    ['fc00::1', 'uniqueLocal'],
    ['fdff::1', 'uniqueLocal'],
    ['100.64.0.1', 'cgnat'],
    ['100.127.255.254', 'cgnat'],
    ['169.254.169.254', 'metadata'],
    ['fd00:ec2::254', 'metadata'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['::', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['ff02::1', 'multicast'],
    ['255.255.255.255', 'reserved'],
    ['192.0.2.1', 'reserved'],
    ['2001:db8::1', 'reserved'],
    // IPv4 carried in IPv6 is judged by its IPv4 address.
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['::ffff:169.254.169.254', 'metadata'],
    ['::ffff:10.0.0.1', 'private'],
    ['64:ff9b::a00:1', 'private'],
    ['::ffff:8.8.8.8', 'public'],
    // Public controls.
    ['8.8.8.8', 'public'],
    ['172.32.0.1', 'public'],
    ['100.128.0.1', 'public'],
    ['2606:4700::1111', 'public'],
  ];
  it.each(cases)('%s is %s', (ip, cls) => {
    expect(classifyAddress(ip)).toBe(cls);
    expect(isNonPublicAddress(ip)).toBe(cls !== 'public');
  });

  it('rejects non-addresses', () => {
    expect(() => classifyAddress('example.com')).toThrow(TypeError);
  });
});
