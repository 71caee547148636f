/**
 * The fencing check every HTTP adapter of this package shares (the
 * fetch-style wrapper, the Express middleware): docs/fencing.md's
 * middleware contract, in its order, from the two header values to an
 * admission or a refusal with the exact 409 JSON body. Adapters only read
 * headers and write responses; use {@link checkFence} directly to fence
 * another framework the same way.
 */
import { FenceError, type FenceErrorKind } from "./errors.js";
import type { Keyset, Verified } from "./keyset.js";
import type { TokenStore } from "./store.js";

/** The header that carries the proof's text form. */
export const FENCE_HEADER = "Tenure-Fence";
/** The header that may carry the fencing token, in decimal. */
export const TOKEN_HEADER = "Tenure-Fencing-Token";

/** Why a request was refused: the `reason` of the 409 body. */
export type FenceReason =
  | "FENCE_MISSING"
  | "FENCE_MALFORMED"
  | "FENCE_UNSUPPORTED_VERSION"
  | "FENCE_UNKNOWN_KEY"
  | "FENCE_BAD_SIGNATURE"
  | "FENCE_WRONG_NAME"
  | "FENCE_TOKEN_MISMATCH"
  | "FENCE_STALE";

/** A refusal: the JSON body of the `409 Conflict` response. */
export interface FenceRefusal {
  /** Which check refused the request. */
  readonly reason: FenceReason;
  /** A one-line explanation for a person. */
  readonly message: string;
  /** `FENCE_STALE` only: the request's token, in decimal. */
  readonly token?: string;
  /** `FENCE_STALE` only: the highest token seen for the lease name, in decimal. */
  readonly highest?: string;
}

/** The outcome of {@link checkFence}. */
export type FenceCheck =
  | { readonly admitted: true; readonly verified: Verified }
  | { readonly admitted: false; readonly refusal: FenceRefusal };

/** What {@link checkFence} checks against. */
export interface FenceCheckOptions {
  /** Tenure's public keys. */
  readonly keyset: Keyset;
  /** The highest admitted token per lease name. */
  readonly store: TokenStore;
}

/** One request as {@link checkFence} sees it. */
export interface FenceInput {
  /**
   * The `Tenure-Fence` header's value; null or undefined when not sent.
   * Repeated headers arrive joined by ", " (as fetch's Headers joins
   * them), which is malformed: a proxy could keep either, so neither is
   * trusted.
   */
  readonly proof: string | null | undefined;
  /** The `Tenure-Fencing-Token` header's value; null or undefined when not sent. */
  readonly token: string | null | undefined;
  /**
   * The lease name that guards the resource the request writes; called
   * once, and only after the proof verified.
   */
  readonly name: () => string;
}

/** The HTTP status of every refusal. */
export const REFUSAL_STATUS = 409;

/** The reason for each kind of verification failure. */
const REASON_OF_KIND: Record<FenceErrorKind, FenceReason> = {
  malformed: "FENCE_MALFORMED",
  unsupported_version: "FENCE_UNSUPPORTED_VERSION",
  unknown_key: "FENCE_UNKNOWN_KEY",
  bad_signature: "FENCE_BAD_SIGNATURE",
};

/** A decimal u64 as a header carries it: 1 to 20 digits, nothing else. */
const DECIMAL = /^[0-9]{1,20}$/;

/**
 * Checks one request, in docs/fencing.md's order: a proof is present
 * (`FENCE_MISSING`; an empty header is present, and malformed), it
 * verifies against the keyset, it is for lease `name` (`FENCE_WRONG_NAME`),
 * the token header, if sent, equals the proof's token
 * (`FENCE_TOKEN_MISMATCH`), and the token is not lower than the highest the
 * store has seen for `name`, which it then becomes (`FENCE_STALE`). Rejects
 * only when `input.name` throws or the store rejects.
 */
export async function checkFence(options: FenceCheckOptions, input: FenceInput): Promise<FenceCheck> {
  const { proof: proofHeader, token: tokenHeader } = input;
  if (proofHeader === null || proofHeader === undefined) {
    return refuse(
      "FENCE_MISSING",
      `no ${FENCE_HEADER} header: send the holder's fence proof with every write (Tenure grants proofs when started with --fence-signing-key)`,
    );
  }
  let verified: Verified;
  try {
    verified = options.keyset.verifyText(proofHeader);
  } catch (err) {
    if (!(err instanceof FenceError)) throw err;
    return refuse(REASON_OF_KIND[err.kind], `${FENCE_HEADER}: ${err.message}`);
  }
  const { fence } = verified;
  const expected = input.name();
  if (fence.name !== expected) {
    return refuse(
      "FENCE_WRONG_NAME",
      `the fence proof is for lease ${JSON.stringify(fence.name)}, not ${JSON.stringify(expected)}`,
    );
  }
  if (tokenHeader !== null && tokenHeader !== undefined) {
    const token = DECIMAL.test(tokenHeader) ? BigInt(tokenHeader) : undefined;
    if (token !== fence.token) {
      const sent = token === undefined ? `${JSON.stringify(clip(tokenHeader))}, not a decimal token` : String(token);
      return refuse("FENCE_TOKEN_MISMATCH", `the ${TOKEN_HEADER} header is ${sent}, but the fence proof's token is ${fence.token}`);
    }
  }
  const advance = await options.store.advance(fence.name, fence.token);
  if (!advance.ok) {
    return {
      admitted: false,
      refusal: {
        reason: "FENCE_STALE",
        message: `fencing token ${fence.token} is lower than ${advance.highest}, the highest seen for lease ${JSON.stringify(fence.name)}: a newer holder has written; stop, the lease was lost`,
        token: String(fence.token),
        highest: String(advance.highest),
      },
    };
  }
  return { admitted: true, verified };
}

/** The JSON text of a refusal's body. */
export function refusalBody(refusal: FenceRefusal): string {
  return JSON.stringify(refusal);
}

/** A refusal without tokens. */
function refuse(reason: FenceReason, message: string): FenceCheck {
  return { admitted: false, refusal: { reason, message } };
}

/** At most 40 characters of a header value, for a message. */
function clip(value: string): string {
  return value.length <= 40 ? value : `${value.slice(0, 40)}...`;
}
