package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.Lease;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Handing a lease over against a real Tenure: Session.transfer and LeaderElector.resignTo. */
@Tag("integration")
class TransferTest {
  private static final Duration TTL = Duration.ofSeconds(10);
  private static final Duration WAIT = Duration.ofSeconds(30);

  private static TenureServer server;
  private static LeaseClient client;
  private static LeaseClient other;

  @BeforeAll
  static void startServer() throws Exception {
    server = TenureServer.start();
    client = LeaseClient.connect(server.target());
    other = LeaseClient.connect(server.target());
  }

  @AfterAll
  static void stopServer() throws Exception {
    if (client != null) {
      client.close();
    }
    if (other != null) {
      other.close();
    }
    if (server != null) {
      server.close();
    }
  }

  private static int counter;

  private static synchronized String name() {
    return "java.transfer.p" + ProcessHandle.current().pid() + "-" + (++counter);
  }

  /** Polls GetLease until at least one acquire waits for {@code name}: queueing has no event. */
  private static void awaitWaiter(String name) throws InterruptedException {
    Await.until("a waiter queued for " + name, () -> client.inspect(name).getWaiting() >= 1);
  }

  private static <T> T next(BlockingQueue<T> queue, String what) throws InterruptedException {
    T v = queue.poll(Await.BOUND.toMillis(), TimeUnit.MILLISECONDS);
    assertNotNull(v, "no " + what + " within " + Await.BOUND);
    return v;
  }

  @Test
  void transferHandsTheHoldingToAWaitingAcquire() throws Exception {
    String name = name();
    Session giver = client.acquire(name, "giver", Duration.ofSeconds(30));
    AtomicBoolean listenerCalled = new AtomicBoolean();
    giver.addLossListener(loss -> listenerCalled.set(true));

    // Nobody waits: NO_WAITER (permanent), and the session is unchanged.
    TenureException none = assertThrows(TenureException.class, () -> giver.transfer(null));
    assertEquals(ErrorReason.NO_WAITER, none.getReason());
    assertFalse(none.isRetryable());
    assertTrue(giver.isHeld());
    assertTrue(giver.getLoss().isEmpty());

    CompletableFuture<Session> waiting =
        CompletableFuture.supplyAsync(() -> other.acquire(name, "waiter", TTL, WAIT));
    awaitWaiter(name);
    // A waiter, but not the one named: NO_WAITER; still held.
    assertEquals(
        ErrorReason.NO_WAITER,
        assertThrows(TenureException.class, () -> giver.transfer("someone-else")).getReason());
    assertTrue(giver.isHeld());
    assertEquals("giver", client.inspect(name).getLease().getHolder());

    Lease lease = giver.transfer("waiter");
    assertEquals("waiter", lease.getHolder());
    assertTrue(lease.getFencingToken() > giver.getFencingToken());
    Session waiter = waiting.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS);
    assertEquals(lease.getFencingToken(), waiter.getFencingToken());
    assertTrue(waiter.isHeld());

    // The giver's session ended as a release: not held, no loss, no listener, release false.
    assertFalse(giver.isHeld());
    assertTrue(giver.getLoss().isEmpty(), () -> "loss " + giver.getLoss());
    assertFalse(giver.release());
    assertEquals(
        ErrorReason.LEASE_NOT_HELD,
        assertThrows(TenureException.class, () -> giver.transfer(null)).getReason());

    // The recipient hands over to the head of the queue.
    CompletableFuture<Session> thirdWaiting =
        CompletableFuture.supplyAsync(() -> client.acquire(name, "third", TTL, WAIT));
    awaitWaiter(name);
    Lease lease3 = waiter.transfer(null);
    try (Session third = thirdWaiting.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS)) {
      assertEquals("third", lease3.getHolder());
      assertEquals(lease3.getFencingToken(), third.getFencingToken());
      assertTrue(lease3.getFencingToken() > waiter.getFencingToken());
      assertTrue(waiter.getLoss().isEmpty());
      assertEquals("third", client.inspect(name).getLease().getHolder());
      assertTrue(third.release());
    }
    assertFalse(listenerCalled.get(), "a loss listener was called for a hand-over");
  }

  /** A participant whose callbacks write to a log shared by all. */
  static final class Candidate implements LeaderElector.Listener {
    final String identity;
    final List<String> log;
    final BlockingQueue<Long> started = new LinkedBlockingQueue<>();

    Candidate(String identity, List<String> log) {
      this.identity = identity;
      this.log = log;
    }

    @Override
    public void takeLeadership(Session term) throws InterruptedException {
      log.add(identity + " started " + term.getFencingToken());
      started.add(term.getFencingToken());
      try {
        Thread.sleep(Long.MAX_VALUE); // lead until interrupted
      } finally {
        log.add(identity + " work ended");
      }
    }

    @Override
    public void stoppedLeading() {
      log.add(identity + " stopped");
    }
  }

  @Test
  void resignToStopsTheLeaderBeforeHandingOver() throws Exception {
    String name = name();
    List<String> log = Collections.synchronizedList(new ArrayList<>());
    Candidate a = new Candidate("node-a", log);
    Candidate b = new Candidate("node-b", log);
    try (LeaderElector ea = LeaderElector.start(client, name, "node-a", "node-a:5432", TTL, a)) {
      long tokenA = next(a.started, "node-a's term");
      try (LeaderElector eb = LeaderElector.start(other, name, "node-b", "node-b:5432", TTL, b)) {
        awaitWaiter(name);
        assertEquals(
            ErrorReason.LEASE_NOT_HELD,
            assertThrows(TenureException.class, () -> eb.resignTo("node-a")).getReason());

        Election.Leader successor = ea.resignTo("node-b");
        assertEquals("node-b", successor.identity());
        assertEquals("node-b:5432", successor.value());
        assertTrue(successor.fencingToken() > tokenA);
        // node-a had stopped when resignTo returned.
        assertEquals(
            List.of("node-a started " + tokenA, "node-a work ended", "node-a stopped"),
            snapshot(log).subList(0, 3));
        long tokenB = next(b.started, "node-b's term");
        assertEquals(successor.fencingToken(), tokenB);
        assertEquals(
            List.of(
                "node-a started " + tokenA,
                "node-a work ended",
                "node-a stopped",
                "node-b started " + tokenB),
            snapshot(log).subList(0, 4));

        // node-a campaigns again; a successor that does not wait gets NO_WAITER and node-b
        // leads the same term again.
        awaitWaiter(name);
        assertEquals(
            ErrorReason.NO_WAITER,
            assertThrows(TenureException.class, () -> eb.resignTo("node-c")).getReason());
        assertEquals(tokenB, next(b.started, "node-b leading again"));
        Election.Leader now = new Election(client, name).leader();
        assertEquals("node-b", now.identity());
        assertEquals(tokenB, now.fencingToken());

        // To the next candidate: node-a, with a greater token.
        Election.Leader nextLeader = eb.resignTo(null);
        long tokenA2 = next(a.started, "node-a's second term");
        assertEquals("node-a", nextLeader.identity());
        assertEquals(tokenA2, nextLeader.fencingToken());
        assertTrue(tokenA2 > tokenB);
        List<String> all = snapshot(log);
        assertEquals(
            List.of(
                "node-b started " + tokenB,
                "node-b work ended",
                "node-b stopped",
                "node-b started " + tokenB,
                "node-b work ended",
                "node-b stopped",
                "node-a started " + tokenA2),
            all.subList(3, all.size()));
      }
    }
  }

  private static List<String> snapshot(List<String> log) {
    synchronized (log) {
      return new ArrayList<>(log);
    }
  }
}
