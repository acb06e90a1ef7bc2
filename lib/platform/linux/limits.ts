/**
 * The defaults of the limits every Linux sandbox gets (processes, tmpfs sizes, per-uid kernel
 * quotas), in both modes.
 */
/** Default cap on processes+threads per sandbox in isolated mode (counted per user namespace). */
export const DEFAULT_MAX_PROCESSES = 4096;
/** Default total size of isolated mode's private tmpfs mounts: /tmp 3/4, /dev/shm 1/4. */
export const DEFAULT_TMP_BYTES = 1 << 30;
/** Per-uid kernel quotas the command gets (RLIMIT_SIGPENDING also bounds POSIX timers). */
export const DEFAULT_SIGPENDING = 1024;
export const DEFAULT_MSGQUEUE_BYTES = 256 << 10;

/** tmpfs options for isolated mode's private /tmp and /dev/shm (sizes in bytes, inodes bounded too). */
export function tmpfsSizes(tmpBytes = DEFAULT_TMP_BYTES): { tmp: string; shm: string } {
  const opts = (bytes: number) => `size=${bytes},nr_inodes=${Math.max(1024, Math.floor(bytes / 4096))}`;
  const shm = Math.max(4096, Math.floor(tmpBytes / 4 / 4096) * 4096);
  return { tmp: opts(Math.max(4096, tmpBytes - shm)), shm: opts(shm) };
}
