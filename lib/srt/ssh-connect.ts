/**
 * ssh's ProxyCommand inside an srt-settings sandbox: `node ssh-connect.js PROXY_HOST PROXY_PORT
 * HOST PORT` opens an HTTP CONNECT tunnel to HOST:PORT through the sandbox's proxy, then relays
 * stdin and stdout. It is what `GIT_SSH_COMMAND` names (runtime.ts), so `git clone
 * ssh://git@allowed.host/...` goes through the proxy and its allow list, as srt sends it through
 * socat. Node is the helper because it is the one program known to be there (no nc or socat is
 * required); it runs inside the sandbox with the command's own rights, so it adds no reach.
 *
 * HOST comes from a git URL a repository chooses: it is only ever a word of the request line,
 * and one that could end that line is refused before anything is sent.
 */
import * as net from 'node:net';

const MAX_HEAD = 16 * 1024;

function no(why: string): never {
  process.stderr.write(`sandbox proxy: ${why}\n`);
  process.exit(1);
}

function main(argv: string[]): void {
  const [proxyHost, proxyPort, host, port] = argv;
  if (!proxyHost || !/^[0-9]{1,5}$/.test(proxyPort ?? '')) no('usage: ssh-connect PROXY_HOST PROXY_PORT HOST PORT');
  if (!host || !/^[A-Za-z0-9._:[\]-]{1,253}$/.test(host)) no('bad host');
  if (!/^[0-9]{1,5}$/.test(port ?? '')) no('bad port');
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  const target = bare.includes(':') ? `[${bare}]:${port}` : `${bare}:${port}`;
  const sock = net.connect(Number(proxyPort), proxyHost);
  sock.on('error', (e) => no(`${target}: ${e.message}`));
  sock.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  let head = Buffer.alloc(0);
  const onHead = (chunk: Buffer): void => {
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) {
      if (head.length > MAX_HEAD) no(`${target}: the proxy's answer is too long`);
      return;
    }
    sock.off('data', onHead);
    const status = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
    const m = /^HTTP\/1\.[01] (\d{3})(.*)$/.exec(status);
    if (!m || m[1] !== '200') no(`${target}: ${(m ? `${m[1]}${m[2]}` : status).replace(/[^\x20-\x7e]/g, '?').slice(0, 200) || 'no answer'}`);
    const rest = head.subarray(end + 4);
    if (rest.length) process.stdout.write(rest);
    sock.pipe(process.stdout);
    process.stdin.pipe(sock);
    // ssh learns that the server went away from our stdout ending: leave then, whatever stdin does.
    sock.on('end', () => process.stdout.end(() => process.exit(0)));
  };
  sock.on('data', onHead);
  sock.on('end', () => {
    if (sock.listenerCount('data') > 0 && head.indexOf('\r\n\r\n') < 0) no(`${target}: no answer`);
  });
}

main(process.argv.slice(2));
