/**
 * Typed errors of the Tenure client.
 *
 * Every failed call is a {@link TenureError}: the gRPC status code plus, when
 * the server sent one, the `google.rpc.ErrorInfo` reason as the generated
 * {@link ErrorReason} (`LEASE_HELD`, `LEASE_NOT_HELD`, ...) and its metadata,
 * and whether it is retryable; decoded from the standard
 * `grpc-status-details-bin` trailer. The end of a session is a
 * {@link LeaseLostError}, found as `session.signal.reason`.
 */
import { status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import { ErrorInfo, RetryInfo } from "./gen/google/rpc/error_details";
import { Status } from "./gen/google/rpc/status";
import { ErrorReason, errorReasonFromJSON, errorReasonToJSON } from "./gen/tenure/v1/error_reason";

/** The `google.rpc.ErrorInfo` domain of every Tenure error. */
export const ERROR_DOMAIN = "tenure.v1";

/** The type URL of a packed `google.rpc.ErrorInfo`. */
const ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo";

/** The type URL of a packed `google.rpc.RetryInfo`. */
const RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo";

/** The trailer carrying a serialized `google.rpc.Status`. */
const STATUS_DETAILS_KEY = "grpc-status-details-bin";

/**
 * The reason of a Tenure error: the generated `tenure.v1.ErrorReason` enum
 * (`proto/tenure/v1/error_reason.proto`), so it has every reason the server
 * sends: `ErrorReason.LEASE_HELD`, `ErrorReason.LEASE_NOT_HELD`, ...
 * `ErrorReason.UNSPECIFIED` stands for "no Tenure reason" (see
 * {@link TenureError.reason}). Also exported as {@link Reason}.
 */
export { ErrorReason, errorReasonToJSON } from "./gen/tenure/v1/error_reason";

/** The same enum as {@link ErrorReason}, under the name earlier versions used. */
export const Reason = ErrorReason;
/** One of the server's `ErrorInfo` reasons (see {@link ErrorReason}). */
export type Reason = ErrorReason;

/**
 * The one classification of the reasons (the "Error reasons" table of
 * clients/README.md): sending the same request again may succeed after
 * these; every other reason is permanent. The renew loop decides with it.
 */
export const RETRYABLE_REASONS: ReadonlySet<ErrorReason> = new Set([
  ErrorReason.NATS_UNAVAILABLE,
  ErrorReason.WATCH_LAGGED,
  ErrorReason.SHUTTING_DOWN,
  ErrorReason.TOO_MANY_REQUESTS,
  ErrorReason.TOO_MANY_WATCHES,
  ErrorReason.TOO_MANY_WAITERS,
  ErrorReason.TOO_MANY_SHARED_HOLDERS,
]);

/**
 * Whether sending the same request again may succeed after a failure with
 * `reason` ({@link RETRYABLE_REASONS}). False for every other reason,
 * `UNSPECIFIED` included: classify an error, which may carry no reason, with
 * {@link TenureError.retryable}.
 */
export function isRetryable(reason: ErrorReason): boolean {
  return RETRYABLE_REASONS.has(reason);
}

/** gRPC codes after which a failure without a Tenure reason may pass. */
const RETRYABLE_CODES: ReadonlySet<GrpcStatus> = new Set([
  GrpcStatus.UNAVAILABLE,
  GrpcStatus.DEADLINE_EXCEEDED,
  GrpcStatus.RESOURCE_EXHAUSTED,
  GrpcStatus.ABORTED,
  GrpcStatus.INTERNAL,
  GrpcStatus.UNKNOWN,
  GrpcStatus.CANCELLED,
]);

/**
 * The {@link ErrorReason} of an `ErrorInfo.reason` string; an unknown one
 * (from a newer server) or none is `ErrorReason.UNSPECIFIED`.
 */
export function parseReason(raw: string | undefined): ErrorReason {
  if (!raw) return ErrorReason.UNSPECIFIED;
  const reason = errorReasonFromJSON(raw);
  return reason === ErrorReason.UNRECOGNIZED ? ErrorReason.UNSPECIFIED : reason;
}

/**
 * A failed Tenure call.
 *
 * `reason` is the server's `ErrorInfo` reason, or `ErrorReason.UNSPECIFIED`
 * when the failure carries none (a transport failure such as an unreachable
 * server, or a deadline that ran out on the client) or one this client does
 * not know (`rawReason` has it).
 *
 * @example
 * ```ts
 * try { await client.acquire("jobs.nightly", "worker-1"); }
 * catch (err) {
 *   if (err instanceof TenureError && err.reason === ErrorReason.LEASE_HELD) {
 *     console.log("held by", err.metadata.holder);
 *   } else throw err;
 * }
 * ```
 */
export class TenureError extends Error {
  /** The gRPC status code of the failure. */
  readonly code: GrpcStatus;
  /**
   * The `ErrorInfo` reason from the server; `ErrorReason.UNSPECIFIED` when
   * the status carried none, or one this client does not know.
   */
  readonly reason: ErrorReason;
  /** The `ErrorInfo` reason exactly as sent (`""` when there was none). */
  readonly rawReason: string;
  /** The `ErrorInfo` metadata, e.g. `holder` and `fencing_token` for LEASE_HELD. */
  readonly metadata: Readonly<Record<string, string>>;
  /** The server's message for a person (without the code prefix). */
  readonly details: string;
  /** The server address the call went to ("host:port"), when known. */
  readonly target: string | undefined;
  /** The RPC that failed ("Acquire", "Renew", ...), when known. */
  readonly rpc: string | undefined;
  /**
   * How long the server asks to wait before retrying (its
   * `google.rpc.RetryInfo`, e.g. with `TOO_MANY_WAITERS` or a lock-delay's
   * `LEASE_HELD`), in milliseconds; undefined when it sent none.
   */
  readonly retryDelayMs: number | undefined;

  /**
   * Builds an error; most code gets one from {@link TenureError.from}.
   * `reason` is an {@link ErrorReason} or the `ErrorInfo.reason` string as
   * sent (an unknown string becomes `UNSPECIFIED`, kept in `rawReason`).
   * The message reads `tenure at <target>: <rpc>: <REASON or CODE>: <details>`.
   */
  constructor(
    code: GrpcStatus,
    reason: ErrorReason | string | undefined,
    details: string,
    metadata: Record<string, string> = {},
    options?: { cause?: unknown; target?: string; rpc?: string; retryDelayMs?: number },
  ) {
    const rawReason = reason === undefined || reason === ErrorReason.UNSPECIFIED ? "" : reason;
    const where = [
      options?.target === undefined ? undefined : `tenure at ${options.target}`,
      options?.rpc,
    ].filter((part) => part !== undefined);
    const prefix = where.length > 0 ? `${where.join(": ")}: ` : "";
    super(`${prefix}${rawReason || (GrpcStatus[code] ?? code)}: ${details}`, options);
    this.name = "TenureError";
    this.code = code;
    this.reason = parseReason(rawReason);
    this.rawReason = rawReason;
    this.details = details;
    this.target = options?.target;
    this.rpc = options?.rpc;
    this.retryDelayMs = options?.retryDelayMs;
    this.metadata = Object.freeze({ ...metadata });
  }

  /**
   * Whether sending the same call again may succeed. With a reason this
   * client knows, that is {@link isRetryable} (the table of
   * clients/README.md); without one (the server could not be reached, the
   * deadline passed, a newer server's reason) it goes by the gRPC code:
   * UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL,
   * UNKNOWN and CANCELLED are retryable.
   */
  get retryable(): boolean {
    if (this.reason !== ErrorReason.UNSPECIFIED) return isRetryable(this.reason);
    return RETRYABLE_CODES.has(this.code);
  }

  /**
   * Converts anything a gRPC call rejected with into a TenureError, decoding
   * the `ErrorInfo` detail of domain `tenure.v1` when present; `where`
   * names the server and RPC in the message. A TenureError is returned as it is.
   */
  static from(err: unknown, where: { target?: string; rpc?: string } = {}): TenureError {
    if (err instanceof TenureError) return err;
    if (!isServiceError(err)) {
      const message = err instanceof Error ? err.message : String(err);
      return new TenureError(GrpcStatus.UNKNOWN, undefined, message, {}, { cause: err, ...where });
    }
    const { info, retryDelayMs } = detailsOf(err);
    return new TenureError(
      err.code,
      info?.reason,
      err.details ?? err.message,
      info?.metadata ?? {},
      { cause: err, retryDelayMs, ...where },
    );
  }
}

/** Whether `err` looks like a grpc-js `ServiceError`. */
function isServiceError(err: unknown): err is ServiceError {
  return (
    err instanceof Error &&
    typeof (err as Partial<ServiceError>).code === "number" &&
    "metadata" in err
  );
}

/** The Tenure `ErrorInfo` and the `RetryInfo` delay inside a status's details trailer, if any. */
function detailsOf(err: ServiceError): { info: ErrorInfo | undefined; retryDelayMs: number | undefined } {
  let info: ErrorInfo | undefined;
  let retryDelayMs: number | undefined;
  const raw = err.metadata?.get(STATUS_DETAILS_KEY) ?? [];
  for (const value of raw) {
    if (typeof value === "string") continue;
    let status: Status;
    try {
      status = Status.decode(value);
    } catch {
      continue;
    }
    for (const detail of status.details) {
      try {
        if (detail.typeUrl === ERROR_INFO_TYPE_URL && info === undefined) {
          const decoded = ErrorInfo.decode(detail.value);
          if (decoded.domain === ERROR_DOMAIN) info = decoded;
        } else if (detail.typeUrl === RETRY_INFO_TYPE_URL && retryDelayMs === undefined) {
          const delay = RetryInfo.decode(detail.value).retryDelay;
          if (delay !== undefined) retryDelayMs = Number(delay.seconds) * 1000 + delay.nanos / 1e6;
        }
      } catch {
        // A malformed detail is ignored; the status code still stands.
      }
    }
  }
  return { info, retryDelayMs };
}

/**
 * Why a session stopped being held:
 * - `TRANSFERRED`: its holder handed the holding to a waiter
 *   (`Session.transfer`, or `LeaderElector.resignTo` for a term): like
 *   `RELEASED`, the holder's own choice, not a loss.
 * - `LEASE_NOT_HELD`: a renewal was refused; someone else holds the lease or
 *   it was released or revoked behind the session's back.
 * - `LEASE_ENDED`: the client's lease watch showed the holding end (REVOKED,
 *   EXPIRED, RELEASED, or another holder's token); `cause` is that event.
 * - `MISSED`: the client's lease watch said it missed changes of the name
 *   (a MISSED event: its server's watcher fell behind) and named this
 *   holding's fencing token (and slot) as one that ended among them; how it
 *   ended is unknown. `cause` is the MISSED event. A MISSED naming another
 *   token, or none, does not end the session.
 * - `SAFE_DEADLINE_PASSED`: renewals did not get through before the safe
 *   deadline (server or network away, or the process stalled).
 * - `RENEW_FAILED`: a renewal failed with another permanent error (one that
 *   retrying cannot fix, e.g. `INVALID_LEASE_KEY` or `RECORD_UNREADABLE`).
 * - `RELEASED`: the session was released by its owner.
 */
export type LossReason =
  | "LEASE_NOT_HELD"
  | "LEASE_ENDED"
  | "MISSED"
  | "SAFE_DEADLINE_PASSED"
  | "RENEW_FAILED"
  | "RELEASED"
  | "TRANSFERRED";

/**
 * The end of a session: the `reason` of its aborted `signal`, and what
 * {@link Session.assertHeld} throws. `cause` is the last renewal failure
 * (a {@link TenureError}) when there was one.
 */
export class LeaseLostError extends Error {
  /** Why the session ended. */
  readonly reason: LossReason;
  /** The lease name. */
  readonly leaseName: string;
  /** The fencing token of the holding that ended. */
  readonly fencingToken: bigint;

  /** Builds the error for the end of the session over `leaseName`. */
  constructor(
    reason: LossReason,
    leaseName: string,
    fencingToken: bigint,
    options?: { cause?: unknown },
  ) {
    const why: Record<LossReason, string> = {
      LEASE_NOT_HELD: "a renewal was refused: the lease is no longer held by this session",
      LEASE_ENDED: "the lease watch showed the holding end (revoked, expired, released or taken over)",
      MISSED: "the lease watch missed changes of the lease, and the holding ended among them",
      SAFE_DEADLINE_PASSED: "no renewal got through before the safe deadline",
      RENEW_FAILED: "a renewal failed with an error that retrying cannot fix",
      RELEASED: "the session was released",
      TRANSFERRED: "the session handed the holding over to a waiter",
    };
    super(`lease ${JSON.stringify(leaseName)} (token ${fencingToken}) lost: ${why[reason]}`, options);
    this.name = "LeaseLostError";
    this.reason = reason;
    this.leaseName = leaseName;
    this.fencingToken = fencingToken;
  }
}
