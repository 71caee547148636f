package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.GetLeaseResponse;
import dev.tenure.v1.ReleaseRequest;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** The Semaphore helper against two Tenure replicas on one bucket. */
@Tag("integration")
class SemaphoreTest {
  private static final Duration TTL = Duration.ofSeconds(10);

  private static NatsServer nats;
  private static TenureServer first;
  private static TenureServer second;
  private static final List<LeaseClient> clients = new ArrayList<>();

  @BeforeAll
  static void start() throws Exception {
    nats = NatsServer.start();
    first = TenureServer.startShared(0, nats.url());
    second = TenureServer.startShared(0, nats.url());
  }

  @AfterAll
  static void stop() throws Exception {
    for (LeaseClient c : clients) {
      c.close();
    }
    for (AutoCloseable c : new AutoCloseable[] {second, first, nats}) {
      if (c != null) {
        c.close();
      }
    }
  }

  /** A new client of replica {@code i % 2}. */
  private static synchronized LeaseClient client(int i) {
    LeaseClient c = LeaseClient.connect((i % 2 == 0 ? first : second).target());
    clients.add(c);
    return c;
  }

  private static int counter;

  private static synchronized String name() {
    return "java.sema.p" + ProcessHandle.current().pid() + "-" + (++counter);
  }

  @Test
  void sixClientsRacingForTwoSlotsNeverExceedTwoHolders() throws Exception {
    String name = name();
    int clientsCount = 6;
    int rounds = 3;
    AtomicInteger live = new AtomicInteger();
    AtomicInteger most = new AtomicInteger();
    Set<Long> tokens = ConcurrentHashMap.newKeySet();
    AtomicInteger holdings = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(clientsCount);
    try {
      List<Future<?>> done = new ArrayList<>();
      for (int i = 0; i < clientsCount; i++) {
        Semaphore sem = new Semaphore(client(i), name, 2);
        String holder = "racer-" + i;
        done.add(
            pool.submit(
                () -> {
                  for (int r = 0; r < rounds; r++) {
                    Session permit = sem.acquire(holder, TTL, Duration.ofSeconds(60));
                    int now = live.incrementAndGet();
                    most.accumulateAndGet(now, Math::max);
                    assertTrue(permit.isHeld());
                    assertTrue(permit.getSlot() == 1 || permit.getSlot() == 2, permit.toString());
                    assertTrue(tokens.add(permit.getFencingToken()), "token reused: " + permit);
                    holdings.incrementAndGet();
                    // The protected work: check the count again while holding.
                    most.accumulateAndGet(live.get(), Math::max);
                    live.decrementAndGet();
                    assertTrue(permit.release(), "release of a held permit: " + permit);
                  }
                  return null;
                }));
      }
      for (Future<?> f : done) {
        f.get(Await.BOUND.toSeconds() * 4, TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
    }
    assertTrue(most.get() <= 2, "saw " + most.get() + " holders of a semaphore of 2");
    assertEquals(clientsCount * rounds, holdings.get());
    assertEquals(clientsCount * rounds, tokens.size());
  }

  @Test
  void anotherLimitIsRefusedWithTheLimitInForce() {
    String name = name();
    try (Session held = new Semaphore(client(0), name, 2).acquire("a", TTL, Duration.ZERO)) {
      TenureException e =
          assertThrows(
              TenureException.class,
              () -> new Semaphore(client(1), name, 3).acquire("b", TTL, Duration.ZERO));
      assertEquals(ErrorReason.LIMIT_MISMATCH, e.getReason());
      assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatusCode());
      assertEquals("2", e.getMetadata().get("limit"));
      assertFalse(e.isRetryable());
      assertTrue(held.isHeld());
      GetLeaseResponse state = client(0).inspect(name);
      assertEquals(2, state.getLimit());
      assertEquals(1, state.getFreeSlots());
      assertEquals(1, state.getHoldersCount());
    }
  }

  @Test
  void otherHoldersComingAndGoingDoNotEndASessionButARevokeOfItsSlotDoes() throws Exception {
    String name = name();
    LeaseClient mine = client(0);
    Semaphore sem = new Semaphore(mine, name, 3);
    Session a = sem.acquire("a", TTL, Duration.ZERO);
    CompletableFuture<Session.Loss> aLoss = Await.loss(a);
    Session c = sem.acquire("c", TTL, Duration.ZERO);
    CompletableFuture<Session.Loss> cLoss = Await.loss(c);

    // Another client on the other replica takes the third slot and gives it back.
    Session b = new Semaphore(client(1), name, 3).acquire("b", TTL, Duration.ZERO);
    assertNotEquals(a.getSlot(), b.getSlot());
    assertTrue(b.release());

    // c's slot is released elsewhere (its key's other user): that RELEASED event of c's slot
    // comes after b's events on the loss watch's one ordered stream, so once c is lost, a's
    // session has seen b acquire and release, and c end.
    client(1)
        .blockingStub()
        .release(
            ReleaseRequest.newBuilder()
                .setName(name)
                .setSlot(c.getSlot())
                .setLeaseKey(c.getLeaseKey())
                .setExpectedRevision(c.getRevision())
                .build());
    assertEquals(Session.LossReason.LEASE_ENDED, Await.get(cLoss).getReason());
    assertTrue(a.isHeld(), "another holder's acquire or release ended " + a);
    assertFalse(aLoss.isDone());

    // A revoke of a's own slot ends it at once.
    revokeSlot(mine, name, a);
    assertEquals(Session.LossReason.LEASE_ENDED, Await.get(aLoss).getReason());
    assertFalse(a.isHeld());
    assertFalse(a.release(), "release after loss reports not held");
  }

  /**
   * Revokes {@code holding}'s slot. A server without RevokeLease.slot (it then looks for a plain
   * lease of the name: LEASE_NOT_FOUND) gets the slot released with the holding's key instead,
   * which ends it through the same loss-watch path (an event of its own slot).
   */
  private static void revokeSlot(LeaseClient via, String name, Session holding) {
    try {
      via.revokeLease(name, holding.getSlot(), "test: end this holder");
    } catch (TenureException e) {
      if (e.getReason() != ErrorReason.LEASE_NOT_FOUND) {
        throw e;
      }
      via.blockingStub()
          .release(
              ReleaseRequest.newBuilder()
                  .setName(name)
                  .setSlot(holding.getSlot())
                  .setLeaseKey(holding.getLeaseKey())
                  .setExpectedRevision(holding.getRevision())
                  .build());
    }
  }
}
