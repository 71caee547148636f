/**
 * The fence proof byte format, version 1, and its text form: what a proof
 * states and how its bytes are split, before any signature is checked.
 *
 * Every integer is unsigned big-endian:
 *
 * | offset   | bytes | field |
 * |----------|-------|-------|
 * | 0        | 1     | version, 1 |
 * | 1        | 8     | key id: the first 8 bytes of SHA-256 of the signer's 32-byte Ed25519 public key |
 * | 9        | 8     | fencing token |
 * | 17       | 4     | slot: the semaphore slot, 0 for a plain lease, group member or election |
 * | 21       | 8     | granted at: Unix time of the grant in milliseconds (Tenure's clock) |
 * | 29       | 4     | TTL granted, whole seconds |
 * | 33       | 1 + n | bucket: length, then UTF-8 bytes (1 to 255) |
 * |          | 1 + n | lease name: length, then UTF-8 bytes (1 to 255) |
 * |          | 2 + n | holder: length, then UTF-8 bytes (0 to 1024) |
 * | end - 64 | 64    | Ed25519 signature over {@link SIGNING_CONTEXT} followed by every byte before it |
 *
 * The text form (the `Tenure-Fence` HTTP header) is the bytes in base64url
 * without padding. See docs/fencing.md.
 */
import { decodeBase64Url } from "./base64url.js";
import { FenceError } from "./errors.js";

/** The format version this package reads. */
export const PROOF_VERSION = 1;
/**
 * Signed before the proof bytes, so that a signature made with the same key
 * for anything else can never pass as a proof.
 */
export const SIGNING_CONTEXT: Uint8Array = new TextEncoder().encode("tenure-fence/v1");
/** The longest proof a verifier reads (the longest valid one is 1,635 bytes). */
export const MAX_PROOF_BYTES = 2048;
/** The shortest proof: one-byte bucket and name, empty holder. */
export const MIN_PROOF_BYTES = 103;
/** The longest text form read: longer text is refused before it is decoded. */
export const MAX_PROOF_TEXT = Math.ceil(MAX_PROOF_BYTES / 3) * 4;
/** Ed25519 signature length. */
export const SIGNATURE_BYTES = 64;
/** Bytes before the variable-length fields. */
const FIXED = 33;
/** The longest holder a proof carries. */
const MAX_HOLDER = 1024;

/** What a proof states: one grant of one lease name. */
export interface Fence {
  /** The Tenure bucket (deployment) that granted the holding. */
  readonly bucket: string;
  /** The lease name. */
  readonly name: string;
  /** The semaphore slot; 0 for a plain lease, a group member or an election term. */
  readonly slot: number;
  /** The fencing token: strictly greater for every later holder of the name (a u64). */
  readonly token: bigint;
  /** When the holding was granted, Unix milliseconds on Tenure's clock (a u64). */
  readonly grantedAtMs: bigint;
  /** The TTL granted, whole seconds. */
  readonly ttlSeconds: number;
  /** Who the holding was granted to (the holder the client named); may be empty. */
  readonly holder: string;
}

/** A proof split into its parts, its signature not yet checked. */
export interface ParsedProof {
  /** The signing key's id, 16 lower-case hex digits. */
  readonly keyId: string;
  /** What the proof states. */
  readonly fence: Fence;
  /** The signed bytes: everything before the signature (without the context). */
  readonly signed: Uint8Array;
  /** The 64-byte signature. */
  readonly signature: Uint8Array;
}

/** Strict UTF-8: refuses invalid sequences, keeps a leading byte-order mark as a character. */
const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * The bytes of a proof's text form; `malformed` for text that is longer
 * than any proof (checked before decoding) or not base64url without padding.
 */
export function proofBytesFromText(text: string): Uint8Array {
  if (text.length > MAX_PROOF_TEXT) throw FenceError.malformed("longer than any proof");
  const bytes = decodeBase64Url(text);
  if (bytes === undefined) throw FenceError.malformed("not base64url without padding");
  return bytes;
}

/**
 * Splits a proof and checks lengths, version, field bounds and UTF-8 (steps
 * 1 to 3 of docs/fencing.md's verification order), not the key or the
 * signature.
 */
export function parseProof(bytes: Uint8Array): ParsedProof {
  if (bytes.length > MAX_PROOF_BYTES) throw FenceError.malformed("longer than any proof");
  if (bytes.length < MIN_PROOF_BYTES) throw FenceError.malformed("shorter than any proof");
  if (bytes[0] !== PROOF_VERSION) throw FenceError.unsupportedVersion(bytes[0]!);
  const signedLength = bytes.length - SIGNATURE_BYTES;
  const signed = bytes.subarray(0, signedLength);
  const view = new DataView(signed.buffer, signed.byteOffset, signed.byteLength);
  // The fixed part always fits: MIN_PROOF_BYTES - SIGNATURE_BYTES > FIXED.
  const keyId = Buffer.from(signed.subarray(1, 9)).toString("hex");
  const token = view.getBigUint64(9);
  const slot = view.getUint32(17);
  const grantedAtMs = view.getBigUint64(21);
  const ttlSeconds = view.getUint32(29);
  let at = FIXED;
  const take = (n: number): Uint8Array => {
    if (at + n > signedLength) throw FenceError.malformed("a field runs past the signature");
    const out = signed.subarray(at, at + n);
    at += n;
    return out;
  };
  const text = (n: number): string => {
    const raw = take(n);
    try {
      return UTF8.decode(raw);
    } catch {
      throw FenceError.malformed("a text field is not UTF-8");
    }
  };
  const bucket = text(take(1)[0]!);
  const name = text(take(1)[0]!);
  const lengthBytes = take(2);
  const holderLength = (lengthBytes[0]! << 8) | lengthBytes[1]!;
  if (holderLength > MAX_HOLDER) throw FenceError.malformed("holder longer than 1024 bytes");
  const holder = text(holderLength);
  if (at !== signedLength) throw FenceError.malformed("bytes after the holder");
  if (bucket === "" || name === "") throw FenceError.malformed("empty bucket or name");
  return {
    keyId,
    fence: { bucket, name, slot, token, grantedAtMs, ttlSeconds, holder },
    signed,
    signature: bytes.subarray(signedLength),
  };
}
