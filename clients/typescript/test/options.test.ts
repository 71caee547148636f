/**
 * Acquire options of issue 12 against a real Tenure: lock-delay (a name
 * stays refused after a revoke, free at once after a release), the FIFO
 * queue's length in `inspect`, and a full queue (TOO_MANY_WAITERS) retried
 * within the wait, else surfaced as the typed, retryable error.
 */
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { status as GrpcStatus } from "@grpc/grpc-js";

import { Reason, TenureError, type TenureClient } from "../src";
import { serverPerFile, uniqueName, within, type TenureServer } from "./harness";

let client: TenureClient;
serverPerFile(
  (_s: TenureServer, c) => {
    client = c;
  },
  ["--max-waiters", "1"],
);

/** The TenureError a promise rejects with. */
async function rejection(promise: Promise<unknown>): Promise<TenureError> {
  const err = await promise.then(
    () => assert.fail("expected the call to fail"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof TenureError, `expected a TenureError, got ${err}`);
  return err;
}

/** Polls `inspect` (bounded) until `count` Acquires wait for `name`: queue tickets have no event. */
async function waiters(name: string, count: number): Promise<void> {
  const until = performance.now() + 10_000;
  while ((await client.inspect(name)).waiting !== count) {
    assert.ok(performance.now() < until, `${count} waiter(s) never showed for ${name}`);
    await delay(20);
  }
}

describe("lock-delay", () => {
  it("keeps a revoked name refused for the delay, then lets a waiter in", async () => {
    const name = uniqueName("ts.delay.revoked");
    const held = await client.acquire(name, "paused", { ttlMs: 10_000, lockDelayMs: 2000 });
    assert.equal(held.lease.lockDelay?.seconds, 2n);
    await client.revokeLease(name, "test revoke");
    const refused = await rejection(client.acquire(name, "next", { ttlMs: 10_000 }));
    assert.equal(refused.reason, Reason.LEASE_HELD);
    assert.equal(refused.metadata.state, "LOCK_DELAY");
    assert.ok(Number(refused.metadata.free_at_unix_ms) > 0);
    assert.ok(refused.retryDelayMs !== undefined && refused.retryDelayMs > 0, "a RetryInfo says when to come back");
    const next = await client.acquire(name, "next", { ttlMs: 10_000, waitMs: 15_000 });
    assert.ok(next.fencingToken > held.fencingToken);
    assert.equal(await next.release(), true);
  });

  it("frees a released name at once", async () => {
    const name = uniqueName("ts.delay.released");
    const held = await client.acquire(name, "tidy", { ttlMs: 10_000, lockDelayMs: 5000 });
    assert.equal(await held.release(), true);
    const next = await client.acquire(name, "next", { ttlMs: 10_000 });
    assert.equal(await next.release(), true);
  });
});

describe("waiting", () => {
  it("reports the queue, surfaces a full queue as TOO_MANY_WAITERS and retries it within a longer wait", async () => {
    const name = uniqueName("ts.fifo");
    const holder = await client.acquire(name, "holder", { ttlMs: 10_000 });
    assert.equal((await client.inspect(name)).waiting, 0);
    const first = client.acquire(name, "first", { ttlMs: 10_000, waitMs: 30_000 });
    await waiters(name, 1);

    // The queue (--max-waiters 1) is full: a short wait gets the typed error.
    const full = await rejection(client.acquire(name, "impatient", { ttlMs: 10_000, waitMs: 1000 }));
    assert.equal(full.reason, Reason.TOO_MANY_WAITERS);
    assert.equal(full.code, GrpcStatus.RESOURCE_EXHAUSTED);
    assert.equal(full.retryable, true);

    // A long wait comes back after the RetryInfo delay and queues once there is room.
    const patient = client.acquire(name, "patient", { ttlMs: 10_000, waitMs: 30_000 });
    assert.equal(await holder.release(), true);
    const firstHeld = await within(20_000, "the first waiter", first);
    await waiters(name, 1);
    assert.equal(await firstHeld.release(), true);
    const patientHeld = await within(20_000, "the patient waiter", patient);
    assert.ok(patientHeld.fencingToken > firstHeld.fencingToken);
    assert.equal(await patientHeld.release(), true);
  });
});
