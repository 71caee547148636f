package dev.tenure.client;

import static dev.tenure.v1.EventType.EVENT_TYPE_ACQUIRED;
import static dev.tenure.v1.EventType.EVENT_TYPE_RELEASED;
import static dev.tenure.v1.EventType.EVENT_TYPE_SNAPSHOT_COMPLETE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.tenure.v1.AcquireRequest;
import dev.tenure.v1.AcquireResponse;
import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.ReleaseRequest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Watch resume across a Tenure restart: Tenure is SIGKILLed while nats-server (and the bucket)
 * stays up, and a new Tenure starts on the same port. A watch sees every change once and in order,
 * a change made through another replica while its Tenure was down arrives after the resume, and a
 * session revoked while its Tenure was down is signalled lost after the reconnect.
 */
@Tag("integration")
class RestartTest {
  private static final Duration BOUND = Duration.ofSeconds(30);

  private static NatsServer nats;
  private static TenureServer tenure;

  @BeforeAll
  static void start() throws Exception {
    nats = NatsServer.start();
    tenure = TenureServer.startShared(0, nats.url());
  }

  @AfterAll
  static void stop() throws Exception {
    if (tenure != null) {
      tenure.close();
    }
    if (nats != null) {
      nats.close();
    }
  }

  /** Something done while the first Tenure is down, through a second one on the same bucket. */
  private interface WhileDown {
    void run(LeaseClient replica) throws Exception;
  }

  /** SIGKILLs the Tenure, runs {@code between} on a replica, starts a new one on the same port. */
  private static void restart(WhileDown between) throws Exception {
    int port = tenure.port();
    tenure.kill();
    tenure.close();
    try (TenureServer replica = TenureServer.startShared(0, nats.url());
        LeaseClient other = LeaseClient.connect(replica.target())) {
      between.run(other);
    }
    tenure = TenureServer.startShared(port, nats.url());
  }

  /** Acquires without a session: nobody renews it, so no RENEWED events. */
  private static AcquireResponse acquireRaw(LeaseClient c, String name, String holder) {
    return c.blockingStub()
        .acquire(
            AcquireRequest.newBuilder()
                .setName(name)
                .setHolder(holder)
                .setTtl(com.google.protobuf.Duration.newBuilder().setSeconds(60))
                .build());
  }

  private static void releaseRaw(LeaseClient c, AcquireResponse held) {
    c.blockingStub()
        .release(
            ReleaseRequest.newBuilder()
                .setName(held.getLease().getName())
                .setExpectedRevision(held.getLease().getRevision())
                .setLeaseKey(held.getLeaseKey())
                .build());
  }

  /** The next event other than SNAPSHOT_COMPLETE, within {@link #BOUND}. */
  private static LeaseEvent next(LeaseWatch watch, List<LeaseEvent> seen) throws Exception {
    long deadline = System.nanoTime() + BOUND.toNanos();
    while (true) {
      LeaseEvent e = watch.poll(Duration.ofNanos(Math.max(1, deadline - System.nanoTime())));
      if (e == null) {
        return fail("no event within " + BOUND);
      }
      if (e.getType() != EVENT_TYPE_SNAPSHOT_COMPLETE) {
        seen.add(e);
        return e;
      }
    }
  }

  @Test
  void watchSeesEveryChangeOnceAcrossARestart() throws Exception {
    List<LeaseEvent> seen = new ArrayList<>();
    List<Long> reconnects = new CopyOnWriteArrayList<>();
    WatchOptions options =
        WatchOptions.DEFAULTS
            .withBackoff(Duration.ofMillis(50), Duration.ofMillis(500))
            .withListener(
                new WatchOptions.Listener() {
                  @Override
                  public void onReconnect(TenureException error, long start, Duration delay) {
                    reconnects.add(start);
                  }
                });
    String prefix = "restart.watch";
    // The push form follows the same stream of changes.
    java.util.concurrent.BlockingQueue<LeaseEvent> pushed =
        new java.util.concurrent.LinkedBlockingQueue<>();
    java.util.concurrent.Semaphore caughtUp = new java.util.concurrent.Semaphore(0);
    List<Throwable> pushErrors = new CopyOnWriteArrayList<>();
    io.grpc.stub.StreamObserver<LeaseEvent> observer =
        new io.grpc.stub.StreamObserver<>() {
          @Override
          public void onNext(LeaseEvent value) {
            if (value.getType() != EVENT_TYPE_SNAPSHOT_COMPLETE) {
              pushed.add(value);
            } else {
              caughtUp.release();
            }
          }

          @Override
          public void onError(Throwable t) {
            pushErrors.add(t);
          }

          @Override
          public void onCompleted() {
            pushErrors.add(new IllegalStateException("completed"));
          }
        };
    List<LeaseEvent> pushedSeen = new ArrayList<>();
    try (LeaseClient client = LeaseClient.connect(tenure.target());
        LeaseWatch watch = client.watch(prefix + ".>", options);
        LeaseClient.Subscription push =
            client.watch(
                prefix + ".>",
                observer,
                WatchOptions.DEFAULTS.withBackoff(Duration.ofMillis(50), Duration.ofMillis(500)))) {
      assertEquals(EVENT_TYPE_SNAPSHOT_COMPLETE, watch.poll(BOUND).getType());
      AcquireResponse a = acquireRaw(client, prefix + ".a", "before");
      next(watch, seen);
      releaseRaw(client, a);
      LeaseEvent releasedA = next(watch, seen);

      long[] replicaToken = new long[1];
      restart(
          replica ->
              replicaToken[0] =
                  acquireRaw(replica, prefix + ".b", "replica").getLease().getFencingToken());
      LeaseEvent b = next(watch, seen);
      assertEquals(prefix + ".b", b.getName());
      assertEquals(replicaToken[0], b.getFencingToken());
      assertEquals(releasedA.getRevision(), reconnects.get(0), "resumed after RELEASED a");
      // Changes made while a watch is still disconnected reach it coalesced (the latest per
      // name), so the next changes wait until the push form has resumed too: its second
      // SNAPSHOT_COMPLETE ("caught up").
      assertTrue(caughtUp.tryAcquire(2, BOUND.toSeconds(), java.util.concurrent.TimeUnit.SECONDS));

      AcquireResponse c = acquireRaw(client, prefix + ".c", "after");
      next(watch, seen);
      releaseRaw(client, c);
      next(watch, seen);
      while (pushedSeen.size() < seen.size()) {
        LeaseEvent e = pushed.poll(BOUND.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
        if (e == null) {
          fail("the push-form watch fell behind: " + pushedSeen + ", errors " + pushErrors);
        }
        pushedSeen.add(e);
      }
    }
    assertEquals(seen, pushedSeen, "the push form saw the same changes");
    assertEquals(List.of(), pushErrors);
    assertEquals(
        List.of(
            "ACQUIRED a", "RELEASED a", "ACQUIRED b", "ACQUIRED c", "RELEASED c"),
        seen.stream()
            .map(
                e ->
                    e.getType().name().substring("EVENT_TYPE_".length())
                        + " "
                        + e.getName().substring(prefix.length() + 1))
            .toList());
    for (int i = 1; i < seen.size(); i++) {
      assertTrue(
          Long.compareUnsigned(seen.get(i).getRevision(), seen.get(i - 1).getRevision()) > 0,
          "revisions strictly increase: no duplicate");
    }
    assertEquals(EVENT_TYPE_ACQUIRED, seen.get(0).getType());
    assertEquals(EVENT_TYPE_RELEASED, seen.get(1).getType());
  }

  @Test
  void sessionRevokedWhileTenureWasDownIsLostAfterTheReconnect() throws Exception {
    try (LeaseClient client = LeaseClient.connect(tenure.target())) {
      // Renewal due after 24 s: only the resumed loss watch can end it within the bound.
      Session victim =
          client.acquire(
              AcquireOptions.builder("restart.loss.victim", "victim")
                  .ttl(Duration.ofSeconds(30))
                  .renewFraction(0.8)
                  .build());
      Session bystander =
          client.acquire(
              AcquireOptions.builder("restart.loss.bystander", "bystander")
                  .ttl(Duration.ofSeconds(30))
                  .renewFraction(0.8)
                  .build());
      CompletableFuture<Session.Loss> loss = Await.loss(victim);
      restart(replica -> replica.revokeLease("restart.loss.victim", "revoked while down"));
      Session.Loss lost = loss.get(BOUND.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
      assertEquals(Session.LossReason.LEASE_ENDED, lost.getReason());
      assertTrue(bystander.isHeld(), "a session whose lease survived is not lost");
      assertFalse(victim.release(), "release after loss reports 'was not held'");
      assertTrue(bystander.release());
    }
  }

  @Test
  void renewalsGoOnOverANewKeepAliveStreamAfterARestart() throws Exception {
    try (LeaseClient client = LeaseClient.connect(tenure.target())) {
      // Renewed every 3.3 s, safe deadline 9 s after each send: a restart fits in between.
      Session session = client.acquire("restart.keepalive", "h", Duration.ofSeconds(10));
      java.util.concurrent.BlockingQueue<dev.tenure.v1.Lease> renewals = Await.renewals(session);
      Await.renewal(renewals);
      KeepAliveStream stream = client.keepAlive();
      assertEquals(1, stream.streamsOpened());
      restart(replica -> {});
      // The old stream broke with the connection; the next renewal opens one to the new Tenure.
      while (stream.streamsOpened() < 2) {
        assertEquals(session.getFencingToken(), Await.renewal(renewals).getFencingToken());
      }
      assertEquals(session.getFencingToken(), Await.renewal(renewals).getFencingToken());
      assertTrue(session.isHeld());
      assertTrue(session.getLoss().isEmpty());
      assertTrue(session.release());
    }
  }

  /** Markers that last 1 s, below the server's 2 s clock margin: no resume can be proven. */
  private static final String[] SHORT_MARKERS = {"--marker-ttl", "1s", "--max-lock-delay", "1s"};

  @Test
  void compactedHistoryStartsOverWithAFreshSnapshot() throws Exception {
    List<TenureException> resyncs = new CopyOnWriteArrayList<>();
    WatchOptions.Listener listener =
        new WatchOptions.Listener() {
          @Override
          public void onResync(TenureException cause) {
            resyncs.add(cause);
          }
        };
    try (NatsServer own = NatsServer.start();
        TenureServer shortMarkers = TenureServer.startShared(0, own.url(), SHORT_MARKERS);
        LeaseClient client = LeaseClient.connect(shortMarkers.target())) {
      AcquireResponse held = acquireRaw(client, "compacted.one", "holder");
      WatchOptions options =
          WatchOptions.DEFAULTS
              .withStartRevision(held.getLease().getRevision())
              .withListener(listener);
      try (LeaseWatch watch = client.watch("compacted.one", options)) {
        LeaseEvent first = watch.poll(BOUND);
        assertEquals(dev.tenure.v1.EventType.EVENT_TYPE_CURRENT, first.getType());
        assertEquals(held.getLease().getFencingToken(), first.getFencingToken());
        assertEquals(EVENT_TYPE_SNAPSHOT_COMPLETE, watch.poll(BOUND).getType());
      }
      assertEquals(1, resyncs.size());
      assertEquals(dev.tenure.v1.ErrorReason.WATCH_HISTORY_COMPACTED, resyncs.get(0).getReason());
    }
  }

  @Test
  void freshSnapshotWithoutTheNameEndsTheSession() throws Exception {
    try (NatsServer own = NatsServer.start()) {
      TenureServer first = TenureServer.startShared(0, own.url(), SHORT_MARKERS);
      try (LeaseClient client = LeaseClient.connect(first.target())) {
        Session victim =
            client.acquire(
                AcquireOptions.builder("compacted.victim", "victim")
                    .ttl(Duration.ofSeconds(30))
                    .renewFraction(0.8)
                    .build());
        CompletableFuture<Session.Loss> loss = Await.loss(victim);
        int port = first.port();
        first.kill();
        first.close();
        try (TenureServer replica = TenureServer.startShared(0, own.url(), SHORT_MARKERS);
            LeaseClient admin = LeaseClient.connect(replica.target())) {
          admin.revokeLease("compacted.victim", "revoked while the first Tenure was down");
        }
        first = TenureServer.startShared(port, own.url(), SHORT_MARKERS);
        // The resume is refused, the loss watch starts fresh, and the snapshot lacks the name.
        Session.Loss lost = loss.get(BOUND.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
        assertEquals(Session.LossReason.LEASE_ENDED, lost.getReason());
      } finally {
        first.close();
      }
    }
  }
}
