/**
 * Fence proofs end to end against a real Tenure started with
 * `--fence-signing-key` (a key made by openssl in a temporary directory):
 * every kind of grant (lease, semaphore slot, group member, election term)
 * carries a proof that verifies, with the keyset of GetFenceKeys, through
 * `@tenure/fence`, and states exactly that grant; renewals keep it; and a
 * store fenced by `@tenure/fence` admits the holder's `fenceHeaders()` and
 * refuses a deposed holder's.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import type { Keyset } from "@tenure/fence" with { "resolution-mode": "import" };

import { Elections, EventType, Semaphore, TenureClient, type FenceKeys } from "../src";
import { nextMatching, TenureServer, uniqueName } from "./harness";

/** `@tenure/fence`, an ES module, loaded from this CommonJS test by import(). */
type FenceModule = typeof import("@tenure/fence", { with: { "resolution-mode": "import" } });

let fence: FenceModule;
let keyDir: string;
let server: TenureServer;
let client: TenureClient;
let served: FenceKeys;
let keyset: Keyset;

before(async () => {
  fence = await import("@tenure/fence");
  keyDir = mkdtempSync(join(tmpdir(), "tenure-ts-fence-"));
  const keyFile = join(keyDir, "fence.pem");
  execFileSync("openssl", ["genpkey", "-algorithm", "ed25519", "-out", keyFile], { stdio: ["ignore", "ignore", "pipe"] });
  server = await TenureServer.start(["--fence-signing-key", keyFile]);
  client = new TenureClient(server.address);
  served = await client.fenceKeys();
  keyset = fence.Keyset.parse(served.keyset);
});
after(async () => {
  client?.close();
  await server?.stop();
  if (keyDir !== undefined) rmSync(keyDir, { recursive: true, force: true });
});

/** The id of the key that signs new proofs. */
function activeKeyId(): string {
  const active = served.keys.find((k) => k.active);
  assert.ok(active, "GetFenceKeys names an active key");
  return active.keyId;
}

describe("fence proofs", () => {
  it("GetFenceKeys serves the signing key, and its keyset is what @tenure/fence pins", () => {
    assert.equal(served.keys.length, 1);
    const [key] = served.keys;
    assert.equal(key!.active, true);
    assert.equal(key!.publicKey.length, 32);
    assert.equal(key!.keyId, createHash("sha256").update(key!.publicKey).digest("hex").slice(0, 16));
    assert.deepEqual(keyset.keyIds, [key!.keyId]);
  });

  it("a lease session's proof verifies and states its grant; fenceHeaders carries proof and token", async () => {
    const name = uniqueName("ts.fence.lease");
    const before = BigInt(Date.now());
    await using session = await client.acquire(name, "worker-1", { ttlMs: 10_000 });
    const after = BigInt(Date.now());
    assert.ok(session.fenceProof.length >= 103, `a proof of ${session.fenceProof.length} bytes`);
    const verified = keyset.verify(session.fenceProof);
    assert.equal(verified.keyId, activeKeyId());
    const { grantedAtMs, bucket, ...stated } = verified.fence;
    assert.deepEqual(stated, { name, slot: 0, token: session.fencingToken, ttlSeconds: 10, holder: "worker-1" });
    assert.ok(bucket.length > 0);
    // Tenure's clock is this machine's: the grant happened while acquire ran.
    assert.ok(grantedAtMs >= before - 1000n && grantedAtMs <= after + 1000n, `granted at ${grantedAtMs}, acquire ran ${before}..${after}`);

    const headers = session.fenceHeaders();
    assert.deepEqual(Object.keys(headers).sort(), ["Tenure-Fence", "Tenure-Fencing-Token"]);
    assert.equal(headers["Tenure-Fencing-Token"], String(session.fencingToken));
    assert.equal(headers["Tenure-Fence"], Buffer.from(session.fenceProof).toString("base64url"));
    assert.deepEqual(keyset.verifyText(headers["Tenure-Fence"]!), verified);
  });

  it("renewals keep the grant's proof", async () => {
    const name = uniqueName("ts.fence.renew");
    const stop = new AbortController();
    const events = client.watch(name, { signal: stop.signal })[Symbol.asyncIterator]();
    try {
      await nextMatching(events, "SNAPSHOT_COMPLETE", (e) => e.type === EventType.SNAPSHOT_COMPLETE);
      await using session = await client.acquire(name, "worker-1", { ttlMs: 1000 });
      const proof = Buffer.from(session.fenceProof);
      await nextMatching(events, "a renewal", (e) => e.type === EventType.RENEWED && e.lease?.name === name);
      assert.ok(session.isHeld());
      assert.deepEqual(Buffer.from(session.fenceProof), proof);
      assert.equal(keyset.verify(session.fenceProof).fence.token, session.fencingToken);
    } finally {
      stop.abort();
    }
  });

  it("a semaphore slot's proof states its slot", async () => {
    const semaphore = new Semaphore(client, uniqueName("ts.fence.sem"), 2);
    await using first = await semaphore.acquire("worker-1", { ttlMs: 10_000 });
    await using second = await semaphore.acquire("worker-2", { ttlMs: 10_000 });
    for (const slot of [first, second]) {
      const { fence: stated } = keyset.verify(slot.fenceProof);
      assert.deepEqual([stated.name, stated.slot, stated.token, stated.holder], [semaphore.name, slot.slot, slot.fencingToken, slot.holder]);
    }
    assert.deepEqual(new Set([first.slot, second.slot]), new Set([1, 2]));
  });

  it("each group member has its own proof and headers", async () => {
    const names = [uniqueName("ts.fence.acct"), uniqueName("ts.fence.acct")];
    await using group = await client.acquireGroup(names, "transfer-1", { ttlMs: 10_000 });
    for (const name of names) {
      const { fence: stated } = keyset.verify(group.fenceProof(name));
      assert.deepEqual([stated.name, stated.token, stated.holder, stated.slot], [name, group.fencingToken(name), "transfer-1", 0]);
      assert.equal(keyset.verifyText(group.fenceHeaders(name)["Tenure-Fence"]!).fence.name, name);
      assert.equal(group.fenceHeaders(name)["Tenure-Fencing-Token"], String(group.fencingToken(name)));
    }
    assert.throws(() => group.fenceProof("not.a.member"), /not a member of this group/);
  });

  it("an election term's proof verifies", async () => {
    const name = uniqueName("ts.fence.election");
    await using term = await new Elections(client).elect(name, "node-1", "10.0.0.1:5432", { ttlMs: 10_000 });
    const { fence: stated } = keyset.verify(term.fenceProof);
    assert.deepEqual([stated.name, stated.holder, stated.token], [name, "node-1", term.fencingToken]);
  });

  it("a store fenced by @tenure/fence admits the holder and refuses it once a newer holder wrote", async () => {
    const name = uniqueName("ts.fence.store");
    let writes = 0;
    const handler = fence.fenced(
      () => {
        writes++;
        return new Response("stored");
      },
      { keyset, resource: () => name },
    );
    const store: Server = createServer(fence.nodeListener(handler));
    await new Promise<void>((ok) => store.listen(0, "127.0.0.1", ok));
    const url = `http://127.0.0.1:${(store.address() as AddressInfo).port}/`;
    const put = async (headers: Record<string, string>) => {
      const response = await fetch(url, { method: "PUT", headers, body: "report" });
      const body = await response.text();
      return { status: response.status, body: response.status === 409 ? (JSON.parse(body) as Record<string, string>) : body };
    };
    try {
      const first = await client.acquire(name, "worker-1", { ttlMs: 10_000 });
      const deposed = first.fenceHeaders();
      assert.deepEqual(await put(deposed), { status: 200, body: "stored" });
      await first.release();
      await using second = await client.acquire(name, "worker-2", { ttlMs: 10_000 });
      assert.ok(second.fencingToken > first.fencingToken);
      assert.deepEqual(await put(second.fenceHeaders()), { status: 200, body: "stored" });

      const stale = await put(deposed);
      assert.equal(stale.status, 409);
      assert.deepEqual(stale.body, {
        reason: "FENCE_STALE",
        message: (stale.body as Record<string, string>).message,
        token: String(first.fencingToken),
        highest: String(second.fencingToken),
      });
      const huge = await put({ ...deposed, "Tenure-Fencing-Token": String(2n ** 62n) });
      assert.equal(huge.status, 409);
      assert.equal((huge.body as Record<string, string>).reason, "FENCE_TOKEN_MISMATCH");
      assert.equal(writes, 2);
    } finally {
      store.closeAllConnections();
      await new Promise((ok) => store.close(ok));
    }
  });
});
