/**
 * Unit tests that need no server: the fencing guard, fence headers, error
 * decoding, option checks and the elector's reading of Observe.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import { fenceHeaders, FencingGuard, LeaderElector, LeaseLostError, Reason, TenureClient, TenureError, type Leader } from "../src";
import { newLeader, PreferredCandidate } from "../src/election";
import { ChangeType, ObserveResponse, type Candidate } from "../src/gen/tenure/v1/election";
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
      await assert.rejects(client.acquire("a", "b", { preference: -1 }), RangeError);
      await assert.rejects(client.acquire("a", "b", { preference: 2 ** 32 }), RangeError);
      await assert.rejects(client.acquire("a", "b", { preference: 1.5 }), RangeError);
      const elector = (preference: number) =>
        new LeaderElector(client, { name: "e", identity: "a", preference, onStartedLeading: () => {}, onStoppedLeading: () => {} });
      assert.throws(() => elector(-1), RangeError);
      assert.throws(() => elector(2 ** 32), RangeError);
      elector(2 ** 32 - 1);
    } finally {
      client.close();
    }
  });
});

describe("an elector's preference", () => {
  const named = (holder: string, preference: number): Candidate => ({ holder, preference });

  it("hands over to a greater preference once per naming of a candidate", () => {
    const p = new PreferredCandidate(1, "node-a");
    assert.equal(p.take(), undefined); // none named
    p.note(named("v2", 2));
    assert.equal(p.take(), "v2");
    // The hand-over failed (NO_WAITER): the same term is led again, with
    // no new try until Observe names a candidate again.
    assert.equal(p.take(), undefined);
    assert.equal(p.take(), undefined);
    p.note(named("v2", 2));
    assert.equal(p.take(), "v2");
    // Equal or lower preferences, and the elector itself, never displace it.
    for (const c of [named("v1", 1), named("v0", 0), named("node-a", 9)]) {
      p.note(c);
      assert.equal(p.take(), undefined, c.holder);
    }
    p.note(named("v3", 3));
    p.note(undefined); // it stopped waiting before this elector led
    assert.equal(p.take(), undefined);
  });

  it("never reports a PREFERRED change as a change of leader, also after a MISSED", () => {
    const leader = (holder: string, fencingToken: bigint) => ({ holder, fencingToken });
    const changes = [
      ObserveResponse.fromPartial({ type: ChangeType.CURRENT, leader: leader("node-a", 5n) }),
      ObserveResponse.fromPartial({ type: ChangeType.PREFERRED, leader: leader("node-a", 5n), preferred: named("v2", 2) }),
      ObserveResponse.fromPartial({ type: ChangeType.MISSED, endedHolder: "node-a", endedFencingToken: 5n, preferred: named("v2", 2) }),
      // After a MISSED the leader is unknown: a PREFERRED without one is not "nobody".
      ObserveResponse.fromPartial({ type: ChangeType.PREFERRED }),
      ObserveResponse.fromPartial({ type: ChangeType.ELECTED, leader: leader("v2", 9n) }),
      ObserveResponse.fromPartial({ type: ChangeType.PREFERRED, leader: leader("v2", 9n), preferred: named("v3", 3) }),
    ];
    const seen: Leader[] = [];
    let last: Leader | undefined;
    for (const change of changes) {
      const now = newLeader(change, last);
      if (now !== undefined) seen.push((last = now));
    }
    assert.deepEqual(seen, [
      { identity: "node-a", value: "", fencingToken: 5n },
      { identity: "", value: "", fencingToken: 0n, missed: true, endedIdentity: "node-a", endedFencingToken: 5n },
      { identity: "v2", value: "", fencingToken: 9n },
    ]);
  });
});
