package dev.tenure.client;

import java.util.OptionalLong;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The downstream side of fencing, in memory: accepts a write to a resource only if its fencing
 * token is at least the highest token seen for that resource.
 *
 * <p>A holder that stalled (GC pause, network partition) can wake up after its lease passed to
 * someone else and still try to write. Every later holder has a strictly greater fencing token,
 * so a store that remembers the highest token per resource rejects the stale holder's writes.
 * This class is that check for a single process; it is thread-safe.
 *
 * <p>In a real store, keep the token next to the data and make the check part of the write, in
 * one statement, so that no other write can slip between the check and the update:
 *
 * <pre>{@code
 * -- a column fencing_token BIGINT NOT NULL DEFAULT 0 on the protected row
 * UPDATE resources
 *    SET value = :value, fencing_token = :token
 *  WHERE id = :id AND fencing_token <= :token;
 * -- 1 row updated: accepted; 0 rows: a newer holder has written, reject (a stale holder)
 * }</pre>
 */
public final class FencingGuard {
  private final ConcurrentHashMap<String, Long> highest = new ConcurrentHashMap<>();

  /** An empty guard: every resource starts with no token seen. */
  public FencingGuard() {}

  /**
   * Accepts {@code token} for {@code resource} if it is at least the highest token seen for it,
   * and records it as the highest. Equal tokens are accepted: one holder writes many times with
   * the same token.
   *
   * @param resource what is written to (a row, a file, a bucket key)
   * @param token the writer's fencing token ({@link Session#getFencingToken()})
   * @return true if the write may go ahead, false if a newer holder has already written
   */
  public boolean accept(String resource, long token) {
    boolean[] accepted = {false};
    highest.compute(
        resource,
        (key, current) -> {
          if (current == null || Long.compareUnsigned(token, current) >= 0) {
            accepted[0] = true;
            return token;
          }
          return current;
        });
    return accepted[0];
  }

  /**
   * The highest token accepted so far for {@code resource}.
   *
   * @param resource the resource
   * @return the token, or empty when none was accepted yet
   */
  public OptionalLong highest(String resource) {
    Long value = highest.get(resource);
    return value == null ? OptionalLong.empty() : OptionalLong.of(value);
  }
}
