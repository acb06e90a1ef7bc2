/**
 * Stdio streams for a deferred start (BackendProcess.started): the handle needs its stdin, stdout
 * and stderr synchronously, as child_process gives them, but the real pipes exist only once the
 * command has started (Windows: after the ACL edits run off the JS thread).
 *
 *   const io = deferredStdio(['pipe', 'pipe', 'ignore']);   // streams: [Writable, Readable, null]
 *   ...later: io.attach(realStreams)  // queued stdin writes (and end) go to the real pipe, output flows
 *   ...or:    io.abandon()            // never started: stdin is destroyed, outputs end empty
 *
 * stdin: writes before the start are held (with backpressure: write() returns false past the
 * high-water mark) and delivered in order after it; end() before the start ends the real pipe
 * once it exists. stdout/stderr: plain Readables fed from the real sockets, with backpressure.
 */
import { Readable, Writable } from 'node:stream';

export interface DeferredStdio {
  streams: Array<Readable | Writable | null>;
  /** The command started: connect each proxy to its real stream (null where there is none). */
  attach(real: Array<Readable | Writable | null>): void;
  /** The command never started: outputs end (empty), stdin is destroyed (writes fail, EPIPE-like). */
  abandon(): void;
}

function deferredWritable(): { stream: Writable; attach(real: Writable | null): void; abandon(): void } {
  let real: Writable | null = null;
  let settled = false;
  const queue: Array<{ chunk: unknown; encoding: BufferEncoding; cb: (err?: Error | null) => void }> = [];
  let pendingEnd: ((err?: Error | null) => void) | null = null;
  const stream = new Writable({
    decodeStrings: false,
    write(chunk, encoding, cb) {
      if (real) real.write(chunk, encoding, cb);
      else queue.push({ chunk, encoding, cb });
    },
    final(cb) {
      if (real) real.end(cb);
      else if (settled) cb();
      else pendingEnd = cb;
    },
    destroy(err, cb) {
      if (real && !real.destroyed) real.destroy();
      cb(err);
    },
  });
  return {
    stream,
    attach(r) {
      settled = true;
      if (r === null) {
        stream.destroy();
        return;
      }
      real = r;
      // Errors of the real pipe (EPIPE when the command exits without reading) surface on the proxy.
      r.on('error', (e) => {
        if (!stream.destroyed) stream.destroy(e);
      });
      for (const q of queue.splice(0)) r.write(q.chunk, q.encoding, q.cb);
      if (pendingEnd) {
        const cb = pendingEnd;
        pendingEnd = null;
        r.end(cb);
      }
      if (stream.destroyed) r.destroy();
    },
    abandon() {
      settled = true;
      queue.length = 0;
      pendingEnd = null;
      stream.destroy();
    },
  };
}

function deferredReadable(): { stream: Readable; attach(real: Readable | null): void; abandon(): void } {
  let real: Readable | null = null;
  const stream = new Readable({
    read() {
      real?.resume();
    },
    destroy(err, cb) {
      if (real && !real.destroyed) real.destroy();
      cb(err);
    },
  });
  let ended = false;
  const end = () => {
    if (ended || stream.destroyed) return;
    ended = true;
    stream.push(null);
    // As net.Socket does at EOF: an ended stream nobody reads still emits 'end' (and 'close').
    if (stream.readableLength === 0) stream.read(0);
  };
  return {
    stream,
    attach(r) {
      if (r === null) return end();
      real = r;
      r.on('data', (d: Buffer) => {
        if (!stream.push(d)) r.pause();
      });
      r.on('end', end);
      r.on('error', (e) => {
        if (!stream.destroyed) stream.destroy(e);
      });
      // A real stream that closes without 'end' (destroyed): end the proxy too.
      r.on('close', end);
      if (stream.destroyed) r.destroy();
    },
    abandon: end,
  };
}

/** Proxies for the stdio entries that are 'pipe' (index 0: stdin), null for the others. */
export function deferredStdio(pipes: boolean[]): DeferredStdio {
  const parts = pipes.map((p, i) => (!p ? null : i === 0 ? deferredWritable() : deferredReadable()));
  return {
    streams: parts.map((p) => p?.stream ?? null),
    attach(real) {
      parts.forEach((p, i) => (p as { attach(r: unknown): void } | null)?.attach(real[i] ?? null));
    },
    abandon() {
      for (const p of parts) p?.abandon();
    },
  };
}
