/**
 * The middleware over real HTTP (node:http on 127.0.0.1, requests with
 * fetch), for each adapter: `fenced` through `nodeListener`, `expressFence`
 * in a real Express app, and `expressFence` with plain node:http. A genuine
 * proof is admitted; each refusal is a 409 with its JSON body and the
 * handler never runs; the forged-token attacks all fail while the genuine
 * holder keeps writing.
 */
import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, describe, it } from "node:test";

import { startExpress, startFetch, startPlainNode, type Started } from "./servers.js";
import { fence, invalidVector, signProof, text, validVector } from "./vectors.js";

/** 2^62: the huge token of the attacks. */
const HUGE = 2n ** 62n;

/** A reply: status, content type and JSON body. */
interface Reply {
  status: number;
  type: string | null;
  body: Record<string, unknown>;
}

/** PUTs to /name with these headers. */
async function put(server: Started, name: string, headers: Record<string, string> = {}, body = "payload"): Promise<Reply> {
  const response = await fetch(`${server.url}/${encodeURIComponent(name)}`, { method: "PUT", headers, body });
  const type = response.headers.get("content-type");
  const raw = await response.text();
  const json = type?.startsWith("application/json") === true;
  return { status: response.status, type, body: json ? (JSON.parse(raw) as Record<string, unknown>) : { text: raw } };
}

/** Headers carrying a proof (bytes or text) and, if given, a token. */
function proofHeaders(proof: Uint8Array | string, token?: bigint | string): Record<string, string> {
  const headers: Record<string, string> = { "Tenure-Fence": typeof proof === "string" ? proof : text(proof) };
  if (token !== undefined) headers["Tenure-Fencing-Token"] = String(token);
  return headers;
}

/** Asserts a 409 refusal with `reason` and a JSON body of exactly the contract's keys. */
function assertRefused(reply: Reply, reason: string, tokens?: { token: string; highest: string }): void {
  assert.equal(reply.status, 409, `${reason}: ${JSON.stringify(reply.body)}`);
  assert.equal(reply.type, "application/json");
  assert.equal(reply.body.reason, reason);
  assert.equal(typeof reply.body.message, "string");
  assert.ok((reply.body.message as string).length > 10);
  assert.deepEqual(Object.keys(reply.body), tokens ? ["reason", "message", "token", "highest"] : ["reason", "message"]);
  if (tokens) assert.deepEqual([reply.body.token, reply.body.highest], [tokens.token, tokens.highest]);
}

const adapters: [string, () => Promise<Started>][] = [
  ["fenced (fetch-style) on node:http", startFetch],
  ["expressFence in Express", startExpress],
  ["expressFence with plain node:http (req, res, next)", startPlainNode],
];

for (const [what, start] of adapters) {
  describe(what, () => {
    let server: Started;
    before(async () => {
      server = await start();
    });
    after(async () => {
      await server.close();
    });

    it("admits a genuine proof and hands the handler the verified fence", async () => {
      const v = validVector("a plain lease");
      const reply = await put(server, "orders", proofHeaders(v.proof_text, "42"));
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      assert.equal(reply.body.name, "orders");
      assert.equal(reply.body.token, "42");
      assert.equal(reply.body.holder, "worker-1");
      assert.equal(reply.body.keyId, v.key_id);
      assert.equal(server.store.highest("orders"), 42n);
    });

    it("refuses every reason with a 409 JSON body, never calling the handler", async () => {
      const handled = server.handled();
      const plain = validVector("a plain lease").proof_text;
      assertRefused(await put(server, "r1"), "FENCE_MISSING");
      assertRefused(await put(server, "r1", proofHeaders("not a proof!")), "FENCE_MALFORMED");
      assertRefused(await put(server, "r1", proofHeaders(`${plain}=`)), "FENCE_MALFORMED");
      assertRefused(await put(server, "r1", proofHeaders(invalidVector("version 2").proof_text)), "FENCE_UNSUPPORTED_VERSION");
      assertRefused(await put(server, "r1", proofHeaders(invalidVector("signed by a key that is not pinned").proof_text)), "FENCE_UNKNOWN_KEY");
      assertRefused(await put(server, "r1", proofHeaders(invalidVector("one bit of the name").proof_text)), "FENCE_BAD_SIGNATURE");
      assertRefused(await put(server, "r2", proofHeaders(plain)), "FENCE_WRONG_NAME");
      assertRefused(await put(server, "r3", proofHeaders(signProof(fence("r3", 5n)), "6")), "FENCE_TOKEN_MISMATCH");
      assert.equal(server.handled(), handled);
      assert.equal((await put(server, "r4", proofHeaders(signProof(fence("r4", 7n))))).status, 200);
      assertRefused(await put(server, "r4", proofHeaders(signProof(fence("r4", 6n)), "6")), "FENCE_STALE", { token: "6", highest: "7" });
      assert.equal(server.handled(), handled + 1);
      for (const name of ["r1", "r2", "r3"]) assert.equal(server.store.highest(name), undefined, name);
    });

    it("keeps a forged, huge or foreign token from poisoning the store: the genuine holder keeps writing", async () => {
      const handled = server.handled();
      const genuine = signProof(fence("ledger", 42n));
      assert.equal((await put(server, "ledger", proofHeaders(genuine, 42n))).status, 200);

      // The attacks, each with token 2^62.
      const bare = await put(server, "ledger", { "Tenure-Fencing-Token": String(HUGE) });
      assertRefused(bare, "FENCE_MISSING");
      const beside = await put(server, "ledger", proofHeaders(genuine, HUGE));
      assertRefused(beside, "FENCE_TOKEN_MISMATCH");
      const forged = Buffer.from(genuine);
      forged.writeBigUInt64BE(HUGE, 9); // the token field, signature kept
      assertRefused(await put(server, "ledger", proofHeaders(forged, HUGE)), "FENCE_BAD_SIGNATURE");
      const foreign = signProof(fence("payments", HUGE)); // genuine, for another lease name
      assertRefused(await put(server, "ledger", proofHeaders(foreign, HUGE)), "FENCE_WRONG_NAME");
      assert.equal(server.store.highest("ledger"), 42n, "no attack moved the highest token");
      assert.equal(server.store.highest("payments"), undefined);

      // The genuine holder's next write goes through; the next genuine
      // holder's token still fences the previous one out.
      assert.equal((await put(server, "ledger", proofHeaders(genuine, 42n))).status, 200);
      assert.equal((await put(server, "ledger", proofHeaders(signProof(fence("ledger", 43n)), 43n))).status, 200);
      assertRefused(await put(server, "ledger", proofHeaders(genuine, 42n)), "FENCE_STALE", { token: "42", highest: "43" });
      assert.equal(server.handled(), handled + 3);
    });

    it("fails the request when the token store fails, without calling the handler", async () => {
      const handled = server.handled();
      const reply = await put(server, "broken-db", proofHeaders(signProof(fence("broken-db", 1n))));
      assert.equal(reply.status, 500);
      assert.equal(server.handled(), handled);
      assert.match(String(server.errors.at(-1)), /token store unreachable for broken-db/);
    });
  });
}

describe("nodeListener", () => {
  let server: Started;
  before(async () => {
    server = await startFetch();
  });
  after(async () => {
    await server.close();
  });

  it("streams the request body to the handler", async () => {
    const body = "x".repeat(200_000);
    const reply = await put(server, "bodies", proofHeaders(signProof(fence("bodies", 1n))), body);
    assert.equal(reply.status, 200);
    assert.equal(reply.body.body, body);
  });

  it("answers 400 to a Host that cannot form a URL, without calling the handler", async () => {
    const handled = server.handled();
    const { port } = new URL(server.url);
    const [status, body] = await new Promise<[number, string]>((ok, fail) => {
      const req = httpRequest({ host: "127.0.0.1", port, method: "PUT", path: "/x", headers: { host: "bad host" } }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => ok([res.statusCode ?? 0, text]));
      });
      req.on("error", fail);
      req.end();
    });
    assert.equal(status, 400);
    assert.match(body, /its Host or headers cannot form a URL/, "the adapter refused it, not node's parser");
    assert.equal(server.handled(), handled);
  });
});
