/**
 * The RWLock helper against a real Tenure: shared holders together and an
 * exclusive Acquire refused meanwhile, one arrival-order queue for both
 * modes, and Session.downgrade keeping the holding (and its renewals) going
 * as a shared one. The server admits at most 3 shared holders
 * (TOO_MANY_SHARED_HOLDERS for a fourth). Last, without a server: the loss
 * watch's events a downgrade holds back while its call is in flight are
 * judged by its outcome.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import {
  EventType,
  LeaseLostError,
  LockMode,
  Reason,
  RWLock,
  Semaphore,
  TenureClient,
  TenureError,
  type Session,
} from "../src";
import { ErrorInfo } from "../src/gen/google/rpc/error_details";
import { Status } from "../src/gen/google/rpc/status";
import { DowngradeResponse, Lease, type LeaseEvent, type LeaseServiceClient } from "../src/gen/tenure/v1/lease";
import { Renewer } from "../src/keepalive";
import { LossWatch, showsLoss, type Watched } from "../src/losswatch";
import { CallContext } from "../src/rpc";
import { Session as SessionClass } from "../src/session";
import { aborted, nextMatching, serverPerFile, TenureServer, uniqueName, within } from "./harness";

const MAX_SHARED = 3;

let server: TenureServer;
let client: TenureClient;

serverPerFile(
  (s, c) => {
    server = s;
    client = c;
  },
  ["--max-shared-holders", String(MAX_SHARED)],
);

/** Polls `inspect` (bounded) until at least `count` acquires wait for `name`: queue tickets have no event. */
async function waiters(name: string, count: number): Promise<void> {
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

/** A pending acquire and whether it has settled yet. */
function tracked(promise: Promise<Session>): { promise: Promise<Session>; settled: () => boolean } {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  return { promise, settled: () => settled };
}

describe("RWLock", () => {
  it("lets two shared holders hold at once and refuses an exclusive acquire meanwhile", async () => {
    const name = uniqueName("ts.rw.shared");
    const lock = client.rwlock(name);
    assert.ok(lock instanceof RWLock);
    const r1 = await lock.lockShared("reader-1", { ttlMs: 10_000 });
    const r2 = await lock.lockShared("reader-2", { ttlMs: 10_000 });
    try {
      assert.ok(r1.isHeld() && r2.isHeld());
      assert.equal(r1.mode, LockMode.SHARED);
      assert.equal(r2.mode, LockMode.SHARED);
      assert.equal(r1.lease.mode, LockMode.SHARED);
      assert.ok(r1.slot > 0 && r2.slot > 0 && r1.slot !== r2.slot, `slots ${r1.slot}, ${r2.slot}`);
      assert.ok(r2.fencingToken > r1.fencingToken);

      // Exclusive without a wait: refused while shared holders hold.
      const held = await rejection(lock.lock("writer", { ttlMs: 10_000 }));
      assert.equal(held.reason, Reason.LEASE_HELD, held.message);

      // A third shared holder joins; a fourth is over the server's --max-shared-holders.
      const r3 = await lock.lockShared("reader-3", { ttlMs: 10_000 });
      try {
        assert.equal(r3.mode, LockMode.SHARED);
        assert.ok(r3.slot !== r1.slot && r3.slot !== r2.slot);
        const full = await rejection(lock.lockShared("reader-4", { ttlMs: 10_000 }));
        assert.equal(full.reason, Reason.TOO_MANY_SHARED_HOLDERS, full.message);
        assert.equal(full.retryable, true);
        assert.equal(full.metadata.max_shared_holders, String(MAX_SHARED));
      } finally {
        assert.equal(await r3.release(), true);
      }

      // The name is a read-write lock's: not a semaphore's.
      const mismatch = await rejection(new Semaphore(client, name, 2).acquire("counter", { ttlMs: 10_000 }));
      assert.equal(mismatch.reason, Reason.MODE_MISMATCH, mismatch.message);
      assert.equal(mismatch.retryable, false);

      assert.ok(r1.isHeld() && r2.isHeld());
    } finally {
      assert.equal(await r1.release(), true);
      assert.equal(await r2.release(), true);
    }
  });

  it("queues an exclusive acquire behind shared holders, and a later shared one behind it", async () => {
    const name = uniqueName("ts.rw.queue");
    const other = new TenureClient(server.address);
    const r1 = await client.rwlock(name).lockShared("reader-1", { ttlMs: 30_000 });
    const r2 = await client.rwlock(name).lockShared("reader-2", { ttlMs: 30_000 });
    try {
      const writing = tracked(other.rwlock(name).lock("writer", { ttlMs: 30_000, waitMs: 30_000 }));
      await waiters(name, 1);
      // A shared acquire without a wait does not pass the queued writer.
      const queued = await rejection(other.rwlock(name).lockShared("reader-3", { ttlMs: 30_000 }));
      assert.equal(queued.reason, Reason.LEASE_HELD, queued.message);
      assert.equal(queued.metadata.state, "QUEUED");
      // A shared acquire with a wait queues behind the writer.
      const reading = tracked(other.rwlock(name).lockShared("reader-3", { ttlMs: 30_000, waitMs: 30_000 }));
      await waiters(name, 2);

      // One shared holder left: the writer still waits, and the later reader behind it.
      assert.equal(await r1.release(), true);
      assert.equal((await client.inspect(name)).waiting, 2);
      assert.ok(!writing.settled() && !reading.settled());

      // The last shared holder leaves: the writer gets the lock.
      assert.equal(await r2.release(), true);
      const writer = await within(20_000, "the queued exclusive acquire", writing.promise);
      assert.equal(writer.mode, LockMode.EXCLUSIVE);
      assert.ok(writer.isHeld());
      assert.ok(writer.fencingToken > r2.fencingToken && r2.fencingToken > r1.fencingToken);

      // The reader that came after it waits until it releases.
      const state = await client.inspect(name);
      assert.equal(state.waiting, 1);
      assert.equal(state.lease.holder, "writer");
      assert.ok(!reading.settled());
      assert.equal(await writer.release(), true);
      const reader = await within(20_000, "the queued shared acquire", reading.promise);
      assert.equal(reader.mode, LockMode.SHARED);
      assert.ok(reader.isHeld());
      assert.ok(reader.fencingToken > writer.fencingToken);
      assert.equal(await reader.release(), true);
    } finally {
      await r1.release();
      await r2.release();
      other.close();
    }
  });

  it("downgrades an exclusive holding: a greater token, SHARED, a waiting reader joins, renewals go on", async () => {
    const name = uniqueName("ts.rw.downgrade");
    const other = new TenureClient(server.address);
    const events = client.watch(name)[Symbol.asyncIterator]();
    // A plain lease beside the lock is the barrier of the client's loss
    // watch (it delivers in revision order).
    const marker = await client.acquire(`${name}-marker`, "writer", { ttlMs: 30_000 });
    let writer: Session | undefined;
    let reader: Session | undefined;
    try {
      await nextMatching(events, "the snapshot", (e) => e.type === EventType.SNAPSHOT_COMPLETE);
      // Renewals every second (TTL 3 s): the background renewals must
      // present the downgrade's revision.
      writer = await client.rwlock(name).lock("writer", { ttlMs: 3000 });
      const { fencingToken: exclusiveToken, slot, leaseKey } = writer;
      assert.equal(writer.mode, LockMode.EXCLUSIVE);
      assert.ok(slot > 0);
      const reading = tracked(other.rwlock(name).lockShared("reader", { ttlMs: 30_000, waitMs: 30_000 }));
      await waiters(name, 1);
      assert.ok(!reading.settled());

      const lease = await writer.downgrade();
      assert.equal(lease.mode, LockMode.SHARED);
      assert.equal(lease.slot, slot);
      assert.ok(lease.fencingToken > exclusiveToken);
      assert.equal(writer.mode, LockMode.SHARED);
      assert.equal(writer.fencingToken, lease.fencingToken);
      assert.equal(writer.revision, lease.revision);
      assert.equal(writer.slot, slot);
      assert.equal(writer.leaseKey, leaseKey);
      assert.ok(writer.isHeld());

      // The waiting reader gets in beside the downgraded holder.
      reader = await within(20_000, "the waiting shared acquire", reading.promise);
      assert.equal(reader.mode, LockMode.SHARED);
      assert.ok(reader.fencingToken > writer.fencingToken);
      assert.ok(writer.isHeld() && reader.isHeld());

      // The background renewals go on with the downgrade's revision.
      const token = writer.fencingToken;
      const renewal = await nextMatching(
        events,
        "a renewal of the downgraded holding",
        (e) => e.type === EventType.RENEWED && e.fencingToken === token && e.revision > lease.revision,
      );
      assert.equal(renewal.slot, slot);
      assert.equal(renewal.lease?.mode, LockMode.SHARED);

      // Only an exclusive holding downgrades: MODE_MISMATCH, and the session is unchanged.
      const mismatch = await rejection(writer.downgrade());
      assert.equal(mismatch.reason, Reason.MODE_MISMATCH, mismatch.message);
      assert.equal(mismatch.retryable, false);

      // The client's loss watch saw the downgrade and the reader before the
      // marker's revoke, and left the session alone.
      await other.revokeLease(marker.name, "barrier", { fencingToken: marker.fencingToken });
      const ended = await within(10_000, "the marker's loss", aborted(marker.signal));
      assert.ok(ended instanceof LeaseLostError);
      assert.equal(ended.reason, "LEASE_ENDED");
      assert.ok(writer.isHeld(), String(writer.signal.reason));
      assert.equal(writer.fencingToken, token);

      assert.equal(await reader.release(), true);
      assert.equal(await writer.release(), true);
    } finally {
      await events.return?.(undefined);
      await reader?.release();
      await writer?.release();
      await marker.release();
      other.close();
    }
  });
});

/** A ServiceError as grpc-js reports one, with a Tenure ErrorInfo reason. */
function serviceError(code: GrpcStatus, reason: string): ServiceError {
  const status = Status.encode({
    code,
    message: reason,
    details: [
      {
        typeUrl: "type.googleapis.com/google.rpc.ErrorInfo",
        value: Buffer.from(ErrorInfo.encode({ reason, domain: "tenure.v1", metadata: {} }).finish()),
      },
    ],
  }).finish();
  const metadata = new Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from(status));
  return Object.assign(new Error(`${code}: ${reason}`), { code, details: reason, metadata });
}

/**
 * An exclusive holding (slot 1, token and revision 3) of a client without a
 * server: its Downgrade runs `answer` (which may feed the loss watch's
 * events first, as the stream would while the call is in flight) and
 * replies with what it returns; `feed` delivers an event as the loss watch
 * does.
 */
function exclusive(answer: (feed: (event: LeaseEvent) => void) => DowngradeResponse | ServiceError) {
  let watched: Watched | undefined;
  const feed = (event: LeaseEvent) => {
    if (watched !== undefined && showsLoss(watched, event)) watched.ended(event);
  };
  const reply = <T>(callback: (err: ServiceError | null, value?: T) => void, value: T | ServiceError) => {
    setImmediate(() => (value instanceof Error ? callback(value) : callback(null, value)));
    return { cancel: () => undefined };
  };
  const stub = {
    downgrade: (_req: unknown, _md: unknown, _opts: unknown, callback: (err: ServiceError | null, value?: DowngradeResponse) => void) =>
      reply(callback, answer(feed)),
    release: (_req: unknown, _md: unknown, _opts: unknown, callback: (err: ServiceError | null, value?: object) => void) =>
      reply(callback, {}),
  } as unknown as LeaseServiceClient;
  const ctx = new CallContext("fake", undefined);
  const lossWatch = new LossWatch(stub, ctx, false);
  lossWatch.add = (w: Watched) => void (watched = w);
  lossWatch.remove = () => undefined;
  const session = new SessionClass({
    stub,
    ctx,
    lossWatch,
    renewer: new Renewer(stub, ctx, false),
    lease: Lease.fromPartial({ name: "lock", holder: "w", fencingToken: 3n, revision: 3n, ttl: { seconds: 30n }, slot: 1, mode: LockMode.EXCLUSIVE }),
    leaseKey: "k".repeat(16),
    sentAt: performance.now(),
    options: {},
  });
  return { session, feed };
}

function event(type: EventType, revision: bigint, fencingToken: bigint): LeaseEvent {
  return { type, name: "lock", revision, holder: "w", fencingToken, slot: 1 } as LeaseEvent;
}

const shared = DowngradeResponse.fromPartial({
  lease: { name: "lock", holder: "w", fencingToken: 5n, revision: 5n, ttl: { seconds: 30n }, slot: 1, mode: LockMode.SHARED },
});

describe("Session.downgrade's hold-back of the loss watch", () => {
  it("does not end the session for the downgrade's own events seen before its reply", async () => {
    const { session, feed } = exclusive((feed) => {
      // The exclusive holding released and the shared one acquired (the
      // downgrade's write), seen before the reply arrives.
      feed(event(EventType.RELEASED, 5n, 3n));
      feed(event(EventType.ACQUIRED, 5n, 5n));
      return shared;
    });
    try {
      const lease = await session.downgrade();
      assert.equal(lease.mode, LockMode.SHARED);
      assert.ok(session.isHeld(), String(session.signal.reason));
      assert.deepEqual([session.fencingToken, session.revision, session.mode], [5n, 5n, LockMode.SHARED]);
      // The same events after the reply leave it alone; a revoke of the shared holding ends it.
      feed(event(EventType.RELEASED, 5n, 3n));
      feed(event(EventType.ACQUIRED, 5n, 5n));
      assert.ok(session.isHeld(), String(session.signal.reason));
      feed(event(EventType.REVOKED, 7n, 5n));
      assert.equal((session.signal.reason as LeaseLostError).reason, "LEASE_ENDED");
    } finally {
      await session.release();
    }
  });

  it("ends the session after the reply for a loss seen while downgrading", async () => {
    const { session } = exclusive((feed) => {
      feed(event(EventType.ACQUIRED, 5n, 5n));
      feed(event(EventType.REVOKED, 6n, 5n)); // the shared holding, revoked
      return shared;
    });
    try {
      await session.downgrade();
      const reason = session.signal.reason as LeaseLostError;
      assert.equal(reason.reason, "LEASE_ENDED");
      assert.equal((reason.cause as LeaseEvent).type, EventType.REVOKED);
    } finally {
      await session.release();
    }
  });

  it("judges the events of a failed downgrade by the exclusive holding", async () => {
    const refused = exclusive(() => serviceError(GrpcStatus.FAILED_PRECONDITION, "MODE_MISMATCH"));
    try {
      const err = await rejection(refused.session.downgrade());
      assert.equal(err.reason, Reason.MODE_MISMATCH);
      assert.ok(refused.session.isHeld());
      assert.deepEqual([refused.session.fencingToken, refused.session.mode], [3n, LockMode.EXCLUSIVE]);
    } finally {
      await refused.session.release();
    }

    const gone = exclusive((feed) => {
      feed(event(EventType.EXPIRED, 4n, 3n));
      return serviceError(GrpcStatus.FAILED_PRECONDITION, "LEASE_NOT_HELD");
    });
    try {
      assert.equal((await rejection(gone.session.downgrade())).reason, Reason.LEASE_NOT_HELD);
      assert.equal(gone.session.isHeld(), false);
      assert.equal((gone.session.signal.reason as LeaseLostError).reason, "LEASE_ENDED");
    } finally {
      await gone.session.release();
    }
  });
});
