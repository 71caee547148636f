/**
 * The keyset a store pins (Tenure's public keys) and proof verification
 * against it.
 *
 * A keyset's text form is what `tenure fence-keys` prints and the
 * `GetFenceKeys` RPC returns as `keyset`: one public key per line, its 32
 * bytes in base64url without padding, `#` starting a comment. Key ids are
 * derived from the keys (the first 8 bytes of SHA-256), never configured, so
 * a keyset cannot name a key wrongly.
 */
import { createHash, createPublicKey, verify as verifySignature, type KeyObject } from "node:crypto";

import { decodeBase64Url, encodeBase64Url } from "./base64url.js";
import { isCurvePoint, isSmallOrder } from "./ed25519.js";
import { FenceError, KeysetError } from "./errors.js";
import { parseProof, proofBytesFromText, SIGNING_CONTEXT, type Fence } from "./proof.js";

/** A proof whose signature verified against a pinned key. */
export interface Verified {
  /** What the proof states. */
  readonly fence: Fence;
  /** The id of the key that signed it, 16 lower-case hex digits. */
  readonly keyId: string;
}

/** One pinned key. */
interface PinnedKey {
  /** The key as node:crypto verifies with it. */
  readonly key: KeyObject;
  /**
   * A point of small order: valid on the curve, but strict Ed25519 never
   * accepts a signature from it (anyone can forge one), so every proof
   * naming it is a bad signature.
   */
  readonly weak: boolean;
}

/** The id of a 32-byte public key: the first 8 bytes of its SHA-256, 16 lower-case hex digits. */
export function keyId(publicKey: Uint8Array): string {
  return createHash("sha256").update(publicKey).digest().subarray(0, 8).toString("hex");
}

/**
 * The public keys a store accepts fence proofs from. Verification is
 * offline (no call to Tenure) and follows docs/fencing.md's order: lengths
 * and base64url, version, fields, key, signature; the first failure is
 * thrown as a {@link FenceError} of that kind.
 *
 * ```ts
 * const keyset = Keyset.parse(readFileSync("/etc/tenure/fence-keys.txt", "utf8"));
 * const { fence } = keyset.verifyText(request.headers.get("tenure-fence") ?? "");
 * ```
 */
export class Keyset {
  /** Every pinned key, by id. */
  readonly #keys: Map<string, PinnedKey>;

  private constructor(keys: Map<string, PinnedKey>) {
    this.#keys = keys;
  }

  /**
   * A keyset from its text form. Throws a {@link KeysetError} naming the
   * line for a line that is not a 32-byte base64url Ed25519 public key, and
   * for a text with no key at all. A key listed twice is pinned once.
   */
  static parse(text: string): Keyset {
    const keys = new Map<string, PinnedKey>();
    const lines = text.split("\n");
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!.split("#", 1)[0]!.trim();
      if (line === "") continue;
      const raw = decodeBase64Url(line);
      if (raw === undefined) throw new KeysetError(`keyset line ${i + 1}: not base64url without padding`);
      if (raw.length !== 32) throw new KeysetError(`keyset line ${i + 1}: an Ed25519 public key is 32 bytes`);
      if (!isCurvePoint(raw)) throw new KeysetError(`keyset line ${i + 1}: not a valid Ed25519 public key`);
      const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: encodeBase64Url(raw) }, format: "jwk" });
      const id = keyId(raw);
      if (!keys.has(id)) keys.set(id, { key, weak: isSmallOrder(raw) });
    }
    if (keys.size === 0) throw new KeysetError("the keyset has no key: pin the output of `tenure fence-keys`");
    return new Keyset(keys);
  }

  /** The ids of the pinned keys, 16 lower-case hex digits each, in keyset order. */
  get keyIds(): string[] {
    return [...this.#keys.keys()];
  }

  /**
   * Verifies a proof's bytes: its format, that a pinned key signed it, and
   * the signature (strict Ed25519). Returns what it states; throws a
   * {@link FenceError} otherwise. It does not check the lease name: compare
   * `fence.name` with the name that guards your resource before using the
   * token.
   */
  verify(proof: Uint8Array): Verified {
    const parsed = parseProof(proof);
    const pinned = this.#keys.get(parsed.keyId);
    if (pinned === undefined) throw FenceError.unknownKey(parsed.keyId);
    const message = new Uint8Array(SIGNING_CONTEXT.length + parsed.signed.length);
    message.set(SIGNING_CONTEXT, 0);
    message.set(parsed.signed, SIGNING_CONTEXT.length);
    // R, the signature's first half, must not be of small order (strict
    // Ed25519); OpenSSL checks S < L and the equation.
    if (pinned.weak || isSmallOrder(parsed.signature.subarray(0, 32))) throw FenceError.badSignature();
    if (!verifySignature(null, message, pinned.key, parsed.signature)) throw FenceError.badSignature();
    return { fence: parsed.fence, keyId: parsed.keyId };
  }

  /** Verifies a proof's text form (the `Tenure-Fence` header): see {@link verify}. */
  verifyText(text: string): Verified {
    return this.verify(proofBytesFromText(text));
  }
}
