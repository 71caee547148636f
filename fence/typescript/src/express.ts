/**
 * Fencing as Express middleware (any connect-style `(req, res, next)`
 * stack, plain node:http too): admits a request only with a verified,
 * current fence proof for the resource's lease name, and puts the verified
 * fence on `res.locals.tenureFence`; otherwise answers 409 and does not call
 * `next`. The check is the one {@link fenced} runs.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";

import { checkFence, refusalBody, REFUSAL_STATUS, FENCE_HEADER, TOKEN_HEADER } from "./check.js";
import type { Keyset, Verified } from "./keyset.js";
import { MemoryTokenStore, type TokenStore } from "./store.js";

declare global {
  // Types `res.locals.tenureFence` in Express handlers (Express's types read
  // this global namespace; without Express it is unused).
  namespace Express {
    interface Locals {
      /** The verified fence of a request admitted by `expressFence`. */
      tenureFence?: Verified;
    }
  }
}

/** What the middleware reads from a request: its headers (an Express request, a node:http IncomingMessage). */
export interface FenceableRequest {
  /** Header values by lower-case name, as node:http gives them. */
  readonly headers: IncomingHttpHeaders;
}

/** The response the middleware writes a refusal to, and where it leaves the fence. */
export type FenceableResponse = ServerResponse & { locals?: Record<string, unknown> };

/** How {@link expressFence} checks requests. */
export interface ExpressFenceOptions<R extends FenceableRequest = IncomingMessage> {
  /** Tenure's public keys (`Keyset.parse` of `tenure fence-keys`). */
  readonly keyset: Keyset;
  /** The lease name that guards the resource a request writes (e.g. from `req.params`). */
  readonly resource: (req: R) => string;
  /**
   * The highest admitted token per lease name. Default: a new
   * {@link MemoryTokenStore} for this middleware alone; pass a
   * database-backed one when the service runs in several processes.
   */
  readonly store?: TokenStore;
}

/**
 * Middleware that fences every request it sees (see {@link fenced} for the
 * checks and the 409 body). An admitted request goes on to `next()` with
 * `res.locals.tenureFence` set to its {@link Verified} fence; a refused one
 * is answered `409 Conflict` with `Content-Type: application/json`. An
 * error from `resource` or the store goes to `next(err)`.
 *
 * ```ts
 * app.put("/reports/:id", expressFence({ keyset, resource: (req) => `reports.${req.params.id}` }), (req, res) => {
 *   const { fence } = res.locals.tenureFence!;
 *   ...
 * });
 * ```
 */
export function expressFence<R extends FenceableRequest = IncomingMessage>(
  options: ExpressFenceOptions<R>,
): (req: R, res: FenceableResponse, next: (err?: unknown) => void) => void {
  const check = { keyset: options.keyset, store: options.store ?? new MemoryTokenStore() };
  return (req, res, next) => {
    checkFence(check, {
      proof: header(req.headers, FENCE_HEADER),
      token: header(req.headers, TOKEN_HEADER),
      name: () => options.resource(req),
    }).then(
      (outcome) => {
        if (outcome.admitted) {
          res.locals ??= {};
          res.locals.tenureFence = outcome.verified;
          next();
          return;
        }
        res.statusCode = REFUSAL_STATUS;
        res.setHeader("Content-Type", "application/json");
        res.end(refusalBody(outcome.refusal));
      },
      (err: unknown) => next(err),
    );
  };
}

/**
 * One header's value; repeated headers joined with ", " as fetch's Headers
 * does (so two proofs are one malformed proof, never a choice of one).
 */
function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name.toLowerCase()];
  return Array.isArray(value) ? value.join(", ") : value;
}
