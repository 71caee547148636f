package dev.tenure.client;

import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.LeaseServiceGrpc;
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
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

/**
 * A running {@code WatchLease} stream as a blocking {@link Iterator} of {@link LeaseEvent}s.
 *
 * <p>Events come in order: a {@code CURRENT} event per lease held when the watch started, one
 * {@code SNAPSHOT_COMPLETE}, then {@code ACQUIRED}, {@code RENEWED}, {@code RELEASED}, {@code
 * EXPIRED} and {@code REVOKED} as they happen. {@link #hasNext()} blocks until an event arrives
 * and returns false once the server ends the stream or the watch is closed; a failed stream throws
 * a {@link TenureException}. {@link #poll(Duration)} waits with a bound. The server sends no more
 * than a few events ahead of what has been taken (gRPC flow control).
 *
 * <p>Use a watch from one thread; {@link #close()} may be called from any thread.
 */
public final class LeaseWatch implements Iterator<LeaseEvent>, AutoCloseable {
  /** How many events the server may send ahead of the consumer. */
  private static final int WINDOW = 16;

  private static final Object END = new Object();

  private final LinkedBlockingQueue<Object> queue = new LinkedBlockingQueue<>();
  private volatile ClientCallStreamObserver<WatchLeaseRequest> call;
  private volatile boolean closed;
  private Object head;

  LeaseWatch(LeaseServiceGrpc.LeaseServiceStub stub, WatchLeaseRequest request) {
    stub.watchLease(
        request,
        new ClientResponseObserver<WatchLeaseRequest, WatchLeaseResponse>() {
          @Override
          public void beforeStart(ClientCallStreamObserver<WatchLeaseRequest> requestStream) {
            call = requestStream;
            requestStream.disableAutoRequestWithInitial(WINDOW);
          }

          @Override
          public void onNext(WatchLeaseResponse value) {
            queue.add(value.getEvent());
          }

          @Override
          public void onError(Throwable t) {
            queue.add(closed ? END : TenureException.from(t));
          }

          @Override
          public void onCompleted() {
            queue.add(END);
          }
        });
  }

  /**
   * Waits for the next event.
   *
   * @return true when an event is ready, false when the stream ended or the watch was closed
   * @throws TenureException when the stream failed (or the waiting thread was interrupted)
   */
  @Override
  public boolean hasNext() {
    if (closed) {
      return false;
    }
    if (head == null) {
      try {
        head = queue.take();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        close();
        throw TenureException.from(
            Status.CANCELLED.withDescription("interrupted while watching").asRuntimeException());
      }
    }
    return ready();
  }

  /**
   * The next event, waiting as long as it takes.
   *
   * @return the event
   * @throws NoSuchElementException when the stream ended or the watch was closed
   * @throws TenureException when the stream failed
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
   * @throws NoSuchElementException when the stream ended or the watch was closed
   * @throws TenureException when the stream failed
   * @throws InterruptedException when the waiting thread was interrupted
   */
  public LeaseEvent poll(Duration timeout) throws InterruptedException {
    if (closed) {
      throw new NoSuchElementException("the watch was closed");
    }
    if (head == null) {
      head = queue.poll(timeout.toNanos(), TimeUnit.NANOSECONDS);
      if (head == null) {
        return null;
      }
    }
    if (!ready()) {
      throw new NoSuchElementException("the watch has ended");
    }
    return take();
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
    call.cancel("watch closed by the client", null);
  }

  /** Whether {@code head} is an event; throws if it is an error. */
  private boolean ready() {
    if (head == END) {
      return false;
    }
    if (head instanceof TenureException error) {
      throw error;
    }
    return true;
  }

  private LeaseEvent take() {
    LeaseEvent event = (LeaseEvent) head;
    head = null;
    call.request(1);
    return event;
  }
}
