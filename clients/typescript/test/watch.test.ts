/**
 * `TenureClient.watch` against a real Tenure: the snapshot, then every kind
 * of live change, and cancellation.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ErrorReason, EventType, LockMode, TenureClient, TenureError, type LeaseEvent } from "../src";
import { nextMatching, TenureServer, uniqueName, within, serverPerFile } from "./harness";

let server: TenureServer;
let client: TenureClient;

serverPerFile((s, c) => {
  server = s;
  client = c;
});

/** Acquires with the raw stub: a holding nobody renews, so it expires. */
function acquireUnrenewed(name: string, holder: string): Promise<bigint> {
  return new Promise((ok, fail) =>
    client.stub.acquire(
      { name, holder, ttl: { seconds: 1n, nanos: 0 }, leaseKey: "", wait: undefined, metadata: {}, lockDelay: undefined, limit: 0, preference: 0, mode: LockMode.UNSPECIFIED },
      (err, reply) => (err ? fail(err) : ok(reply.lease!.fencingToken)),
    ),
  );
}

describe("watch", () => {
  it("yields ACQUIRED, RENEWED, RELEASED and EXPIRED", async () => {
    const prefix = uniqueName("watched");
    const stop = new AbortController();
    const events = client.watch(`${prefix}.>`, { signal: stop.signal })[Symbol.asyncIterator]();
    try {
      const first = await within(10_000, "the first event", events.next());
      assert.equal(first.done, false);
      assert.equal((first.value as LeaseEvent).type, EventType.SNAPSHOT_COMPLETE, "nothing held yet");

      const name = `${prefix}.job`;
      const session = await client.acquire(name, "watched-holder", { ttlMs: 1000 });
      const acquired = await nextMatching(events, "ACQUIRED", () => true);
      assert.equal(acquired.type, EventType.ACQUIRED);
      assert.equal(acquired.name, name);
      assert.equal(acquired.holder, "watched-holder");
      assert.equal(acquired.fencingToken, session.fencingToken);
      assert.equal(acquired.lease?.holder, "watched-holder");

      const renewed = await nextMatching(events, "RENEWED", () => true);
      assert.equal(renewed.type, EventType.RENEWED);
      assert.equal(renewed.fencingToken, session.fencingToken);
      assert.ok(renewed.revision > acquired.revision);

      await session.release();
      const released = await nextMatching(events, "RELEASED", (e) => e.type !== EventType.RENEWED);
      assert.equal(released.type, EventType.RELEASED);
      assert.equal(released.name, name);
      assert.equal(released.fencingToken, session.fencingToken);

      const other = `${prefix}.orphan`;
      const token = await acquireUnrenewed(other, "gone-away");
      const taken = await nextMatching(events, "ACQUIRED of the orphan", () => true);
      assert.equal(taken.type, EventType.ACQUIRED);
      assert.equal(taken.fencingToken, token);
      const expired = await nextMatching(events, "EXPIRED", () => true);
      assert.equal(expired.type, EventType.EXPIRED);
      assert.equal(expired.name, other);
      assert.equal(expired.holder, "gone-away");
      assert.equal(expired.fencingToken, token);
    } finally {
      stop.abort();
    }
    // Aborting ends the iteration without an error.
    assert.deepEqual(await within(5000, "the end of the watch", events.next()), { done: true, value: undefined });
  });

  it("starts with a snapshot of the held leases", async () => {
    const prefix = uniqueName("snap");
    const a = await client.acquire(`${prefix}.a`, "holder-a", { ttlMs: 5000 });
    const b = await client.acquire(`${prefix}.b`, "holder-b", { ttlMs: 5000 });
    const seen: LeaseEvent[] = [];
    await within(10_000, "the snapshot", (async () => {
      for await (const event of client.watch(`${prefix}.>`)) {
        seen.push(event);
        if (event.type === EventType.SNAPSHOT_COMPLETE) break; // leaving the loop cancels the call
      }
    })());
    assert.deepEqual(
      seen.map((e) => [e.type, e.name, e.fencingToken]).sort(),
      [
        [EventType.CURRENT, `${prefix}.a`, a.fencingToken],
        [EventType.CURRENT, `${prefix}.b`, b.fencingToken],
        [EventType.SNAPSHOT_COMPLETE, "", 0n],
      ].sort(),
    );
    assert.equal(seen.at(-1)?.type, EventType.SNAPSHOT_COMPLETE);
    await Promise.all([a.release(), b.release()]);
  });

  it("keeps only the requested event types", async () => {
    const name = uniqueName("filtered");
    const stop = new AbortController();
    const events = client
      .watch(name, { eventTypes: [EventType.RELEASED], signal: stop.signal })
      [Symbol.asyncIterator]();
    try {
      await nextMatching(events, "SNAPSHOT_COMPLETE", (e) => e.type === EventType.SNAPSHOT_COMPLETE);
      const session = await client.acquire(name, "filtered", { ttlMs: 1000 });
      // Wait past at least one renewal, seen through a second, unfiltered watch.
      const all = client.watch(name, { signal: stop.signal })[Symbol.asyncIterator]();
      await nextMatching(all, "RENEWED", (e) => e.type === EventType.RENEWED);
      await session.release();
      const next = await nextMatching(events, "the first filtered event", () => true);
      assert.equal(next.type, EventType.RELEASED, "ACQUIRED and RENEWED were filtered out");
    } finally {
      stop.abort();
    }
  });

  it("rejects an invalid name with a typed error", async () => {
    await assert.rejects(
      (async () => {
        for await (const _ of client.watch("bad..name")) {
          // never reached
        }
      })(),
      (err: unknown) => err instanceof TenureError && err.reason === ErrorReason.INVALID_NAME && err.rawReason === "INVALID_NAME",
    );
  });
});
