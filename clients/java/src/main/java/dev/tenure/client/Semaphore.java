package dev.tenure.client;

import dev.tenure.v1.GetLeaseResponse;
import java.time.Duration;
import java.util.Objects;

/**
 * A counting semaphore of a {@link LeaseClient}: up to {@code limit} holders of one name at once,
 * enforced by the server's conditional writes (never by trusting clients). Each holder gets a
 * {@link Session} like a lease's, with its own slot ({@link Session#getSlot()}), lease key and
 * fencing token (strictly increasing per name across all holders), renewed in the background and
 * lost at its safe deadline, or the moment the client's loss watch sees <em>its own slot</em>
 * revoked, expired, released or taken with another token (other holders coming and going never
 * end it).
 *
 * <pre>{@code
 * Semaphore sem = new Semaphore(client, "jobs.encoders", 4);
 * try (Session permit = sem.acquire("worker-7", Duration.ofSeconds(10), Duration.ofMinutes(1))) {
 *   while (permit.isHeld()) { ... write with permit.getFencingToken() ... }
 * }
 * }</pre>
 *
 * <p>The rule: a holder stops using the resource before its safe deadline ({@link
 * Session#isHeld()} turns false then) and passes its fencing token downstream, so a store can
 * reject a stalled holder's late writes.
 */
public final class Semaphore {
  private final LeaseClient client;
  private final String name;
  private final int limit;

  /**
   * The semaphore {@code name} of {@code limit} slots over {@code client}'s connection.
   *
   * @param client the client
   * @param name the semaphore's name (a lease name)
   * @param limit how many holders at once: 1 to the server's {@code --max-semaphore-limit}
   */
  public Semaphore(LeaseClient client, String name, int limit) {
    this.client = Objects.requireNonNull(client, "client");
    this.name = Objects.requireNonNull(name, "name");
    if (limit < 1) {
      throw new IllegalArgumentException("limit must be at least 1, got " + limit);
    }
    this.limit = limit;
  }

  /** @return the semaphore's name */
  public String name() {
    return name;
  }

  /** @return the limit this helper asks for */
  public int limit() {
    return limit;
  }

  /**
   * Takes a slot for {@code holder}, waiting up to {@code wait} while every slot is taken (FIFO
   * with the other waiters).
   *
   * @param holder who takes the slot
   * @param ttl the TTL to ask for
   * @param wait how long to wait for a free slot; zero fails at once with {@code LEASE_HELD}
   * @return the holding, renewing in the background; {@link Session#release()} frees the slot
   * @throws TenureException {@code LIMIT_MISMATCH} (metadata {@code limit}: the limit in force)
   *     when the live holders use another limit, {@code LEASE_HELD} when no slot came free in time
   */
  public Session acquire(String holder, Duration ttl, Duration wait) {
    return acquire(AcquireOptions.builder(name, holder).ttl(ttl).wait(wait));
  }

  /**
   * Takes a slot with every option of {@code options} (lease key, metadata, renewal settings);
   * its name and limit are set to this semaphore's.
   *
   * @param options a builder made with this semaphore's name ({@code
   *     AcquireOptions.builder(name, holder)})
   * @return the holding
   * @throws TenureException as {@link #acquire(String, Duration, Duration)}
   */
  public Session acquire(AcquireOptions.Builder options) {
    AcquireOptions built = options.limit(limit).build();
    if (!built.getName().equals(name)) {
      throw new IllegalArgumentException(
          "options are for " + built.getName() + ", not for semaphore " + name);
    }
    return client.acquire(built);
  }

  /**
   * The semaphore's state: {@code getHolders()} (by slot), {@code getLimit()}, {@code
   * getFreeSlots()} and {@code getWaiting()}.
   *
   * @return the server's reply
   * @throws TenureException {@code LEASE_NOT_FOUND} when nobody holds a slot
   */
  public GetLeaseResponse inspect() {
    return client.inspect(name);
  }
}
