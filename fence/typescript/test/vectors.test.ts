/**
 * Every shared test vector: each valid proof verifies (from its text and
 * from its bytes) and states exactly its fence, u64s without loss; each
 * invalid text is refused with exactly its error kind.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { FenceError, Keyset } from "../src/index.js";
import { fence, signProof, vectors, VECTORS_PATH } from "./vectors.js";

const keyset = Keyset.parse(vectors.keyset);

describe(`shared vectors (${VECTORS_PATH})`, () => {
  it("has valid and invalid vectors, and pins exactly the keys marked pinned", () => {
    assert.ok(vectors.valid.length >= 5, `only ${vectors.valid.length} valid vectors`);
    assert.ok(vectors.invalid.length >= 14, `only ${vectors.invalid.length} invalid vectors`);
    assert.deepEqual(
      keyset.keyIds,
      vectors.keys.filter((k) => k.pinned).map((k) => k.key_id),
    );
  });

  for (const v of vectors.valid) {
    it(`verifies: ${v.about}`, () => {
      const expected = {
        fence: {
          bucket: v.fence.bucket,
          name: v.fence.name,
          slot: v.fence.slot,
          token: BigInt(v.fence.token),
          grantedAtMs: BigInt(v.fence.granted_at_ms),
          ttlSeconds: v.fence.ttl_s,
          holder: v.fence.holder,
        },
        keyId: v.key_id,
      };
      assert.deepEqual(keyset.verifyText(v.proof_text), expected);
      assert.deepEqual(keyset.verify(Buffer.from(v.proof_hex, "hex")), expected);
      assert.equal(String(expected.fence.token), v.fence.token, "the token survives as a bigint");
    });
  }

  for (const v of vectors.invalid) {
    it(`refuses with ${v.error}: ${v.about}`, () => {
      assert.throws(
        () => keyset.verifyText(v.proof_text),
        (err: unknown) => err instanceof FenceError && err.kind === v.error && err.message.length > 0,
      );
    });
  }

  it("the test signer reproduces the vectors byte for byte (signatures are deterministic)", () => {
    for (const v of vectors.valid) {
      const f = v.fence;
      const keyName = vectors.keys.find((k) => k.key_id === v.key_id)!.name;
      const proof = signProof(
        fence(f.name, BigInt(f.token), { slot: f.slot, grantedAtMs: BigInt(f.granted_at_ms), ttlSeconds: f.ttl_s, holder: f.holder, bucket: f.bucket }),
        keyName,
      );
      assert.equal(Buffer.from(proof).toString("hex"), v.proof_hex, v.about);
    }
  });
});
