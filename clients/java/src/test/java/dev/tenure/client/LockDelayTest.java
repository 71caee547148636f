package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.GetLeaseResponse;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** The lock-delay option and the waiting count, against a real Tenure. */
@Tag("integration")
class LockDelayTest {
  private static final Duration TTL = Duration.ofSeconds(10);

  private static TenureServer server;
  private static LeaseClient client;
  private static LeaseClient other;

  @BeforeAll
  static void start() throws Exception {
    server = TenureServer.start();
    client = LeaseClient.connect(server.target());
    other = LeaseClient.connect(server.target());
  }

  @AfterAll
  static void stop() throws Exception {
    for (AutoCloseable c : new AutoCloseable[] {client, other, server}) {
      if (c != null) {
        c.close();
      }
    }
  }

  private static int counter;

  private static synchronized String name() {
    return "java.delay.p" + ProcessHandle.current().pid() + "-" + (++counter);
  }

  private static Session withDelay(String name, String holder) {
    return client.acquire(
        AcquireOptions.builder(name, holder).ttl(TTL).lockDelay(Duration.ofSeconds(1)).build());
  }

  @Test
  void afterARevokeTheNameIsRefusedForTheDelayThenWaitersGetIt() throws Exception {
    String name = name();
    Session held = withDelay(name, "first");
    assertEquals(1, client.getLease(name).getLockDelay().getSeconds());
    CompletableFuture<Session.Loss> loss = Await.loss(held);
    client.revokeLease(name, "test: a stalled holder");
    assertEquals(Session.LossReason.LEASE_ENDED, Await.get(loss).getReason());

    TenureException refused =
        assertThrows(TenureException.class, () -> other.acquire(name, "second", TTL));
    assertEquals(ErrorReason.LEASE_HELD, refused.getReason());
    assertEquals("LOCK_DELAY", refused.getMetadata().get("state"), refused.getMetadata().toString());
    try (Session next = other.acquire(name, "second", TTL, Duration.ofSeconds(30))) {
      assertTrue(next.isHeld());
      assertTrue(next.getFencingToken() > held.getFencingToken());
    }
  }

  @Test
  void afterAReleaseTheNameIsFreeAtOnce() {
    String name = name();
    Session held = withDelay(name, "first");
    assertTrue(held.release());
    try (Session next = other.acquire(name, "second", TTL)) {
      assertTrue(next.isHeld());
    }
  }

  @Test
  void limitAndLockDelayDoNotCombine() {
    assertThrows(
        IllegalArgumentException.class,
        () -> AcquireOptions.builder("n", "h").limit(2).lockDelay(Duration.ofSeconds(1)).build());
  }

  @Test
  void inspectCountsTheQueuedWaiters() throws Exception {
    String name = name();
    Session held = client.acquire(name, "first", TTL);
    CompletableFuture<Session> waiter =
        CompletableFuture.supplyAsync(() -> other.acquire(name, "second", TTL, Duration.ofSeconds(60)));
    Await.until("one waiter queued for " + name, () -> client.inspect(name).getWaiting() == 1);
    GetLeaseResponse state = client.inspect(name);
    assertEquals("first", state.getLease().getHolder());
    assertTrue(held.release());
    try (Session next = waiter.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS)) {
      assertEquals("second", next.getHolder());
    }
  }
}
