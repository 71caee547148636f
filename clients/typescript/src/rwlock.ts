/**
 * Read-write locks: one exclusive holder, or any number of shared holders
 * (up to the server's `--max-shared-holders`, 64 by default), at once. Each
 * holder gets a {@link Session} of its own slot, with its own fencing token
 * (tokens increase across all holders of the name, shared and exclusive, in
 * grant order), safe deadline and loss signal, exactly like a lease session;
 * `session.mode` says how it holds, and `session.downgrade()` turns an
 * exclusive holding shared without a gap. The client's loss watch follows a
 * holder by (name, slot): other holders coming and going never end it.
 */
import type { AcquireOptions, LeaseState, TenureClient } from "./client";
import { LockMode } from "./gen/tenure/v1/lease";
import type { Session } from "./session";

/** What to ask for in {@link RWLock.lock} and {@link RWLock.lockShared}: a lease's options but `limit`, `lockDelayMs`, `preference` and `mode`. */
export type RWLockAcquireOptions = Omit<AcquireOptions, "limit" | "lockDelayMs" | "preference" | "mode">;

/**
 * The read-write lock `name` (also `client.rwlock(name)`).
 *
 * ```ts
 * const catalog = new RWLock(client, "catalog");
 * {
 *   await using reader = await catalog.lockShared("reader-1", { ttlMs: 10_000, waitMs: 30_000 });
 *   // Readers hold together; no writer meanwhile.
 * }
 * await using writer = await catalog.lock("writer-1", { ttlMs: 10_000, waitMs: 30_000 });
 * // The only holder: rebuild, passing writer.fencingToken downstream...
 * await writer.downgrade(); // ...then keep reading beside readers (a new, greater token).
 * ```
 *
 * Waiters of both modes queue in one arrival-order queue across replicas:
 * a `lockShared` arriving after a queued `lock` waits behind it, so writers
 * are never starved by a stream of readers. Without `waitMs`, an acquire
 * rejects with `LEASE_HELD` when the lock is held incompatibly or anyone is
 * queued (`metadata.state` `QUEUED`). There is no upgrade: `lock` by the
 * holder and key of a shared holding rejects with `MODE_MISMATCH`
 * (FAILED_PRECONDITION, permanent). A semaphore's name is refused
 * `MODE_MISMATCH`, and the other way round (a plain lease of the same name
 * is kept apart from the lock).
 */
export class RWLock {
  readonly #client: TenureClient;
  /** The lock's name. */
  readonly name: string;

  constructor(client: TenureClient, name: string) {
    this.#client = client;
    this.name = name;
  }

  /**
   * Takes the lock exclusively for `holder`: a {@link Session} of mode
   * `EXCLUSIVE`, renewed in the background until released or lost. With
   * `waitMs`, waits in the lock's queue; without, rejects with `LEASE_HELD`
   * when anyone holds the lock or waits for it.
   */
  lock(holder: string, options: RWLockAcquireOptions = {}): Promise<Session> {
    return this.#client.acquire(this.name, holder, { ...options, mode: LockMode.EXCLUSIVE });
  }

  /**
   * Takes the lock shared for `holder`, beside other shared holders: a
   * {@link Session} of mode `SHARED`. With `waitMs`, waits in the lock's
   * queue (behind any exclusive acquire queued before it); without, rejects
   * with `LEASE_HELD` when the lock is held exclusively or anyone waits,
   * and with `TOO_MANY_SHARED_HOLDERS` (retryable; `retryDelayMs` says when
   * to try again) when the server's `--max-shared-holders` hold it already.
   */
  lockShared(holder: string, options: RWLockAcquireOptions = {}): Promise<Session> {
    return this.#client.acquire(this.name, holder, { ...options, mode: LockMode.SHARED });
  }

  /**
   * The holders (by slot; each `Lease.mode` says how it holds) and how many
   * wait; rejects with `LEASE_NOT_FOUND` when nobody holds the lock.
   */
  state(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<LeaseState> {
    return this.#client.inspect(this.name, options);
  }

  /** Revokes the holder of `slot` (admin grant); it sees its session end. */
  revoke(slot: number, reason: string): Promise<bigint> {
    return this.#client.revokeLease(this.name, reason, { slot });
  }
}
