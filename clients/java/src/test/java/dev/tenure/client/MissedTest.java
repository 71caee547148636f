package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.AcquireGroupRequest;
import dev.tenure.v1.AcquireGroupResponse;
import dev.tenure.v1.AcquireRequest;
import dev.tenure.v1.AcquireResponse;
import dev.tenure.v1.ChangeType;
import dev.tenure.v1.ElectionServiceGrpc;
import dev.tenure.v1.EventType;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.LeaseServiceGrpc;
import dev.tenure.v1.Leadership;
import dev.tenure.v1.ObserveRequest;
import dev.tenure.v1.ObserveResponse;
import dev.tenure.v1.ReleaseRequest;
import dev.tenure.v1.ReleaseResponse;
import dev.tenure.v1.WatchLeaseRequest;
import dev.tenure.v1.WatchLeaseResponse;
import io.grpc.Server;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * MISSED events (a watch that did not see every change of a name) against a scripted gRPC server
 * on 127.0.0.1: the shared loss watch ends a session, a semaphore slot or a group whose own token a
 * MISSED names ({@link Session.LossReason#MISSED}), and only then; a watch passes MISSED on with
 * its missed_after_revision; the observer reports a MISSED change and the elector's term ends.
 */
class MissedTest {
  private static final Duration TTL = Duration.ofSeconds(30);

  /** A MISSED of {@code name} for {@code token} (0: unknown) at {@code revision}, after 10. */
  private static LeaseEvent missed(String name, long token, long revision, int slot) {
    return LeaseEvent.newBuilder()
        .setType(EventType.EVENT_TYPE_MISSED)
        .setName(name)
        .setFencingToken(token)
        .setRevision(revision)
        .setSlot(slot)
        .setMissedAfterRevision(10)
        .build();
  }

  private static LeaseEvent revoked(String name, long token, long revision, int slot) {
    return LeaseEvent.newBuilder()
        .setType(EventType.EVENT_TYPE_REVOKED)
        .setName(name)
        .setFencingToken(token)
        .setRevision(revision)
        .setSlot(slot)
        .build();
  }

  private static Lease lease(String name, String holder, long token, int slot) {
    return Lease.newBuilder()
        .setName(name)
        .setHolder(holder)
        .setFencingToken(token)
        .setRevision(token)
        .setSlot(slot)
        .setTtl(com.google.protobuf.Duration.newBuilder().setSeconds(TTL.toSeconds()))
        .build();
  }

  /**
   * A scripted Tenure: grants the first Acquire (token 10 at revision 10; slot 2 for a semaphore)
   * or AcquireGroup ("g.a" token 10, "g.b" token 11); every WatchLease sends their snapshot,
   * SNAPSHOT_COMPLETE, then {@code live}, and stays open. Later Acquires are never answered (a held
   * election). Observe sends {@code changes} and stays open.
   */
  private static final class Fake implements AutoCloseable {
    final Server server;
    final String target;
    private final List<LeaseEvent> live;
    private final List<ObserveResponse> changes;
    private volatile List<LeaseEvent> snapshot = List.of();
    private final AtomicInteger acquires = new AtomicInteger();

    Fake(List<LeaseEvent> live, List<ObserveResponse> changes) throws Exception {
      this.live = live;
      this.changes = changes;
      server =
          NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
              .addService(new Leases())
              .addService(new Elections())
              .build()
              .start();
      target = "127.0.0.1:" + server.getPort();
    }

    private final class Leases extends LeaseServiceGrpc.LeaseServiceImplBase {
      @Override
      public void acquire(AcquireRequest request, StreamObserver<AcquireResponse> out) {
        if (acquires.incrementAndGet() > 1) {
          return; // held: never answered (the caller gives up)
        }
        int slot = request.getLimit() > 0 ? 2 : 0;
        Lease l = lease(request.getName(), request.getHolder(), 10, slot);
        snapshot = List.of(current(l));
        out.onNext(AcquireResponse.newBuilder().setLease(l).setLeaseKey("k".repeat(16)).build());
        out.onCompleted();
      }

      @Override
      public void acquireGroup(
          AcquireGroupRequest request, StreamObserver<AcquireGroupResponse> out) {
        List<Lease> leases =
            List.of(lease("g.a", request.getHolder(), 10, 0), lease("g.b", request.getHolder(), 11, 0));
        snapshot = leases.stream().map(MissedTest::current).toList();
        out.onNext(
            AcquireGroupResponse.newBuilder()
                .addAllLeases(leases)
                .setLeaseKey("k".repeat(16))
                .build());
        out.onCompleted();
      }

      @Override
      public void release(ReleaseRequest request, StreamObserver<ReleaseResponse> out) {
        out.onNext(ReleaseResponse.newBuilder().setRevision(30).build());
        out.onCompleted();
      }

      @Override
      public void watchLease(WatchLeaseRequest request, StreamObserver<WatchLeaseResponse> out) {
        List<LeaseEvent> events = new ArrayList<>(snapshot);
        events.add(
            LeaseEvent.newBuilder()
                .setType(EventType.EVENT_TYPE_SNAPSHOT_COMPLETE)
                .setRevision(11)
                .build());
        events.addAll(live);
        for (LeaseEvent e : events) {
          out.onNext(WatchLeaseResponse.newBuilder().setEvent(e).build());
        }
      }
    }

    private final class Elections extends ElectionServiceGrpc.ElectionServiceImplBase {
      @Override
      public void observe(ObserveRequest request, StreamObserver<ObserveResponse> out) {
        changes.forEach(out::onNext);
      }
    }

    @Override
    public void close() throws Exception {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  private static LeaseEvent current(Lease l) {
    return LeaseEvent.newBuilder()
        .setType(EventType.EVENT_TYPE_CURRENT)
        .setName(l.getName())
        .setRevision(l.getRevision())
        .setFencingToken(l.getFencingToken())
        .setSlot(l.getSlot())
        .setLease(l)
        .build();
  }

  private static LeaseClient client(Fake fake) {
    return LeaseClient.connect(fake.target, ConnectOptions.builder().keepAliveStream(false).build());
  }

  /**
   * Each case: the live events, whether the session is a semaphore slot, and the loss reason. A
   * MISSED that does not name the session's holding leaves the REVOKED after it to end the session
   * (a loss is final: the first reason is the one kept).
   */
  static Stream<Arguments> cases() {
    return Stream.of(
        Arguments.of("own token", List.of(missed("jobs.m", 10, 14, 0), revoked("jobs.m", 10, 20, 0)), false, Session.LossReason.MISSED),
        Arguments.of("another token", List.of(missed("jobs.m", 9, 14, 0), revoked("jobs.m", 10, 20, 0)), false, Session.LossReason.LEASE_ENDED),
        Arguments.of("no token", List.of(missed("jobs.m", 0, 14, 0), revoked("jobs.m", 10, 20, 0)), false, Session.LossReason.LEASE_ENDED),
        Arguments.of("another name", List.of(missed("jobs.x", 10, 14, 0), revoked("jobs.m", 10, 20, 0)), false, Session.LossReason.LEASE_ENDED),
        Arguments.of("own slot", List.of(missed("jobs.m", 10, 14, 2), revoked("jobs.m", 10, 20, 2)), true, Session.LossReason.MISSED),
        Arguments.of("another slot", List.of(missed("jobs.m", 10, 14, 1), revoked("jobs.m", 10, 20, 2)), true, Session.LossReason.LEASE_ENDED));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void lossWatchEndsTheSessionOnlyForAMissedOfItsToken(
      String what, List<LeaseEvent> live, boolean semaphore, Session.LossReason reason)
      throws Exception {
    try (Fake fake = new Fake(live, List.of());
        LeaseClient client = client(fake)) {
      Session session =
          semaphore
              ? new Semaphore(client, "jobs.m", 3).acquire("me", TTL, Duration.ZERO)
              : client.acquire("jobs.m", "me", TTL);
      Session.Loss loss = Await.get(Await.loss(session));
      assertEquals(reason, loss.getReason(), what);
      assertFalse(session.isHeld());
      LeaseEvent event = loss.getEvent().orElseThrow();
      if (reason == Session.LossReason.MISSED) {
        assertEquals(EventType.EVENT_TYPE_MISSED, event.getType());
        assertEquals(10, event.getMissedAfterRevision());
        assertFalse(session.release(), "lost: nothing to release");
      } else {
        assertEquals(EventType.EVENT_TYPE_REVOKED, event.getType());
      }
    }
  }

  @Test
  void aGroupIsLostWhenAMissedNamesAMembersToken() throws Exception {
    for (Object[] c :
        new Object[][] {
          {List.of(missed("g.b", 11, 14, 0), revoked("g.a", 10, 20, 0)), Session.LossReason.MISSED},
          {List.of(missed("g.b", 10, 14, 0), revoked("g.a", 10, 20, 0)), Session.LossReason.LEASE_ENDED},
        }) {
      @SuppressWarnings("unchecked")
      List<LeaseEvent> live = (List<LeaseEvent>) c[0];
      try (Fake fake = new Fake(live, List.of());
          LeaseClient client = client(fake)) {
        GroupSession group = client.acquireGroup(List.of("g.a", "g.b"), "me", TTL, Duration.ZERO);
        BlockingQueue<Session.Loss> losses = new LinkedBlockingQueue<>();
        group.addLossListener(losses::add);
        Session.Loss loss = losses.poll(Await.BOUND.toSeconds(), TimeUnit.SECONDS);
        assertEquals(c[1], loss == null ? null : loss.getReason());
      }
    }
  }

  @Test
  void aWatchPassesMissedOnWithItsRevisions() throws Exception {
    LeaseEvent missed =
        LeaseEvent.newBuilder()
            .setType(EventType.EVENT_TYPE_MISSED)
            .setName("a")
            .setHolder("h")
            .setFencingToken(5)
            .setRevision(9)
            .setMissedAfterRevision(5)
            .build();
    LeaseEvent acquired =
        LeaseEvent.newBuilder()
            .setType(EventType.EVENT_TYPE_ACQUIRED)
            .setName("a")
            .setFencingToken(9)
            .setRevision(9)
            .build();
    try (Fake fake = new Fake(List.of(missed, acquired), List.of());
        LeaseClient client = client(fake);
        LeaseWatch watch = client.watch("a", EventType.EVENT_TYPE_ACQUIRED)) {
      assertEquals(EventType.EVENT_TYPE_SNAPSHOT_COMPLETE, watch.next().getType());
      assertEquals(missed, watch.next());
      LeaseEvent next = watch.next();
      assertEquals(EventType.EVENT_TYPE_ACQUIRED, next.getType());
      assertEquals(0, next.getMissedAfterRevision());
    }
  }

  @Test
  void aLeaderWhoseTermIsMissedStopsAndTheObserverSeesTheMissedChange() throws Exception {
    Leadership leadership =
        Leadership.newBuilder()
            .setName("jobs.m")
            .setHolder("node-a")
            .setValue("v")
            .setFencingToken(10)
            .setRevision(10)
            .build();
    List<ObserveResponse> changes =
        List.of(
            ObserveResponse.newBuilder()
                .setType(ChangeType.CHANGE_TYPE_CURRENT)
                .setLeader(leadership)
                .setRevision(10)
                .build(),
            ObserveResponse.newBuilder()
                .setType(ChangeType.CHANGE_TYPE_MISSED)
                .setEndedHolder("node-a")
                .setEndedFencingToken(10)
                .setRevision(14)
                .build());
    BlockingQueue<Session.Loss> termLosses = new LinkedBlockingQueue<>();
    BlockingQueue<String> stopped = new LinkedBlockingQueue<>();
    BlockingQueue<Election.Leader> leaders = new LinkedBlockingQueue<>();
    try (Fake fake = new Fake(List.of(missed("jobs.m", 10, 14, 0)), changes);
        LeaseClient client = client(fake)) {
      LeaderElector elector =
          LeaderElector.start(
              client,
              "jobs.m",
              "node-a",
              "v",
              TTL,
              new LeaderElector.Listener() {
                @Override
                public void takeLeadership(Session term) throws InterruptedException {
                  try {
                    Thread.sleep(Await.BOUND.toMillis());
                  } finally {
                    term.getLoss().ifPresent(termLosses::add);
                  }
                }

                @Override
                public void stoppedLeading() {
                  stopped.add("node-a");
                }

                @Override
                public void newLeader(Election.Leader leader) {
                  leaders.add(leader);
                }
              });
      try {
        assertEquals("node-a", stopped.poll(Await.BOUND.toSeconds(), TimeUnit.SECONDS));
        Session.Loss loss = termLosses.poll(Await.BOUND.toSeconds(), TimeUnit.SECONDS);
        assertEquals(Session.LossReason.MISSED, loss == null ? null : loss.getReason());
        assertEquals(
            new Election.Leader("node-a", "v", 10),
            leaders.poll(Await.BOUND.toSeconds(), TimeUnit.SECONDS));
        Election.Leader unknown = leaders.poll(Await.BOUND.toSeconds(), TimeUnit.SECONDS);
        assertEquals(new Election.Leader("", "", 0, true, "node-a", 10), unknown);
        assertTrue(unknown.missed());
        assertFalse(unknown.present());
      } finally {
        elector.close();
      }
    }
  }
}
