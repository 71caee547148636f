package dev.tenure.client;

import dev.tenure.v1.LockMode;
import java.time.Duration;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Everything {@link LeaseClient#acquire(AcquireOptions)} can be told. Build one with {@link
 * #builder(String, String)}; only the name and the holder are required.
 *
 * <p>The renewal options: the session renews every {@code renewFraction} of the granted TTL
 * (default 1/3), counted from when the last successful Acquire or Renew was sent, and believes it
 * holds the lease until its <em>safe deadline</em>: that send time plus the granted TTL minus
 * {@code safetyMargin} (default a tenth of the granted TTL).
 */
public final class AcquireOptions {
  /** The default share of the granted TTL between two renewals. */
  public static final double DEFAULT_RENEW_FRACTION = 1.0 / 3.0;

  /** The default safety margin is the granted TTL divided by this. */
  public static final int DEFAULT_MARGIN_DIVISOR = 10;

  /** The default gRPC deadline of each call (an Acquire with a wait gets the wait on top). */
  public static final Duration DEFAULT_RPC_TIMEOUT = Duration.ofSeconds(10);

  private final String name;
  private final String holder;
  private final Duration ttl;
  private final Duration wait;
  private final String leaseKey;
  private final Map<String, String> metadata;
  private final double renewFraction;
  private final Duration safetyMargin;
  private final Duration rpcTimeout;
  private final int limit;
  private final Duration lockDelay;
  private final List<String> names;
  private final int preference;
  private final LockMode mode;

  private AcquireOptions(Builder b) {
    if (b.mode != LockMode.LOCK_MODE_UNSPECIFIED) {
      String with =
          b.names != null
              ? "a group"
              : b.limit > 0
                  ? "limit"
                  : b.lockDelay != null ? "lockDelay" : b.preference > 0 ? "preference" : null;
      if (with != null) {
        throw new IllegalArgumentException(
            "a read-write lock's mode does not combine with " + with);
      }
    }
    this.mode = b.mode;
    if (b.names != null && b.limit > 0) {
      throw new IllegalArgumentException("a group takes plain leases: limit does not apply");
    }
    if (b.preference > 0 && b.limit > 0) {
      throw new IllegalArgumentException(
          "limit and preference do not combine: preference is an election candidate's");
    }
    if (b.preference > 0 && b.names != null) {
      throw new IllegalArgumentException(
          "a group takes plain leases: preference is an election candidate's");
    }
    this.preference = b.preference;
    this.names = b.names;
    if (b.limit > 0 && b.lockDelay != null) {
      throw new IllegalArgumentException(
          "limit and lockDelay do not combine: a semaphore has no lock delay");
    }
    this.limit = b.limit;
    this.lockDelay = b.lockDelay;
    this.name = b.name;
    this.holder = b.holder;
    this.ttl = b.ttl;
    this.wait = b.wait;
    this.leaseKey = b.leaseKey;
    this.metadata = Collections.unmodifiableMap(new LinkedHashMap<>(b.metadata));
    this.renewFraction = b.renewFraction;
    this.safetyMargin = b.safetyMargin;
    this.rpcTimeout = b.rpcTimeout;
  }

  /**
   * Starts options for taking the leases {@code names} all at once, or none ({@link
   * LeaseClient#acquireGroup(AcquireOptions)}): 2 to the server's {@code --max-group-size}
   * (default 16) distinct plain lease names. The TTL, wait, lease key, metadata, lock delay and
   * renewal settings apply to the whole group; {@link Builder#limit(int)} does not.
   *
   * @param names the lease names, in the order the group's leases are returned
   * @param holder who takes them
   * @return a builder
   */
  public static Builder groupBuilder(List<String> names, String holder) {
    List<String> copy = List.copyOf(names);
    Builder b = new Builder(String.join(",", copy), holder);
    b.names = copy;
    return b;
  }

  /**
   * Starts options for taking lease {@code name} as {@code holder}.
   *
   * @param name the lease name (1 to 255 characters from {@code [-/_=.a-zA-Z0-9]})
   * @param holder who takes it: free text, 1 to 256 bytes
   * @return a builder
   */
  public static Builder builder(String name, String holder) {
    return new Builder(name, holder);
  }

  /** @return the lease name */
  public String getName() {
    return name;
  }

  /** @return the names of a group ({@link #groupBuilder}), or null for one lease */
  public List<String> getNames() {
    return names;
  }

  /** @return the holder */
  public String getHolder() {
    return holder;
  }

  /** @return the requested TTL, or null for the server's default */
  public Duration getTtl() {
    return ttl;
  }

  /** @return how long to wait for a held lease to become free; zero fails at once */
  public Duration getWait() {
    return wait;
  }

  /** @return the caller's lease key, or null to have the client mint one */
  public String getLeaseKey() {
    return leaseKey;
  }

  /** @return the metadata stored with the lease */
  public Map<String, String> getMetadata() {
    return metadata;
  }

  /** @return the share of the granted TTL between two renewals */
  public double getRenewFraction() {
    return renewFraction;
  }

  /** @return the safety margin, or null for a tenth of the granted TTL */
  public Duration getSafetyMargin() {
    return safetyMargin;
  }

  /** @return the gRPC deadline of each call */
  public Duration getRpcTimeout() {
    return rpcTimeout;
  }

  /** @return the semaphore limit; 0 for a plain lease */
  public int getLimit() {
    return limit;
  }

  /** @return the lock delay, or null for none */
  public Duration getLockDelay() {
    return lockDelay;
  }

  /** @return the election candidate's preference; 0 for none */
  public int getPreference() {
    return preference;
  }

  /**
   * @return the read-write lock mode ({@code LOCK_MODE_EXCLUSIVE} or {@code LOCK_MODE_SHARED}), or
   *     {@code LOCK_MODE_UNSPECIFIED} for a plain lease or a semaphore slot
   */
  public LockMode getMode() {
    return mode;
  }

  /** The safety margin for a granted TTL: the configured one or a tenth of the TTL. */
  Duration marginFor(Duration grantedTtl) {
    return safetyMargin != null ? safetyMargin : grantedTtl.dividedBy(DEFAULT_MARGIN_DIVISOR);
  }

  /** Builds {@link AcquireOptions}. */
  public static final class Builder {
    private final String name;
    private final String holder;
    private Duration ttl;
    private Duration wait = Duration.ZERO;
    private String leaseKey;
    private final Map<String, String> metadata = new LinkedHashMap<>();
    private double renewFraction = DEFAULT_RENEW_FRACTION;
    private Duration safetyMargin;
    private Duration rpcTimeout = DEFAULT_RPC_TIMEOUT;
    private int limit;
    private Duration lockDelay;
    private List<String> names;
    private int preference;
    private LockMode mode = LockMode.LOCK_MODE_UNSPECIFIED;

    private Builder(String name, String holder) {
      this.name = Objects.requireNonNull(name, "name");
      this.holder = Objects.requireNonNull(holder, "holder");
    }

    /**
     * The TTL to ask for. The server rounds it up to whole seconds and to its minimum (1 s by
     * default). Unset: the server's default TTL.
     *
     * @param ttl a positive duration
     * @return this builder
     */
    public Builder ttl(Duration ttl) {
      if (ttl != null && (ttl.isNegative() || ttl.isZero())) {
        throw new IllegalArgumentException("ttl must be positive, got " + ttl);
      }
      this.ttl = ttl;
      return this;
    }

    /**
     * How long Acquire may wait for a held lease to become free. Zero (the default) fails at once
     * with {@code LEASE_HELD}.
     *
     * @param wait zero or a positive duration
     * @return this builder
     */
    public Builder wait(Duration wait) {
      Objects.requireNonNull(wait, "wait");
      if (wait.isNegative()) {
        throw new IllegalArgumentException("wait must not be negative, got " + wait);
      }
      this.wait = wait;
      return this;
    }

    /**
     * The ownership secret (16 to 256 printable ASCII characters). Unset: the client mints a random
     * one. Reusing a key makes a retried Acquire return the same holding.
     *
     * @param leaseKey the key
     * @return this builder
     */
    public Builder leaseKey(String leaseKey) {
      this.leaseKey = leaseKey;
      return this;
    }

    /**
     * Adds one metadata entry, stored with the lease and shown to watchers.
     *
     * @param key the key
     * @param value the value
     * @return this builder
     */
    public Builder metadata(String key, String value) {
      metadata.put(Objects.requireNonNull(key, "key"), Objects.requireNonNull(value, "value"));
      return this;
    }

    /**
     * The share of the granted TTL between two renewals, in (0, 1); default 1/3.
     *
     * @param renewFraction the fraction
     * @return this builder
     */
    public Builder renewFraction(double renewFraction) {
      if (!(renewFraction > 0 && renewFraction < 1)) {
        throw new IllegalArgumentException("renewFraction must lie in (0, 1), got " + renewFraction);
      }
      this.renewFraction = renewFraction;
      return this;
    }

    /**
     * How long before the granted TTL runs out (counted from the send time) the session stops
     * believing it holds the lease. Default: a tenth of the granted TTL. It must leave room for a
     * renewal: {@code margin < ttl * (1 - renewFraction)}.
     *
     * @param safetyMargin zero or a positive duration
     * @return this builder
     */
    public Builder safetyMargin(Duration safetyMargin) {
      if (safetyMargin != null && safetyMargin.isNegative()) {
        throw new IllegalArgumentException("safetyMargin must not be negative, got " + safetyMargin);
      }
      this.safetyMargin = safetyMargin;
      return this;
    }

    /**
     * The gRPC deadline of each call (Acquire gets its wait on top); default 10 s. A renewal's
     * deadline is never later than the safe deadline.
     *
     * @param rpcTimeout a positive duration
     * @return this builder
     */
    public Builder rpcTimeout(Duration rpcTimeout) {
      Objects.requireNonNull(rpcTimeout, "rpcTimeout");
      if (rpcTimeout.isNegative() || rpcTimeout.isZero()) {
        throw new IllegalArgumentException("rpcTimeout must be positive, got " + rpcTimeout);
      }
      this.rpcTimeout = rpcTimeout;
      return this;
    }

    /**
     * Makes the name a counting semaphore of {@code limit} slots: up to {@code limit} holders at
     * once, each with its own slot ({@link Session#getSlot()}) and fencing token. The first
     * holder's limit is in force while the semaphore has holders; another limit fails with {@code
     * LIMIT_MISMATCH} (metadata {@code limit}). Not combinable with {@link #lockDelay(Duration)}.
     * {@link Semaphore} is the helper for this.
     *
     * @param limit 1 to the server's {@code --max-semaphore-limit}; 0 for a plain lease
     * @return this builder
     */
    public Builder limit(int limit) {
      if (limit < 0) {
        throw new IllegalArgumentException("limit must not be negative, got " + limit);
      }
      this.limit = limit;
      return this;
    }

    /**
     * After this holding <em>expires or is revoked</em> (never after a release), nobody may
     * acquire the name for {@code lockDelay}: it protects downstream systems that cannot check
     * fencing tokens from a stalled holder's in-flight writes. Whole seconds, at most the server's
     * {@code --max-lock-delay}. Refused Acquires say when the name is free; waiting ones wait.
     *
     * @param lockDelay a positive duration, or null for none
     * @return this builder
     */
    public Builder lockDelay(Duration lockDelay) {
      if (lockDelay != null && (lockDelay.isNegative() || lockDelay.isZero())) {
        throw new IllegalArgumentException("lockDelay must be positive, got " + lockDelay);
      }
      this.lockDelay = lockDelay;
      return this;
    }

    /**
     * An election candidate's preference (the lease is an election's, as {@link LeaderElector}
     * and {@link Election#campaign(String, String, Duration, Duration, int)} campaign): kept with
     * this Acquire's place in the queue while it waits (only an Acquire with a {@link
     * #wait(Duration)} queues). Observe names the waiting candidate of the highest preference
     * ({@link Election.Candidate}, the earliest of equals), and a {@link LeaderElector} leading
     * with a lower preference hands over to it. For a rolling update, campaign with the
     * deployment's generation. Not combinable with {@link #limit(int)} or a group.
     *
     * @param preference 0 (the default) for none, or a positive number: higher is preferred
     * @return this builder
     */
    public Builder preference(int preference) {
      if (preference < 0) {
        throw new IllegalArgumentException("preference must not be negative, got " + preference);
      }
      this.preference = preference;
      return this;
    }

    /**
     * Makes the Acquire a read-write lock's: {@code LOCK_MODE_EXCLUSIVE} (the only holder) or
     * {@code LOCK_MODE_SHARED} (one of any number of shared holders, up to the server's {@code
     * --max-shared-holders}, while nobody holds it exclusively). Each holder gets its own slot
     * and fencing token. Not combinable with {@link #limit(int)}, {@link #lockDelay(Duration)},
     * {@link #preference(int)} or a group. {@link ReadWriteLock} is the helper for this.
     *
     * @param mode the mode; {@code LOCK_MODE_UNSPECIFIED} (the default) for a plain lease
     * @return this builder
     */
    public Builder mode(LockMode mode) {
      Objects.requireNonNull(mode, "mode");
      if (mode == LockMode.UNRECOGNIZED) {
        throw new IllegalArgumentException("mode must be a LockMode value, got " + mode);
      }
      this.mode = mode;
      return this;
    }

    /**
     * The options.
     *
     * @return the built options
     */
    public AcquireOptions build() {
      return new AcquireOptions(this);
    }
  }
}
