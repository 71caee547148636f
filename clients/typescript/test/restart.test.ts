/**
 * Watch resume across a Tenure restart: Tenure is SIGKILLed while nats-server
 * (and the bucket) stays up, and a new Tenure starts on the same address. A
 * watch sees every change once and in order, a change made through another
 * replica while its Tenure was down arrives after the resume, and a session
 * revoked while its Tenure was down is signalled lost after the reconnect.
 */
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { after, before, describe, it } from "node:test";

import { EventType, LeaseLostError, LockMode, TenureClient, type LeaseEvent } from "../src";
import { aborted, NatsServer, nextMatching, TenureServer, uniqueName, within } from "./harness";

let nats: NatsServer;
let tenure: TenureServer;
let client: TenureClient;

before(async () => {
  nats = await NatsServer.start();
  tenure = await TenureServer.start([], {}, { nats });
});
after(async () => {
  await tenure?.stop();
  await nats?.stop();
});

/** SIGKILLs the Tenure and starts a new one on the same address and bucket. */
async function restart(between?: () => Promise<void>): Promise<void> {
  const address = tenure.address;
  await tenure.kill();
  await between?.();
  await tenure.stop();
  tenure = await TenureServer.start([], {}, { nats, address });
}

/** Acquires with the raw stub: a holding nobody renews (so no RENEWED noise), for `ttl` s. */
function acquireRaw(c: TenureClient, name: string, holder: string, ttl = 60n): Promise<{ token: bigint; key: string; revision: bigint }> {
  return new Promise((ok, fail) =>
    c.stub.acquire(
      { name, holder, ttl: { seconds: ttl, nanos: 0 }, leaseKey: "", wait: undefined, metadata: {}, lockDelay: undefined, limit: 0, preference: 0, mode: LockMode.UNSPECIFIED },
      (err, reply) => (err ? fail(err) : ok({ token: reply.lease!.fencingToken, key: reply.leaseKey, revision: reply.lease!.revision })),
    ),
  );
}

/** Releases with the raw stub. */
function releaseRaw(c: TenureClient, name: string, held: { key: string; revision: bigint }): Promise<void> {
  return new Promise((ok, fail) =>
    c.stub.release({ name, expectedRevision: held.revision, leaseKey: held.key, slot: 0 }, (err) => (err ? fail(err) : ok())),
  );
}

describe("watch across a Tenure restart", () => {
  it("sees every change exactly once, in order, including one made through another replica meanwhile", async () => {
    client = new TenureClient(tenure.address);
    const prefix = uniqueName("restart");
    const stop = new AbortController();
    const reconnects: bigint[] = [];
    const events = client
      .watch(`${prefix}.>`, { signal: stop.signal, minBackoffMs: 50, maxBackoffMs: 500, onReconnect: (i) => reconnects.push(i.startRevision) })
      [Symbol.asyncIterator]();
    const seen: LeaseEvent[] = [];
    const next = async (what: string) => {
      const event = await nextMatching(events, what, (e) => e.type !== EventType.SNAPSHOT_COMPLETE, 30_000);
      seen.push(event);
      return event;
    };
    try {
      await nextMatching(events, "the first SNAPSHOT_COMPLETE", (e) => e.type === EventType.SNAPSHOT_COMPLETE);
      // Before the restart.
      const a = await acquireRaw(client, `${prefix}.a`, "before");
      await next("ACQUIRED a");
      await releaseRaw(client, `${prefix}.a`, a);
      await next("RELEASED a");

      // While the watch's Tenure is down, a second replica on the same bucket changes a lease.
      let replicaToken = 0n;
      await restart(async () => {
        const replica = await TenureServer.start([], {}, { nats });
        const other = new TenureClient(replica.address);
        try {
          replicaToken = (await acquireRaw(other, `${prefix}.b`, "replica")).token;
        } finally {
          other.close();
          await replica.stop();
        }
      });
      const b = await next("the replica's change, after the resume");
      assert.equal(b.name, `${prefix}.b`);
      assert.equal(b.fencingToken, replicaToken);
      assert.ok(reconnects.length > 0 && reconnects[0] === a.revision + 1n, `resumed after RELEASED a: ${reconnects}`);

      // After the restart.
      const c = await acquireRaw(client, `${prefix}.c`, "after");
      await next("ACQUIRED c");
      await releaseRaw(client, `${prefix}.c`, c);
      await next("RELEASED c");
    } finally {
      stop.abort();
      client.close();
    }
    assert.deepEqual(
      seen.map((e) => [e.type, e.name.slice(prefix.length + 1)]),
      [
        [EventType.ACQUIRED, "a"],
        [EventType.RELEASED, "a"],
        [EventType.ACQUIRED, "b"],
        [EventType.ACQUIRED, "c"],
        [EventType.RELEASED, "c"],
      ],
    );
    for (let i = 1; i < seen.length; i++) {
      assert.ok(seen[i]!.revision > seen[i - 1]!.revision, "revisions strictly increase: no duplicate");
    }
  });

  it("signals a session revoked while its Tenure was down as lost after the reconnect", async () => {
    client = new TenureClient(tenure.address);
    const name = uniqueName("revoked-while-down");
    // Renewal due after 27 s: only the resumed loss watch can end it within the test.
    const session = await client.acquire(name, "victim", { ttlMs: 30_000, renewFraction: 0.9 });
    const bystander = await client.acquire(`${name}.other`, "bystander", { ttlMs: 30_000, renewFraction: 0.9 });
    try {
      await restart(async () => {
        const replica = await TenureServer.start([], {}, { nats });
        const admin = new TenureClient(replica.address);
        try {
          await admin.revokeLease(name, "revoked while the first Tenure was down");
        } finally {
          admin.close();
          await replica.stop();
        }
      });
      const restarted = performance.now();
      const reason = await within(30_000, "the loss signal after the reconnect", aborted(session.signal));
      console.log(`# new Tenure ready to loss signal: ${(performance.now() - restarted).toFixed(1)} ms`);
      assert.ok(reason instanceof LeaseLostError);
      assert.equal(reason.reason, "LEASE_ENDED");
      assert.equal(bystander.isHeld(), true, "a session whose lease survived is not lost");
      assert.equal(await session.release(), false);
      assert.equal(await bystander.release(), true);
    } finally {
      client.close();
    }
  });
});

describe("watch resume refused (WATCH_HISTORY_COMPACTED)", () => {
  it("starts over with a fresh snapshot and calls onResync", async () => {
    // Markers that last 1 s, below the server's 2 s clock margin: no resume can be proven.
    const short = await TenureServer.start(["--marker-ttl", "1s", "--max-lock-delay", "1s"]);
    const c = new TenureClient(short.address);
    const stop = new AbortController();
    try {
      const name = uniqueName("compacted");
      const held = await acquireRaw(c, name, "holder");
      const resyncs: unknown[] = [];
      const events = c
        .watch(name, { signal: stop.signal, startRevision: held.revision, onResync: (cause) => resyncs.push(cause) })
        [Symbol.asyncIterator]();
      const first = await nextMatching(events, "the fresh snapshot", () => true);
      assert.equal(first.type, EventType.CURRENT, "the snapshot arrives again");
      assert.equal(first.fencingToken, held.token);
      assert.equal((await nextMatching(events, "SNAPSHOT_COMPLETE", () => true)).type, EventType.SNAPSHOT_COMPLETE);
      assert.equal(resyncs.length, 1);
      assert.equal((resyncs[0] as { reason?: unknown }).reason, "WATCH_HISTORY_COMPACTED");
    } finally {
      stop.abort();
      c.close();
      await short.stop();
    }
  });

  it("ends a session revoked while its Tenure was down when the fresh snapshot lacks it", async () => {
    const short = ["--marker-ttl", "1s", "--max-lock-delay", "1s"];
    const ownNats = await NatsServer.start();
    let first = await TenureServer.start(short, {}, { nats: ownNats });
    const c = new TenureClient(first.address);
    try {
      const name = uniqueName("fresh-loss");
      const session = await c.acquire(name, "victim", { ttlMs: 30_000, renewFraction: 0.9 });
      const address = first.address;
      await first.kill();
      await first.stop();
      const replica = await TenureServer.start(short, {}, { nats: ownNats });
      const admin = new TenureClient(replica.address);
      try {
        await admin.revokeLease(name, "revoked while the first Tenure was down");
      } finally {
        admin.close();
        await replica.stop();
      }
      first = await TenureServer.start(short, {}, { nats: ownNats, address });
      // The resume is refused (markers outlive no proof), the loss watch starts fresh, and the
      // snapshot shows no holding of the name.
      const reason = await within(30_000, "the loss signal", aborted(session.signal));
      assert.ok(reason instanceof LeaseLostError);
      assert.equal(reason.reason, "LEASE_ENDED");
    } finally {
      c.close();
      await first.stop();
      await ownNats.stop();
    }
  });
});
