/**
 * Leader election helpers against a real Tenure: hand-over on stop, a
 * revoked leader stops and campaigns again, a leader hands over to a
 * candidate of a higher preference, proclaim and leader.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Elections, LeaderElector, LeaseLostError, TenureClient, type Leader } from "../src";
import { aborted, serverPerFile, TenureServer, uniqueName, within } from "./harness";

let server: TenureServer;
let client: TenureClient;

serverPerFile((s, c) => {
  server = s;
  client = c;
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

/** One LeaderElector and what its callbacks saw. */
class Participant {
  readonly started = new Queue<bigint>();
  readonly stopped = new Queue<string>();
  readonly leaders = new Queue<Leader>();
  readonly stop = new AbortController();
  readonly done: Promise<void>;

  constructor(c: TenureClient, name: string, readonly identity: string, leading: Set<string>, maxLeading: { n: number }) {
    const elector = new LeaderElector(c, {
      name,
      identity,
      value: `${identity}:5432`,
      ttlMs: 10_000,
      onStartedLeading: async (term, signal) => {
        leading.add(identity);
        maxLeading.n = Math.max(maxLeading.n, leading.size);
        this.started.push(term.fencingToken);
        await aborted(signal);
        leading.delete(identity);
      },
      onStoppedLeading: () => this.stopped.push(identity),
      onNewLeader: (l) => this.leaders.push(l),
    });
    this.done = elector.run(this.stop.signal);
  }

  async leaderIs(identity: string): Promise<Leader> {
    for (;;) {
      const l = await this.leaders.next(`${identity} as leader`);
      if (l.identity === identity) return l;
    }
  }
}

describe("LeaderElector", () => {
  it("hands over when the leader stops, one leader at a time", async () => {
    const name = uniqueName("ts.election");
    const leading = new Set<string>();
    const max = { n: 0 };
    const cb = new TenureClient(server.address);
    try {
      const a = new Participant(client, name, "node-a", leading, max);
      const tokenA = await a.started.next("node-a's term");
      await a.leaderIs("node-a");
      const b = new Participant(cb, name, "node-b", leading, max);
      const seen = await b.leaderIs("node-a");
      assert.equal(seen.value, "node-a:5432");
      assert.equal(seen.fencingToken, tokenA);
      assert.equal((await new Elections(cb).leader(name)).identity, "node-a");

      a.stop.abort();
      assert.equal(await a.stopped.next("node-a stopped"), "node-a");
      await within(20_000, "node-a's run to end", a.done);
      const tokenB = await b.started.next("node-b's term");
      assert.ok(tokenB > tokenA, `node-b's token ${tokenB} is not above ${tokenA}`);
      await b.leaderIs("node-b");
      b.stop.abort();
      assert.equal(await b.stopped.next("node-b stopped"), "node-b");
      await within(20_000, "node-b's run to end", b.done);
      assert.equal(max.n, 1);
      assert.equal((await new Elections(client).leader(name)).identity, "");
    } finally {
      cb.close();
    }
  });

  it("hands over to a candidate of a higher preference at once: the leader stops first, the successor's token is greater", async () => {
    // node-a's term has a 30 s TTL and every wait here is at most 10 s: a
    // takeover at expiry would fail the test. Neither elector has an
    // onNewLeader: each follows Observe anyway.
    const name = uniqueName("ts.preference");
    const log: string[] = [];
    const started = new Map<string, (token: bigint) => void>();
    const startedA = new Promise<bigint>((ok) => started.set("node-a", ok));
    const startedB = new Promise<bigint>((ok) => started.set("node-b", ok));
    const elector = (c: TenureClient, identity: string, preference: number) =>
      new LeaderElector(c, {
        name,
        identity,
        ttlMs: 30_000,
        preference,
        onStartedLeading: async (term, signal) => {
          log.push(`${identity} started ${term.fencingToken}`);
          started.get(identity)?.(term.fencingToken);
          await aborted(signal);
        },
        onStoppedLeading: () => {
          log.push(`${identity} stopped`);
        },
      });
    const cb = new TenureClient(server.address);
    const stopA = new AbortController();
    const stopB = new AbortController();
    const doneA = elector(client, "node-a", 1).run(stopA.signal);
    let doneB: Promise<void> | undefined;
    try {
      const tokenA = await within(10_000, "node-a's term", startedA);
      doneB = elector(cb, "node-b", 2).run(stopB.signal);
      const tokenB = await within(10_000, "node-b's term, handed over", startedB);
      assert.deepEqual(log.slice(0, 3), [`node-a started ${tokenA}`, "node-a stopped", `node-b started ${tokenB}`]);
      assert.ok(tokenB > tokenA, `node-b's token ${tokenB} is not above ${tokenA}`);
      const now = await new Elections(client).leader(name);
      assert.equal(now.identity, "node-b");
      assert.equal(now.fencingToken, tokenB);
    } finally {
      stopB.abort();
      stopA.abort();
      await within(10_000, "the electors to end", Promise.all([doneA, doneB]));
      cb.close();
    }
  });

  it("stops a revoked leader and campaigns again", async () => {
    const name = uniqueName("ts.election");
    const p = new Participant(client, name, "node-a", new Set(), { n: 0 });
    const first = await p.started.next("first term");
    await client.revokeLease(name, "test", { fencingToken: first });
    assert.equal(await p.stopped.next("stopped after revoke"), "node-a");
    const second = await p.started.next("second term");
    assert.ok(second > first);
    p.stop.abort();
    await p.stopped.next("stopped after abort");
    await within(20_000, "run to end", p.done);
  });
});

describe("Elections", () => {
  it("proclaims a new value without a new term; a deposed leader cannot", async () => {
    const name = uniqueName("ts.election");
    const elections = new Elections(client);
    const term = await elections.elect(name, "node-a", "10.0.0.1:5432", { ttlMs: 10_000 });
    await elections.proclaim(term, "10.0.0.1:6432");
    const now = await elections.leader(name);
    assert.deepEqual(now, { identity: "node-a", value: "10.0.0.1:6432", fencingToken: term.fencingToken });
    await client.revokeLease(name, "test");
    await within(20_000, "loss after revoke", aborted(term.signal));
    // The session knows its term ended: it refuses before sending anything.
    await assert.rejects(elections.proclaim(term, "x"), LeaseLostError);
  });
});
