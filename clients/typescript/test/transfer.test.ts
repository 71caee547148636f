/**
 * Handing a lease over against a real Tenure: Session.transfer to a waiting
 * acquire of another client, NO_WAITER, and LeaderElector.resignTo.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";

import { Elections, LeaderElector, LeaseLostError, Reason, TenureClient, TenureError, type Session } from "../src";
import { aborted, serverPerFile, TenureServer, uniqueName, within } from "./harness";

let server: TenureServer;
let client: TenureClient;

serverPerFile((s, c) => {
  server = s;
  client = c;
});

/** Polls `inspect` (bounded) until at least `count` acquires wait for `name`: queue tickets have no event. */
async function waiters(name: string, count = 1): Promise<void> {
  const until = performance.now() + 20_000;
  while ((await client.inspect(name)).waiting < count) {
    assert.ok(performance.now() < until, `${count} waiter(s) never showed for ${name}`);
    await delay(20); // poll interval
  }
}

async function rejection(promise: Promise<unknown>): Promise<TenureError> {
  const err = await promise.then(
    () => assert.fail("expected the call to fail"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof TenureError, `expected a TenureError, got ${err}`);
  return err;
}

describe("Session.transfer", () => {
  it("hands the holding to a waiting acquire of another client; NO_WAITER leaves it held", async () => {
    const name = uniqueName("ts.transfer");
    const other = new TenureClient(server.address);
    try {
      const giver = await client.acquire(name, "giver", { ttlMs: 30_000 });
      // Nobody waits: NO_WAITER (permanent), and the session is unchanged.
      const none = await rejection(giver.transfer());
      assert.equal(none.reason, Reason.NO_WAITER);
      assert.equal(none.retryable, false);
      assert.ok(giver.isHeld() && !giver.signal.aborted);

      const waiting = other.acquire(name, "waiter", { ttlMs: 10_000, waitMs: 30_000 });
      await waiters(name);
      // A waiter, but not the one named: NO_WAITER; still held and renewing.
      assert.equal((await rejection(giver.transfer("someone-else"))).reason, Reason.NO_WAITER);
      assert.ok(giver.isHeld());
      await client.inspect(name).then((info) => assert.equal(info.lease?.holder, "giver"));

      const lease = await giver.transfer("waiter");
      assert.equal(lease.holder, "waiter");
      assert.ok(lease.fencingToken > giver.fencingToken);
      const waiter: Session = await within(20_000, "the waiter's acquire", waiting);
      assert.equal(waiter.fencingToken, lease.fencingToken);
      assert.ok(waiter.isHeld());

      // The giver's session ended as a release, not a loss.
      assert.equal(giver.isHeld(), false);
      assert.ok(giver.signal.aborted);
      const reason = giver.signal.reason as LeaseLostError;
      assert.ok(reason instanceof LeaseLostError);
      assert.equal(reason.reason, "TRANSFERRED");
      assert.equal(await giver.release(), false);
      await assert.rejects(giver.transfer(), LeaseLostError);

      // The recipient hands over to the head of the queue.
      const thirdWaiting = client.acquire(name, "third", { ttlMs: 10_000, waitMs: 30_000 });
      await waiters(name);
      const lease3 = await waiter.transfer();
      const third = await within(20_000, "the third acquire", thirdWaiting);
      assert.equal(lease3.holder, "third");
      assert.equal(third.fencingToken, lease3.fencingToken);
      assert.ok(lease3.fencingToken > waiter.fencingToken);
      assert.equal((waiter.signal.reason as LeaseLostError).reason, "TRANSFERRED");
      assert.equal((await client.inspect(name)).lease?.holder, "third");
      assert.equal(await third.release(), true);
    } finally {
      other.close();
    }
  });
});

/** A queue of values that tests await one at a time. */
class Queue<T> {
  readonly #items: T[] = [];
  readonly #waiters: ((v: T) => void)[] = [];
  push(v: T): void {
    const w = this.#waiters.shift();
    if (w !== undefined) w(v);
    else this.#items.push(v);
  }
  next(what: string): Promise<T> {
    const v = this.#items.shift();
    if (v !== undefined) return Promise.resolve(v);
    return within(20_000, what, new Promise<T>((ok) => this.#waiters.push(ok)));
  }
}

/** A LeaderElector whose callbacks write to a log shared by all. */
class Candidate {
  readonly started = new Queue<bigint>();
  readonly reasons = new Queue<unknown>();
  readonly stop = new AbortController();
  readonly elector: LeaderElector;
  readonly done: Promise<void>;

  constructor(c: TenureClient, name: string, identity: string, log: string[]) {
    this.elector = new LeaderElector(c, {
      name,
      identity,
      value: `${identity}:5432`,
      ttlMs: 10_000,
      onStartedLeading: async (term, signal) => {
        log.push(`${identity} started ${term.fencingToken}`);
        this.started.push(term.fencingToken);
        this.reasons.push(await aborted(signal));
        log.push(`${identity} work ended`);
      },
      onStoppedLeading: () => {
        log.push(`${identity} stopped`);
      },
    });
    this.done = this.elector.run(this.stop.signal);
  }

  async close(): Promise<void> {
    this.stop.abort();
    await this.done;
  }
}

describe("LeaderElector.resignTo", () => {
  it("stops the leader before handing over; NO_WAITER leads the term again; to the next candidate", async () => {
    const name = uniqueName("ts.resign-to");
    const log: string[] = [];
    const cb = new TenureClient(server.address);
    const a = new Candidate(client, name, "node-a", log);
    let b: Candidate | undefined;
    try {
      const tokenA = await a.started.next("node-a's term");
      b = new Candidate(cb, name, "node-b", log);
      await waiters(name);
      assert.equal((await rejection(b.elector.resignTo("node-a"))).reason, Reason.LEASE_NOT_HELD);

      const termA = a.elector.term!;
      const successor = await within(20_000, "resignTo node-b", a.elector.resignTo("node-b"));
      assert.equal(successor.identity, "node-b");
      assert.equal(successor.value, "node-b:5432");
      assert.ok(successor.fencingToken > tokenA);
      // node-a had stopped when resignTo resolved.
      assert.deepEqual(log.slice(0, 3), [`node-a started ${tokenA}`, "node-a work ended", "node-a stopped"]);
      const reasonA = await a.reasons.next("node-a's abort reason");
      assert.ok(reasonA instanceof LeaseLostError && reasonA.reason === "TRANSFERRED", `reason ${reasonA}`);
      assert.equal((termA.signal.reason as LeaseLostError).reason, "TRANSFERRED");
      const tokenB = await b.started.next("node-b's term");
      assert.equal(tokenB, successor.fencingToken);
      assert.deepEqual(log.slice(0, 4), [
        `node-a started ${tokenA}`,
        "node-a work ended",
        "node-a stopped",
        `node-b started ${tokenB}`,
      ]);

      // node-a campaigns again; a successor that does not wait gets
      // NO_WAITER and node-b leads the same term again.
      await waiters(name);
      assert.equal((await rejection(b.elector.resignTo("node-c"))).reason, Reason.NO_WAITER);
      assert.equal(await b.started.next("node-b leading again"), tokenB);
      const now = await new Elections(client).leader(name);
      assert.equal(now.identity, "node-b");
      assert.equal(now.fencingToken, tokenB);

      // To the next candidate: node-a, with a greater token.
      const next = await within(20_000, "resignTo the next", b.elector.resignTo());
      const tokenA2 = await a.started.next("node-a's second term");
      assert.equal(next.identity, "node-a");
      assert.equal(next.fencingToken, tokenA2);
      assert.ok(tokenA2 > tokenB);
      assert.deepEqual(log.slice(3), [
        `node-b started ${tokenB}`,
        "node-b work ended",
        "node-b stopped",
        `node-b started ${tokenB}`,
        "node-b work ended",
        "node-b stopped",
        `node-a started ${tokenA2}`,
      ]);
    } finally {
      await a.close();
      await b?.close();
      cb.close();
    }
  });
});
