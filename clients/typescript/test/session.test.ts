/**
 * The session helper against a real Tenure: round trip, races, fencing
 * tokens, loss signalling and typed errors.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, describe, it } from "node:test";
import { status as GrpcStatus } from "@grpc/grpc-js";

import {
  EventType,
  FencingGuard,
  LeaseLostError,
  LockMode,
  Reason,
  Session,
  TenureClient,
  TenureError,
  type LeaseEvent,
} from "../src";
import { aborted, clientEntry, nextMatching, TenureServer, uniqueName, within, serverPerFile } from "./harness";

let server: TenureServer;
let client: TenureClient;

serverPerFile((s, c) => {
  server = s;
  client = c;
});

/** Starts a watch on `name` and returns its iterator once the snapshot is complete. */
async function watchFrom(name: string, signal: AbortSignal): Promise<AsyncIterator<LeaseEvent>> {
  const events = client.watch(name, { signal })[Symbol.asyncIterator]();
  await nextMatching(events, "SNAPSHOT_COMPLETE", (e) => e.type === EventType.SNAPSHOT_COMPLETE);
  return events;
}

/** The TenureError a promise rejects with. */
async function rejection(promise: Promise<unknown>): Promise<TenureError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof TenureError, `expected a TenureError, got ${err}`);
    return err;
  }
  assert.fail("expected the call to fail");
}

describe("session", () => {
  it("carries no fence proof from a server without --fence-signing-key: fenceHeaders sends the token alone", async () => {
    await using session = await client.acquire(uniqueName("noproof"), "worker-a", { ttlMs: 5000 });
    assert.equal(session.fenceProof.length, 0);
    assert.deepEqual(session.fenceHeaders(), { "Tenure-Fencing-Token": String(session.fencingToken) });
    const served = await client.fenceKeys();
    assert.deepEqual(served.keys, []);
    const keyLines = served.keyset.split("\n").filter((line) => line.split("#")[0]!.trim() !== "");
    assert.deepEqual(keyLines, [], "a keyset of no key");
  });

  it("acquires, renews in the background and releases", async () => {
    const name = uniqueName("roundtrip");
    const stop = new AbortController();
    const events = await watchFrom(name, stop.signal);
    try {
      const session = await client.acquire(name, "worker-a", { ttlMs: 1000, metadata: { job: "nightly" } });
      assert.equal(session.name, name);
      assert.equal(session.holder, "worker-a");
      assert.ok(session.fencingToken > 0n);
      assert.equal(session.revision, session.fencingToken, "a fresh holding's revision is its token");
      assert.equal(session.ttlMs, 1000);
      assert.ok(session.leaseKey.length >= 16);
      assert.deepEqual(session.lease.metadata, { job: "nightly" });
      assert.equal(session.isHeld(), true);
      assert.equal(session.signal.aborted, false);

      const current = await client.getLease(name);
      assert.equal(current.holder, "worker-a");
      assert.equal(current.fencingToken, session.fencingToken);

      // Renewals are sequential: the second RENEWED is only written after
      // the first reply was taken in, so the session's revision has moved.
      const isRenewal = (e: LeaseEvent) => e.type === EventType.RENEWED && e.fencingToken === session.fencingToken;
      const first = await nextMatching(events, "first RENEWED", isRenewal);
      await nextMatching(events, "second RENEWED", isRenewal);
      assert.ok(session.revision >= first.revision);
      assert.ok(session.revision > session.fencingToken);
      assert.equal(session.isHeld(), true);

      await session.release();
      assert.equal(session.isHeld(), false);
      assert.ok(session.signal.reason instanceof LeaseLostError);
      assert.equal(session.signal.reason.reason, "RELEASED");
      const released = await nextMatching(events, "RELEASED", (e) => e.type === EventType.RELEASED);
      assert.equal(released.fencingToken, session.fencingToken);
      assert.equal(released.holder, "worker-a");

      const gone = await rejection(client.getLease(name));
      assert.equal(gone.reason, Reason.LEASE_NOT_FOUND);
      assert.equal(gone.code, GrpcStatus.NOT_FOUND);
      await session.release(); // idempotent
      assert.throws(() => session.assertHeld(), LeaseLostError);
    } finally {
      stop.abort();
    }
  });

  it("lets exactly one of several racing sessions win", async () => {
    const name = uniqueName("race");
    const holders = ["racer-1", "racer-2", "racer-3", "racer-4"];
    const results = await Promise.allSettled(holders.map((h) => client.acquire(name, h, { ttlMs: 2000 })));
    const winners = results.filter((r): r is PromiseFulfilledResult<Session> => r.status === "fulfilled");
    const losers = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    assert.equal(winners.length, 1, "exactly one session wins");
    const winner = winners[0].value;
    for (const loser of losers) {
      const err = loser.reason;
      assert.ok(err instanceof TenureError);
      assert.equal(err.reason, Reason.LEASE_HELD);
      assert.equal(err.code, GrpcStatus.FAILED_PRECONDITION);
      assert.equal(err.metadata.holder, winner.holder);
      assert.equal(err.metadata.fencing_token, String(winner.fencingToken));
      assert.equal(err.metadata.ttl_seconds, "2");
    }
    await winner.release();
  });

  it("keeps the fencing token across renewals and raises it for the next holder", async () => {
    const name = uniqueName("fencing");
    const stop = new AbortController();
    const events = await watchFrom(name, stop.signal);
    try {
      const first = await client.acquire(name, "first", { ttlMs: 1000 });
      for (let i = 0; i < 2; i++) {
        const renewed = await nextMatching(events, `RENEWED #${i + 1}`, (e) => e.type === EventType.RENEWED);
        assert.equal(renewed.fencingToken, first.fencingToken);
        assert.equal(renewed.lease?.fencingToken, first.fencingToken);
        assert.ok(renewed.revision > first.fencingToken);
      }
      assert.equal(first.lease.fencingToken, first.fencingToken);
      await first.release();

      const second = await client.acquire(name, "second", { ttlMs: 1000 });
      assert.ok(second.fencingToken > first.fencingToken, "the next holder's token is greater");

      const store = new FencingGuard();
      assert.equal(store.accept(name, first.fencingToken), true);
      assert.equal(store.accept(name, second.fencingToken), true);
      assert.equal(store.accept(name, first.fencingToken), false, "the old holder is fenced off");
      assert.equal(store.highest(name), second.fencingToken);
      await second.release();
    } finally {
      stop.abort();
    }
  });

  it("signals LEASE_NOT_HELD as soon as a renewal is refused after a takeover (no loss watch)", async () => {
    const name = uniqueName("takeover");
    // A long TTL: the refusal (at the first renewal, after 1 s) comes well
    // before the safe deadline (2.7 s), so only a refused renewal explains
    // a LEASE_NOT_HELD loss. This client has its loss watch off, so the
    // renewal is what notices (tests/loss.test.ts covers the watch).
    const client = new TenureClient(server.address, { lossWatch: false });
    after(() => client.close());
    const session = await client.acquire(name, "old", { ttlMs: 3000 });
    // Someone ends the holding behind the session's back, and another
    // holder takes the name.
    await new Promise<void>((ok, fail) =>
      client.stub.release(
        { name, expectedRevision: session.revision, leaseKey: session.leaseKey, slot: 0 },
        (err) => (err ? fail(err) : ok()),
      ),
    );
    const next = await client.acquire(name, "new", { ttlMs: 3000 });
    assert.equal(session.isHeld(), true, "the session cannot know before it renews");

    const reason = await within(5000, "the loss signal", aborted(session.signal));
    assert.ok(reason instanceof LeaseLostError);
    assert.equal(reason.reason, "LEASE_NOT_HELD");
    assert.ok(reason.cause instanceof TenureError);
    assert.equal(reason.cause.reason, Reason.LEASE_NOT_HELD);
    assert.equal(session.isHeld(), false);
    assert.equal(await session.release(), false, "release after loss reports 'was not held'");

    const current = await client.getLease(name);
    assert.equal(current.holder, "new", "releasing the lost session leaves the new holder alone");
    assert.ok(next.fencingToken > session.fencingToken);
    await next.release();
  });

  it("stops believing it holds the lease when its renewals stall past the expiry and another takes over", async () => {
    const name = uniqueName("stalled");
    const session = await client.acquire(name, "stalled", { ttlMs: 1000 });
    assert.equal(session.isHeld(), true);
    // spawnSync blocks this process's event loop, so no renewal can run,
    // until another process has waited for the lease to expire and taken it.
    const script = `
      const { TenureClient } = require(${JSON.stringify(clientEntry)});
      const client = new TenureClient(${JSON.stringify(server.address)});
      client.acquire(${JSON.stringify(name)}, "taker", { ttlMs: 5000, waitMs: 15000 })
        .then((s) => { console.log(String(s.fencingToken)); process.exit(0); })
        .catch((e) => { console.error(String(e)); process.exit(1); });
    `;
    const taker = spawnSync(process.execPath, ["-e", script], { encoding: "utf8", timeout: 30_000 });
    assert.equal(taker.status, 0, `the taker failed: ${taker.stderr}`);
    const takerToken = BigInt(taker.stdout.trim());
    assert.ok(takerToken > session.fencingToken);

    // Before any renewal or timer gets to run, the session already knows.
    assert.equal(session.isHeld(), false, "a stalled holder never believes it holds past its safe deadline");
    const reason = await within(5000, "the loss signal", aborted(session.signal));
    assert.ok(reason instanceof LeaseLostError);
    assert.equal(reason.reason, "SAFE_DEADLINE_PASSED");
    await session.release();
    const current = await client.getLease(name);
    assert.equal(current.holder, "taker");
    assert.equal(current.fencingToken, takerToken);
  });

  it("waits for a held lease and gets it when the holder releases", async () => {
    const name = uniqueName("wait");
    const holder = await client.acquire(name, "holder", { ttlMs: 5000 });
    const waiting = client.acquire(name, "waiter", { ttlMs: 5000, waitMs: 20_000 });
    await holder.release();
    const waiter = await within(10_000, "the waiting acquire", waiting);
    assert.equal(waiter.holder, "waiter");
    assert.ok(waiter.fencingToken > holder.fencingToken);
    await waiter.release();
  });

  it("re-sends a waiting acquire whose grant came after its own safe deadline", async () => {
    const name = uniqueName("late");
    // A holding nobody renews: it expires after 2 s.
    const orphan = await new Promise<bigint>((ok, fail) =>
      client.stub.acquire(
        { name, holder: "orphan", ttl: { seconds: 2n, nanos: 0 }, leaseKey: "", wait: undefined, metadata: {}, lockDelay: undefined, limit: 0, preference: 0, mode: LockMode.UNSPECIFIED },
        (err, reply) => (err ? fail(err) : ok(reply.lease!.fencingToken)),
      ),
    );
    // Granted only after the orphan expires, i.e. more than this session's
    // 1 s TTL after its Acquire was sent: the first grant is born too late.
    const session = await client.acquire(name, "patient", { ttlMs: 1000, waitMs: 20_000 });
    assert.equal(session.isHeld(), true, "the session starts from the re-sent Acquire's send time");
    assert.ok(session.fencingToken > orphan);
    assert.ok(session.revision > session.fencingToken, "the re-sent Acquire renewed the same holding");
    await session.release();
  });

  it("releases at the end of an `await using` scope", async () => {
    const name = uniqueName("using");
    let kept: Session | undefined;
    {
      await using session = await client.acquire(name, "scoped", { ttlMs: 2000 });
      kept = session;
      assert.equal((await client.getLease(name)).holder, "scoped");
    }
    assert.equal(kept.isHeld(), false);
    assert.equal((kept.signal.reason as LeaseLostError).reason, "RELEASED");
    assert.equal((await rejection(client.getLease(name))).reason, Reason.LEASE_NOT_FOUND);
  });

  it("exposes the server's reason as a typed value", async () => {
    const badName = await rejection(client.acquire(".bad..name", "x", { ttlMs: 1000 }));
    assert.equal(badName.reason, Reason.INVALID_NAME);
    assert.equal(badName.code, GrpcStatus.INVALID_ARGUMENT);
    assert.match(badName.message, /^tenure at 127\.0\.0\.1:\d+: Acquire: INVALID_NAME: /);

    const badTtl = await rejection(client.acquire(uniqueName("ttl"), "x", { ttlMs: 10 * 3600 * 1000 }));
    assert.equal(badTtl.reason, Reason.INVALID_TTL);

    const badKey = await rejection(client.acquire(uniqueName("key"), "x", { leaseKey: "short" }));
    assert.equal(badKey.reason, Reason.INVALID_LEASE_KEY);

    await assert.rejects(client.acquire("x", "y", { renewFraction: 1 }), RangeError);
  });

  it("reports an unreachable server as a TenureError without a reason", async () => {
    const nowhere = new TenureClient("127.0.0.1:1", { rpcTimeoutMs: 2000 });
    try {
      const err = await rejection(nowhere.acquire(uniqueName("nowhere"), "x"));
      assert.equal(err.reason, Reason.UNSPECIFIED);
      assert.equal(err.rawReason, "");
      assert.equal(err.code, GrpcStatus.UNAVAILABLE);
      assert.equal(err.retryable, true);
    } finally {
      nowhere.close();
    }
  });
});
