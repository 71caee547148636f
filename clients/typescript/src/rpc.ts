/**
 * Small promise wrappers over the generated grpc-js stubs.
 * @internal
 */
import { Metadata, type CallOptions, type ClientUnaryCall, type ServiceError } from "@grpc/grpc-js";

import { TenureError } from "./errors";

/** A generated unary stub method with the (request, metadata, options, callback) overload. */
export type UnaryMethod<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<CallOptions>,
  callback: (error: ServiceError | null, response: Res) => void,
) => ClientUnaryCall;

/** A unary call in flight: its result, and the handle that can cancel it. */
export interface PendingCall<Res> {
  /** Resolves with the reply; rejects with a {@link TenureError}. */
  readonly result: Promise<Res>;
  /** The grpc-js call, for `cancel()`. */
  readonly call: ClientUnaryCall;
}

/**
 * Starts a unary call with a deadline `timeoutMs` from now. When `signal`
 * aborts, the call is cancelled and the promise rejects with the signal's
 * reason.
 */
export function unary<Req, Res>(
  method: UnaryMethod<Req, Res>,
  request: Req,
  timeoutMs: number,
  signal?: AbortSignal,
): PendingCall<Res> {
  let call!: ClientUnaryCall;
  const result = new Promise<Res>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => call.cancel();
    call = method(
      request,
      new Metadata(),
      { deadline: Date.now() + Math.max(1, Math.ceil(timeoutMs)) },
      (error, response) => {
        signal?.removeEventListener("abort", onAbort);
        if (error === null) resolve(response);
        else if (signal?.aborted) reject(signal.reason);
        else reject(TenureError.from(error));
      },
    );
    signal?.addEventListener("abort", onAbort, { once: true });
  });
  return { result, call };
}
