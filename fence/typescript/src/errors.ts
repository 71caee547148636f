/**
 * Why a fence proof or a keyset was refused. The four proof error kinds,
 * with these exact names, are what every Tenure verifier reports
 * (docs/fencing.md) and what the shared test vectors expect.
 */

/** The kind of a refused proof, named as in the shared vectors and HTTP bodies. */
export type FenceErrorKind = "malformed" | "unsupported_version" | "unknown_key" | "bad_signature";

/**
 * A proof that does not verify. `kind` says which of the verification steps
 * refused it; the message says what to do about it.
 */
export class FenceError extends Error {
  /** Which step refused the proof. */
  readonly kind: FenceErrorKind;

  /** A refusal of kind `kind`, with a one-line message. */
  constructor(kind: FenceErrorKind, message: string) {
    super(message);
    this.name = "FenceError";
    this.kind = kind;
  }

  /** Not a proof: bad base64url, wrong lengths, bad UTF-8, an empty name. */
  static malformed(detail: string): FenceError {
    return new FenceError("malformed", `malformed fence proof: ${detail}`);
  }

  /** A format version this verifier does not read. */
  static unsupportedVersion(version: number): FenceError {
    return new FenceError(
      "unsupported_version",
      `fence proof version ${version} is not supported (this verifier reads version 1)`,
    );
  }

  /** Signed by a key the store has not pinned. */
  static unknownKey(keyId: string): FenceError {
    return new FenceError(
      "unknown_key",
      `fence proof signed by unknown key ${keyId}: refresh the pinned keys from \`tenure fence-keys\``,
    );
  }

  /** The signature does not match the statement. */
  static badSignature(): FenceError {
    return new FenceError("bad_signature", "fence proof signature does not verify: the proof was altered or forged");
  }
}

/** A keyset text that cannot be pinned: a line that is not an Ed25519 public key, or no key at all. */
export class KeysetError extends Error {
  /** A refusal with a one-line message naming the line at fault. */
  constructor(message: string) {
    super(message);
    this.name = "KeysetError";
  }
}
