/**
 * Where the fencing middleware keeps the highest token it has admitted per
 * lease name. The in-memory store suits one process; for several replicas of
 * a service, implement {@link TokenStore} on your database (the PostgreSQL
 * and Redis kits in fence/kits do the same compare-and-set).
 */

/** The outcome of {@link TokenStore.advance}. */
export interface Advance {
  /** Whether the token was at least the highest seen, and is now the highest. */
  readonly ok: boolean;
  /** The highest token for the name after the call (the refusing one, when `ok` is false). */
  readonly highest: bigint;
}

/**
 * The highest admitted token per lease name. `advance` must be atomic per
 * name (a compare-and-set): concurrent calls for one name must behave as if
 * made one after the other.
 */
export interface TokenStore {
  /**
   * If `token` is not lower than the highest token recorded for `name` (or
   * none is), records it as the highest and returns `{ ok: true }`;
   * otherwise changes nothing and returns `{ ok: false }`. Equal tokens are
   * admitted: one holding writes many times with the same token. May return
   * a promise; a rejection fails the request (the handler is not called).
   */
  advance(name: string, token: bigint): Advance | Promise<Advance>;
}

/** A {@link TokenStore} in memory, for one process; the middleware's default. */
export class MemoryTokenStore implements TokenStore {
  readonly #highest = new Map<string, bigint>();

  /** See {@link TokenStore.advance}; synchronous, so atomic in one process. */
  advance(name: string, token: bigint): Advance {
    const highest = this.#highest.get(name);
    if (highest !== undefined && token < highest) return { ok: false, highest };
    this.#highest.set(name, token);
    return { ok: true, highest: token };
  }

  /** The highest token admitted for `name`, or undefined if none yet. */
  highest(name: string): bigint | undefined {
    return this.#highest.get(name);
  }
}
