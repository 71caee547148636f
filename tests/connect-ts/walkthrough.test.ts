/**
 * The README walkthrough (acquire, renew, held by another, watch, release,
 * acquire again) through the Connect TypeScript client, against the real
 * Tenure that test.sh started (TENURE_URL, with bearer-token auth on:
 * TENURE_TOKEN): over the Connect protocol with JSON bodies, over Connect
 * with binary protobuf, and over gRPC-Web, all on HTTP/1.1 to the gRPC
 * port. Each transport walks its own lease name, so they share the server
 * without sharing state.
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";

import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { EventType, LeaseService, type LeaseEvent } from "./gen/tenure/v1/lease_pb.js";

const baseUrl = process.env.TENURE_URL;
const token = process.env.TENURE_TOKEN;
if (!baseUrl || !token) throw new Error("TENURE_URL and TENURE_TOKEN are not set: run this through test.sh");

/** Sends the bearer token, as any Connect or gRPC-Web client would. */
const bearer: Interceptor = (next) => (req) => {
  req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};
const interceptors = [bearer];

const transports: Record<string, Transport> = {
  "Connect (JSON)": createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: false, interceptors }),
  "Connect (protobuf)": createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: true, interceptors }),
  "gRPC-Web": createGrpcWebTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: true, interceptors }),
};

const seconds = (s: number) => create(DurationSchema, { seconds: BigInt(s) });

/** The next event of `events` of one of `types`, within 10 s. */
async function nextOf(events: AsyncIterator<LeaseEvent>, ...types: EventType[]): Promise<LeaseEvent> {
  const until = Date.now() + 10_000;
  for (;;) {
    const timeout = new Promise<never>((_, fail) =>
      setTimeout(() => fail(new Error(`no ${types.map((t) => EventType[t])} event in time`)), until - Date.now()).unref(),
    );
    const next = await Promise.race([events.next(), timeout]);
    assert.ok(!next.done, "the watch ended early");
    if (types.includes(next.value.type)) return next.value;
  }
}

for (const [protocol, transport] of Object.entries(transports)) {
  test(`README walkthrough over ${protocol}`, async () => {
    const client = createClient(LeaseService, transport);
    const name = `jobs.nightly-${protocol.replace(/[^A-Za-z]+/g, "-").replace(/-$/, "").toLowerCase()}`;
    const leaseKey = `my-secret-lease-key-${name}`;

    // Acquire: the lease, its fencing token and our key.
    const acquired = await client.acquire({ name, holder: "worker-1", ttl: seconds(30), leaseKey });
    const lease = acquired.lease!;
    assert.equal(lease.holder, "worker-1");
    assert.equal(acquired.leaseKey, leaseKey);
    assert.equal(lease.ttl?.seconds, 30n);
    const fence = lease.fencingToken;
    console.log(`${protocol}: acquired ${name} token ${fence} revision ${lease.revision}`);

    // Renew: same token, a new revision.
    const renewed = (await client.renew({ name, expectedRevision: lease.revision, leaseKey })).lease!;
    assert.equal(renewed.fencingToken, fence);
    assert.ok(renewed.revision > lease.revision);
    console.log(`${protocol}: renewed, token ${renewed.fencingToken} revision ${renewed.revision}`);

    // Held by another: FAILED_PRECONDITION with the ErrorInfo reason.
    const refused = await client
      .acquire({ name, holder: "worker-2", ttl: seconds(5) })
      .then(() => assert.fail("worker-2 acquired a held lease"))
      .catch((err: unknown) => ConnectError.from(err));
    assert.equal(refused.code, Code.FailedPrecondition, refused.message);
    const [info] = refused.findDetails(ErrorInfoSchema);
    assert.ok(info, `no ErrorInfo in ${refused.message}`);
    assert.equal(info.reason, "LEASE_HELD");
    assert.equal(info.domain, "tenure.v1");
    assert.equal(info.metadata.holder, "worker-1");
    console.log(`${protocol}: worker-2 refused: ${Code[refused.code]} ${info.reason} (holder ${info.metadata.holder})`);

    // Watch: the current holding, the end of the snapshot, then live events.
    const stop = new AbortController();
    const events = (async function* () {
      for await (const reply of client.watchLease({ name }, { signal: stop.signal })) {
        if (reply.event) yield reply.event;
      }
    })();
    try {
      const current = await nextOf(events, EventType.CURRENT);
      assert.equal(current.holder, "worker-1");
      assert.equal(current.fencingToken, fence);
      await nextOf(events, EventType.SNAPSHOT_COMPLETE);
      console.log(`${protocol}: watch: CURRENT ${current.holder} token ${current.fencingToken}, SNAPSHOT_COMPLETE`);

      // Release with the current revision.
      const released = await client.release({ name, expectedRevision: renewed.revision, leaseKey });
      assert.ok(released.revision > renewed.revision);
      const gone = await nextOf(events, EventType.RELEASED);
      assert.equal(gone.holder, "worker-1");
      console.log(`${protocol}: released at revision ${released.revision}; watch: RELEASED`);

      // worker-2 now gets it, with a greater token.
      const next = (await client.acquire({ name, holder: "worker-2", ttl: seconds(5) })).lease!;
      assert.equal(next.holder, "worker-2");
      assert.ok(next.fencingToken > fence);
      const taken = await nextOf(events, EventType.ACQUIRED);
      assert.equal(taken.holder, "worker-2");
      assert.equal(taken.fencingToken, next.fencingToken);
      console.log(`${protocol}: worker-2 acquired token ${next.fencingToken}; watch: ACQUIRED`);
    } finally {
      stop.abort();
      await events.return?.(undefined).catch(() => undefined);
    }
  });
}

test("without the bearer token, Connect calls are UNAUTHENTICATED", async () => {
  const transport = createConnectTransport({ baseUrl, httpVersion: "1.1" });
  const err = await createClient(LeaseService, transport)
    .getLease({ name: "jobs.nightly" })
    .then(() => assert.fail("answered without credentials"))
    .catch((e: unknown) => ConnectError.from(e));
  assert.equal(err.code, Code.Unauthenticated, err.message);
  assert.equal(err.findDetails(ErrorInfoSchema)[0]?.reason, "UNAUTHENTICATED");
  console.log(`no token: ${Code[err.code]}: ${err.rawMessage}`);
});
