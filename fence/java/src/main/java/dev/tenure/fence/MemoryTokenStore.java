package dev.tenure.fence;

import java.util.OptionalLong;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A {@link TokenStore} in memory: the highest token per lease name for one process, the default of
 * {@link FenceFilter}. Thread-safe; it forgets everything at restart, so a store whose writes must
 * stay fenced across restarts or replicas keeps the tokens in its database instead.
 */
public final class MemoryTokenStore implements TokenStore {
  private final ConcurrentHashMap<String, Long> highest = new ConcurrentHashMap<>();

  /** An empty store: no token seen for any name. */
  public MemoryTokenStore() {}

  @Override
  public Advance advance(String name, long unsignedToken) {
    Long now =
        highest.merge(
            name,
            unsignedToken,
            (current, token) -> Long.compareUnsigned(token, current) >= 0 ? token : current);
    return new Advance(now == unsignedToken, now);
  }

  /**
   * The highest token admitted so far for {@code name}.
   *
   * @param name a lease name
   * @return the token (unsigned), or empty when none was admitted
   */
  public OptionalLong highest(String name) {
    Long value = highest.get(name);
    return value == null ? OptionalLong.empty() : OptionalLong.of(value);
  }
}
