package dev.tenure.client;

import static dev.tenure.v1.EventType.EVENT_TYPE_ACQUIRED;
import static dev.tenure.v1.EventType.EVENT_TYPE_CURRENT;
import static dev.tenure.v1.EventType.EVENT_TYPE_RELEASED;
import static dev.tenure.v1.EventType.EVENT_TYPE_SNAPSHOT_COMPLETE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.EventType;
import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.WatchLeaseRequest;
import dev.tenure.v1.WatchLeaseResponse;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The reconnecting watch without a server: each stream is a scripted fake, so the resume revision,
 * the skipping of replayed events, the compacted fallback and permanent errors are checked exactly.
 */
class LeaseWatchResumeTest {
  private static final WatchOptions FAST =
      WatchOptions.DEFAULTS.withBackoff(Duration.ofMillis(1), Duration.ofMillis(2));

  /** What one scripted stream sends, then how it ends (null: completes cleanly). */
  private record Script(List<LeaseEvent> events, Throwable end) {}

  /** Opens scripted streams in order and records each request. */
  private static final class FakeOpener implements LeaseWatch.Opener {
    final List<WatchLeaseRequest> requests = new ArrayList<>();
    final List<Script> scripts;

    FakeOpener(Script... scripts) {
      this.scripts = new ArrayList<>(List.of(scripts));
    }

    @Override
    public void open(
        WatchLeaseRequest request,
        ClientResponseObserver<WatchLeaseRequest, WatchLeaseResponse> observer) {
      requests.add(request);
      observer.beforeStart(new FakeCall());
      if (scripts.isEmpty()) {
        return; // stays open, silent
      }
      Script script = scripts.remove(0);
      for (LeaseEvent e : script.events()) {
        observer.onNext(WatchLeaseResponse.newBuilder().setEvent(e).build());
      }
      if (script.end() == null) {
        observer.onCompleted();
      } else {
        observer.onError(script.end());
      }
    }
  }

  /** A call that ignores flow control and cancellation. */
  private static final class FakeCall extends ClientCallStreamObserver<WatchLeaseRequest> {
    @Override
    public void cancel(String message, Throwable cause) {}

    @Override
    public boolean isReady() {
      return true;
    }

    @Override
    public void setOnReadyHandler(Runnable onReadyHandler) {}

    @Override
    public void request(int count) {}

    @Override
    public void setMessageCompression(boolean enable) {}

    @Override
    public void disableAutoInboundFlowControl() {}

    @Override
    public void disableAutoRequestWithInitial(int request) {}

    @Override
    public void onNext(WatchLeaseRequest value) {}

    @Override
    public void onError(Throwable t) {}

    @Override
    public void onCompleted() {}
  }

  private static LeaseEvent event(EventType type, String name, long revision) {
    return LeaseEvent.newBuilder()
        .setType(type)
        .setName(name)
        .setRevision(revision)
        .setFencingToken(revision)
        .build();
  }

  private static final LeaseEvent COMPLETE = event(EVENT_TYPE_SNAPSHOT_COMPLETE, "", 0);

  private static Throwable unavailable() {
    return Status.UNAVAILABLE.withDescription("connection refused").asRuntimeException();
  }

  private static List<String> take(LeaseWatch watch, int count) {
    List<String> seen = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      LeaseEvent e = watch.next();
      seen.add(e.getType().name().substring("EVENT_TYPE_".length()) + "@" + e.getRevision());
    }
    return seen;
  }

  @Test
  void resumesFromTheLastDeliveredRevisionWithoutDuplicates() {
    FakeOpener opener =
        new FakeOpener(
            new Script(
                List.of(
                    event(EVENT_TYPE_CURRENT, "a", 3),
                    COMPLETE,
                    event(EVENT_TYPE_ACQUIRED, "b", 5)),
                unavailable()),
            // A server without resume sends its snapshot again: 3 and 5 are skipped.
            new Script(
                List.of(
                    event(EVENT_TYPE_CURRENT, "a", 3),
                    event(EVENT_TYPE_CURRENT, "b", 5),
                    event(EVENT_TYPE_RELEASED, "b", 7),
                    COMPLETE),
                null),
            new Script(List.of(event(EVENT_TYPE_ACQUIRED, "c", 9)), unavailable()));
    List<Long> reconnects = new ArrayList<>();
    WatchOptions options =
        FAST.withListener(
            new WatchOptions.Listener() {
              @Override
              public void onReconnect(TenureException error, long startRevision, Duration d) {
                reconnects.add(startRevision);
              }
            });
    try (LeaseWatch watch = new LeaseWatch(opener, "jobs.>", options, "fake:1")) {
      assertEquals(
          List.of(
              "CURRENT@3",
              "SNAPSHOT_COMPLETE@0",
              "ACQUIRED@5",
              "RELEASED@7",
              "SNAPSHOT_COMPLETE@0",
              "ACQUIRED@9"),
          take(watch, 6));
      assertEquals(9, watch.lastRevision());
    }
    // The third stream's failure is not acted on: the consumer stopped before asking again.
    assertEquals(
        List.of(0L, 5L, 7L),
        opener.requests.stream().map(WatchLeaseRequest::getStartRevision).toList());
    assertEquals(List.of(5L, 7L), reconnects);
  }

  @Test
  void startsOverWhenTheHistoryIsCompacted() {
    TenureException compacted =
        new TenureException(
            Status.Code.OUT_OF_RANGE,
            ErrorReason.WATCH_HISTORY_COMPACTED,
            "WATCH_HISTORY_COMPACTED",
            "history gone",
            Map.of(),
            null);
    FakeOpener opener =
        new FakeOpener(
            new Script(List.of(), compacted),
            new Script(List.of(event(EVENT_TYPE_CURRENT, "a", 4), COMPLETE), null));
    List<TenureException> resyncs = new ArrayList<>();
    WatchOptions options =
        FAST.withStartRevision(2)
            .withListener(
                new WatchOptions.Listener() {
                  @Override
                  public void onResync(TenureException cause) {
                    resyncs.add(cause);
                  }
                });
    try (LeaseWatch watch = new LeaseWatch(opener, "jobs.>", options, "fake:1")) {
      assertEquals(List.of("CURRENT@4", "SNAPSHOT_COMPLETE@0"), take(watch, 2));
    }
    assertEquals(
        List.of(2L, 0L), opener.requests.stream().map(WatchLeaseRequest::getStartRevision).toList());
    assertEquals(List.of(compacted), resyncs);
  }

  @Test
  void permanentErrorsEndTheWatch() {
    for (Status status :
        List.of(Status.PERMISSION_DENIED, Status.UNAUTHENTICATED, Status.INVALID_ARGUMENT)) {
      FakeOpener opener = new FakeOpener(new Script(List.of(), status.asRuntimeException()));
      try (LeaseWatch watch = new LeaseWatch(opener, "jobs.>", FAST, "fake:1")) {
        TenureException e = assertThrows(TenureException.class, watch::hasNext);
        assertSame(status.getCode(), e.getStatusCode());
        assertEquals(1, opener.requests.size());
      }
    }
  }

  @Test
  void withoutReconnectACleanEndEndsTheIteration() {
    FakeOpener opener = new FakeOpener(new Script(List.of(COMPLETE), null));
    try (LeaseWatch watch =
        new LeaseWatch(opener, "jobs.>", FAST.withReconnect(false), "fake:1")) {
      assertEquals(List.of("SNAPSHOT_COMPLETE@0"), take(watch, 1));
      assertFalse(watch.hasNext());
    }
  }

  @Test
  void closeEndsAWatchWaitingToReconnect() throws Exception {
    FakeOpener opener = new FakeOpener(new Script(List.of(), unavailable()));
    LeaseWatch watch =
        new LeaseWatch(
            opener,
            "jobs.>",
            WatchOptions.DEFAULTS.withBackoff(Duration.ofMinutes(1), Duration.ofMinutes(1)),
            "fake:1");
    assertEquals(null, watch.poll(Duration.ofMillis(10)), "waiting for the reopen");
    watch.close();
    assertFalse(watch.hasNext());
  }
}
