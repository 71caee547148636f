/**
 * Verification beyond the shared vectors: the strictness of the text form,
 * the length bounds and their order, field bounds, UTF-8, strict Ed25519
 * (what OpenSSL alone would accept), and keyset parsing.
 */
import assert from "node:assert/strict";
import { createHash, createPublicKey, generateKeyPairSync, verify as opensslVerify } from "node:crypto";
import { describe, it } from "node:test";

import { FenceError, Keyset, KeysetError, keyId, MAX_PROOF_BYTES, type FenceErrorKind } from "../src/index.js";
import { isCurvePoint, isSmallOrder } from "../src/ed25519.js";
import { fence, signProof, statementBytes, text, validVector, vectors } from "./vectors.js";

const keyset = Keyset.parse(vectors.keyset);
const plain = validVector("a plain lease");

/** Asserts that verifying `input` (text or bytes) throws a FenceError of `kind`. */
function refused(input: string | Uint8Array, kind: FenceErrorKind): void {
  assert.throws(
    () => (typeof input === "string" ? keyset.verifyText(input) : keyset.verify(input)),
    (err: unknown) => err instanceof FenceError && err.kind === kind,
    `expected ${kind}`,
  );
}

describe("the text form", () => {
  it("refuses padding, the standard alphabet, whitespace and foreign characters", () => {
    const t = plain.proof_text;
    assert.ok(t.includes("_"));
    for (const bad of [`${t}==`, `${t}=`, t.replace("_", "/"), `+${t.slice(1)}`, `${t.slice(0, 40)}/${t.slice(41)}`, ` ${t}`, `${t}\n`, `${t.slice(0, 80)} ${t.slice(81)}`, `${t.slice(0, -1)}é`]) {
      refused(bad, "malformed");
    }
  });

  it("refuses a length that leaves one character over", () => {
    assert.equal(plain.proof_text.length % 4, 2);
    refused(`${plain.proof_text}A`, "malformed");
  });

  it("refuses stray bits in the last character (one proof has one text)", () => {
    const t = plain.proof_text;
    assert.equal(t.at(-1), "w"); // 110000: the low 4 bits carry nothing
    refused(`${t.slice(0, -1)}x`, "malformed");
    assert.equal(keyset.verifyText(t).fence.token, 42n);
  });

  it("refuses text longer than any proof before decoding it", () => {
    refused("A".repeat(Math.ceil(MAX_PROOF_BYTES / 3) * 4 + 1), "malformed");
    refused("!".repeat(1_000_000), "malformed");
  });
});

describe("the byte format", () => {
  it("bounds lengths before the version: 102 bytes are malformed whatever the first byte", () => {
    const short = new Uint8Array(102).fill(2);
    refused(short, "malformed");
    const minimal = new Uint8Array(103);
    minimal[0] = 2;
    refused(minimal, "unsupported_version");
    const long = new Uint8Array(MAX_PROOF_BYTES + 1);
    long[0] = 2;
    refused(long, "malformed");
  });

  it("checks the version before the fields, and the fields before the key", () => {
    const bytes = Buffer.from(plain.proof_hex, "hex");
    bytes[0] = 0;
    refused(bytes, "unsupported_version");
    const stranger = signProof(fence("orders", 1n, { holder: "h".repeat(1025) }), "stranger");
    refused(stranger, "malformed");
  });

  it("reads the largest proof (255-byte bucket and name, 1024-byte holder) and refuses a 1025-byte holder", () => {
    const largest = signProof(fence("n".repeat(255), 5n, { bucket: "b".repeat(255), holder: "h".repeat(1024) }));
    assert.equal(largest.length, 1635);
    assert.equal(keyset.verify(largest).fence.holder.length, 1024);
    refused(signProof(fence("orders", 5n, { holder: "h".repeat(1025) })), "malformed");
  });

  it("refuses a signed proof whose text field is not UTF-8, and keeps a leading byte-order mark", () => {
    const statement = statementBytes(fence("orders", 5n, { holder: "ab" }), Buffer.from(vectors.keys[0]!.key_id, "hex"));
    statement[statement.length - 1] = 0xff;
    refused(Buffer.concat([statement, Buffer.alloc(64)]), "malformed");
    const bom = keyset.verify(signProof(fence("orders", 5n, { holder: "\uFEFFw" })));
    assert.equal(bom.fence.holder, "\uFEFFw");
  });

  it("states u64 tokens and times without loss", () => {
    const max = 2n ** 64n - 1n;
    const verified = keyset.verify(signProof(fence("orders", max, { grantedAtMs: max - 1n, slot: 2 ** 32 - 1, ttlSeconds: 2 ** 32 - 1 })));
    assert.deepEqual(
      [verified.fence.token, verified.fence.grantedAtMs, verified.fence.slot, verified.fence.ttlSeconds],
      [max, max - 1n, 2 ** 32 - 1, 2 ** 32 - 1],
    );
  });
});

/** Ed25519's group order L. */
const L = (1n << 252n) + 27742317777372353535851937790883648493n;

/** A little-endian integer. */
function le(bytes: Uint8Array): bigint {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]!);
  return n;
}

/** 32 little-endian bytes. */
function le32(n: bigint): Buffer {
  const out = Buffer.alloc(32);
  for (let i = 0; i < 32; i++) out[i] = Number((n >> BigInt(8 * i)) & 0xffn);
  return out;
}

describe("strict Ed25519", () => {
  it("refuses a malleated signature (S + L), as OpenSSL does", () => {
    const bytes = Buffer.from(plain.proof_hex, "hex");
    const at = bytes.length - 32;
    le32(le(bytes.subarray(at)) + L).copy(bytes, at);
    refused(bytes, "bad_signature");
  });

  it("refuses the universal forgery of a small-order key that OpenSSL alone accepts", () => {
    const identity = Buffer.alloc(32);
    identity[0] = 1;
    const weak = Keyset.parse(text(identity)); // a curve point: pinned, as the Rust reference pins it
    const statement = statementBytes(fence("orders", 2n ** 62n), Buffer.from(keyId(identity), "hex"));
    const signature = Buffer.alloc(64);
    signature[0] = 1; // R = identity, S = 0: [0]B == identity + [k]identity for every message
    const jwk = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: text(identity) }, format: "jwk" });
    assert.equal(opensslVerify(null, Buffer.concat([Buffer.from("tenure-fence/v1"), statement]), jwk, signature), true);
    assert.throws(() => weak.verify(Buffer.concat([statement, signature])), (e: unknown) => e instanceof FenceError && e.kind === "bad_signature");
  });

  it("refuses a signature with a small-order R made with the real key, that OpenSSL alone accepts", () => {
    // R = identity (nonce 0) and S = k·a: valid for the cofactorless
    // equation, refused by strict verification.
    const seed = Buffer.from(vectors.keys[0]!.seed_hex, "hex");
    const h = createHash("sha512").update(seed).digest();
    h[0]! &= 248;
    h[31]! &= 127;
    h[31]! |= 64;
    const a = le(h.subarray(0, 32));
    const publicKey = Buffer.from(vectors.keys[0]!.public_key, "base64url");
    const statement = statementBytes(fence("orders", 2n ** 62n), Buffer.from(vectors.keys[0]!.key_id, "hex"));
    const message = Buffer.concat([Buffer.from("tenure-fence/v1"), statement]);
    const r = le32(1n);
    const k = le(createHash("sha512").update(Buffer.concat([r, publicKey, message])).digest()) % L;
    const signature = Buffer.concat([r, le32((k * a) % L)]);
    const jwk = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: text(publicKey) }, format: "jwk" });
    assert.equal(opensslVerify(null, message, jwk, signature), true);
    refused(Buffer.concat([statement, signature]), "bad_signature");
  });
});

/** The field prime. */
const P = (1n << 255n) - 19n;

/** base^e mod p. */
function pow(base: bigint, e: bigint): bigint {
  let r = 1n;
  let b = ((base % P) + P) % P;
  for (; e > 0n; e >>= 1n, b = (b * b) % P) if (e & 1n) r = (r * b) % P;
  return r;
}

/**
 * Whether y is on the curve, computed another way than the package does:
 * find x by RFC 8032's square root and check -x² + y² = 1 + d·x²·y².
 */
function onCurveByRoot(y: bigint): boolean {
  const d = (((-121665n * pow(121666n, P - 2n)) % P) + P) % P;
  const x2 = (((y * y - 1n) * pow(d * y * y + 1n, P - 2n)) % P + P) % P;
  let x = pow(x2, (P + 3n) / 8n);
  if ((x * x - x2) % P !== 0n) x = (x * pow(2n, (P - 1n) / 4n)) % P;
  const lhs = (((-x * x + y * y) % P) + P) % P;
  const rhs = (1n + d * x * x % P * y % P * y) % P;
  return lhs === rhs;
}

describe("curve points", () => {
  it("agrees with an independent check on small y, and accepts genuine keys", () => {
    let off = 0;
    for (let y = 0n; y < 64n; y++) {
      const expected = onCurveByRoot(y);
      assert.equal(isCurvePoint(le32(y)), expected, `y = ${y}`);
      if (!expected) off++;
    }
    assert.ok(off > 10, `only ${off} of 64 small y are off the curve`);
    for (let i = 0; i < 20; i++) {
      const jwk = generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" });
      assert.equal(isCurvePoint(Buffer.from(jwk.x!, "base64url")), true);
    }
  });

  it("knows the small-order points in every encoding, and no genuine key is one", () => {
    const order8 = le32(2707385501144840649318225287225658788936804267575313519463743609750303402022n);
    for (const y of [0n, 1n, P - 1n, P, P + 1n]) assert.equal(isSmallOrder(le32(y)), true, `y = ${y}`);
    assert.equal(isSmallOrder(order8), true);
    order8[31]! |= 0x80;
    assert.equal(isSmallOrder(order8), true);
    for (const k of vectors.keys) assert.equal(isSmallOrder(Buffer.from(k.public_key, "base64url")), false);
  });
});

describe("Keyset.parse", () => {
  const [active, older] = [vectors.keys[0]!.public_key, vectors.keys[1]!.public_key];

  it("reads comments, blank lines and CRLF, and pins a repeated key once", () => {
    const set = Keyset.parse(`# Tenure fence keys\r\n\r\n  ${active}  # active\r\n${older}\n${active}\n#${vectors.keys[2]!.public_key}\n`);
    assert.deepEqual(set.keyIds, [vectors.keys[0]!.key_id, vectors.keys[1]!.key_id]);
  });

  const cases: [string, string, RegExp][] = [
    ["no key", "# nothing\n\n", /the keyset has no key/],
    ["padding", `${active}\n${older}=\n`, /keyset line 2: not base64url without padding/],
    ["standard base64", `${older.replace("-", "+")}`, /keyset line 1: not base64url without padding/],
    ["31 bytes", text(Buffer.alloc(31)), /keyset line 1: an Ed25519 public key is 32 bytes/],
  ];
  for (const [what, input, message] of cases) {
    it(`refuses ${what} with a message naming the line`, () => {
      assert.throws(() => Keyset.parse(input), (e: unknown) => e instanceof KeysetError && message.test(e.message));
    });
  }

  it("refuses 32 bytes that are no curve point", () => {
    let y = 2n;
    while (onCurveByRoot(y)) y++;
    assert.throws(
      () => Keyset.parse(`# a key\n${text(le32(y))}`),
      (e: unknown) => e instanceof KeysetError && /keyset line 2: not a valid Ed25519 public key/.test(e.message),
    );
  });
});
