package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.fail;

import dev.tenure.v1.EventType;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LeaseEvent;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/** Bounded waits on events the tests expect. */
final class Await {
  /** The bound on any single wait in the tests: generous, only hit when something is broken. */
  static final Duration BOUND = Duration.ofSeconds(15);

  private Await() {}

  /** A future completed by the session's loss listener. */
  static CompletableFuture<Session.Loss> loss(Session session) {
    CompletableFuture<Session.Loss> future = new CompletableFuture<>();
    session.addLossListener(future::complete);
    return future;
  }

  /** Waits for the session's loss. */
  static Session.Loss get(CompletableFuture<Session.Loss> loss) throws Exception {
    return loss.get(BOUND.toSeconds(), TimeUnit.SECONDS);
  }

  /** A queue that receives the lease of every background renewal of {@code session}. */
  static BlockingQueue<Lease> renewals(Session session) {
    BlockingQueue<Lease> queue = new LinkedBlockingQueue<>();
    session.setRenewalObserver(queue::add);
    return queue;
  }

  /** The next renewal's lease. */
  static Lease renewal(BlockingQueue<Lease> renewals) throws InterruptedException {
    Lease lease = renewals.poll(BOUND.toSeconds(), TimeUnit.SECONDS);
    assertNotNull(lease, "no renewal within " + BOUND);
    return lease;
  }

  /**
   * The next event of type {@code want}, allowing only events of the {@code skip} types before it.
   */
  static LeaseEvent event(LeaseWatch watch, EventType want, EventType... skip)
      throws InterruptedException {
    List<EventType> skippable = Arrays.asList(skip);
    long deadline = System.nanoTime() + BOUND.toNanos();
    while (true) {
      LeaseEvent event = watch.poll(Duration.ofNanos(Math.max(1, deadline - System.nanoTime())));
      if (event == null) {
        return fail("no " + want + " event within " + BOUND);
      }
      if (event.getType() == want) {
        return event;
      }
      if (!skippable.contains(event.getType())) {
        assertEquals(want, event.getType(), "unexpected event " + event);
      }
    }
  }

  /** As {@link #event(LeaseWatch, EventType, EventType...)}, for an observer's queue. */
  static LeaseEvent event(BlockingQueue<LeaseEvent> events, EventType want, EventType... skip)
      throws InterruptedException {
    List<EventType> skippable = Arrays.asList(skip);
    long deadline = System.nanoTime() + BOUND.toNanos();
    while (true) {
      LeaseEvent event =
          events.poll(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
      if (event == null) {
        return fail("no " + want + " event within " + BOUND);
      }
      if (event.getType() == want) {
        return event;
      }
      if (!skippable.contains(event.getType())) {
        assertEquals(want, event.getType(), "unexpected event " + event);
      }
    }
  }

  /**
   * Polls {@code condition} (a server-side state no event reports, e.g. a queue length) every 20
   * ms until it holds, failing after {@link #BOUND}.
   */
  static void until(String what, java.util.function.BooleanSupplier condition)
      throws InterruptedException {
    long deadline = System.nanoTime() + BOUND.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        fail("not within " + BOUND + ": " + what);
      }
      TimeUnit.MILLISECONDS.sleep(20);
    }
  }
}
