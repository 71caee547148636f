package dev.tenure.client;

import static java.util.concurrent.TimeUnit.NANOSECONDS;

import dev.tenure.v1.KeepAliveEntry;
import dev.tenure.v1.KeepAliveError;
import dev.tenure.v1.KeepAliveRequest;
import dev.tenure.v1.KeepAliveResponse;
import dev.tenure.v1.KeepAliveResult;
import dev.tenure.v1.Lease;
import dev.tenure.v1.RenewRequest;
import dev.tenure.v1.RenewResponse;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The one KeepAlive stream of a {@link LeaseClient}: every background renewal of its lease and
 * semaphore sessions goes through it instead of a unary Renew each.
 *
 * <p>Renewals handed in while a flush is pending (the renewals due at the same moment on the
 * client's scheduler) go out as one {@code KeepAliveRequest} (split at {@link #MAX_ENTRIES}). The
 * server answers each request with one response, results in entry order, so responses are matched
 * to requests first in, first out, and results to renewals by id. A per-entry {@code
 * KeepAliveError} becomes the {@link TenureException} a unary Renew's status would have been.
 *
 * <p>Each renewal has its own deadline (the session's, never past its safe deadline): when it
 * passes without a result the renewal fails with {@code DEADLINE_EXCEEDED} and the stream, which
 * may be stuck, is cancelled. When the stream breaks or ends, every renewal waiting on it fails with
 * the stream's (retryable) error, and the sessions retry as after a failed unary Renew; the next
 * renewal opens a new stream. A server that answers the stream with {@code UNIMPLEMENTED} (or a
 * client built with {@link ConnectOptions.Builder#keepAliveStream(boolean)} off) gets unary Renew
 * calls from then on.
 */
final class KeepAliveStream {
  private static final Logger LOG = Logger.getLogger(KeepAliveStream.class.getName());

  /** The most entries in one request (the server's default {@code --max-keepalive-entries}). */
  static final int MAX_ENTRIES = 1000;

  /** Told once the outcome of one renewal. */
  interface Callback {
    /** The renewed holding. */
    void renewed(Lease lease);

    /** Why it was not renewed. */
    void failed(TenureException error);
  }

  /** One renewal waiting to be sent or answered. */
  private final class Pending {
    final long id;
    final RenewRequest request;
    final long deadlineNanos;
    final Callback callback;
    final AtomicBoolean done = new AtomicBoolean();
    ScheduledFuture<?> timer;

    Pending(long id, RenewRequest request, long deadlineNanos, Callback callback) {
      this.id = id;
      this.request = request;
      this.deadlineNanos = deadlineNanos;
      this.callback = callback;
    }

    void succeed(Lease lease) {
      if (done.compareAndSet(false, true)) {
        cancelTimer();
        callback.renewed(lease);
      }
    }

    void fail(TenureException error) {
      if (done.compareAndSet(false, true)) {
        cancelTimer();
        callback.failed(error);
      }
    }

    private void cancelTimer() {
      ScheduledFuture<?> t = timer;
      if (t != null) {
        t.cancel(false);
      }
    }

    KeepAliveEntry entry() {
      return KeepAliveEntry.newBuilder()
          .setId(id)
          .setName(request.getName())
          .setExpectedRevision(request.getExpectedRevision())
          .setLeaseKey(request.getLeaseKey())
          .setSlot(request.getSlot())
          .build();
    }
  }

  /** One open stream and the requests it has not answered yet, oldest first. */
  private final class Stream implements ClientResponseObserver<KeepAliveRequest, KeepAliveResponse> {
    ClientCallStreamObserver<KeepAliveRequest> call;
    final Deque<List<Pending>> unanswered = new ArrayDeque<>();
    boolean answered;

    @Override
    public void beforeStart(ClientCallStreamObserver<KeepAliveRequest> requestStream) {
      this.call = requestStream;
    }

    @Override
    public void onNext(KeepAliveResponse response) {
      List<Pending> batch;
      synchronized (KeepAliveStream.this) {
        answered = true;
        batch = unanswered.poll();
      }
      if (batch == null) {
        return;
      }
      Map<Long, Pending> byId = new HashMap<>();
      for (Pending p : batch) {
        byId.put(p.id, p);
      }
      List<KeepAliveResult> results = response.getResultsList();
      for (int i = 0; i < results.size(); i++) {
        KeepAliveResult result = results.get(i);
        Pending p = byId.remove(result.getId());
        if (p == null) {
          continue;
        }
        if (result.hasLease()) {
          p.succeed(result.getLease());
        } else {
          p.fail(error(expanded(results, i)));
        }
      }
      for (Pending p : byId.values()) {
        p.fail(streamError(Status.Code.INTERNAL, "the KeepAlive response had no result for it"));
      }
    }

    /**
     * The error of result {@code i}: one that repeats an earlier error of the same response
     * ({@code same_as}: sent as code, reason and that result's index) gets its message, metadata
     * and retry delay.
     */
    private KeepAliveError expanded(List<KeepAliveResult> results, int i) {
      KeepAliveError e = results.get(i).getError();
      if (!e.hasSameAs() || e.getSameAs() >= i || !results.get(e.getSameAs()).hasError()) {
        return e;
      }
      KeepAliveError first = results.get(e.getSameAs()).getError();
      KeepAliveError.Builder full =
          e.toBuilder()
              .clearSameAs()
              .setMessage(first.getMessage())
              .putAllMetadata(first.getMetadataMap());
      if (first.hasRetryDelay()) {
        full.setRetryDelay(first.getRetryDelay());
      }
      return full.build();
    }

    @Override
    public void onError(Throwable t) {
      ended(this, client.error(t, "KeepAlive"));
    }

    @Override
    public void onCompleted() {
      ended(this, streamError(Status.Code.UNAVAILABLE, "the server ended the KeepAlive stream"));
    }
  }

  private final LeaseClient client;
  private final AtomicLong ids = new AtomicLong();

  // Guarded by `this`.
  private boolean unary;
  private boolean closed;
  private Stream stream;
  private List<Pending> queued = new ArrayList<>();
  private boolean flushScheduled;

  // Counters for tests and diagnostics.
  private final AtomicLong streamsOpened = new AtomicLong();
  private final AtomicLong messagesSent = new AtomicLong();
  private final AtomicLong entriesSent = new AtomicLong();
  private final AtomicLong unaryRenewals = new AtomicLong();
  private final AtomicLong largestMessage = new AtomicLong();

  KeepAliveStream(LeaseClient client, boolean enabled) {
    this.client = client;
    this.unary = !enabled;
  }

  /**
   * Renews the holding of {@code request}; {@code callback} is told the outcome once, on a gRPC or
   * scheduler thread.
   *
   * @param request the renewal (name, expected revision, lease key, slot)
   * @param timeoutNanos how long to wait for its result
   * @param callback told the outcome
   */
  void renew(RenewRequest request, long timeoutNanos, Callback callback) {
    Pending p =
        new Pending(ids.incrementAndGet(), request, System.nanoTime() + timeoutNanos, callback);
    boolean viaUnary;
    boolean schedule = false;
    synchronized (this) {
      viaUnary = unary || closed;
      if (!viaUnary) {
        queued.add(p);
        schedule = !flushScheduled;
        flushScheduled = true;
      }
    }
    if (viaUnary) {
      sendUnary(p);
      return;
    }
    if (schedule) {
      try {
        client.scheduler().execute(this::flush);
      } catch (RejectedExecutionException e) {
        flush();
      }
    }
  }

  /** Sends everything queued as one request (or several of at most MAX_ENTRIES). */
  private void flush() {
    List<Pending> batch;
    Stream s;
    boolean viaUnary;
    TenureException unopened = null;
    synchronized (this) {
      flushScheduled = false;
      batch = queued;
      queued = new ArrayList<>();
      s = unary || closed ? null : openLocked();
      viaUnary = s == null && (unary || closed);
      if (s != null) {
        for (int from = 0; from < batch.size(); from += MAX_ENTRIES) {
          List<Pending> part = batch.subList(from, Math.min(batch.size(), from + MAX_ENTRIES));
          s.unanswered.add(part);
        }
      } else if (!viaUnary) {
        unopened = streamError(Status.Code.UNAVAILABLE, "the stream ended as it opened");
      }
    }
    if (batch.isEmpty()) {
      return;
    }
    if (viaUnary) {
      batch.forEach(this::sendUnary);
      return;
    }
    if (unopened != null) {
      for (Pending p : batch) {
        p.fail(unopened);
      }
      return;
    }
    for (Pending p : batch) {
      arm(p, s);
    }
    try {
      for (int from = 0; from < batch.size(); from += MAX_ENTRIES) {
        KeepAliveRequest.Builder request = KeepAliveRequest.newBuilder();
        for (Pending p : batch.subList(from, Math.min(batch.size(), from + MAX_ENTRIES))) {
          request.addEntries(p.entry());
        }
        synchronized (s) {
          s.call.onNext(request.build());
        }
        messagesSent.incrementAndGet();
        entriesSent.addAndGet(request.getEntriesCount());
        largestMessage.accumulateAndGet(request.getEntriesCount(), Math::max);
      }
    } catch (RuntimeException e) {
      // The call ended under us (its onError may already have run): fail this batch here, like
      // a broken stream, so the sessions retry on a new one.
      LOG.log(Level.FINE, "KeepAlive send failed", e);
      synchronized (this) {
        if (stream == s) {
          stream = null;
        }
        s.unanswered.removeIf(part -> !part.isEmpty() && batch.contains(part.get(0)));
      }
      s.call.cancel("send failed", e);
      TenureException error = streamError(Status.Code.UNAVAILABLE, "the stream broke: " + e);
      for (Pending p : batch) {
        p.fail(error);
      }
    }
  }

  /**
   * Opens the stream if none is open. Caller holds the lock. Null when the call ended as it
   * started (then {@link #ended} ran already, and may have switched to unary Renew).
   */
  private Stream openLocked() {
    if (stream == null) {
      Stream s = new Stream();
      stream = s;
      streamsOpened.incrementAndGet();
      client.asyncStub().keepAlive(s);
    }
    return stream;
  }

  /** Fails {@code p} at its deadline, cancelling the stream that did not answer it in time. */
  private void arm(Pending p, Stream s) {
    long delay = Math.max(0, p.deadlineNanos - System.nanoTime());
    try {
      p.timer =
          client
              .scheduler()
              .schedule(
                  () -> {
                    if (!p.done.get()) {
                      p.fail(
                          streamError(
                              Status.Code.DEADLINE_EXCEEDED, "no KeepAlive result in time"));
                      s.call.cancel("a renewal got no result in time", null);
                    }
                  },
                  delay,
                  NANOSECONDS);
    } catch (RejectedExecutionException e) {
      LOG.log(Level.FINE, "scheduler is shut down", e);
    }
    if (p.done.get()) {
      p.cancelTimer();
    }
  }

  /** The stream {@code s} broke or ended: fail what it owes, or fall back to unary Renew. */
  private void ended(Stream s, TenureException error) {
    List<Pending> owed = new ArrayList<>();
    boolean fallBack;
    synchronized (this) {
      if (stream == s) {
        stream = null;
      }
      for (List<Pending> batch : s.unanswered) {
        owed.addAll(batch);
      }
      s.unanswered.clear();
      fallBack = error.getStatusCode() == Status.Code.UNIMPLEMENTED && !s.answered;
      if (fallBack) {
        if (!unary) {
          LOG.info(
              "tenure at " + client.target() + " has no KeepAlive stream: renewing with unary Renew");
        }
        unary = true;
      }
    }
    for (Pending p : owed) {
      if (fallBack && !p.done.get()) {
        p.cancelTimer();
        sendUnary(p);
      } else {
        p.fail(error);
      }
    }
  }

  /** Renews {@code p} with a unary Renew (the fallback). */
  private void sendUnary(Pending p) {
    long timeout = p.deadlineNanos - System.nanoTime();
    if (timeout <= 0) {
      p.fail(streamError(Status.Code.DEADLINE_EXCEEDED, "renewal deadline passed"));
      return;
    }
    unaryRenewals.incrementAndGet();
    client
        .asyncStub()
        .withDeadlineAfter(timeout, NANOSECONDS)
        .renew(
            p.request,
            new StreamObserver<RenewResponse>() {
              @Override
              public void onNext(RenewResponse reply) {
                p.succeed(reply.getLease());
              }

              @Override
              public void onError(Throwable t) {
                p.fail(client.error(t, "Renew"));
              }

              @Override
              public void onCompleted() {}
            });
  }

  /** Half-closes an idle stream (no session left); the next renewal opens a new one. */
  synchronized void idle() {
    if (stream != null && stream.unanswered.isEmpty() && queued.isEmpty()) {
      Stream s = stream;
      stream = null;
      synchronized (s) {
        s.call.onCompleted();
      }
    }
  }

  /** Cancels the stream; later renewals use unary Renew (the client is closing). */
  void close() {
    Stream s;
    synchronized (this) {
      closed = true;
      s = stream;
      stream = null;
    }
    if (s != null) {
      s.call.cancel("client closed", null);
    }
  }

  /** A typed error of a KeepAlive entry, as a unary Renew's status would have given. */
  private TenureException error(KeepAliveError e) {
    Status.Code code = Status.fromCodeValue(e.getCode()).getCode();
    String message =
        "tenure at "
            + client.target()
            + ": KeepAlive: "
            + (e.getReason().isEmpty() ? code.name() : e.getReason())
            + (e.getMessage().isEmpty() ? "" : ": " + e.getMessage());
    return new TenureException(
        code,
        TenureException.parseReason(e.getReason()),
        e.getReason(),
        message,
        e.getMetadataMap(),
        null);
  }

  private TenureException streamError(Status.Code code, String what) {
    return new TenureException(
        code,
        dev.tenure.v1.ErrorReason.ERROR_REASON_UNSPECIFIED,
        "",
        "tenure at " + client.target() + ": KeepAlive: " + code.name() + ": " + what,
        Map.of(),
        null);
  }

  // ---- Counters (package-private, for tests). ----

  long streamsOpened() {
    return streamsOpened.get();
  }

  long messagesSent() {
    return messagesSent.get();
  }

  long entriesSent() {
    return entriesSent.get();
  }

  long unaryRenewals() {
    return unaryRenewals.get();
  }

  long largestMessage() {
    return largestMessage.get();
  }
}
