/**
 * The one error class of the package. Every failure that is ours (bad input, a mechanism the host
 * lacks, a setup step that failed) is a SandboxError with a stable string `code`.
 *
 * ERROR_CODES mirrors native/error_codes.def line for line; test/native/error-codes.test.ts checks
 * that the addon's list and this one agree. Both are append-only.
 */
export const ERROR_CODES = [
  'EINVALID_ARGUMENT',
  'EINVALID_POLICY',
  'ENOT_FOUND',
  'ENOT_EXECUTABLE',
  'ESPAWN',
  'ENOT_ENFORCED',
  'EUNSUPPORTED_POLICY',
  'EUSERNS_UNAVAILABLE',
  'ELANDLOCK_UNSUPPORTED',
  'ESECCOMP_UNSUPPORTED',
  'ESECCOMP_INSTALL',
  'ENAMESPACE_SETUP',
  'EMOUNT_SETUP',
  'ECAPS_DROP',
  'ESYMLINK_ROOT',
  'EMAXBUFFER',
  'EABORTED',
  'EPLATFORM_UNSUPPORTED',
  'ESEATBELT_UNAVAILABLE',
  'ENETWORK_NOT_ENFORCEABLE',
  'EPROXY_CONFIG',
  'EPROXY_START',
  'EREQUEST_INVALID',
  'EREQUEST_INTERNAL',
  'ETOKEN_CREATE',
  'ESID_LOOKUP',
  'EACL_EDIT',
  'EDESKTOP_CREATE',
  'EJOB_CREATE',
  'EADDON_LOAD',
  'ETIMEDOUT',
  'ECOMMAND_FAILED',
  'ECHANGED_OUTSIDE',
  'ECHANGES_LIMIT',
  // Append new codes above this line, in the same order as native/error_codes.def.
] as const;

export type SandboxErrorCode = (typeof ERROR_CODES)[number];

export interface SandboxErrorDetails {
  syscall?: string;
  errno?: number;
  /** Windows: the GetLastError() value. */
  winError?: number;
  /** Extra machine-readable facts (missing feature, offending path, ...). */
  detail?: Record<string, unknown>;
  /** The underlying error, when this one wraps another (Error.cause). */
  cause?: unknown;
}

export class SandboxError extends Error {
  readonly code: SandboxErrorCode;
  readonly syscall?: string;
  readonly errno?: number;
  readonly winError?: number;
  readonly platform: NodeJS.Platform;
  readonly detail?: Record<string, unknown>;

  constructor(code: SandboxErrorCode, message: string, details: SandboxErrorDetails = {}) {
    super(message, details.cause !== undefined ? { cause: details.cause } : undefined);
    this.name = 'SandboxError';
    this.code = code;
    this.platform = process.platform;
    if (details.syscall !== undefined) this.syscall = details.syscall;
    if (details.errno !== undefined) this.errno = details.errno;
    if (details.winError !== undefined) this.winError = details.winError;
    if (details.detail !== undefined) this.detail = details.detail;
  }
}

/**
 * Node's longest timer: 2^31 - 1 ms (about 24.8 days). setTimeout with more fires after 1 ms (a
 * TimeoutOverflowWarning), which for a timeout means the command is killed at once, so every
 * timeout option is refused past it rather than chained: no command is meant to be stopped that
 * far ahead, and a refusal names the limit where a chain would hide it.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Whether `ms` is a timer length Node honours: a finite number above 0, at most MAX_TIMER_MS. */
export function isTimerMs(ms: unknown): ms is number {
  return typeof ms === 'number' && Number.isFinite(ms) && ms > 0 && ms <= MAX_TIMER_MS;
}

/** The CLI's exit status for an error raised before or while the command started. */
export function exitStatusForError(err: unknown): number {
  if (err instanceof SandboxError) {
    if (err.code === 'ENOT_FOUND') return 127;
    if (err.code === 'ENOT_EXECUTABLE') return 126;
  }
  return 125;
}
