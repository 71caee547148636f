/**
 * The shared middleware check, without HTTP: docs/fencing.md's order of
 * checks, the refusal bodies, the token header's strict decimal form, and
 * stores that answer late or fail.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { checkFence, Keyset, MemoryTokenStore, refusalBody, type FenceCheck, type FenceInput, type TokenStore } from "../src/index.js";
import { fence, invalidVector, signProof, text, validVector, vectors } from "./vectors.js";

const keyset = Keyset.parse(vectors.keyset);
const orders42 = validVector("a plain lease").proof_text;

/** Checks one request for lease `name` against a store; counts the calls of `name`. */
async function check(store: TokenStore, input: Partial<FenceInput> & { lease?: string }): Promise<FenceCheck & { named: number }> {
  let named = 0;
  const outcome = await checkFence(
    { keyset, store },
    { proof: input.proof, token: input.token, name: () => (named++, input.lease ?? "orders") },
  );
  return { ...outcome, named };
}

/** The refusal's reason, or "admitted". */
function reason(outcome: FenceCheck): string {
  return outcome.admitted ? "admitted" : outcome.refusal.reason;
}

describe("checkFence", () => {
  it("refuses a missing proof, and an empty one as malformed", async () => {
    const store = new MemoryTokenStore();
    assert.equal(reason(await check(store, { proof: null, token: "42" })), "FENCE_MISSING");
    assert.equal(reason(await check(store, { proof: undefined })), "FENCE_MISSING");
    assert.equal(reason(await check(store, { proof: "" })), "FENCE_MALFORMED");
    assert.equal(reason(await check(store, { proof: `${orders42}, ${orders42}` })), "FENCE_MALFORMED");
  });

  it("verifies before it asks for the lease name, and checks the name before the token header", async () => {
    const store = new MemoryTokenStore();
    const forged = await check(store, { proof: invalidVector("the token changed to 2^62").proof_text, lease: "elsewhere" });
    assert.equal(reason(forged), "FENCE_BAD_SIGNATURE");
    assert.equal(forged.named, 0);
    const wrong = await check(store, { proof: orders42, token: "999", lease: "payments" });
    assert.equal(reason(wrong), "FENCE_WRONG_NAME");
    assert.equal(wrong.named, 1);
    assert.equal(store.highest("orders"), undefined);
    assert.equal(store.highest("payments"), undefined);
  });

  it("checks the token header before the store, which a mismatch leaves untouched", async () => {
    const store = new MemoryTokenStore();
    const higher = text(signProof(fence("orders", 50n)));
    assert.equal(reason(await check(store, { proof: higher, token: String(2n ** 62n) })), "FENCE_TOKEN_MISMATCH");
    assert.equal(store.highest("orders"), undefined);
  });

  it("takes the token header only as 1 to 20 ASCII digits", async () => {
    for (const [token, expected] of [
      ["42", "admitted"],
      ["042", "admitted"],
      ["", "FENCE_TOKEN_MISMATCH"],
      [" 42", "FENCE_TOKEN_MISMATCH"],
      ["+42", "FENCE_TOKEN_MISMATCH"],
      ["42.0", "FENCE_TOKEN_MISMATCH"],
      ["0x2a", "FENCE_TOKEN_MISMATCH"],
      ["42, 42", "FENCE_TOKEN_MISMATCH"],
      ["4".repeat(21), "FENCE_TOKEN_MISMATCH"],
    ] as const) {
      assert.equal(reason(await check(new MemoryTokenStore(), { proof: orders42, token })), expected, JSON.stringify(token));
    }
    const big = validVector("the largest token");
    const outcome = await check(new MemoryTokenStore(), { proof: big.proof_text, token: "18446744073709551615", lease: "big" });
    assert.equal(outcome.admitted && outcome.verified.fence.token, 2n ** 64n - 1n);
  });

  it("admits equal and higher tokens and refuses a lower one as stale, with both tokens in decimal", async () => {
    const store = new MemoryTokenStore();
    assert.equal(reason(await check(store, { proof: orders42 })), "admitted");
    assert.equal(reason(await check(store, { proof: orders42, token: "42" })), "admitted");
    const max = text(signProof(fence("orders", 2n ** 64n - 1n)));
    assert.equal(reason(await check(store, { proof: max })), "admitted");
    const stale = await check(store, { proof: orders42 });
    assert.ok(!stale.admitted);
    assert.deepEqual(JSON.parse(refusalBody(stale.refusal)), {
      reason: "FENCE_STALE",
      message: stale.refusal.message,
      token: "42",
      highest: "18446744073709551615",
    });
    assert.match(stale.refusal.message, /fencing token 42 is lower than 18446744073709551615/);
    assert.equal(store.highest("orders"), 2n ** 64n - 1n);
  });

  it("gives every refusal a JSON body of reason and message only (but FENCE_STALE)", async () => {
    const outcome = await check(new MemoryTokenStore(), { proof: validVector("a semaphore slot").proof_text });
    assert.ok(!outcome.admitted);
    const body = JSON.parse(refusalBody(outcome.refusal)) as Record<string, unknown>;
    assert.deepEqual(Object.keys(body), ["reason", "message"]);
    assert.equal(body.message, 'the fence proof is for lease "pool.gpu", not "orders"');
  });

  it("awaits an asynchronous store, and rejects when the store does", async () => {
    const memory = new MemoryTokenStore();
    const later: TokenStore = { advance: async (name, token) => (await Promise.resolve(), memory.advance(name, token)) };
    assert.equal(reason(await check(later, { proof: text(signProof(fence("orders", 9n))) })), "admitted");
    assert.equal(reason(await check(later, { proof: text(signProof(fence("orders", 8n))) })), "FENCE_STALE");
    const broken: TokenStore = { advance: () => Promise.reject(new Error("database unreachable")) };
    await assert.rejects(check(broken, { proof: orders42 }), /database unreachable/);
  });
});
