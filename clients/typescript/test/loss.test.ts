/**
 * Loss noticed at once: the client's one shared lease watch ends a session
 * the moment the server records a revoke or a takeover, long before the
 * next renewal would have run; admin helpers (list, revoke, get); release
 * after loss reports "was not held".
 */
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { describe, it } from "node:test";

import { EventType, LeaseLostError, Reason, TenureError, type LeaseEvent, type TenureClient } from "../src";
import { LeaseEvent as LeaseEventMessage } from "../src/gen/tenure/v1/lease";
import { coveringFilter, covers, showsLoss } from "../src/losswatch";
import { aborted, serverPerFile, uniqueName, within, type TenureServer } from "./harness";

let client: TenureClient;
serverPerFile((_s: TenureServer, c) => {
  client = c;
});

describe("loss watch", () => {
  it("covers every live name with the narrowest filter", () => {
    assert.equal(coveringFilter(["a.b.c"]), "a.b.c");
    assert.equal(coveringFilter(["a.b.c", "a.b.d"]), "a.b.>");
    assert.equal(coveringFilter(["a.b", "a.b.c"]), "a.>");
    assert.equal(coveringFilter(["a.b", "x.y"]), ">");
    for (const names of [["a.b.c", "a.b.d"], ["a.b", "a.b.c"], ["a", "b"]]) {
      for (const name of names) assert.ok(covers(coveringFilter(names), name), `${names} -> ${name}`);
    }
    assert.ok(!covers("a.b.>", "a.b"));
    assert.ok(!covers("a.b.>", "a.bc.d"));
  });

  it("follows a semaphore holder by name and slot, and a plain lease by name with slot 0", () => {
    const ended = () => undefined;
    const holder = { name: "sem", slot: 2, fencingToken: 10n, ended };
    const plain = { name: "sem", slot: 0, fencingToken: 10n, ended };
    const ev = (type: EventType, slot: number, fencingToken: bigint, revision = 20n) =>
      LeaseEventMessage.fromPartial({ type, name: "sem", slot, fencingToken, revision });
    // Other holders of other slots come and go: not this holder's loss.
    assert.equal(showsLoss(holder, ev(EventType.ACQUIRED, 1, 15n)), false);
    assert.equal(showsLoss(holder, ev(EventType.RELEASED, 3, 12n)), false);
    assert.equal(showsLoss(holder, ev(EventType.EXPIRED, 1, 11n)), false);
    // Its own slot ending, or taken by another token, is.
    assert.equal(showsLoss(holder, ev(EventType.REVOKED, 2, 10n)), true);
    assert.equal(showsLoss(holder, ev(EventType.EXPIRED, 2, 10n)), true);
    assert.equal(showsLoss(holder, ev(EventType.ACQUIRED, 2, 15n)), true);
    assert.equal(showsLoss(holder, ev(EventType.CURRENT, 2, 15n)), true);
    assert.equal(showsLoss(holder, ev(EventType.RENEWED, 2, 10n)), false);
    // A plain lease's session ignores slot events, and a holder the plain lease's.
    assert.equal(showsLoss(plain, ev(EventType.REVOKED, 2, 10n)), false);
    assert.equal(showsLoss(plain, ev(EventType.REVOKED, 0, 10n)), true);
    assert.equal(showsLoss(holder, ev(EventType.REVOKED, 0, 10n)), false);
  });

  it("ends a session on revoke before its next renewal, and release then reports false", async () => {
    const name = uniqueName("revoked");
    // Renewal at 90% of 30 s: only the watch can explain a loss within seconds.
    const session = await client.acquire(name, "victim", { ttlMs: 30_000, renewFraction: 0.9 });
    // A second session under the same prefix makes the watch widen to a subtree.
    const other = await client.acquire(`${name}.other`, "bystander", { ttlMs: 30_000 });
    const page = await client.listLeases(name);
    assert.deepEqual(page.leases.map((l) => l.name).sort(), [name, `${name}.other`]);
    assert.equal((await client.getLease(name)).fencingToken, session.fencingToken);

    const start = performance.now();
    const revision = await client.revokeLease(name, "test revoke");
    const reason = await within(10_000, "the loss signal", aborted(session.signal));
    const elapsed = performance.now() - start;
    console.log(`# revoke-to-loss: ${elapsed.toFixed(1)} ms`);
    assert.ok(revision > session.fencingToken);
    assert.ok(reason instanceof LeaseLostError);
    assert.equal(reason.reason, "LEASE_ENDED");
    assert.equal((reason.cause as LeaseEvent).type, EventType.REVOKED);
    assert.equal(session.isHeld(), false);
    assert.equal(await session.release(), false, "release after loss is not an error");
    assert.equal(other.isHeld(), true, "the bystander is untouched");
    assert.equal(await other.release(), true);
  });

  it("ends a session when another holder takes the name", async () => {
    const name = uniqueName("taken");
    const session = await client.acquire(name, "old", { ttlMs: 30_000, renewFraction: 0.9 });
    // Someone with the key releases behind the session's back; another takes it.
    await new Promise<void>((ok, fail) =>
      client.stub.release(
        { name, expectedRevision: session.revision, leaseKey: session.leaseKey, slot: 0 },
        (err) => (err ? fail(err) : ok()),
      ),
    );
    const next = await client.acquire(name, "new", { ttlMs: 30_000 });
    const reason = await within(10_000, "the loss signal", aborted(session.signal));
    assert.ok(reason instanceof LeaseLostError);
    assert.equal(reason.reason, "LEASE_ENDED");
    assert.equal(next.isHeld(), true, "the new holder's session is not ended by the old one's events");
    assert.equal(await next.release(), true);
  });

  it("revoke of a name nobody holds is LEASE_NOT_FOUND", async () => {
    await assert.rejects(
      client.revokeLease(uniqueName("nobody"), "test revoke"),
      (err: unknown) => err instanceof TenureError && err.reason === Reason.LEASE_NOT_FOUND,
    );
  });
});
