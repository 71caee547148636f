/**
 * Counting semaphores: up to `limit` holders of one name at once, the limit
 * enforced by the server's conditional writes (never by trusting clients).
 * Each holder gets a {@link Session} of its own slot, with its own fencing
 * token (tokens increase across all holders of the name, in grant order),
 * safe deadline and loss signal, exactly like a lease session. The client's
 * loss watch follows a holder by (name, slot): other holders coming and
 * going never end it; a revoke, expiry or takeover of its own slot does.
 */
import type { AcquireOptions, LeaseState, TenureClient } from "./client";
import type { Session } from "./session";

/** What to ask for in {@link Semaphore.acquire}: a lease's options but `limit`, `lockDelayMs`, `preference` and `mode`. */
export type SemaphoreAcquireOptions = Omit<AcquireOptions, "limit" | "lockDelayMs" | "preference" | "mode">;

/**
 * The semaphore `name` with `limit` slots.
 *
 * ```ts
 * const sem = new Semaphore(client, "jobs.encode", 4);
 * await using slot = await sem.acquire("worker-7", { ttlMs: 10_000, waitMs: 60_000 });
 * // At most 4 holders run this at once. Stop when slot.signal aborts (no
 * // later than its safe deadline) and pass slot.fencingToken downstream.
 * ```
 *
 * Every holder must use the same limit: while the semaphore has holders,
 * an Acquire with another limit fails with `LIMIT_MISMATCH`
 * (FAILED_PRECONDITION; `err.metadata.limit` is the limit in force).
 */
export class Semaphore {
  readonly #client: TenureClient;
  /** The semaphore's name. */
  readonly name: string;
  /** Its number of slots. */
  readonly limit: number;

  constructor(client: TenureClient, name: string, limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`a semaphore's limit is a positive integer, got ${limit}`);
    this.#client = client;
    this.name = name;
    this.limit = limit;
  }

  /**
   * Takes a free slot for `holder`: a {@link Session} whose `slot` is the
   * slot taken, renewed in the background until released or lost. With
   * `waitMs`, waits for a slot to free (in arrival order); without, rejects
   * with `LEASE_HELD` when every slot is taken.
   */
  acquire(holder: string, options: SemaphoreAcquireOptions = {}): Promise<Session> {
    return this.#client.acquire(this.name, holder, { ...options, limit: this.limit });
  }

  /**
   * The holders (by slot), the limit in force, the free slots and how many
   * wait; rejects with `LEASE_NOT_FOUND` when nobody holds a slot.
   */
  state(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<LeaseState> {
    return this.#client.inspect(this.name, options);
  }

  /** Revokes the holder of `slot` (admin grant); it sees its session end. */
  revoke(slot: number, reason: string): Promise<bigint> {
    return this.#client.revokeLease(this.name, reason, { slot });
  }
}
