/**
 * Fencing on the receiving side: a downstream store accepts a write only if
 * it carries a fencing token at least as high as the highest it has seen for
 * that resource. A holder whose lease has passed on (a stalled process, a
 * late packet) carries a lower token than the new holder, so its writes are
 * refused even if it still believes it holds the lease.
 */

/**
 * An in-memory fencing check per resource, for stores that live in one
 * process (or tests). For a real database, keep the token next to the data
 * and make the check part of the write; see the README's SQL pattern.
 *
 * @example
 * ```ts
 * const guard = new FencingGuard();
 * if (!guard.accept("report.csv", session.fencingToken)) throw new Error("stale holder");
 * ```
 */
export class FencingGuard {
  readonly #highest = new Map<string, bigint>();

  /**
   * Accepts `token` for `resource` if it is at least the highest token seen
   * for that resource, and then remembers it as the highest. Returns false
   * (and remembers nothing) for a lower, stale token. Equal tokens are
   * accepted: one holding writes many times with the same token.
   */
  accept(resource: string, token: bigint | number): boolean {
    const t = BigInt(token);
    const highest = this.#highest.get(resource);
    if (highest !== undefined && t < highest) return false;
    this.#highest.set(resource, t);
    return true;
  }

  /** The highest token accepted for `resource`, or undefined if none yet. */
  highest(resource: string): bigint | undefined {
    return this.#highest.get(resource);
  }
}
