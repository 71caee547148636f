package dev.tenure.client;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.EventType;
import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.WatchLeaseRequest;
import dev.tenure.v1.WatchLeaseResponse;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

/**
 * The one WatchLease stream a client keeps open to notice the loss of any of its sessions the
 * moment the server records it (revoke, expiry, a release by the key's other user, another
 * holder), instead of at the next renewal.
 *
 * <p>The stream follows the narrowest filter covering the names of all live sessions (the one
 * name, the common dotted prefix {@code a.b.>}, or {@code >}); it is reopened when a new session's
 * name is not covered and closed when no session is left. If the server refuses the watch
 * (PERMISSION_DENIED / UNAUTHENTICATED: no {@code watch} grant) the client stops watching and
 * sessions notice loss at their next renewal. Other failures (a Tenure restart, a broken
 * connection) reopen it with backoff (100 ms doubling to 5 s, jittered), resuming after the last
 * revision seen ({@code start_revision}), so a revoke, expiry or takeover that happened while
 * disconnected still arrives as its event. When the server cannot resume ({@code
 * WATCH_HISTORY_COMPACTED}) the stream starts fresh, and a session whose name the fresh snapshot
 * shows with another token, or not at all, is lost.
 */
final class LossWatch {
  /**
   * One holding the watch follows: a lease session, a semaphore session (slot above 0) or one
   * member of a group session. {@code ended} is called at most once, when an event or a fresh
   * snapshot shows the holding ended.
   *
   * @param name the lease (or semaphore) name
   * @param slot the semaphore slot; 0 for a plain lease
   * @param token the holding's fencing token
   * @param ended told the event that ended the holding
   */
  record Watched(String name, int slot, long token, java.util.function.Consumer<LeaseEvent> ended) {
    /** Whether {@code event} (a CURRENT of a snapshot) shows this very holding. */
    boolean shownBy(LeaseEvent event) {
      return name.equals(event.getName())
          && slot == event.getSlot()
          && token == event.getFencingToken();
    }
  }

  private static final long MIN_BACKOFF_MS = 100;
  private static final long MAX_BACKOFF_MS = 5000;

  private final LeaseClient client;
  private final Set<Watched> sessions = new LinkedHashSet<>();
  private String filter;
  private ClientCallStreamObserver<WatchLeaseRequest> call;
  private ScheduledFuture<?> retry;
  private long backoffMs = MIN_BACKOFF_MS;
  /** The highest revision the current filter's streams delivered (0: none yet). */
  private long lastRevision;
  private boolean refused;
  private boolean closed;

  LossWatch(LeaseClient client, boolean enabled) {
    this.client = client;
    this.closed = !enabled;
  }

  /** The narrowest watch filter covering every name in {@code names} (non-empty). */
  static String coveringFilter(List<String> names) {
    String first = names.get(0);
    if (names.stream().allMatch(first::equals)) {
      return first;
    }
    List<String[]> split = names.stream().map(n -> n.split("\\.", -1)).toList();
    int shortest = split.stream().mapToInt(p -> p.length).min().orElse(0);
    int common = 0;
    // "a.b.>" covers names below a.b only: keep at least one segment of every name below it.
    while (common < shortest - 1) {
      String segment = split.get(0)[common];
      final int at = common;
      if (!split.stream().allMatch(p -> p[at].equals(segment))) {
        break;
      }
      common++;
    }
    if (common == 0) {
      return ">";
    }
    return String.join(".", java.util.Arrays.copyOf(split.get(0), common)) + ".>";
  }

  /** Whether the watch filter {@code filter} covers the lease name {@code name}. */
  static boolean covers(String filter, String name) {
    if (filter.equals(name) || filter.equals(">")) {
      return true;
    }
    return filter.endsWith(".>") && name.startsWith(filter.substring(0, filter.length() - 1));
  }

  /** Whether {@code event} shows that the plain-lease holding {@code token} of {@code name} ended. */
  static boolean showsLoss(String name, long token, LeaseEvent event) {
    return showsLoss(name, 0, token, event);
  }

  /**
   * Whether {@code event} shows that the holding with {@code token} of slot {@code slot} of {@code
   * name} ended. Events of other slots (other holders of the same semaphore acquiring, renewing or
   * releasing) never do; a plain lease (slot 0) ignores semaphore events and vice versa. A MISSED
   * (the stream did not see every change of the name) does only when it names this holding's
   * token: a MISSED of another token, or of none (0), says nothing of this holding.
   */
  static boolean showsLoss(String name, int slot, long token, LeaseEvent event) {
    if (!event.getName().equals(name)
        || event.getSlot() != slot
        || Long.compareUnsigned(event.getRevision(), token) <= 0) {
      return false;
    }
    EventType type = event.getType();
    return switch (type) {
      case EVENT_TYPE_REVOKED, EVENT_TYPE_EXPIRED, EVENT_TYPE_RELEASED -> true;
      case EVENT_TYPE_ACQUIRED, EVENT_TYPE_CURRENT -> event.getFencingToken() != token;
      case EVENT_TYPE_MISSED -> token != 0 && event.getFencingToken() == token;
      default -> false;
    };
  }

  synchronized void add(Watched session) {
    if (closed) {
      return;
    }
    sessions.add(session);
    if (!refused && (filter == null || !covers(filter, session.name()))) {
      open(0);
    }
  }

  /**
   * Follows {@code next} instead of {@code previous} (the same holding after a Downgrade gave it a
   * new token), also when the watch already stopped following {@code previous} because an event
   * (the downgrade's own write, most likely) seemed to end it.
   */
  synchronized void replace(Watched previous, Watched next) {
    sessions.remove(previous);
    add(next);
  }

  synchronized void remove(Watched session) {
    sessions.remove(session);
    if (sessions.isEmpty()) {
      stop();
    }
  }

  synchronized void close() {
    closed = true;
    sessions.clear();
    stop();
  }

  private void stop() {
    if (retry != null) {
      retry.cancel(false);
      retry = null;
    }
    filter = null;
    lastRevision = 0;
    if (call != null) {
      call.cancel("no session left to follow", null);
      call = null;
    }
  }

  /**
   * (Re)opens the stream with the filter covering every live session: fresh ({@code
   * startRevision} 0) for a new filter, else resuming after the last revision of the same filter.
   */
  private void open(long startRevision) {
    stop();
    if (sessions.isEmpty() || closed || refused) {
      return;
    }
    filter = coveringFilter(sessions.stream().map(Watched::name).toList());
    lastRevision = startRevision;
    client
        .asyncStub()
        .watchLease(
            WatchLeaseRequest.newBuilder().setName(filter).setStartRevision(startRevision).build(),
            new Observer(startRevision, new LinkedHashSet<>(sessions)));
  }

  private void onEvent(Observer from, LeaseEvent event) {
    List<Watched> ended = new ArrayList<>();
    List<LeaseEvent> why = new ArrayList<>();
    synchronized (this) {
      if (from.call != call) {
        return;
      }
      if (Long.compareUnsigned(event.getRevision(), lastRevision) > 0) {
        lastRevision = event.getRevision();
      }
      if (event.getType() == EventType.EVENT_TYPE_SNAPSHOT_COMPLETE) {
        backoffMs = MIN_BACKOFF_MS;
        // A snapshot (fresh, or from a server that ignored start_revision) lists every holding:
        // a session it did not show ended while nobody watched.
        if (!from.complete && (from.startRevision == 0 || from.sawCurrent)) {
          for (Watched s : from.expected) {
            if (!from.shown.contains(s) && sessions.contains(s)) {
              ended.add(s);
              why.add(event.toBuilder().setName(s.name()).setSlot(s.slot()).build());
            }
          }
        }
        from.complete = true;
      } else {
        if (event.getType() == EventType.EVENT_TYPE_CURRENT) {
          from.sawCurrent = true;
          for (Watched s : from.expected) {
            if (s.shownBy(event)) {
              from.shown.add(s);
            }
          }
        }
        for (Watched s : sessions) {
          if (showsLoss(s.name(), s.slot(), s.token(), event)) {
            ended.add(s);
            why.add(event);
          }
        }
      }
      sessions.removeAll(ended);
    }
    // Outside this lock: a session takes its own lock to end.
    for (int i = 0; i < ended.size(); i++) {
      ended.get(i).ended().accept(why.get(i));
    }
  }

  private synchronized void onEnd(Observer from, Throwable failure) {
    if (from.call != call) {
      return;
    }
    long resumeFrom = lastRevision;
    call = null;
    filter = null;
    if (closed || sessions.isEmpty()) {
      return;
    }
    TenureException error = failure == null ? null : TenureException.from(failure);
    Status.Code code = error == null ? Status.Code.OK : error.getStatusCode();
    if (code == Status.Code.PERMISSION_DENIED || code == Status.Code.UNAUTHENTICATED) {
      refused = true;
      return;
    }
    // The history after resumeFrom is gone, or (INVALID_ARGUMENT) the bucket is not the one the
    // revision came from: start over with a snapshot.
    boolean fresh =
        error != null
            && (error.getReason() == ErrorReason.WATCH_HISTORY_COMPACTED
                || (code == Status.Code.INVALID_ARGUMENT && resumeFrom != 0));
    long delay = 0;
    if (!fresh) {
      delay = backoffMs / 2 + ThreadLocalRandom.current().nextLong(backoffMs / 2 + 1);
      backoffMs = Math.min(MAX_BACKOFF_MS, backoffMs * 2);
    }
    long startFrom = fresh ? 0 : resumeFrom;
    retry =
        client
            .scheduler()
            .schedule(
                () -> {
                  synchronized (LossWatch.this) {
                    retry = null;
                    if (call == null) {
                      open(startFrom);
                    }
                  }
                },
                delay,
                TimeUnit.MILLISECONDS);
  }

  private final class Observer
      implements ClientResponseObserver<WatchLeaseRequest, WatchLeaseResponse> {
    private volatile ClientCallStreamObserver<WatchLeaseRequest> call;
    /** The revision this stream started from (0: a snapshot). */
    private final long startRevision;
    /** The sessions followed when it opened: a snapshot must show each. */
    private final Set<Watched> expected;
    /** The sessions the snapshot showed with their own token (under the LossWatch lock). */
    private final Set<Watched> shown = new java.util.HashSet<>();
    /** Whether CURRENT events came (under the LossWatch lock). */
    private boolean sawCurrent;
    /** Whether SNAPSHOT_COMPLETE came (under the LossWatch lock). */
    private boolean complete;

    Observer(long startRevision, Set<Watched> expected) {
      this.startRevision = startRevision;
      this.expected = expected;
    }

    @Override
    public void beforeStart(ClientCallStreamObserver<WatchLeaseRequest> requestStream) {
      this.call = requestStream;
      // Runs inside open(long), which holds the LossWatch lock.
      LossWatch.this.call = requestStream;
    }

    @Override
    public void onNext(WatchLeaseResponse value) {
      onEvent(this, value.getEvent());
    }

    @Override
    public void onError(Throwable t) {
      onEnd(this, t);
    }

    @Override
    public void onCompleted() {
      onEnd(this, null);
    }
  }
}
