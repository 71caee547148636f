/**
 * Typed errors of the Tenure client.
 *
 * Every failed call is a {@link TenureError}: the gRPC status code plus, when
 * the server sent one, the `google.rpc.ErrorInfo` reason (`LEASE_HELD`,
 * `LEASE_NOT_HELD`, ...) and its metadata, decoded from the standard
 * `grpc-status-details-bin` trailer. The end of a session is a
 * {@link LeaseLostError}, found as `session.signal.reason`.
 */
import { status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import { ErrorInfo } from "./gen/google/rpc/error_details";
import { Status } from "./gen/google/rpc/status";

/** The `google.rpc.ErrorInfo` domain of every Tenure error. */
export const ERROR_DOMAIN = "tenure.v1";

/** The type URL of a packed `google.rpc.ErrorInfo`. */
const ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo";

/** The trailer carrying a serialized `google.rpc.Status`. */
const STATUS_DETAILS_KEY = "grpc-status-details-bin";

/**
 * The stable reasons the server sends in `ErrorInfo.reason` (domain
 * `tenure.v1`), usable as values: `Reason.LEASE_HELD`.
 */
export const Reason = {
  /** Another holder has the lease (FAILED_PRECONDITION; metadata holder, fencing_token, ttl_seconds). */
  LEASE_HELD: "LEASE_HELD",
  /** The caller does not hold the lease any more (FAILED_PRECONDITION; metadata state). */
  LEASE_NOT_HELD: "LEASE_NOT_HELD",
  /** Nobody holds the lease (NOT_FOUND). */
  LEASE_NOT_FOUND: "LEASE_NOT_FOUND",
  /** The lease name breaks the naming rule (INVALID_ARGUMENT). */
  INVALID_NAME: "INVALID_NAME",
  /** The holder is empty, too long or not printable (INVALID_ARGUMENT). */
  INVALID_HOLDER: "INVALID_HOLDER",
  /** The TTL is zero, negative or above the server's maximum (INVALID_ARGUMENT). */
  INVALID_TTL: "INVALID_TTL",
  /** The lease key is too short, too long or not printable ASCII (INVALID_ARGUMENT). */
  INVALID_LEASE_KEY: "INVALID_LEASE_KEY",
  /** The expected revision is missing (INVALID_ARGUMENT). */
  INVALID_REVISION: "INVALID_REVISION",
  /** The metadata has too many entries or is too large (INVALID_ARGUMENT). */
  INVALID_METADATA: "INVALID_METADATA",
  /** The wait is negative or above the server's maximum (INVALID_ARGUMENT). */
  INVALID_WAIT: "INVALID_WAIT",
  /** Another argument is malformed (INVALID_ARGUMENT). */
  INVALID_ARGUMENT: "INVALID_ARGUMENT",
  /** The bucket holds a value under this name that Tenure cannot read (DATA_LOSS). */
  RECORD_UNREADABLE: "RECORD_UNREADABLE",
  /** NATS cannot be reached or did not answer in time (UNAVAILABLE). */
  NATS_UNAVAILABLE: "NATS_UNAVAILABLE",
  /** The server is shutting down (UNAVAILABLE). */
  SHUTTING_DOWN: "SHUTTING_DOWN",
  /** An unexpected server failure (INTERNAL). */
  INTERNAL: "INTERNAL",
} as const;

/** One of the server's `ErrorInfo` reasons (see {@link Reason}). */
export type Reason = (typeof Reason)[keyof typeof Reason];

/**
 * A failed Tenure call.
 *
 * `reason` is the server's `ErrorInfo` reason, or `undefined` when the
 * failure carries none (a transport failure such as an unreachable server,
 * or a deadline that ran out on the client).
 *
 * @example
 * ```ts
 * try { await client.acquire("jobs.nightly", "worker-1"); }
 * catch (err) {
 *   if (err instanceof TenureError && err.reason === Reason.LEASE_HELD) {
 *     console.log("held by", err.metadata.holder);
 *   } else throw err;
 * }
 * ```
 */
export class TenureError extends Error {
  /** The gRPC status code of the failure. */
  readonly code: GrpcStatus;
  /**
   * The `ErrorInfo` reason from the server, or `undefined` when the status
   * carried none. A reason unknown to this client version is kept as sent.
   */
  readonly reason: Reason | undefined;
  /** The `ErrorInfo` metadata, e.g. `holder` and `fencing_token` for LEASE_HELD. */
  readonly metadata: Readonly<Record<string, string>>;
  /** The server's message for a person (without the code prefix). */
  readonly details: string;

  /** Builds an error; most code gets one from {@link TenureError.from}. */
  constructor(
    code: GrpcStatus,
    reason: Reason | undefined,
    details: string,
    metadata: Record<string, string> = {},
    options?: { cause?: unknown },
  ) {
    super(`${reason ?? GrpcStatus[code] ?? code}: ${details}`, options);
    this.name = "TenureError";
    this.code = code;
    this.reason = reason;
    this.details = details;
    this.metadata = Object.freeze({ ...metadata });
  }

  /**
   * Converts anything a gRPC call rejected with into a TenureError, decoding
   * the `ErrorInfo` detail of domain `tenure.v1` when present. A TenureError
   * is returned as it is.
   */
  static from(err: unknown): TenureError {
    if (err instanceof TenureError) return err;
    if (!isServiceError(err)) {
      const message = err instanceof Error ? err.message : String(err);
      return new TenureError(GrpcStatus.UNKNOWN, undefined, message, {}, { cause: err });
    }
    const info = errorInfoOf(err);
    return new TenureError(
      err.code,
      info?.reason as Reason | undefined,
      err.details ?? err.message,
      info?.metadata ?? {},
      { cause: err },
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

/** The Tenure `ErrorInfo` inside a status's details trailer, if any. */
function errorInfoOf(err: ServiceError): ErrorInfo | undefined {
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
      if (detail.typeUrl !== ERROR_INFO_TYPE_URL) continue;
      try {
        const info = ErrorInfo.decode(detail.value);
        if (info.domain === ERROR_DOMAIN) return info;
      } catch {
        // A malformed detail is ignored; the status code still stands.
      }
    }
  }
  return undefined;
}

/**
 * Why a session stopped being held:
 * - `LEASE_NOT_HELD`: a renewal was refused; someone else holds the lease or
 *   it was released or revoked behind the session's back.
 * - `SAFE_DEADLINE_PASSED`: renewals did not get through before the safe
 *   deadline (server or network away, or the process stalled).
 * - `RELEASED`: the session was released by its owner.
 */
export type LossReason = "LEASE_NOT_HELD" | "SAFE_DEADLINE_PASSED" | "RELEASED";

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
      SAFE_DEADLINE_PASSED: "no renewal got through before the safe deadline",
      RELEASED: "the session was released",
    };
    super(`lease ${JSON.stringify(leaseName)} (token ${fencingToken}) lost: ${why[reason]}`, options);
    this.name = "LeaseLostError";
    this.reason = reason;
    this.leaseName = leaseName;
    this.fencingToken = fencingToken;
  }
}
