import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fileUriToPath, FileUriError, parseFileUri, pathToFileUri } from '../../lib/permissions/uri';
import { nativePath } from '../../lib/prepare';
import { SandboxError } from '../../lib/errors';

describe('parseFileUri shapes (host independent)', () => {
  it.each([
    ['file:///usr/bin', { kind: 'posix', path: '/usr/bin' }],
    ['file://localhost/etc/hosts', { kind: 'posix', path: '/etc/hosts' }],
    ['file:///home/u/a%20b', { kind: 'posix', path: '/home/u/a b' }],
    ['file:///', { kind: 'posix', path: '/' }],
    ['file:///C:/Users/dev', { kind: 'drive', drive: 'C:', path: '\\Users\\dev' }],
    ['file:///c:/', { kind: 'drive', drive: 'C:', path: '\\' }],
    ['file:///D|/data', { kind: 'drive', drive: 'D:', path: '\\data' }],
    ['file://server/share/dir/f.txt', { kind: 'unc', host: 'server', share: 'share', path: '\\dir\\f.txt' }],
    ['FILE:///x', { kind: 'posix', path: '/x' }],
  ])('%s', (uri, expected) => {
    expect(parseFileUri(uri)).toEqual(expected);
  });

  it.each([
    ['http://example.com/x', /unsupported URI scheme `http`/],
    ['/plain/path', /not an absolute URI/],
    ['file:/no/authority', /expected `file:\/\/`/],
    ['file:///a?b', /query or fragment/],
    ['file:///a#b', /query or fragment/],
    ['file:///a%00b', /NUL byte/],
    ['file:///a%2Fb', /encoded path separator/],
    ['file:///a%ZZ', /invalid percent-encoding/],
    ['file://host', /has no share name/],
    ['file://user@host/share', /user info or a port/],
    ['file://', /empty path/],
  ])('rejects %s', (uri, re) => {
    expect(() => parseFileUri(uri)).toThrow(FileUriError);
    expect(() => parseFileUri(uri)).toThrow(re);
  });
});

describe('fileUriToPath with explicit path rules', () => {
  it('posix', () => {
    expect(fileUriToPath('file:///usr/./bin/../lib', 'posix')).toBe('/usr/lib');
  });
  it('Windows drive and UNC forms on any host', () => {
    expect(fileUriToPath('file:///C:/Users/dev/project', 'win32')).toBe('C:\\Users\\dev\\project');
    expect(fileUriToPath('file://fileserver/share/lib', 'win32')).toBe('\\\\fileserver\\share\\lib');
    expect(fileUriToPath('file://fileserver/share', 'win32')).toBe('\\\\fileserver\\share\\');
  });
  it('Windows forms are not valid on a POSIX host, and POSIX forms not on Windows', () => {
    expect(() => fileUriToPath('file:///C:/Users', 'posix')).toThrow('Windows drive path `C:` is not an absolute path on this host');
    expect(() => fileUriToPath('file://srv/share/x', 'posix')).toThrow('UNC host `srv` is not supported on this host');
    expect(() => fileUriToPath('file:///usr/bin', 'win32')).toThrow('path has no drive letter or UNC host, so it is not absolute on this host');
  });
  it('round trips with pathToFileUri', () => {
    for (const p of ['/', '/a b/c', '/x/ü/%']) expect(fileUriToPath(pathToFileUri(p, 'posix'), 'posix')).toBe(p);
    for (const p of ['C:\\Users\\a b', '\\\\srv\\share\\dir', 'D:\\']) {
      expect(fileUriToPath(pathToFileUri(p, 'win32'), 'win32')).toBe(path.win32.normalize(p));
    }
    expect(pathToFileUri('C:\\Users\\dev', 'win32')).toBe('file:///C:/Users/dev');
    expect(pathToFileUri('\\\\srv\\share\\d', 'win32')).toBe('file://srv/share/d');
  });
});

describe("nativePath: the seed's labelled error text", () => {
  it('"<label> URI `<uri>` is not valid on this exec-server host: …" as -32602', () => {
    let err: unknown;
    try {
      nativePath('file:///C:/work', 'sandbox cwd', 'linux');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('EREQUEST_INVALID');
    expect((err as SandboxError).message).toBe(
      'sandbox cwd URI `file:///C:/work` is not valid on this exec-server host: Windows drive path `C:` is not an absolute path on this host',
    );
    expect((err as SandboxError).detail?.rpc).toEqual({ code: -32602, message: (err as SandboxError).message });
  });
  it('Windows host accepts drive and UNC', () => {
    expect(nativePath('file:///C:/work', 'cwd', 'win32')).toBe('C:\\work');
    expect(nativePath('file://srv/share', 'sandbox workspace root', 'win32')).toBe('\\\\srv\\share\\');
  });
});
