/**
 * Base64url without padding (RFC 4648 section 5), the text form of fence
 * proofs and of keyset keys.
 *
 * Decoding is strict, as every Tenure verifier's is, so that one proof has
 * exactly one text form: only `A-Z a-z 0-9 - _`, no `=` padding, no `+` or
 * `/` of standard base64, no whitespace, no length that leaves a lone
 * character, and no stray bits in the last character. Node's own
 * `Buffer.from(text, "base64url")` skips what it does not understand, so it
 * is not used for decoding.
 */

/** The value of each alphabet character, by char code; -1 for every other character. */
const VALUES: Int8Array = (() => {
  const values = new Int8Array(128).fill(-1);
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  for (let i = 0; i < alphabet.length; i++) values[alphabet.charCodeAt(i)] = i;
  return values;
})();

/** The base64url text, without padding, of `bytes`. */
export function encodeBase64Url(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64url");
}

/**
 * The bytes `text` encodes, or `undefined` when it is not canonical
 * base64url without padding. Callers bound the text's length first: this
 * allocates three quarters of it.
 */
export function decodeBase64Url(text: string): Uint8Array | undefined {
  const rest = text.length % 4;
  if (rest === 1) return undefined;
  const out = new Uint8Array(Math.floor(text.length / 4) * 3 + (rest === 0 ? 0 : rest - 1));
  let acc = 0;
  let bits = 0;
  let at = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const value = code < 128 ? VALUES[code]! : -1;
    if (value < 0) return undefined;
    acc = ((acc << 6) | value) & 0xffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[at++] = (acc >> bits) & 0xff;
    }
  }
  // The bits left over after the last whole byte must be zero: otherwise
  // two texts would decode to the same bytes.
  if ((acc & ((1 << bits) - 1)) !== 0) return undefined;
  return out;
}
