/**
 * JSON-RPC error objects for request preparation, and their mapping onto SandboxError.
 *
 * Choice: prepareExecRequest throws a SandboxError whose `code` is EREQUEST_INVALID (-32602) or
 * EREQUEST_INTERNAL (-32603), whose `message` is exactly the JSON-RPC message (the seed's text),
 * and whose `detail.rpc` is the ready-made `{ code, message }` object. `toJsonRpcError()` turns any
 * thrown value into such an object (other SandboxError codes map as listed in RPC_CODE_FOR).
 */
import { SandboxError, type SandboxErrorCode } from '../errors';

export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;

export interface JsonRpcError {
  code: number;
  message: string;
  data?: unknown;
}

/** The JSON-RPC code for each SandboxError code that can surface while preparing or spawning. */
export const RPC_CODE_FOR: Partial<Record<SandboxErrorCode, number>> = {
  EREQUEST_INVALID: INVALID_PARAMS,
  EREQUEST_INTERNAL: INTERNAL_ERROR,
  EINVALID_ARGUMENT: INVALID_PARAMS,
  EINVALID_POLICY: INVALID_PARAMS,
  ESYMLINK_ROOT: INVALID_PARAMS,
  EUNSUPPORTED_POLICY: INVALID_PARAMS,
  ENOT_ENFORCED: INVALID_PARAMS,
  EPLATFORM_UNSUPPORTED: INVALID_PARAMS,
  ENETWORK_NOT_ENFORCEABLE: INVALID_PARAMS,
  EPROXY_CONFIG: INVALID_PARAMS,
  EPROXY_START: INTERNAL_ERROR,
};

/** `invalid_params(message)`: a SandboxError carrying `{ code: -32602, message }`. */
export function invalidParams(message: string, extra: Record<string, unknown> = {}): SandboxError {
  return new SandboxError('EREQUEST_INVALID', message, { detail: { ...extra, rpc: { code: INVALID_PARAMS, message } } });
}

/** `internal_error(message)`: a SandboxError carrying `{ code: -32603, message }`. */
export function internalError(message: string, extra: Record<string, unknown> = {}): SandboxError {
  return new SandboxError('EREQUEST_INTERNAL', message, { detail: { ...extra, rpc: { code: INTERNAL_ERROR, message } } });
}

/** The JSON-RPC error object for anything thrown by prepareExecRequest or a spawn. */
export function toJsonRpcError(err: unknown): JsonRpcError {
  if (err instanceof SandboxError) {
    const rpc = err.detail?.rpc as JsonRpcError | undefined;
    if (rpc && typeof rpc.code === 'number' && typeof rpc.message === 'string') return { code: rpc.code, message: rpc.message };
    return { code: RPC_CODE_FOR[err.code] ?? INTERNAL_ERROR, message: err.message };
  }
  return { code: INTERNAL_ERROR, message: err instanceof Error ? err.message : String(err) };
}
