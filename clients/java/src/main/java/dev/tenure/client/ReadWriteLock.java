package dev.tenure.client;

import dev.tenure.v1.GetLeaseResponse;
import dev.tenure.v1.LockMode;
import java.time.Duration;
import java.util.Objects;

/**
 * A read-write lock of a {@link LeaseClient}: any number of shared holders ({@link #readLock()},
 * up to the server's {@code --max-shared-holders}) while nobody holds it exclusively, or one
 * exclusive holder ({@link #writeLock()}) and nobody else, enforced by the server's conditional
 * writes. Named after {@link java.util.concurrent.locks.ReadWriteLock}, but each acquire returns
 * a {@link Session} like a lease's: its own slot ({@link Session#getSlot()}), lease key and fencing
 * token (strictly increasing per name across all holders, shared and exclusive), its mode ({@link
 * Session#getMode()}), renewed in the background and lost at its safe deadline or the moment the
 * client's loss watch sees <em>its own slot</em> end (other holders coming and going never end
 * it). {@link Session#downgrade()} turns an exclusive holding shared without a gap.
 *
 * <pre>{@code
 * ReadWriteLock routes = client.readWriteLock("config.routes");
 * try (Session writer = routes.writeLock().acquire("deployer", Duration.ofSeconds(10), Duration.ofMinutes(1))) {
 *   store.publish(table, writer.getFencingToken());
 *   writer.downgrade(); // now shared, with a new token: readers may join
 *   store.verify(table, writer.getFencingToken());
 * }
 * }</pre>
 *
 * <p>Waiting acquires of both modes queue in arrival order across replicas: a reader arriving
 * after a queued writer waits behind it, so writers are never starved. Without a wait an acquire
 * is refused {@code LEASE_HELD} while the lock is held incompatibly or anyone is queued (metadata
 * {@code state} {@code QUEUED}), and a shared one that finds {@code --max-shared-holders} readers
 * {@code TOO_MANY_SHARED_HOLDERS} (retryable). A name in use as a semaphore is refused {@code
 * MODE_MISMATCH}, and the other way round; a plain lease of the same name is another holding.
 */
public final class ReadWriteLock {
  private final LeaseClient client;
  private final String name;
  private final Lock writeLock;
  private final Lock readLock;

  /**
   * The read-write lock {@code name} over {@code client}'s connection (also {@link
   * LeaseClient#readWriteLock(String)}).
   *
   * @param client the client
   * @param name the lock's name (a lease name)
   */
  public ReadWriteLock(LeaseClient client, String name) {
    this.client = Objects.requireNonNull(client, "client");
    this.name = Objects.requireNonNull(name, "name");
    this.writeLock = new Lock(LockMode.LOCK_MODE_EXCLUSIVE);
    this.readLock = new Lock(LockMode.LOCK_MODE_SHARED);
  }

  /** @return the lock's name */
  public String name() {
    return name;
  }

  /**
   * The exclusive side: its holder is the lock's only holder.
   *
   * @return the write lock
   */
  public Lock writeLock() {
    return writeLock;
  }

  /**
   * The shared side: any number of holders at once, while nobody holds the write lock.
   *
   * @return the read lock
   */
  public Lock readLock() {
    return readLock;
  }

  /**
   * The lock's state: {@code getLease()}, {@code getHolders()} and {@code getWaiting()} (how many
   * acquires are queued).
   *
   * @return the server's reply
   * @throws TenureException {@code LEASE_NOT_FOUND} when nobody holds it
   */
  public GetLeaseResponse inspect() {
    return client.inspect(name);
  }

  /** One side of the lock: acquires in its mode. */
  public final class Lock {
    private final LockMode mode;

    private Lock(LockMode mode) {
      this.mode = mode;
    }

    /** @return {@code LOCK_MODE_EXCLUSIVE} for the write lock, {@code LOCK_MODE_SHARED} for the read lock */
    public LockMode mode() {
      return mode;
    }

    /**
     * Takes the lock in this side's mode for {@code holder}, waiting up to {@code wait} (in
     * arrival order with the other waiters of both modes).
     *
     * @param holder who takes it
     * @param ttl the TTL to ask for
     * @param wait how long to wait; zero fails at once with {@code LEASE_HELD} (or {@code
     *     TOO_MANY_SHARED_HOLDERS} for the read lock)
     * @return the holding, renewing in the background; {@link Session#release()} lets it go
     * @throws TenureException {@code LEASE_HELD} when it was not granted in time, {@code
     *     TOO_MANY_SHARED_HOLDERS} (retryable) for a read lock without a wait that found the
     *     server's maximum of shared holders, {@code MODE_MISMATCH} when the name is in use as a
     *     semaphore, or when the holder already holds it (same key) in the other mode
     */
    public Session acquire(String holder, Duration ttl, Duration wait) {
      return acquire(AcquireOptions.builder(name, holder).ttl(ttl).wait(wait));
    }

    /**
     * Takes the lock with every option of {@code options} (lease key, metadata, renewal
     * settings); its mode is set to this side's.
     *
     * @param options a builder made with the lock's name ({@code AcquireOptions.builder(name,
     *     holder)})
     * @return the holding
     * @throws TenureException as {@link #acquire(String, Duration, Duration)}
     * @throws IllegalArgumentException for options of another name, or with a limit, lock delay
     *     or preference
     */
    public Session acquire(AcquireOptions.Builder options) {
      AcquireOptions built = options.mode(mode).build();
      if (!built.getName().equals(name)) {
        throw new IllegalArgumentException(
            "options are for " + built.getName() + ", not for read-write lock " + name);
      }
      return client.acquire(built);
    }

    @Override
    public String toString() {
      return (mode == LockMode.LOCK_MODE_EXCLUSIVE ? "writeLock" : "readLock") + " of " + name;
    }
  }
}
