/** A pseudo-terminal the host opens for a command (Landlock mode; isolated mode makes its own inside). */
import * as tty from 'node:tty';
import { SandboxError } from '../../errors';
import type { LinuxNative } from '../../native';

export interface OpenedPty {
  master: number;
  slave: number;
}

export function openPty(native: LinuxNative, size: { cols: number; rows: number }): OpenedPty {
  if (!native.openPty) throw new SandboxError('EPLATFORM_UNSUPPORTED', 'this build of the addon has no pseudo-terminal support');
  const { master, slave } = native.openPty(size.cols, size.rows);
  return { master, slave };
}

/**
 * The master side as one duplex stream. Linux reports the slave's last close as EIO on the
 * master (after any buffered output has been read): that is the end of the terminal's output,
 * not an error. The stream owns the fd and closes it.
 */
export function ptyStream(master: number): tty.ReadStream {
  const stream = new tty.ReadStream(master);
  const destroy = stream.destroy.bind(stream);
  let ended = false;
  stream.destroy = (err?: Error) => {
    if ((err as NodeJS.ErrnoException | undefined)?.code !== 'EIO') return destroy(err);
    // End, do not destroy: destroy() would drop output that was read but not yet emitted. The
    // stream closes itself once it has ended (allowHalfOpen is off).
    (stream as unknown as { _handle?: { readStop?: () => void } })._handle?.readStop?.();
    if (!ended) {
      ended = true;
      stream.push(null);
    }
    return stream;
  };
  stream.on('error', () => {});
  return stream;
}
