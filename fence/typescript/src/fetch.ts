/**
 * Fencing for fetch-style handlers, `(request: Request) => Response`, as
 * Node's fetch-style servers, Deno, Bun, Hono and service workers use them:
 * a wrapper that admits a request only with a verified, current fence proof
 * for the resource's lease name, and otherwise answers 409 without calling
 * the handler.
 */
import { checkFence, refusalBody, REFUSAL_STATUS, FENCE_HEADER, TOKEN_HEADER, type FenceRefusal } from "./check.js";
import type { Keyset, Verified } from "./keyset.js";
import { MemoryTokenStore, type TokenStore } from "./store.js";

/** A fetch-style handler that receives the verified fence of an admitted request. */
export type FencedHandler = (request: Request, verified: Verified) => Response | Promise<Response>;

/** How {@link fenced} checks requests. */
export interface FencedOptions {
  /** Tenure's public keys (`Keyset.parse` of `tenure fence-keys`). */
  readonly keyset: Keyset;
  /** The lease name that guards the resource a request writes (e.g. from its path). */
  readonly resource: (request: Request) => string;
  /**
   * The highest admitted token per lease name. Default: a new
   * {@link MemoryTokenStore} for this wrapper alone; pass one store to every
   * wrapper that guards the same resources, and a database-backed one when
   * the service runs in several processes.
   */
  readonly store?: TokenStore;
}

/**
 * Wraps `handler` so that it only sees requests whose `Tenure-Fence` proof
 * verifies against `keyset`, is for the lease name `resource(request)`
 * returns, agrees with a `Tenure-Fencing-Token` header if one is sent, and
 * carries a token not lower than the highest seen for that name. Other
 * requests get `409 Conflict` with a JSON body `{"reason", "message"}` (plus
 * `"token"` and `"highest"` for `FENCE_STALE`); see docs/fencing.md. The
 * returned promise rejects when `resource` throws or the store rejects.
 *
 * ```ts
 * const handle = fenced(async (request, { fence }) => {
 *   await writeReport(await request.text(), fence.token);
 *   return new Response("stored");
 * }, { keyset, resource: (request) => "reports." + new URL(request.url).pathname.split("/")[2] });
 * ```
 */
export function fenced(handler: FencedHandler, options: FencedOptions): (request: Request) => Promise<Response> {
  const check = { keyset: options.keyset, store: options.store ?? new MemoryTokenStore() };
  return async (request) => {
    const outcome = await checkFence(check, {
      proof: request.headers.get(FENCE_HEADER),
      token: request.headers.get(TOKEN_HEADER),
      name: () => options.resource(request),
    });
    if (!outcome.admitted) return refusalResponse(outcome.refusal);
    return handler(request, outcome.verified);
  };
}

/** The `409 Conflict` response of a refusal, with its JSON body. */
export function refusalResponse(refusal: FenceRefusal): Response {
  return new Response(refusalBody(refusal), {
    status: REFUSAL_STATUS,
    headers: { "content-type": "application/json" },
  });
}
