package dev.tenure.client;

import dev.tenure.v1.EventType;
import java.time.Duration;
import java.util.List;
import java.util.Objects;

/**
 * What {@link LeaseClient#watch(String, WatchOptions)} watches and how it reconnects.
 *
 * <p>By default a watch starts with a snapshot ({@code startRevision} 0), keeps every event type,
 * and reconnects after a stream ends or fails retryably with backoff from 100 ms doubling to 5 s
 * (jittered), resuming after the last revision it delivered.
 *
 * @param eventTypes the event types to keep; empty means all ({@code SNAPSHOT_COMPLETE} and
 *     {@code MISSED} always come)
 * @param startRevision resume after this revision instead of starting with a snapshot (0: fresh)
 * @param reconnect whether to reopen the stream after it ends or fails retryably
 * @param minBackoff the first reconnect delay (doubled per failure, jittered)
 * @param maxBackoff the longest reconnect delay
 * @param listener told about reconnects and re-syncs (never null)
 */
public record WatchOptions(
    List<EventType> eventTypes,
    long startRevision,
    boolean reconnect,
    Duration minBackoff,
    Duration maxBackoff,
    Listener listener) {

  /** Told what a reconnecting watch does; both methods do nothing by default. */
  public interface Listener {
    /**
     * Called before the watch reopens its stream.
     *
     * @param error what ended the previous stream, or null when the server ended it cleanly
     * @param startRevision the revision the next stream resumes after (0: a fresh snapshot)
     * @param delay how long the watch waits before reopening
     */
    default void onReconnect(TenureException error, long startRevision, Duration delay) {}

    /**
     * Called when the server could not resume ({@code WATCH_HISTORY_COMPACTED}) and the watch
     * starts over: the snapshot ({@code CURRENT} events, then {@code SNAPSHOT_COMPLETE}) arrives
     * again and describes the state from then on.
     *
     * @param cause the refusal
     */
    default void onResync(TenureException cause) {}
  }

  /** The defaults: all event types, a fresh snapshot, reconnect with 100 ms to 5 s backoff. */
  public static final WatchOptions DEFAULTS =
      new WatchOptions(
          List.of(), 0, true, Duration.ofMillis(100), Duration.ofSeconds(5), new Listener() {});

  /** Checks the values. */
  public WatchOptions {
    eventTypes = List.copyOf(Objects.requireNonNull(eventTypes, "eventTypes"));
    Objects.requireNonNull(minBackoff, "minBackoff");
    Objects.requireNonNull(maxBackoff, "maxBackoff");
    Objects.requireNonNull(listener, "listener");
    if (minBackoff.isNegative() || maxBackoff.compareTo(minBackoff) < 0) {
      throw new IllegalArgumentException("need 0 <= minBackoff <= maxBackoff");
    }
  }

  /**
   * These options keeping only {@code types}.
   *
   * @param types the event types to keep
   * @return the new options
   */
  public WatchOptions withEventTypes(EventType... types) {
    return new WatchOptions(
        List.of(types), startRevision, reconnect, minBackoff, maxBackoff, listener);
  }

  /**
   * These options resuming after {@code revision}.
   *
   * @param revision the last revision already processed (0: a fresh snapshot)
   * @return the new options
   */
  public WatchOptions withStartRevision(long revision) {
    return new WatchOptions(eventTypes, revision, reconnect, minBackoff, maxBackoff, listener);
  }

  /**
   * These options with reconnecting on or off (off: the first failure is thrown).
   *
   * @param on whether to reconnect
   * @return the new options
   */
  public WatchOptions withReconnect(boolean on) {
    return new WatchOptions(eventTypes, startRevision, on, minBackoff, maxBackoff, listener);
  }

  /**
   * These options with another backoff.
   *
   * @param min the first delay
   * @param max the longest delay
   * @return the new options
   */
  public WatchOptions withBackoff(Duration min, Duration max) {
    return new WatchOptions(eventTypes, startRevision, reconnect, min, max, listener);
  }

  /**
   * These options telling {@code l} about reconnects and re-syncs.
   *
   * @param l the listener
   * @return the new options
   */
  public WatchOptions withListener(Listener l) {
    return new WatchOptions(eventTypes, startRevision, reconnect, minBackoff, maxBackoff, l);
  }
}
