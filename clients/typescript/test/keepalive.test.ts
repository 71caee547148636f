/**
 * Renewals over one KeepAlive stream per client: batching, per-entry
 * errors, the fallback to unary Renew (a server without KeepAlive, a broken
 * stream), checked on a fake stub; then against real Tenure: many sessions
 * renewed over one stream, a refused entry ending its session with the
 * typed error, and sessions surviving a Tenure restart that breaks the
 * stream.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { after, before, describe, it } from "node:test";
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import { EventType, LeaseLostError, Reason, TenureClient, TenureError, type Lease } from "../src";
import { KeepAliveRequest, Lease as LeaseMessage, RenewRequest, type LeaseServiceClient } from "../src/gen/tenure/v1/lease";
import { Renewer } from "../src/keepalive";
import { CallContext } from "../src/rpc";
import { aborted, NatsServer, nextMatching, TenureServer, uniqueName, within } from "./harness";

/** A grpc-js ServiceError with `code`. */
function serviceError(code: GrpcStatus, details: string): ServiceError {
  return Object.assign(new Error(`${code} ${GrpcStatus[code]}: ${details}`), { code, details, metadata: new Metadata() });
}

const lease = (name: string, revision: bigint): Lease =>
  LeaseMessage.fromPartial({ name, holder: "h", fencingToken: 1n, revision, ttl: { seconds: 3n, nanos: 0 } });

/** A fake stub: KeepAlive calls are EventEmitters the test drives; Renew answers at once. */
class FakeStub {
  readonly streams: (EventEmitter & { written: KeepAliveRequest[]; write(r: KeepAliveRequest): void; end(): void; cancel(): void })[] = [];
  readonly unary: RenewRequest[] = [];
  keepAlive() {
    const stream = Object.assign(new EventEmitter(), {
      written: [] as KeepAliveRequest[],
      write(r: KeepAliveRequest) {
        stream.written.push(r);
      },
      end: () => undefined,
      cancel: () => undefined,
    });
    this.streams.push(stream);
    return stream;
  }
  renew(request: RenewRequest, _md: Metadata, _options: unknown, callback: (err: ServiceError | null, reply: { lease: Lease }) => void) {
    this.unary.push(request);
    setImmediate(() => callback(null, { lease: lease(request.name, request.expectedRevision + 1n) }));
    return { cancel: () => undefined };
  }
}

const request = (name: string, revision: bigint) => RenewRequest.fromPartial({ name, expectedRevision: revision, leaseKey: "k".repeat(16) });

/** Waits until `stub` has `n` streams with a written message each. */
async function written(stub: FakeStub, stream: number, messages: number): Promise<KeepAliveRequest[]> {
  return within(5000, `message ${messages} on stream ${stream}`, (async () => {
    while ((stub.streams[stream]?.written.length ?? 0) < messages) await new Promise((ok) => setImmediate(ok));
    return stub.streams[stream]!.written;
  })());
}

describe("Renewer (fake stub)", () => {
  it("batches renewals due together into one message and maps per-entry results", async () => {
    const stub = new FakeStub();
    const renewer = new Renewer(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined), true);
    const a = renewer.renew(request("a", 5n), 5000).result;
    const b = renewer.renew(request("b", 6n), 5000).result;
    const c = renewer.renew(request("c", 7n), 5000).result;
    const [message] = await written(stub, 0, 1);
    assert.deepEqual(message!.entries.map((e) => [e.name, e.expectedRevision]), [["a", 5n], ["b", 6n], ["c", 7n]]);
    const ids = message!.entries.map((e) => e.id);
    assert.equal(new Set(ids).size, 3);
    stub.streams[0]!.emit("data", {
      results: [
        { id: ids[0], lease: lease("a", 8n) },
        { id: ids[1], error: { code: GrpcStatus.FAILED_PRECONDITION, reason: "LEASE_NOT_HELD", message: "gone", metadata: { holder: "x" } } },
        { id: ids[2], lease: lease("c", 9n) },
      ],
    });
    assert.equal((await a).revision, 8n);
    assert.equal((await c).revision, 9n);
    const err = await b.then(() => assert.fail("b was renewed"), (e: unknown) => e);
    assert.ok(err instanceof TenureError);
    assert.equal(err.reason, Reason.LEASE_NOT_HELD);
    assert.equal(err.code, GrpcStatus.FAILED_PRECONDITION);
    assert.equal(err.retryable, false);
    assert.equal(err.rpc, "KeepAlive");
    assert.deepEqual(err.metadata, { holder: "x" });
    assert.deepEqual(renewer.stats, { streamMessages: 1, streamEntries: 3, streamsOpened: 1, unaryRenews: 0, unaryOnly: false });
    renewer.close();
  });

  it("splits a large batch into messages within the server's default 16 KiB request bound", async () => {
    const stub = new FakeStub();
    const renewer = new Renewer(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined), true);
    const names = Array.from({ length: 300 }, (_, i) => `${"n".repeat(200)}.${i}`);
    const results = names.map((name, i) => renewer.renew(request(name, BigInt(i + 1)), 5000).result);
    await written(stub, 0, 1);
    const messages = stub.streams[0]!.written;
    assert.ok(messages.length > 1, "one message would be too large");
    for (const m of messages) assert.ok(KeepAliveRequest.encode(m).finish().length <= 16 * 1024);
    assert.deepEqual(messages.flatMap((m) => m.entries.map((e) => e.name)), names, "every entry once, in order");
    for (const m of messages) {
      stub.streams[0]!.emit("data", { results: m.entries.map((e) => ({ id: e.id, lease: lease(e.name, e.expectedRevision + 1n) })) });
    }
    assert.equal((await Promise.all(results)).length, 300);
    renewer.close();
  });

  it("halves its message bounds after a server ends the stream with REQUEST_TOO_LARGE", async () => {
    const stub = new FakeStub();
    const renewer = new Renewer(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined), true);
    const names = Array.from({ length: 100 }, (_, i) => `${"n".repeat(200)}.${i}`);
    const first = names.map((name, i) => renewer.renew(request(name, BigInt(i + 1)), 5000).result);
    await written(stub, 0, 1);
    stub.streams[0]!.emit("error", new TenureError(GrpcStatus.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE", "smaller, please"));
    assert.equal((await Promise.all(first)).length, 100, "answered by unary Renews");
    const second = names.map((name, i) => renewer.renew(request(name, BigInt(i + 1)), 5000).result);
    const messages = await written(stub, 1, 1);
    for (const m of messages) assert.ok(KeepAliveRequest.encode(m).finish().length <= 8 * 1024);
    for (const m of messages) {
      stub.streams[1]!.emit("data", { results: m.entries.map((e) => ({ id: e.id, lease: lease(e.name, e.expectedRevision + 1n) })) });
    }
    assert.equal((await Promise.all(second)).length, 100);
    renewer.close();
  });

  it("re-sends a broken stream's pending entries as unary Renews and opens a new stream next time", async () => {
    const stub = new FakeStub();
    const renewer = new Renewer(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined), true);
    const a = renewer.renew(request("a", 5n), 5000).result;
    await written(stub, 0, 1);
    stub.streams[0]!.emit("error", serviceError(GrpcStatus.UNAVAILABLE, "connection reset"));
    assert.equal((await a).revision, 6n, "answered by the unary Renew");
    assert.deepEqual(stub.unary.map((r) => r.name), ["a"]);
    const b = renewer.renew(request("b", 7n), 5000).result;
    const [message] = await written(stub, 1, 1);
    stub.streams[1]!.emit("data", { results: [{ id: message!.entries[0]!.id, lease: lease("b", 8n) }] });
    assert.equal((await b).revision, 8n);
    assert.equal(renewer.stats.streamsOpened, 2);
    assert.equal(renewer.stats.unaryOnly, false);
    renewer.close();
  });

  it("falls back to unary Renew for good when the server answers KeepAlive with UNIMPLEMENTED", async () => {
    const stub = new FakeStub();
    const renewer = new Renewer(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined), true);
    const a = renewer.renew(request("a", 5n), 5000).result;
    await written(stub, 0, 1);
    stub.streams[0]!.emit("error", serviceError(GrpcStatus.UNIMPLEMENTED, "unknown method KeepAlive"));
    assert.equal((await a).revision, 6n);
    assert.equal((await renewer.renew(request("b", 7n), 5000).result).revision, 8n);
    assert.equal(stub.streams.length, 1, "no second stream");
    assert.deepEqual(stub.unary.map((r) => r.name), ["a", "b"]);
    assert.equal(renewer.stats.unaryOnly, true);
    renewer.close();
  });

  it("fails an entry with a retryable DEADLINE_EXCEEDED when no result comes in time", async () => {
    const stub = new FakeStub();
    const renewer = new Renewer(stub as unknown as LeaseServiceClient, new CallContext("fake:1", undefined), true);
    const err = await renewer.renew(request("a", 5n), 50).result.then(() => assert.fail("renewed"), (e: unknown) => e);
    assert.ok(err instanceof TenureError);
    assert.equal(err.code, GrpcStatus.DEADLINE_EXCEEDED);
    assert.equal(err.retryable, true);
    renewer.close();
  });
});

describe("KeepAlive against Tenure", () => {
  let nats: NatsServer;
  let tenure: TenureServer;
  before(async () => {
    nats = await NatsServer.start();
    tenure = await TenureServer.start([], {}, { nats });
  });
  after(async () => {
    await tenure?.stop();
    await nats?.stop();
  });

  it("renews every session of a client over one stream", async () => {
    const client = new TenureClient(tenure.address);
    const prefix = uniqueName("ts.ka");
    const stop = new AbortController();
    try {
      const events = client.watch(`${prefix}.>`, { signal: stop.signal })[Symbol.asyncIterator]();
      await nextMatching(events, "SNAPSHOT_COMPLETE", (e) => e.type === EventType.SNAPSHOT_COMPLETE);
      const names = Array.from({ length: 20 }, (_, i) => `${prefix}.s${i}`);
      const sessions = await Promise.all(names.map((n) => client.acquire(n, "holder", { ttlMs: 3000 })));
      const renewed = new Map<string, number>();
      await nextMatching(events, "two renewals of each session", (e) => {
        if (e.type === EventType.RENEWED) renewed.set(e.name, (renewed.get(e.name) ?? 0) + 1);
        return names.every((n) => (renewed.get(n) ?? 0) >= 2);
      }, 20_000).catch((err: unknown) => {
        const lost = sessions.filter((s) => !s.isHeld()).map((s) => `${s.name}: ${(s.signal.reason as Error).message} ${String((s.signal.reason as Error).cause)}`);
        throw new Error(`${err}; stats ${JSON.stringify(client.renewalStats)}; renewed ${JSON.stringify([...renewed])}; lost ${lost.join("; ")}`);
      });
      const stats = client.renewalStats;
      console.log(`# keepalive: ${stats.streamEntries} renewals in ${stats.streamMessages} messages on ${stats.streamsOpened} stream(s)`);
      assert.equal(stats.streamsOpened, 1);
      assert.equal(stats.unaryRenews, 0);
      assert.ok(stats.streamEntries >= 40);
      assert.ok(stats.streamMessages <= stats.streamEntries);
      for (const s of sessions) assert.equal(s.isHeld(), true);
      await Promise.all(sessions.map((s) => s.release()));
    } finally {
      stop.abort();
      client.close();
    }
  });

  it("ends a session whose entry is refused with LEASE_NOT_HELD (no loss watch)", async () => {
    const client = new TenureClient(tenure.address, { lossWatch: false });
    try {
      const name = uniqueName("ts.ka.refused");
      const session = await client.acquire(name, "old", { ttlMs: 3000 });
      await client.revokeLease(name, "test revoke");
      const reason = await within(10_000, "the loss signal", aborted(session.signal));
      assert.ok(reason instanceof LeaseLostError);
      assert.equal(reason.reason, "LEASE_NOT_HELD");
      assert.ok(reason.cause instanceof TenureError);
      assert.equal(reason.cause.reason, Reason.LEASE_NOT_HELD);
      assert.equal(reason.cause.rpc, "KeepAlive");
    } finally {
      client.close();
    }
  });

  it("keeps sessions held across a Tenure restart that breaks the stream", async () => {
    const client = new TenureClient(tenure.address, { lossWatch: false });
    const name = uniqueName("ts.ka.restart");
    try {
      // Renewed every 2 s, safe for 5.4 s: a restart fits between.
      const session = await client.acquire(name, "survivor", { ttlMs: 6000 });
      const renewal = async (what: string) => {
        const watcher = new TenureClient(tenure.address);
        const stop = new AbortController();
        try {
          const events = watcher.watch(name, { signal: stop.signal })[Symbol.asyncIterator]();
          const isOurs = (e: { type: EventType; fencingToken: bigint }) => e.type === EventType.RENEWED && e.fencingToken === session.fencingToken;
          await nextMatching(events, what, isOurs, 20_000);
        } finally {
          stop.abort();
          watcher.close();
        }
      };
      await renewal("a renewal over the first stream");
      assert.equal(client.renewalStats.streamsOpened, 1);
      const address = tenure.address;
      await tenure.kill();
      await tenure.stop();
      tenure = await TenureServer.start([], {}, { nats, address });
      await renewal("a renewal after the restart");
      assert.equal(session.isHeld(), true);
      assert.ok(client.renewalStats.streamsOpened >= 2, "a new stream after the broken one");
      assert.equal(await session.release(), true);
    } finally {
      client.close();
    }
  });
});
