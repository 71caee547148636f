/**
 * The Semaphore helper against two Tenure replicas sharing one bucket:
 * racing holders never exceed the limit, LIMIT_MISMATCH is typed, and the
 * loss watch follows a holder by (name, slot): other holders coming and
 * going leave it alone, a revoke of its own slot ends it.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { status as GrpcStatus } from "@grpc/grpc-js";

import { EventType, LeaseLostError, Reason, Semaphore, TenureClient, TenureError, type LeaseEvent } from "../src";
import { aborted, NatsServer, TenureServer, uniqueName, within } from "./harness";

let nats: NatsServer;
let replicas: TenureServer[] = [];
let clients: TenureClient[] = [];

before(async () => {
  nats = await NatsServer.start();
  replicas = [await TenureServer.start([], {}, { nats }), await TenureServer.start([], {}, { nats })];
  // Six clients, alternating replicas.
  clients = Array.from({ length: 6 }, (_, i) => new TenureClient(replicas[i % 2]!.address));
});
after(async () => {
  for (const c of clients) c.close();
  for (const r of replicas) await r.stop();
  await nats?.stop();
});

describe("Semaphore", () => {
  it("never lets more than `limit` of 6 racing clients hold at once, each with its own token", async () => {
    const name = uniqueName("ts.sem.race");
    const limit = 2;
    let live = 0;
    let most = 0;
    const tokens: bigint[] = [];
    const slots = new Set<number>();
    await within(60_000, "every holder's turn", Promise.all(
      clients.map(async (client, i) => {
        for (let round = 0; round < 2; round++) {
          const held = await new Semaphore(client, name, limit).acquire(`worker-${i}`, { ttlMs: 5000, waitMs: 50_000 });
          live++;
          most = Math.max(most, live);
          assert.ok(live <= limit, `${live} holders at once`);
          assert.ok(held.slot >= 1 && held.slot <= limit, `slot ${held.slot}`);
          slots.add(held.slot);
          tokens.push(held.fencingToken);
          // Let the others run into the full semaphore while this one holds.
          await new Promise((ok) => setImmediate(ok));
          assert.equal(held.isHeld(), true);
          live--;
          assert.equal(await held.release(), true);
        }
      }),
    ));
    assert.equal(tokens.length, 12);
    assert.equal(new Set(tokens).size, tokens.length, "every holding has its own fencing token");
    assert.ok(most >= 1 && most <= limit);
    console.log(`# semaphore race: 12 holdings, at most ${most} at once, slots used ${[...slots].sort()}`);
  });

  it("refuses another limit with a typed LIMIT_MISMATCH naming the limit in force", async () => {
    const name = uniqueName("ts.sem.limit");
    const held = await new Semaphore(clients[0]!, name, 2).acquire("first", { ttlMs: 10_000 });
    try {
      const err = await new Semaphore(clients[1]!, name, 3).acquire("second", { ttlMs: 10_000 }).then(
        () => assert.fail("a different limit was accepted"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof TenureError);
      assert.equal(err.reason, Reason.LIMIT_MISMATCH);
      assert.equal(err.code, GrpcStatus.FAILED_PRECONDITION);
      assert.equal(err.metadata.limit, "2");
      assert.equal(err.retryable, false);
      const state = await new Semaphore(clients[1]!, name, 2).state();
      assert.equal(state.limit, 2);
      assert.equal(state.freeSlots, 1);
      assert.deepEqual(state.holders.map((h) => h.fencingToken), [held.fencingToken]);
      assert.equal(state.waiting, 0);
    } finally {
      await held.release();
    }
  });

  it("is not ended by other holders acquiring and releasing, but is by a revoke of its own slot", async () => {
    const name = uniqueName("ts.sem.loss");
    const client = clients[0]!;
    const sem = new Semaphore(client, name, 3);
    // Renewal at 90% of 30 s: only the loss watch can end it within the test.
    const mine = await sem.acquire("mine", { ttlMs: 30_000, renewFraction: 0.9 });
    // Other holders on the same client (same loss watch) and on the other replica.
    const other = await sem.acquire("other", { ttlMs: 30_000 });
    const remote = await new Semaphore(clients[1]!, name, 3).acquire("remote", { ttlMs: 30_000 });
    assert.equal(new Set([mine.slot, other.slot, remote.slot]).size, 3);
    assert.equal(await other.release(), true);
    assert.equal(await remote.release(), true);
    const again = await sem.acquire("again", { ttlMs: 30_000 });
    assert.equal(await again.release(), true);
    assert.equal(mine.isHeld(), true);

    await sem.revoke(mine.slot, "test revoke");
    const reason = await within(10_000, "the loss signal", aborted(mine.signal));
    assert.ok(reason instanceof LeaseLostError);
    assert.equal(reason.reason, "LEASE_ENDED");
    // The loss watch delivers in revision order: the event that ended the
    // session is the revoke of its own slot, so the earlier ACQUIRED and
    // RELEASED events of the other slots did not end it.
    const cause = reason.cause as LeaseEvent;
    assert.equal(cause.type, EventType.REVOKED);
    assert.equal(cause.slot, mine.slot);
    assert.equal(cause.name, name);
    assert.equal(await mine.release(), false, "release after loss is not an error");
  });
});
