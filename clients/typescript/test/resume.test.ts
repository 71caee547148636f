/**
 * Watch resume without a server: the public watch's reconnect loop and the
 * shared loss watch driven by fake streams (resume revision, no duplicates,
 * the WATCH_HISTORY_COMPACTED fallback, permanent errors, losses that
 * happened while disconnected).
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { after, before, describe, it } from "node:test";
import { status as GrpcStatus } from "@grpc/grpc-js";

import { ErrorReason, EventType, TenureError, type LeaseEvent } from "../src";
import { LeaseEvent as LeaseEventMessage, type LeaseServiceClient } from "../src/gen/tenure/v1/lease";
import { LossWatch, type Watched } from "../src/losswatch";
import { CallContext } from "../src/rpc";
import { resumingWatch } from "../src/watch";

const ev = (type: EventType, name: string, revision: bigint, fencingToken = revision): LeaseEvent =>
  LeaseEventMessage.fromPartial({ type, name, revision, fencingToken });
const complete = ev(EventType.SNAPSHOT_COMPLETE, "", 0n, 0n);
const unavailable = () => new TenureError(GrpcStatus.UNAVAILABLE, undefined, "connection refused");
const compacted = () => new TenureError(GrpcStatus.OUT_OF_RANGE, "WATCH_HISTORY_COMPACTED", "history gone");

/** A stream that yields `events` then throws `end` (or ends cleanly). */
async function* script(events: LeaseEvent[], end?: Error): AsyncGenerator<LeaseEvent> {
  yield* events;
  if (end !== undefined) throw end;
}

/** Collects `count` events of the watch, then stops it. */
async function take(gen: AsyncGenerator<LeaseEvent>, count: number): Promise<LeaseEvent[]> {
  const seen: LeaseEvent[] = [];
  for await (const event of gen) {
    seen.push(event);
    if (seen.length === count) break;
  }
  return seen;
}

describe("resumingWatch", () => {
  it("reconnects after a failure from the last delivered revision, skipping replays", async () => {
    const starts: bigint[] = [];
    const streams = [
      script([ev(EventType.CURRENT, "a", 3n), complete, ev(EventType.ACQUIRED, "b", 5n)], unavailable()),
      // A server without resume would send its snapshot again: 3 and 5 are skipped.
      script([ev(EventType.CURRENT, "a", 3n), ev(EventType.CURRENT, "b", 5n), ev(EventType.RELEASED, "b", 7n), complete]),
      script([ev(EventType.ACQUIRED, "c", 9n)]),
    ];
    const reconnects: bigint[] = [];
    const seen = await take(
      resumingWatch((start) => (starts.push(start), streams.shift()!), (e) => e as TenureError, {
        minBackoffMs: 1,
        onReconnect: (info) => reconnects.push(info.startRevision),
      }),
      6,
    );
    assert.deepEqual(starts, [0n, 5n, 7n]);
    assert.deepEqual(reconnects, [5n, 7n]);
    assert.deepEqual(
      seen.map((e) => [e.type, e.revision]),
      [
        [EventType.CURRENT, 3n],
        [EventType.SNAPSHOT_COMPLETE, 0n],
        [EventType.ACQUIRED, 5n],
        [EventType.RELEASED, 7n],
        [EventType.SNAPSHOT_COMPLETE, 0n],
        [EventType.ACQUIRED, 9n],
      ],
    );
  });

  it("starts over with a snapshot when the history is compacted, and says so", async () => {
    const starts: bigint[] = [];
    const streams = [
      script([], compacted()),
      script([ev(EventType.CURRENT, "a", 4n), complete]),
    ];
    const resyncs: TenureError[] = [];
    const seen = await take(
      resumingWatch((start) => (starts.push(start), streams.shift()!), (e) => e as TenureError, {
        startRevision: 2n,
        minBackoffMs: 1,
        onResync: (cause) => resyncs.push(cause),
      }),
      2,
    );
    assert.deepEqual(starts, [2n, 0n]);
    assert.equal(resyncs.length, 1);
    assert.equal(resyncs[0]!.reason, ErrorReason.WATCH_HISTORY_COMPACTED);
    assert.deepEqual(seen.map((e) => e.type), [EventType.CURRENT, EventType.SNAPSHOT_COMPLETE]);
  });

  for (const code of [GrpcStatus.PERMISSION_DENIED, GrpcStatus.UNAUTHENTICATED, GrpcStatus.INVALID_ARGUMENT]) {
    it(`ends with the typed error on ${GrpcStatus[code]}`, async () => {
      let opens = 0;
      const failure = new TenureError(code, undefined, "no");
      await assert.rejects(
        take(resumingWatch(() => (opens++, script([], failure)), (e) => e as TenureError, { minBackoffMs: 1 }), 1),
        (err: unknown) => err === failure,
      );
      assert.equal(opens, 1);
    });
  }

  it("stops while waiting to reconnect when aborted", async () => {
    const stop = new AbortController();
    const gen = resumingWatch(() => script([], unavailable()), (e) => e as TenureError, {
      minBackoffMs: 60_000,
      signal: stop.signal,
      onReconnect: () => stop.abort(),
    });
    assert.deepEqual(await gen.next(), { done: true, value: undefined });
  });
});

/** A fake stub whose WatchLease calls are EventEmitters the test drives. */
class FakeStub {
  readonly calls: { startRevision: bigint; name: string; stream: EventEmitter & { cancel(): void } }[] = [];
  #waiters: (() => void)[] = [];
  watchLease(request: { name: string; startRevision: bigint }) {
    const stream = Object.assign(new EventEmitter(), { cancel: () => undefined });
    this.calls.push({ name: request.name, startRevision: request.startRevision, stream });
    for (const wake of this.#waiters.splice(0)) wake();
    return stream;
  }
  /** Resolves once call number `n` (1-based) was opened. */
  async opened(n: number) {
    while (this.calls.length < n) await new Promise<void>((ok) => this.#waiters.push(ok));
    return this.calls[n - 1]!;
  }
}

/** A watched session whose end resolves `lost`. */
function watched(name: string, fencingToken: bigint) {
  let resolve!: (event: LeaseEvent) => void;
  const lost = new Promise<LeaseEvent>((ok) => (resolve = ok));
  const session: Watched = { name, slot: 0, fencingToken, ended: (event) => resolve(event) };
  return { session, lost };
}

const data = (event: LeaseEvent) => ({ event });

describe("loss watch resume", () => {
  // The loss watch's retry timer is unref'd: keep the test process alive.
  let keepAlive: NodeJS.Timeout;
  before(() => (keepAlive = setInterval(() => undefined, 1000)));
  after(() => clearInterval(keepAlive));
  it("resumes after a failure and signals a revoke that happened meanwhile", async () => {
    const stub = new FakeStub();
    const loss = new LossWatch(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined));
    const { session, lost } = watched("jobs.a", 10n);
    loss.add(session);
    const first = await stub.opened(1);
    assert.equal(first.startRevision, 0n);
    first.stream.emit("data", data(ev(EventType.CURRENT, "jobs.a", 10n)));
    first.stream.emit("data", data(complete));
    first.stream.emit("data", data(ev(EventType.RENEWED, "jobs.a", 12n, 10n)));
    first.stream.emit("error", unavailable());
    const second = await stub.opened(2);
    assert.equal(second.startRevision, 12n, "resumes after the last revision seen");
    second.stream.emit("data", data(ev(EventType.REVOKED, "jobs.a", 15n, 10n)));
    assert.equal((await lost).type, EventType.REVOKED);
    loss.close();
  });

  it("after a compacted history, a fresh snapshot without the session ends it", async () => {
    const stub = new FakeStub();
    const loss = new LossWatch(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined));
    const kept = watched("jobs.kept", 10n);
    const gone = watched("jobs.gone", 11n);
    loss.add(kept.session);
    loss.add(gone.session);
    let call = await stub.opened(1); // the second session widened the filter before it opened
    assert.equal(call.name, "jobs.>");
    assert.equal(stub.calls.length, 1);
    call.stream.emit("data", data(ev(EventType.CURRENT, "jobs.kept", 10n)));
    call.stream.emit("data", data(ev(EventType.CURRENT, "jobs.gone", 11n)));
    call.stream.emit("data", data(complete));
    call.stream.emit("error", unavailable());
    call = await stub.opened(2);
    assert.equal(call.startRevision, 11n);
    call.stream.emit("error", compacted());
    call = await stub.opened(3);
    assert.equal(call.startRevision, 0n, "starts fresh");
    call.stream.emit("data", data(ev(EventType.CURRENT, "jobs.kept", 10n)));
    call.stream.emit("data", data(complete));
    const event = await gone.lost;
    assert.equal(event.name, "jobs.gone");
    let keptLost = false;
    void kept.lost.then(() => (keptLost = true));
    await new Promise((ok) => setImmediate(ok));
    assert.equal(keptLost, false, "the session the snapshot showed is still held");
    loss.close();
  });

  it("a resumed replay without the session's name does not end it", async () => {
    const stub = new FakeStub();
    const loss = new LossWatch(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined));
    const { session, lost } = watched("jobs.a", 10n);
    loss.add(session);
    let call = await stub.opened(1);
    call.stream.emit("data", data(ev(EventType.CURRENT, "jobs.a", 10n)));
    call.stream.emit("data", data(complete));
    call.stream.emit("end");
    call = await stub.opened(2);
    assert.equal(call.startRevision, 10n);
    call.stream.emit("data", data(complete)); // caught up: nothing changed
    call.stream.emit("data", data(ev(EventType.ACQUIRED, "jobs.a", 20n, 20n))); // then another holder
    assert.equal((await lost).revision, 20n);
    loss.close();
  });
});
