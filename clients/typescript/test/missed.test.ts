/**
 * MISSED events (a watch that did not see every change of a name) against a
 * scripted in-process gRPC server: the shared loss watch ends a session, a
 * semaphore slot or a group whose own token a MISSED names (reason MISSED),
 * and only then; a watch passes MISSED on with its missedAfterRevision; the
 * election observer reports a MISSED change and the elector's term ends.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Server, ServerCredentials, type ServerUnaryCall, type ServerWritableStream } from "@grpc/grpc-js";

import {
  EventType,
  LeaderElector,
  LeaseLostError,
  Semaphore,
  TenureClient,
  eventTypeToJSON,
  type Leader,
  type LeaseEvent,
  type Session,
} from "../src";
import {
  ChangeType,
  ElectionServiceService,
  ObserveResponse,
  type ObserveRequest,
} from "../src/gen/tenure/v1/election";
import {
  AcquireGroupResponse,
  AcquireResponse,
  Lease,
  LeaseEvent as LeaseEventMessage,
  LeaseServiceService,
  ReleaseResponse,
  type AcquireGroupRequest,
  type AcquireRequest,
  type WatchLeaseRequest,
  type WatchLeaseResponse,
} from "../src/gen/tenure/v1/lease";
import { showsLoss, lossReasonOf } from "../src/losswatch";
import { aborted, within } from "./harness";

const WAIT_MS = 10_000;

/** A MISSED of `name` for `fencingToken` (0n: unknown) at `revision`, after the stream last saw it at 10. */
const missed = (name: string, fencingToken: bigint, revision: bigint, slot = 0): LeaseEvent =>
  LeaseEventMessage.fromPartial({ type: EventType.MISSED, name, fencingToken, revision, slot, missedAfterRevision: 10n });
const revoked = (name: string, fencingToken: bigint, revision: bigint, slot = 0): LeaseEvent =>
  LeaseEventMessage.fromPartial({ type: EventType.REVOKED, name, fencingToken, revision, slot });

const lease = (name: string, holder: string, fencingToken: bigint, slot = 0): Lease =>
  Lease.fromPartial({ name, holder, fencingToken, revision: fencingToken, slot, ttl: { seconds: 30n, nanos: 0 } });

/**
 * A scripted Tenure: grants the first Acquire (token 10 at revision 10; slot
 * 2 for a semaphore) or AcquireGroup ("g.a" token 10, "g.b" token 11); every
 * WatchLease sends their snapshot, SNAPSHOT_COMPLETE, then `live`, and stays
 * open. Later Acquires stay unanswered until cancelled (a held election).
 * Observe sends `changes` and stays open.
 */
class Fake {
  readonly server = new Server();
  address = "";
  #snapshot: LeaseEvent[] = [];
  #acquires = 0;

  constructor(
    readonly live: LeaseEvent[],
    readonly changes: ObserveResponse[] = [],
  ) {
    this.server.addService(LeaseServiceService, {
      acquire: (call: ServerUnaryCall<AcquireRequest, AcquireResponse>, done: (e: null, r?: AcquireResponse) => void) => {
        if (++this.#acquires > 1) return; // held: never answered (the caller cancels)
        const slot = call.request.limit > 0 ? 2 : 0;
        const l = lease(call.request.name, call.request.holder, 10n, slot);
        this.#snapshot = [LeaseEventMessage.fromPartial({ type: EventType.CURRENT, name: l.name, revision: 10n, fencingToken: 10n, slot, lease: l })];
        done(null, AcquireResponse.fromPartial({ lease: l, leaseKey: "k".repeat(16) }));
      },
      acquireGroup: (call: ServerUnaryCall<AcquireGroupRequest, AcquireGroupResponse>, done: (e: null, r?: AcquireGroupResponse) => void) => {
        const leases = [lease("g.a", call.request.holder, 10n), lease("g.b", call.request.holder, 11n)];
        this.#snapshot = leases.map((l) =>
          LeaseEventMessage.fromPartial({ type: EventType.CURRENT, name: l.name, revision: l.revision, fencingToken: l.fencingToken, lease: l }),
        );
        done(null, AcquireGroupResponse.fromPartial({ leases, leaseKey: "k".repeat(16) }));
      },
      release: (_call: unknown, done: (e: null, r: ReleaseResponse) => void) => done(null, ReleaseResponse.fromPartial({ revision: 30n })),
      watchLease: (call: ServerWritableStream<WatchLeaseRequest, WatchLeaseResponse>) => {
        const complete = LeaseEventMessage.fromPartial({ type: EventType.SNAPSHOT_COMPLETE, revision: 11n });
        for (const event of [...this.#snapshot, complete, ...this.live]) call.write({ event });
      },
    });
    this.server.addService(ElectionServiceService, {
      observe: (call: ServerWritableStream<ObserveRequest, ObserveResponse>) => {
        for (const change of this.changes) call.write(change);
      },
    });
  }

  async start(): Promise<this> {
    const port = await new Promise<number>((ok, fail) =>
      this.server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? fail(err) : ok(p))),
    );
    this.address = `127.0.0.1:${port}`;
    return this;
  }

  stop(): void {
    this.server.forceShutdown();
  }
}

/** The loss of `session`: its signal's LeaseLostError. */
async function lossOf(session: { signal: AbortSignal }): Promise<LeaseLostError> {
  const reason = await within(WAIT_MS, "the loss", aborted(session.signal));
  assert.ok(reason instanceof LeaseLostError);
  return reason;
}

describe("MISSED", () => {
  // Each case: the live events, whether the session is a semaphore slot,
  // and the loss reason. A MISSED that does not name the session's holding
  // leaves the REVOKED after it to end the session (a loss is final: the
  // first reason is the one kept).
  const cases: [string, LeaseEvent[], boolean, string][] = [
    ["own token", [missed("jobs.m", 10n, 14n), revoked("jobs.m", 10n, 20n)], false, "MISSED"],
    ["another token", [missed("jobs.m", 9n, 14n), revoked("jobs.m", 10n, 20n)], false, "LEASE_ENDED"],
    ["no token", [missed("jobs.m", 0n, 14n), revoked("jobs.m", 10n, 20n)], false, "LEASE_ENDED"],
    ["another name", [missed("jobs.x", 10n, 14n), revoked("jobs.m", 10n, 20n)], false, "LEASE_ENDED"],
    ["own slot", [missed("jobs.m", 10n, 14n, 2), revoked("jobs.m", 10n, 20n, 2)], true, "MISSED"],
    ["another slot", [missed("jobs.m", 10n, 14n, 1), revoked("jobs.m", 10n, 20n, 2)], true, "LEASE_ENDED"],
  ];
  for (const [what, live, semaphore, reason] of cases) {
    it(`loss watch: a MISSED of ${what} ends the session with ${reason}`, async () => {
      const fake = await new Fake(live).start();
      const client = new TenureClient(fake.address, { keepAlive: false });
      try {
        const session: Session = semaphore
          ? await new Semaphore(client, "jobs.m", 3).acquire("me", { ttlMs: 30_000 })
          : await client.acquire("jobs.m", "me", { ttlMs: 30_000 });
        const lost = await lossOf(session);
        assert.equal(lost.reason, reason);
        const cause = lost.cause as LeaseEvent;
        assert.equal(cause.type, reason === "MISSED" ? EventType.MISSED : EventType.REVOKED);
        assert.equal(session.isHeld(), false);
        if (reason === "MISSED") {
          assert.equal(cause.missedAfterRevision, 10n);
          assert.equal(await session.release(), false, "lost: nothing to release");
        }
      } finally {
        client.close();
        fake.stop();
      }
    });
  }

  for (const [what, live, reason] of [
    ["a member's token", [missed("g.b", 11n, 14n), revoked("g.a", 10n, 20n)], "MISSED"],
    ["another token", [missed("g.b", 10n, 14n), revoked("g.a", 10n, 20n)], "LEASE_ENDED"],
  ] as [string, LeaseEvent[], string][]) {
    it(`loss watch: a group whose member is MISSED with ${what} ends with ${reason}`, async () => {
      const fake = await new Fake(live).start();
      const client = new TenureClient(fake.address, { keepAlive: false });
      try {
        const group = await client.acquireGroup(["g.a", "g.b"], "me", { ttlMs: 30_000 });
        assert.equal((await lossOf(group)).reason, reason);
      } finally {
        client.close();
        fake.stop();
      }
    });
  }

  it("showsLoss and lossReasonOf: MISSED counts for the session's own token and slot only", () => {
    const plain = { name: "n", slot: 0, fencingToken: 10n, ended: () => undefined };
    const holder = { ...plain, slot: 2 };
    assert.equal(showsLoss(plain, missed("n", 10n, 14n)), true);
    assert.equal(showsLoss(plain, missed("n", 9n, 14n)), false);
    assert.equal(showsLoss(plain, missed("n", 0n, 14n)), false);
    assert.equal(showsLoss(holder, missed("n", 10n, 14n, 2)), true);
    assert.equal(showsLoss(holder, missed("n", 10n, 14n, 1)), false);
    assert.equal(lossReasonOf(missed("n", 10n, 14n)), "MISSED");
    assert.equal(lossReasonOf(revoked("n", 10n, 14n)), "LEASE_ENDED");
  });

  it("the event types are the proto's, MISSED included", () => {
    assert.equal(EventType.MISSED, "EVENT_TYPE_MISSED");
    assert.equal(eventTypeToJSON(EventType.MISSED), "EVENT_TYPE_MISSED");
    assert.equal(new LeaseLostError("MISSED", "n", 7n).message.includes("missed changes"), true);
  });

  it("watch passes MISSED on with its missedAfterRevision", async () => {
    const fake = await new Fake([
      LeaseEventMessage.fromPartial({ type: EventType.MISSED, name: "a", holder: "h", fencingToken: 5n, revision: 9n, missedAfterRevision: 5n }),
      LeaseEventMessage.fromPartial({ type: EventType.ACQUIRED, name: "a", fencingToken: 9n, revision: 9n }),
    ]).start();
    const client = new TenureClient(fake.address, { keepAlive: false });
    try {
      const seen: LeaseEvent[] = [];
      for await (const event of client.watch("a", { eventTypes: [EventType.ACQUIRED] })) {
        seen.push(event);
        if (seen.length === 3) break;
      }
      assert.deepEqual(
        seen.map((e) => [e.type, e.name, e.holder, e.fencingToken, e.revision, e.missedAfterRevision]),
        [
          [EventType.SNAPSHOT_COMPLETE, "", "", 0n, 11n, 0n],
          [EventType.MISSED, "a", "h", 5n, 9n, 5n],
          [EventType.ACQUIRED, "a", "", 9n, 9n, 0n],
        ],
      );
    } finally {
      client.close();
      fake.stop();
    }
  });

  describe("election", () => {
    let fake: Fake;
    before(async () => {
      const leadership = { name: "jobs.m", holder: "node-a", value: "v", fencingToken: 10n, revision: 10n };
      fake = await new Fake(
        [missed("jobs.m", 10n, 14n)],
        [
          ObserveResponse.fromPartial({ type: ChangeType.CURRENT, leader: leadership, revision: 10n }),
          ObserveResponse.fromPartial({ type: ChangeType.MISSED, endedHolder: "node-a", endedFencingToken: 10n, revision: 14n }),
        ],
      ).start();
    });
    after(() => fake.stop());

    it("a leader whose term is MISSED stops, and the observer gets the MISSED change", async () => {
      const client = new TenureClient(fake.address, { keepAlive: false });
      const stop = new AbortController();
      const leaders: Leader[] = [];
      let sawMissed!: () => void;
      const missedSeen = new Promise<void>((ok) => (sawMissed = ok));
      let termLoss: Promise<unknown> | undefined;
      let stopped!: () => void;
      const stoppedLeading = new Promise<void>((ok) => (stopped = ok));
      const elector = new LeaderElector(client, {
        name: "jobs.m",
        identity: "node-a",
        value: "v",
        ttlMs: 30_000,
        onStartedLeading: async (term, signal) => {
          termLoss = aborted(term.signal);
          await aborted(signal);
        },
        onStoppedLeading: () => stopped(),
        onNewLeader: (l) => {
          leaders.push(l);
          if (l.missed) sawMissed();
        },
      });
      const running = elector.run(stop.signal);
      try {
        await within(WAIT_MS, "onStoppedLeading after the MISSED", stoppedLeading);
        const loss = await termLoss;
        assert.ok(loss instanceof LeaseLostError);
        assert.equal(loss.reason, "MISSED");
        await within(WAIT_MS, "the MISSED change", missedSeen);
        assert.deepEqual(leaders, [
          { identity: "node-a", value: "v", fencingToken: 10n },
          { identity: "", value: "", fencingToken: 0n, missed: true, endedIdentity: "node-a", endedFencingToken: 10n },
        ]);
      } finally {
        stop.abort();
        await running;
        client.close();
      }
    });
  });
});
