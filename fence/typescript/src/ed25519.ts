/**
 * What node:crypto's Ed25519 (OpenSSL) does not check and strict Ed25519
 * requires: that a public key is a point of the curve at all, and that
 * neither the public key nor a signature's R is a point of small order.
 *
 * OpenSSL verifies with the cofactorless equation and refuses a
 * non-canonical S, like the Rust reference's `verify_strict`; but it
 * accepts a small-order public key, and with one (the identity, say) the
 * signature R = identity, S = 0 "verifies" for every message. Refusing
 * small-order points on both sides closes that, so this package accepts
 * exactly the proofs the Rust reference accepts. The checks read the
 * encoded y coordinate only; they are cheap bigint arithmetic, run once
 * per key when a keyset is parsed and once per signature for R.
 */

/** The field prime 2^255 - 19. */
const P = (1n << 255n) - 19n;
/** The curve constant d = -121665 / 121666 mod p. */
const D = mod(-121665n * modPow(121666n, P - 2n));

/** y coordinates (mod p) of the eight points of small order: 0, 1, -1 and the order-8 pair. */
const SMALL_ORDER_Y: ReadonlySet<bigint> = (() => {
  const order8 = 2707385501144840649318225287225658788936804267575313519463743609750303402022n;
  return new Set([0n, 1n, P - 1n, order8, P - order8]);
})();

/** n mod p, in [0, p). */
function mod(n: bigint): bigint {
  const r = n % P;
  return r < 0n ? r + P : r;
}

/** base^exponent mod p. */
function modPow(base: bigint, exponent: bigint): bigint {
  let result = 1n;
  let b = mod(base);
  let e = exponent;
  while (e > 0n) {
    if (e & 1n) result = (result * b) % P;
    b = (b * b) % P;
    e >>= 1n;
  }
  return result;
}

/** The y coordinate of a 32-byte point encoding: little-endian, sign bit cleared, reduced mod p. */
function yOf(encoded: Uint8Array): bigint {
  let y = 0n;
  for (let i = 31; i >= 0; i--) y = (y << 8n) | BigInt(encoded[i]!);
  return (y & ((1n << 255n) - 1n)) % P;
}

/**
 * Whether a 32-byte encoding names a point of the curve: x² = (y² - 1) /
 * (d·y² + 1) has a solution mod p (its right side is 0 or a square).
 */
export function isCurvePoint(encoded: Uint8Array): boolean {
  if (encoded.length !== 32) return false;
  const y2 = mod(yOf(encoded) ** 2n);
  const u = mod(y2 - 1n);
  const v = mod(D * y2 + 1n);
  const x2 = mod(u * modPow(v, P - 2n));
  return x2 === 0n || modPow(x2, (P - 1n) / 2n) === 1n;
}

/** Whether a 32-byte encoding is a point of small order (order 1, 2, 4 or 8), in any of its encodings. */
export function isSmallOrder(encoded: Uint8Array): boolean {
  return encoded.length === 32 && SMALL_ORDER_Y.has(yOf(encoded));
}
