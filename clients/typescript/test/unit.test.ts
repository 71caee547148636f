/**
 * Unit tests that need no server: the fencing guard, fence headers, error
 * decoding and option checks.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import { fenceHeaders, FencingGuard, LeaseLostError, Reason, TenureClient, TenureError } from "../src";
import { ErrorInfo } from "../src/gen/google/rpc/error_details";
import { Status } from "../src/gen/google/rpc/status";
import { durationToMs, msToDuration } from "../src/time";

/** A ServiceError as grpc-js reports one, with an ErrorInfo detail. */
function serviceError(code: GrpcStatus, details: string, info?: ErrorInfo): ServiceError {
  const metadata = new Metadata();
  if (info) {
    const status = Status.encode({
      code,
      message: details,
      details: [{ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: Buffer.from(ErrorInfo.encode(info).finish()) }],
    }).finish();
    metadata.set("grpc-status-details-bin", Buffer.from(status));
  }
  return Object.assign(new Error(`${code} ${GrpcStatus[code]}: ${details}`), { code, details, metadata });
}

describe("FencingGuard", () => {
  it("accepts equal and higher tokens and refuses lower ones, per resource", () => {
    const guard = new FencingGuard();
    assert.equal(guard.highest("a"), undefined);
    assert.equal(guard.accept("a", 5n), true);
    assert.equal(guard.accept("a", 5n), true, "the same holding writes again");
    assert.equal(guard.accept("a", 4n), false);
    assert.equal(guard.highest("a"), 5n, "a refused token is not remembered");
    assert.equal(guard.accept("a", 9), true, "numbers are accepted too");
    assert.equal(guard.accept("b", 1n), true, "resources are independent");
    assert.equal(guard.highest("a"), 9n);
  });
});

describe("TenureError.from", () => {
  it("decodes the ErrorInfo reason and metadata of domain tenure.v1", () => {
    const err = TenureError.from(
      serviceError(GrpcStatus.FAILED_PRECONDITION, "lease is held", {
        reason: "LEASE_HELD",
        domain: "tenure.v1",
        metadata: { holder: "other", fencing_token: "42", ttl_seconds: "10" },
      }),
    );
    assert.equal(err.reason, Reason.LEASE_HELD);
    assert.equal(err.code, GrpcStatus.FAILED_PRECONDITION);
    assert.deepEqual(err.metadata, { holder: "other", fencing_token: "42", ttl_seconds: "10" });
    assert.equal(err.details, "lease is held");
    assert.equal(err.message, "LEASE_HELD: lease is held");
    assert.equal(err.rawReason, "LEASE_HELD");
    assert.equal(err.retryable, false, "LEASE_HELD is permanent: Acquire with a wait");
    assert.equal(TenureError.from(err), err);
  });

  it("maps a reason this client does not know to UNSPECIFIED and keeps the string", () => {
    const newer = TenureError.from(
      serviceError(GrpcStatus.FAILED_PRECONDITION, "frozen", { reason: "LEASE_FROZEN", domain: "tenure.v1", metadata: {} }),
    );
    assert.equal(newer.reason, Reason.UNSPECIFIED);
    assert.equal(newer.rawReason, "LEASE_FROZEN");
    assert.equal(newer.message, "LEASE_FROZEN: frozen");
    assert.equal(newer.retryable, false, "no known reason: FAILED_PRECONDITION is permanent");
  });

  it("calls REQUEST_TOO_LARGE permanent and TOO_MANY_REQUESTS retryable", () => {
    const tooLarge = TenureError.from(
      serviceError(GrpcStatus.RESOURCE_EXHAUSTED, "too large", { reason: "REQUEST_TOO_LARGE", domain: "tenure.v1", metadata: {} }),
    );
    assert.equal(tooLarge.reason, Reason.REQUEST_TOO_LARGE);
    assert.equal(tooLarge.retryable, false);
    const busy = TenureError.from(
      serviceError(GrpcStatus.RESOURCE_EXHAUSTED, "busy", { reason: "TOO_MANY_REQUESTS", domain: "tenure.v1", metadata: {} }),
    );
    assert.equal(busy.retryable, true);
  });

  it("ignores other domains and leaves the reason UNSPECIFIED without details", () => {
    const foreign = TenureError.from(
      serviceError(GrpcStatus.UNAVAILABLE, "proxy", { reason: "LEASE_HELD", domain: "example.com", metadata: {} }),
    );
    assert.equal(foreign.reason, Reason.UNSPECIFIED);
    const bare = TenureError.from(serviceError(GrpcStatus.UNAVAILABLE, "connection refused"));
    assert.equal(bare.reason, Reason.UNSPECIFIED);
    assert.equal(bare.rawReason, "");
    assert.equal(bare.code, GrpcStatus.UNAVAILABLE);
    assert.equal(bare.message, "UNAVAILABLE: connection refused");
    assert.equal(bare.retryable, true, "no reason: UNAVAILABLE is retryable");
    const other = TenureError.from(new TypeError("boom"));
    assert.equal(other.code, GrpcStatus.UNKNOWN);
    assert.ok(other.cause instanceof TypeError);
  });
});

describe("LeaseLostError", () => {
  it("names the lease, the token and the reason", () => {
    const err = new LeaseLostError("SAFE_DEADLINE_PASSED", "jobs.a", 7n);
    assert.equal(err.reason, "SAFE_DEADLINE_PASSED");
    assert.equal(err.fencingToken, 7n);
    assert.match(err.message, /"jobs\.a" \(token 7\)/);
  });
});

describe("durations", () => {
  it("convert between milliseconds and google.protobuf.Duration", () => {
    assert.deepEqual(msToDuration(1500), { seconds: 1n, nanos: 500_000_000 });
    assert.deepEqual(msToDuration(0), { seconds: 0n, nanos: 0 });
    assert.equal(durationToMs({ seconds: 10n, nanos: 0 }), 10_000);
    assert.equal(durationToMs(undefined), 0);
    assert.throws(() => msToDuration(-1), RangeError);
  });
});

describe("fenceHeaders", () => {
  it("sends the proof as base64url without padding and the token in decimal, u64 intact", () => {
    const backing = new Uint8Array([0xee, 0xfb, 0xff, 0xfe, 0x01, 0xee]);
    const proof = backing.subarray(1, 5); // a view at an offset: only its own bytes are sent
    assert.deepEqual(fenceHeaders(proof, 2n ** 64n - 1n), {
      "Tenure-Fence": "-__-AQ",
      "Tenure-Fencing-Token": "18446744073709551615",
    });
  });

  it("sends the token alone when there is no proof", () => {
    assert.deepEqual(fenceHeaders(new Uint8Array(0), 7n), { "Tenure-Fencing-Token": "7" });
  });
});

describe("acquire options", () => {
  it("are checked before anything is sent", async () => {
    const client = new TenureClient("127.0.0.1:1");
    try {
      await assert.rejects(client.acquire("a", "b", { renewFraction: 0 }), RangeError);
      await assert.rejects(client.acquire("a", "b", { safetyMarginMs: -1 }), RangeError);
      await assert.rejects(client.acquire("a", "b", { ttlMs: Number.NaN }), RangeError);
      await assert.rejects(client.acquire("a", "b", { rpcTimeoutMs: 0 }), RangeError);
    } finally {
      client.close();
    }
  });
});
