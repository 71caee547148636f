package dev.tenure.client;

import static dev.tenure.v1.EventType.EVENT_TYPE_ACQUIRED;
import static dev.tenure.v1.EventType.EVENT_TYPE_CURRENT;
import static dev.tenure.v1.EventType.EVENT_TYPE_EXPIRED;
import static dev.tenure.v1.EventType.EVENT_TYPE_RELEASED;
import static dev.tenure.v1.EventType.EVENT_TYPE_RENEWED;
import static dev.tenure.v1.EventType.EVENT_TYPE_SNAPSHOT_COMPLETE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.LeaseEvent;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.NoSuchElementException;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** WatchLease through the helper: the iterator and the observer forms. */
@Tag("integration")
class WatchTest {
  private static final Duration ONE_SECOND = Duration.ofSeconds(1);

  private static TenureServer server;
  private static LeaseClient client;

  @BeforeAll
  static void startServer() throws Exception {
    server = TenureServer.start();
    client = LeaseClient.connect(server.target());
  }

  @AfterAll
  static void stopServer() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) {
      server.close();
    }
  }

  @Test
  void watchYieldsAcquiredRenewedReleasedAndExpired() throws Exception {
    try (LeaseWatch watch = client.watch("watched.one");
        LeaseWatch releases = client.watch("watched.one", EVENT_TYPE_RELEASED)) {
      assertEquals(EVENT_TYPE_SNAPSHOT_COMPLETE, watch.next().getType(), "nothing held yet");
      assertEquals(EVENT_TYPE_SNAPSHOT_COMPLETE, releases.next().getType());

      Session first = client.acquire("watched.one", "first", ONE_SECOND);
      LeaseEvent acquired = Await.event(watch, EVENT_TYPE_ACQUIRED);
      assertEquals("watched.one", acquired.getName());
      assertEquals("first", acquired.getHolder());
      assertEquals(first.getFencingToken(), acquired.getFencingToken());
      assertEquals("first", acquired.getLease().getHolder());

      LeaseEvent renewed = Await.event(watch, EVENT_TYPE_RENEWED);
      assertEquals(first.getFencingToken(), renewed.getFencingToken());
      assertTrue(renewed.getRevision() > acquired.getRevision());

      first.release();
      LeaseEvent released = Await.event(watch, EVENT_TYPE_RELEASED, EVENT_TYPE_RENEWED);
      assertEquals("first", released.getHolder());
      assertEquals(first.getFencingToken(), released.getFencingToken());
      LeaseEvent filtered = releases.next();
      assertEquals(EVENT_TYPE_RELEASED, filtered.getType(), "the filtered watch skips the rest");
      assertEquals(released.getRevision(), filtered.getRevision());

      Session second = client.acquire("watched.one", "second", ONE_SECOND);
      second.pauseRenewals();
      LeaseEvent reacquired = Await.event(watch, EVENT_TYPE_ACQUIRED);
      assertEquals(second.getFencingToken(), reacquired.getFencingToken());
      assertTrue(second.getFencingToken() > first.getFencingToken());
      LeaseEvent expired = Await.event(watch, EVENT_TYPE_EXPIRED, EVENT_TYPE_RENEWED);
      assertEquals("second", expired.getHolder());
      assertEquals(second.getFencingToken(), expired.getFencingToken());
      second.close();

      assertNull(releases.poll(Duration.ofMillis(1)), "no event but RELEASED passes the filter");
    }
  }

  @Test
  void observerWatchOfASubtreeStartsWithTheSnapshot() throws Exception {
    Session held = client.acquire("jobs.a", "snapshot-holder", Duration.ofSeconds(2));
    BlockingQueue<LeaseEvent> events = new LinkedBlockingQueue<>();
    CompletableFuture<Throwable> failure = new CompletableFuture<>();
    StreamObserver<LeaseEvent> observer =
        new StreamObserver<>() {
          @Override
          public void onNext(LeaseEvent event) {
            events.add(event);
          }

          @Override
          public void onError(Throwable t) {
            failure.complete(t);
          }

          @Override
          public void onCompleted() {
            failure.complete(null);
          }
        };
    LeaseClient.Subscription subscription = client.watch("jobs.>", observer);
    try {
      LeaseEvent current = Await.event(events, EVENT_TYPE_CURRENT);
      assertEquals("jobs.a", current.getName());
      assertEquals("snapshot-holder", current.getHolder());
      assertEquals(held.getFencingToken(), current.getFencingToken());
      Await.event(events, EVENT_TYPE_SNAPSHOT_COMPLETE);

      // A lease outside the subtree is not seen; the next one inside is.
      try (Session outside = client.acquire("other.b", "outsider", ONE_SECOND);
          Session inside = client.acquire("jobs.b", "insider", ONE_SECOND)) {
        LeaseEvent acquired = Await.event(events, EVENT_TYPE_ACQUIRED, EVENT_TYPE_RENEWED);
        assertEquals("jobs.b", acquired.getName());
        assertEquals(inside.getFencingToken(), acquired.getFencingToken());
        assertTrue(outside.isHeld());
      }
    } finally {
      subscription.close();
    }
    held.release();
    assertFalse(failure.isDone(), "a closed subscription tells the observer nothing more");
  }

  @Test
  void closedWatchEnds() throws Exception {
    LeaseWatch watch = client.watch(">");
    Await.event(watch, EVENT_TYPE_SNAPSHOT_COMPLETE, EVENT_TYPE_CURRENT);
    watch.close();
    assertFalse(watch.hasNext());
    assertThrows(NoSuchElementException.class, watch::next);
  }

  @Test
  void invalidWatchFailsWithTypedReason() {
    try (LeaseWatch watch = client.watch("bad..name")) {
      TenureException e = assertThrows(TenureException.class, watch::hasNext);
      assertEquals(ErrorReason.INVALID_NAME, e.getReason());
    }
  }
}
