/**
 * Small promise wrappers over the generated grpc-js stubs, and the one place
 * where every call gets its credentials (bearer token, extra metadata) and
 * where every failure is turned into a {@link TenureError} that names the
 * server and the RPC.
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

/** A bearer token: a fixed string, or a function asked for a fresh one before every call. */
export type TokenSource = string | (() => string | Promise<string>);

/** What every call of one client carries: where it goes and how it authenticates. */
export class CallContext {
  /** The server address as given to the client ("host:port"), for error messages. */
  readonly target: string;
  readonly #token: TokenSource | undefined;
  readonly #metadata: Readonly<Record<string, string>>;

  constructor(target: string, token: TokenSource | undefined, metadata: Record<string, string> = {}) {
    this.target = target;
    this.#token = token;
    this.#metadata = { ...metadata };
  }

  /** The metadata of one call: the extra entries and `authorization: Bearer <token>`. */
  async metadata(): Promise<Metadata> {
    const md = new Metadata();
    for (const [key, value] of Object.entries(this.#metadata)) md.set(key, value);
    if (this.#token !== undefined) {
      const token = typeof this.#token === "string" ? this.#token : await this.#token();
      md.set("authorization", `Bearer ${token}`);
    }
    return md;
  }

  /** `err` as a TenureError whose message names this server and `rpc`. */
  error(err: unknown, rpc: string): TenureError {
    return TenureError.from(err, { target: this.target, rpc });
  }
}

/** A unary call in flight: its result, and a way to cancel it. */
export interface PendingCall<Res> {
  /** Resolves with the reply; rejects with a {@link TenureError}. */
  readonly result: Promise<Res>;
  /** Cancels the call (the result then rejects with CANCELLED). */
  cancel(): void;
}

/**
 * Starts the unary call `rpc` with a deadline `timeoutMs` from now. When
 * `signal` aborts, the call is cancelled and the promise rejects with the
 * signal's reason.
 */
export function unary<Req, Res>(
  ctx: CallContext,
  rpc: string,
  method: UnaryMethod<Req, Res>,
  request: Req,
  timeoutMs: number,
  signal?: AbortSignal,
): PendingCall<Res> {
  let call: ClientUnaryCall | undefined;
  let cancelled = false;
  const deadline = Date.now() + Math.max(1, Math.ceil(timeoutMs));
  const result = (async () => {
    let md: Metadata;
    try {
      md = await ctx.metadata();
    } catch (err) {
      throw new TenureError(16 /* UNAUTHENTICATED */, undefined, `the token callback failed: ${String(err)}`, {}, {
        cause: err,
        target: ctx.target,
        rpc,
      });
    }
    return new Promise<Res>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = () => call?.cancel();
      call = method(request, md, { deadline }, (error, response) => {
        signal?.removeEventListener("abort", onAbort);
        if (error === null) resolve(response);
        else if (signal?.aborted) reject(signal.reason);
        else reject(ctx.error(error, rpc));
      });
      if (cancelled) call.cancel();
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  })();
  return {
    result,
    cancel: () => {
      cancelled = true;
      call?.cancel();
    },
  };
}
