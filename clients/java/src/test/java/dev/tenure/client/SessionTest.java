package dev.tenure.client;

import static dev.tenure.v1.ErrorReason.INVALID_NAME;
import static dev.tenure.v1.ErrorReason.LEASE_HELD;
import static dev.tenure.v1.ErrorReason.LEASE_NOT_FOUND;
import static dev.tenure.v1.ErrorReason.LEASE_NOT_HELD;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.ListLeasesResponse;
import dev.tenure.v1.Lease;
import dev.tenure.v1.ReleaseRequest;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Sessions against a real Tenure server: the round trip, races, fencing, loss and errors. */
@Tag("integration")
class SessionTest {
  private static final Duration ONE_SECOND = Duration.ofSeconds(1);
  private static final Duration TWO_SECONDS = Duration.ofSeconds(2);

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

  @Test
  void acquireRenewReleaseRoundTrip() throws Exception {
    Session session = client.acquire("round.trip", "holder-a", ONE_SECOND);
    BlockingQueue<Lease> renewals = Await.renewals(session);
    assertTrue(session.isHeld());
    assertEquals("round.trip", session.getName());
    assertEquals("holder-a", session.getHolder());
    assertEquals(ONE_SECOND, session.getGrantedTtl());
    assertTrue(session.getFencingToken() > 0);
    assertEquals(session.getFencingToken(), session.getRevision(), "acquire's revision is the token");
    assertEquals(64, session.getLeaseKey().length(), "a minted 32-byte hex key");
    assertTrue(session.getTimeLeft().compareTo(ONE_SECOND) < 0, "the margin comes off the TTL");

    Lease stored = client.getLease("round.trip");
    assertEquals("holder-a", stored.getHolder());
    assertEquals(session.getFencingToken(), stored.getFencingToken());

    Lease renewed = Await.renewal(renewals);
    assertTrue(renewed.getRevision() > session.getFencingToken(), "a renewal writes a new revision");
    assertEquals(session.getFencingToken(), renewed.getFencingToken());
    assertTrue(session.getRevision() >= renewed.getRevision());
    assertTrue(session.isHeld());

    assertTrue(session.release(), "releasing a held lease reports true");
    assertFalse(session.isHeld());
    assertTrue(session.getLoss().isEmpty(), "a release is not a loss");
    TenureException gone = assertThrows(TenureException.class, () -> client.getLease("round.trip"));
    assertEquals(LEASE_NOT_FOUND, gone.getReason());
    assertEquals(Status.Code.NOT_FOUND, gone.getStatusCode());
    assertFalse(session.release(), "a second release reports 'was not held'");
  }

  @Test
  void tryWithResourcesReleases() {
    try (Session session = client.acquire("scoped.lease", "scoped", TWO_SECONDS)) {
      assertTrue(session.isHeld());
      assertEquals("scoped", client.getLease("scoped.lease").getHolder());
    }
    TenureException gone = assertThrows(TenureException.class, () -> client.getLease("scoped.lease"));
    assertEquals(LEASE_NOT_FOUND, gone.getReason());
  }

  @Test
  void racingSessionsOneWins() throws Exception {
    int racers = 4;
    ExecutorService pool = Executors.newFixedThreadPool(racers);
    CountDownLatch start = new CountDownLatch(1);
    List<Future<Session>> results = new ArrayList<>();
    try {
      for (int i = 0; i < racers; i++) {
        LeaseClient via = i % 2 == 0 ? client : other;
        String holder = "racer-" + i;
        results.add(
            pool.submit(
                () -> {
                  start.await();
                  return via.acquire("race.one", holder, TWO_SECONDS);
                }));
      }
      start.countDown();
      List<Session> winners = new ArrayList<>();
      List<TenureException> losers = new ArrayList<>();
      for (Future<Session> result : results) {
        try {
          winners.add(result.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS));
        } catch (java.util.concurrent.ExecutionException e) {
          losers.add((TenureException) e.getCause());
        }
      }
      assertEquals(1, winners.size(), "exactly one racer wins");
      Session winner = winners.get(0);
      assertTrue(winner.isHeld());
      assertEquals(racers - 1, losers.size());
      for (TenureException loser : losers) {
        assertEquals(LEASE_HELD, loser.getReason());
        assertEquals(Status.Code.FAILED_PRECONDITION, loser.getStatusCode());
        assertEquals(winner.getHolder(), loser.getHolder().orElseThrow());
        assertEquals(OptionalLong.of(winner.getFencingToken()), loser.getFencingToken());
      }
      winner.release();
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void fencingTokenIsStableAcrossRenewalsAndGreaterForTheNextHolder() throws Exception {
    Session first = client.acquire("fence.one", "first", ONE_SECOND);
    long token = first.getFencingToken();
    BlockingQueue<Lease> renewals = Await.renewals(first);
    Lease r1 = Await.renewal(renewals);
    Lease r2 = Await.renewal(renewals);
    assertTrue(r2.getRevision() > r1.getRevision());
    assertEquals(token, r1.getFencingToken());
    assertEquals(token, r2.getFencingToken());
    assertEquals(token, first.getFencingToken());
    first.release();

    Session second = other.acquire("fence.one", "second", ONE_SECOND);
    assertTrue(second.getFencingToken() > token, "the next holder's token is greater");

    FencingGuard store = new FencingGuard();
    assertTrue(store.accept("row-1", token));
    assertTrue(store.accept("row-1", second.getFencingToken()));
    assertFalse(store.accept("row-1", token), "the old holder's write is fenced off");
    second.release();
  }

  @Test
  void stalledHolderLosesTheLeaseWhenItIsTakenOverAfterExpiry() throws Exception {
    Session stalled = client.acquire("stall.one", "stalled", ONE_SECOND);
    CompletableFuture<Session.Loss> loss = Await.loss(stalled);
    stalled.pauseRenewals();

    // The successor waits for the lease; it gets it once the stalled holding expires.
    Session successor =
        other.acquire("stall.one", "successor", TWO_SECONDS, Await.BOUND.dividedBy(2));
    assertFalse(stalled.isHeld(), "the stalled holder must not believe it holds a taken lease");
    assertTrue(successor.isHeld(), "a waited acquire still has a fresh safe deadline");
    assertTrue(successor.getFencingToken() > stalled.getFencingToken());

    Session.Loss lost = Await.get(loss);
    assertEquals(Session.LossReason.DEADLINE_PASSED, lost.getReason());
    assertTrue(stalled.getLoss().isPresent());

    // The stalled holder wakes up: its release reports "was not held" (the server refuses it),
    // not an error, and leaves the successor alone.
    assertFalse(stalled.release());
    assertEquals("successor", client.getLease("stall.one").getHolder());
    successor.release();
  }

  @Test
  void renewalRefusedWithLeaseNotHeldSignalsLossAtOnce() throws Exception {
    // Without the loss watch, so the refused renewal is what notices (the next test has the watch).
    LeaseClient client =
        LeaseClient.connect(server.target(), ConnectOptions.builder().lossWatch(false).build());
    Session victim = client.acquire("revoke.one", "victim", TWO_SECONDS);
    CompletableFuture<Session.Loss> loss = Await.loss(victim);
    // Someone else with the key (a duplicate process, an operator's tool) releases it.
    other
        .blockingStub()
        .release(
            ReleaseRequest.newBuilder()
                .setName("revoke.one")
                .setExpectedRevision(victim.getRevision())
                .setLeaseKey(victim.getLeaseKey())
                .build());

    Session.Loss lost = Await.get(loss);
    assertEquals(Session.LossReason.NOT_HELD, lost.getReason());
    assertEquals(LEASE_NOT_HELD, lost.getCause().orElseThrow().getReason());
    assertFalse(victim.isHeld());
    assertEquals(lost, victim.getLoss().orElseThrow());

    // A listener added after the loss hears of it too.
    assertEquals(lost, Await.get(Await.loss(victim)));
    victim.close();
    client.close();
  }

  @Test
  void sharedWatchEndsARevokedSessionBeforeItsNextRenewal() throws Exception {
    // Renewal at 80% of 30 s (24 s): only the watch can explain a loss within the await's bound.
    Session victim =
        client.acquire(
            AcquireOptions.builder("watched.victim", "victim")
                .ttl(Duration.ofSeconds(30))
                .renewFraction(0.8)
                .build());
    // A second session under the same prefix widens the shared watch to a subtree.
    Session bystander = client.acquire("watched.bystander", "bystander", Duration.ofSeconds(30));
    CompletableFuture<Session.Loss> loss = Await.loss(victim);
    long start = System.nanoTime();
    other.revokeLease("watched.victim", "test revoke");
    Session.Loss lost = Await.get(loss);
    long micros = (System.nanoTime() - start) / 1000;
    System.out.printf("revoke-to-loss: %.1f ms%n", micros / 1000.0);
    assertEquals(Session.LossReason.LEASE_ENDED, lost.getReason());
    assertFalse(victim.isHeld());
    assertFalse(victim.release(), "release after loss reports 'was not held'");
    assertTrue(bystander.isHeld(), "the other session is untouched");
    assertTrue(bystander.release());
  }

  @Test
  void errorsCarryTypedReasons() throws Exception {
    TenureException badName =
        assertThrows(TenureException.class, () -> client.acquire(".bad.", "x", ONE_SECOND));
    assertEquals(INVALID_NAME, badName.getReason());
    assertEquals(Status.Code.INVALID_ARGUMENT, badName.getStatusCode());
    assertFalse(badName.isRetryable());

    try (Session holder = client.acquire("errors.held", "owner", TWO_SECONDS)) {
      TenureException held =
          assertThrows(TenureException.class, () -> other.acquire("errors.held", "x", ONE_SECOND));
      assertEquals(LEASE_HELD, held.getReason());
      assertEquals("owner", held.getHolder().orElseThrow());
      assertEquals(OptionalLong.of(holder.getFencingToken()), held.getFencingToken());
      assertEquals("2", held.getMetadata().get("ttl_seconds"));

      TenureException waited =
          assertThrows(
              TenureException.class,
              () -> other.acquire("errors.held", "x", ONE_SECOND, Duration.ofMillis(300)));
      assertEquals(LEASE_HELD, waited.getReason(), "a wait that runs out fails with LEASE_HELD");
      assertTrue(holder.isHeld());
    }

    TenureException missing =
        assertThrows(TenureException.class, () -> client.getLease("errors.missing"));
    assertEquals(LEASE_NOT_FOUND, missing.getReason());
  }

  @Test
  void unreachableServerIsAnUnknownRetryableError() throws Exception {
    int port;
    try (java.net.ServerSocket socket =
        new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      port = socket.getLocalPort();
    }
    try (LeaseClient nowhere = LeaseClient.connect("127.0.0.1:" + port)) {
      TenureException e =
          assertThrows(TenureException.class, () -> nowhere.acquire("x.y", "z", ONE_SECOND));
      assertEquals(ErrorReason.ERROR_REASON_UNSPECIFIED, e.getReason());
      assertEquals(Status.Code.UNAVAILABLE, e.getStatusCode());
      assertTrue(e.isRetryable());
      assertTrue(
          e.getMessage().startsWith("tenure at 127.0.0.1:" + port + ": Acquire: UNAVAILABLE"),
          e.getMessage());
      assertTrue(e.getMessage().contains("Connection refused"), "names the cause: " + e.getMessage());
    }
  }

  @Test
  void adminHelpersListAndRevokeAndReleaseAfterLossReportsFalse() {
    Session session = client.acquire("admin.revoked", "victim", Duration.ofSeconds(30));
    ListLeasesResponse page = other.listLeases("admin.", 0, "");
    assertEquals(1, page.getLeasesCount());
    assertEquals(session.getFencingToken(), page.getLeases(0).getFencingToken());
    long revision = other.revokeLease("admin.revoked", "test revoke");
    assertTrue(revision > session.getFencingToken());
    assertFalse(session.release(), "release after a revoke reports 'was not held', no error");
    TenureException none =
        assertThrows(TenureException.class, () -> other.revokeLease("admin.nobody", "test revoke"));
    assertEquals(LEASE_NOT_FOUND, none.getReason());
    assertTrue(none.getMessage().contains(": RevokeLease: LEASE_NOT_FOUND"), none.getMessage());
  }
}
