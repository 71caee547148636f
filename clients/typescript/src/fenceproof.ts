/**
 * Fencing on the sending side: the fence proof of a grant and the HTTP
 * headers a holder sends with each write, so that a store verifying proofs
 * (docs/fencing.md; `@tenure/fence` in Node) admits only tokens Tenure
 * granted for the lease name it guards.
 */

/** The header carrying the proof's text form (base64url without padding). */
export const FENCE_HEADER = "Tenure-Fence";
/** The header carrying the fencing token in decimal. */
export const FENCING_TOKEN_HEADER = "Tenure-Fencing-Token";

/**
 * The headers of one write under a grant: `Tenure-Fence` (the proof as
 * base64url without padding) and `Tenure-Fencing-Token` (the token in
 * decimal). Without a proof (a server started without
 * `--fence-signing-key`) only the token header is returned: a store that
 * requires proofs then refuses the write with `FENCE_MISSING`.
 */
export function fenceHeaders(proof: Uint8Array, token: bigint): Record<string, string> {
  const headers: Record<string, string> = {};
  if (proof.length > 0) headers[FENCE_HEADER] = Buffer.from(proof.buffer, proof.byteOffset, proof.byteLength).toString("base64url");
  headers[FENCING_TOKEN_HEADER] = token.toString();
  return headers;
}
