/**
 * Unit tests that need no server: the fencing guard, error decoding and
 * option checks.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import { FencingGuard, LeaseLostError, Reason, TenureClient, TenureError } from "../src";
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
    assert.equal(TenureError.from(err), err);
  });

  it("ignores other domains and leaves the reason undefined without details", () => {
    const foreign = TenureError.from(
      serviceError(GrpcStatus.UNAVAILABLE, "proxy", { reason: "LEASE_HELD", domain: "example.com", metadata: {} }),
    );
    assert.equal(foreign.reason, undefined);
    const bare = TenureError.from(serviceError(GrpcStatus.UNAVAILABLE, "connection refused"));
    assert.equal(bare.reason, undefined);
    assert.equal(bare.code, GrpcStatus.UNAVAILABLE);
    assert.equal(bare.message, "UNAVAILABLE: connection refused");
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
