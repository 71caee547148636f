/**
 * Verify Tenure fence proofs offline and fence writes with them.
 *
 * A fence proof is Tenure's Ed25519-signed statement of one grant (bucket,
 * lease name, slot, fencing token, holder, grant time, TTL). A store that
 * verifies it against Tenure's pinned public keys, checks that it is for the
 * lease name it guards, and only then compares fencing tokens, records only
 * tokens Tenure granted for that name: a forged, huge or foreign token can
 * never become its highest and lock genuine holders out. Format, order of
 * checks and the HTTP contract: docs/fencing.md.
 *
 * - {@link Keyset}: `Keyset.parse(text)`, `verify(bytes)`, `verifyText(text)`.
 * - {@link fenced}: a fetch-style handler wrapper; {@link expressFence}: the
 *   same check as Express middleware; {@link checkFence}: the check alone,
 *   for other frameworks; {@link nodeListener}: fetch-style handlers on
 *   node:http.
 *
 * @packageDocumentation
 */
export {
  checkFence,
  FENCE_HEADER,
  refusalBody,
  REFUSAL_STATUS,
  TOKEN_HEADER,
  type FenceCheck,
  type FenceCheckOptions,
  type FenceInput,
  type FenceReason,
  type FenceRefusal,
} from "./check.js";
export { FenceError, KeysetError, type FenceErrorKind } from "./errors.js";
export { expressFence, type ExpressFenceOptions, type FenceableRequest, type FenceableResponse } from "./express.js";
export { fenced, refusalResponse, type FencedHandler, type FencedOptions } from "./fetch.js";
export { keyId, Keyset, type Verified } from "./keyset.js";
export { nodeListener, toRequest, type FetchHandler, type NodeListenerOptions } from "./node.js";
export { MAX_PROOF_BYTES, MIN_PROOF_BYTES, PROOF_VERSION, type Fence } from "./proof.js";
export { MemoryTokenStore, type Advance, type TokenStore } from "./store.js";
