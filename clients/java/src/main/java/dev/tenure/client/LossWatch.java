package dev.tenure.client;

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
 * sessions notice loss at their next renewal. Other failures reopen it with backoff (100 ms
 * doubling to 5 s).
 */
final class LossWatch {
  private static final long MIN_BACKOFF_MS = 100;
  private static final long MAX_BACKOFF_MS = 5000;

  private final LeaseClient client;
  private final Set<Session> sessions = new LinkedHashSet<>();
  private String filter;
  private ClientCallStreamObserver<WatchLeaseRequest> call;
  private ScheduledFuture<?> retry;
  private long backoffMs = MIN_BACKOFF_MS;
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

  /** Whether {@code event} shows that the holding with {@code token} of {@code name} ended. */
  static boolean showsLoss(String name, long token, LeaseEvent event) {
    if (!event.getName().equals(name) || Long.compareUnsigned(event.getRevision(), token) <= 0) {
      return false;
    }
    EventType type = event.getType();
    return switch (type) {
      case EVENT_TYPE_REVOKED, EVENT_TYPE_EXPIRED, EVENT_TYPE_RELEASED -> true;
      case EVENT_TYPE_ACQUIRED, EVENT_TYPE_CURRENT -> event.getFencingToken() != token;
      default -> false;
    };
  }

  synchronized void add(Session session) {
    if (closed) {
      return;
    }
    sessions.add(session);
    if (!refused && (filter == null || !covers(filter, session.getName()))) {
      open();
    }
  }

  synchronized void remove(Session session) {
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
    if (call != null) {
      call.cancel("no session left to follow", null);
      call = null;
    }
  }

  private void open() {
    stop();
    if (sessions.isEmpty() || closed || refused) {
      return;
    }
    filter = coveringFilter(sessions.stream().map(Session::getName).toList());
    client
        .asyncStub()
        .watchLease(WatchLeaseRequest.newBuilder().setName(filter).build(), new Observer());
  }

  private void onEvent(Observer from, LeaseEvent event) {
    List<Session> ended = new ArrayList<>();
    synchronized (this) {
      if (from.call != call) {
        return;
      }
      if (event.getType() == EventType.EVENT_TYPE_SNAPSHOT_COMPLETE) {
        backoffMs = MIN_BACKOFF_MS;
      }
      for (Session s : sessions) {
        if (showsLoss(s.getName(), s.getFencingToken(), event)) {
          ended.add(s);
        }
      }
      sessions.removeAll(ended);
    }
    // Outside this lock: a session takes its own lock to end.
    for (Session s : ended) {
      s.endedByWatch(event);
    }
  }

  private synchronized void onEnd(Observer from, Status.Code code) {
    if (from.call != call) {
      return;
    }
    call = null;
    filter = null;
    if (closed || sessions.isEmpty()) {
      return;
    }
    if (code == Status.Code.PERMISSION_DENIED || code == Status.Code.UNAUTHENTICATED) {
      refused = true;
      return;
    }
    long delay = backoffMs;
    backoffMs = Math.min(MAX_BACKOFF_MS, backoffMs * 2);
    retry =
        client
            .scheduler()
            .schedule(
                () -> {
                  synchronized (LossWatch.this) {
                    retry = null;
                    if (call == null) {
                      open();
                    }
                  }
                },
                delay,
                TimeUnit.MILLISECONDS);
  }

  private final class Observer
      implements ClientResponseObserver<WatchLeaseRequest, WatchLeaseResponse> {
    private volatile ClientCallStreamObserver<WatchLeaseRequest> call;

    @Override
    public void beforeStart(ClientCallStreamObserver<WatchLeaseRequest> requestStream) {
      this.call = requestStream;
      // Runs inside open(), which holds the LossWatch lock.
      LossWatch.this.call = requestStream;
    }

    @Override
    public void onNext(WatchLeaseResponse value) {
      onEvent(this, value.getEvent());
    }

    @Override
    public void onError(Throwable t) {
      onEnd(this, Status.fromThrowable(t).getCode());
    }

    @Override
    public void onCompleted() {
      onEnd(this, Status.Code.OK);
    }
  }
}
