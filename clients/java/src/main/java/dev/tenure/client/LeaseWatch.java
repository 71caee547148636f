package dev.tenure.client;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.EventType;
import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.WatchLeaseRequest;
import dev.tenure.v1.WatchLeaseResponse;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Spliterator;
import java.util.Spliterators;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

/**
 * A running {@code WatchLease} watch as a blocking {@link Iterator} of {@link LeaseEvent}s, which
 * reconnects and resumes by itself.
 *
 * <p>Events come in revision order: a {@code CURRENT} event per lease held when the watch started,
 * one {@code SNAPSHOT_COMPLETE}, then {@code ACQUIRED}, {@code RENEWED}, {@code RELEASED}, {@code
 * EXPIRED} and {@code REVOKED} as they happen. {@link #hasNext()} blocks until an event arrives;
 * {@link #poll(Duration)} waits with a bound. The server sends no more than a few events ahead of
 * what has been taken (gRPC flow control).
 *
 * <p>When the stream ends or fails retryably (a Tenure restart, UNAVAILABLE, a broken connection)
 * the watch reopens it after a capped exponential backoff with jitter, with {@code
 * start_revision} = the revision of the last event it delivered: the server replays the changes
 * after it (the latest per name), sends {@code SNAPSHOT_COMPLETE} ("caught up") and goes live, so
 * no event comes twice and none is missing. If the server cannot resume ({@code
 * WATCH_HISTORY_COMPACTED}) the watch starts over with a fresh snapshot and tells {@link
 * WatchOptions.Listener#onResync}. A permanent failure (PERMISSION_DENIED, UNAUTHENTICATED,
 * INVALID_ARGUMENT, ...) is thrown as a {@link TenureException}; with reconnect off, every
 * failure is, and a clean end of the stream makes {@link #hasNext()} false.
 *
 * <p>Use a watch from one thread; {@link #close()} may be called from any thread.
 */
public final class LeaseWatch implements Iterator<LeaseEvent>, AutoCloseable {
  /** How many events the server may send ahead of the consumer. */
  private static final int WINDOW = 16;

  private static final Object END = new Object();
  private static final Object CLOSED = new Object();

  /** Starts one WatchLease call (the gRPC stub, or a fake in tests). */
  interface Opener {
    /**
     * Starts the call.
     *
     * @param request the request
     * @param observer receives the call's events
     */
    void open(
        WatchLeaseRequest request,
        ClientResponseObserver<WatchLeaseRequest, WatchLeaseResponse> observer);
  }

  /** One queued item of the stream of generation {@code generation}. */
  private record Item(int generation, Object value) {}

  private final LinkedBlockingQueue<Item> queue = new LinkedBlockingQueue<>();
  private final Opener opener;
  private final String name;
  private final WatchOptions options;
  private final String target;
  private volatile ClientCallStreamObserver<WatchLeaseRequest> call;
  private volatile boolean closed;
  /** The generation of the current stream; items of older ones are dropped. */
  private volatile int generation;
  /** The revision the current stream started from (0: a snapshot). */
  private long start;
  /** The highest revision delivered so far. */
  private long last;
  private long backoffNanos;
  /** When a reopen is due (System.nanoTime), or -1 when no reopen is pending. */
  private long reopenAt = -1;
  private Object head;

  LeaseWatch(Opener opener, String name, WatchOptions options, String target) {
    this.opener = opener;
    this.name = name;
    this.options = options;
    this.target = target;
    this.last = options.startRevision();
    this.backoffNanos = options.minBackoff().toNanos();
    openStream(last);
  }

  /**
   * The highest revision this watch delivered (or its start revision before any): pass it as
   * {@link WatchOptions#withStartRevision} to continue later where this watch stopped.
   *
   * @return the revision
   */
  public long lastRevision() {
    return last;
  }

  /**
   * Waits for the next event.
   *
   * @return true when an event is ready, false when the watch was closed (or, with reconnect off,
   *     the stream ended)
   * @throws TenureException when the watch failed for good (or the waiting thread was interrupted)
   */
  @Override
  public boolean hasNext() {
    try {
      return fill(Long.MAX_VALUE) == Fill.READY;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      close();
      throw TenureException.from(
          Status.CANCELLED.withDescription("interrupted while watching").asRuntimeException(),
          target,
          "WatchLease");
    }
  }

  /**
   * The next event, waiting as long as it takes.
   *
   * @return the event
   * @throws NoSuchElementException when the watch has ended
   * @throws TenureException when the watch failed for good
   */
  @Override
  public LeaseEvent next() {
    if (!hasNext()) {
      throw new NoSuchElementException("the watch has ended");
    }
    return take();
  }

  /**
   * The next event, waiting at most {@code timeout}.
   *
   * @param timeout how long to wait
   * @return the event, or null if none came in time
   * @throws NoSuchElementException when the watch has ended
   * @throws TenureException when the watch failed for good
   * @throws InterruptedException when the waiting thread was interrupted
   */
  public LeaseEvent poll(Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    return switch (fill(deadline)) {
      case READY -> take();
      case TIMEOUT -> null;
      case ENDED -> throw new NoSuchElementException("the watch has ended");
    };
  }

  /**
   * The rest of the events as a sequential {@link Stream}; closing the stream closes the watch.
   *
   * @return the events
   */
  public Stream<LeaseEvent> stream() {
    return StreamSupport.stream(
            Spliterators.spliteratorUnknownSize(this, Spliterator.ORDERED | Spliterator.NONNULL),
            false)
        .onClose(this::close);
  }

  /** Cancels the stream. Further {@link #hasNext()} calls return false. */
  @Override
  public void close() {
    closed = true;
    queue.add(new Item(-1, CLOSED));
    ClientCallStreamObserver<WatchLeaseRequest> c = call;
    if (c != null) {
      c.cancel("watch closed by the client", null);
    }
  }

  private enum Fill {
    READY,
    TIMEOUT,
    ENDED
  }

  /** Waits until an event is in {@code head}, the watch ended, or {@code deadline} passed. */
  private Fill fill(long deadline) throws InterruptedException {
    boolean forever = deadline == Long.MAX_VALUE;
    while (true) {
      if (closed) {
        return Fill.ENDED;
      }
      if (head != null) {
        if (head instanceof LeaseEvent) {
          return Fill.READY;
        }
        Object ending = head;
        head = null;
        if (!afterEnd(ending)) {
          return Fill.ENDED;
        }
        continue;
      }
      long now = System.nanoTime();
      if (reopenAt >= 0 && now - reopenAt >= 0) {
        reopenAt = -1;
        openStream(last);
        continue;
      }
      Item item;
      if (reopenAt >= 0 && (forever || reopenAt - deadline < 0)) {
        item = queue.poll(Math.max(0, reopenAt - now), TimeUnit.NANOSECONDS);
      } else if (forever) {
        item = queue.take();
      } else {
        item = queue.poll(Math.max(0, deadline - now), TimeUnit.NANOSECONDS);
      }
      if (item == null) {
        if (!forever && System.nanoTime() - deadline >= 0) {
          return Fill.TIMEOUT;
        }
        continue; // a reopen is due
      }
      if (item.value() == CLOSED) {
        return Fill.ENDED;
      }
      if (item.generation() != generation) {
        continue; // from a stream this watch has left
      }
      Object value = item.value();
      if (value instanceof LeaseEvent event
          && event.getType() != EventType.EVENT_TYPE_SNAPSHOT_COMPLETE
          && start != 0
          && Long.compareUnsigned(event.getRevision(), start) <= 0) {
        // Delivered before: a server without resume sends its snapshot again.
        call.request(1);
        continue;
      }
      head = value;
    }
  }

  /**
   * Handles the end of the current stream ({@code END} or a {@link TenureException}): schedules
   * a reopen and returns true, returns false when the watch ends cleanly, or throws.
   */
  private boolean afterEnd(Object ending) {
    TenureException error = ending instanceof TenureException e ? e : null;
    if (!options.reconnect()) {
      if (error != null) {
        throw error;
      }
      return false;
    }
    if (error != null
        && error.getReason() == ErrorReason.WATCH_HISTORY_COMPACTED
        && start != 0) {
      last = 0;
      options.listener().onResync(error);
      reopenAt = System.nanoTime();
      return true;
    }
    if (error != null && !error.isRetryable()) {
      throw error;
    }
    long delay = backoffNanos / 2 + ThreadLocalRandom.current().nextLong(backoffNanos / 2 + 1);
    options.listener().onReconnect(error, last, Duration.ofNanos(delay));
    backoffNanos = Math.min(options.maxBackoff().toNanos(), backoffNanos * 2);
    reopenAt = System.nanoTime() + delay;
    return true;
  }

  private LeaseEvent take() {
    LeaseEvent event = (LeaseEvent) head;
    head = null;
    if (event.getType() == EventType.EVENT_TYPE_SNAPSHOT_COMPLETE) {
      backoffNanos = options.minBackoff().toNanos(); // connected and caught up
    }
    if (Long.compareUnsigned(event.getRevision(), last) > 0) {
      last = event.getRevision();
    }
    call.request(1);
    return event;
  }

  /** Opens a new stream from {@code startRevision}; events of older streams are dropped. */
  private void openStream(long startRevision) {
    int gen = ++generation;
    start = startRevision;
    WatchLeaseRequest request =
        WatchLeaseRequest.newBuilder()
            .setName(name)
            .addAllEventTypes(options.eventTypes())
            .setStartRevision(startRevision)
            .build();
    opener.open(
        request,
        new ClientResponseObserver<WatchLeaseRequest, WatchLeaseResponse>() {
          @Override
          public void beforeStart(ClientCallStreamObserver<WatchLeaseRequest> requestStream) {
            call = requestStream;
            requestStream.disableAutoRequestWithInitial(WINDOW);
          }

          @Override
          public void onNext(WatchLeaseResponse value) {
            queue.add(new Item(gen, value.getEvent()));
          }

          @Override
          public void onError(Throwable t) {
            queue.add(new Item(gen, closed ? END : TenureException.from(t, target, "WatchLease")));
          }

          @Override
          public void onCompleted() {
            queue.add(new Item(gen, END));
          }
        });
    if (closed) {
      call.cancel("watch closed by the client", null);
    }
  }
}
