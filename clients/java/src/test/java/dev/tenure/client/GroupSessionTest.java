package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.EventType;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LeaseEvent;
import io.grpc.Status;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Group sessions (AcquireGroup / RenewGroup / ReleaseGroup) against a real Tenure. A server
 * without groups answers UNIMPLEMENTED: the tests are then skipped (run them with TENURE_BIN
 * pointing at a server with groups).
 */
@Tag("integration")
class GroupSessionTest {
  private static final Duration TTL = Duration.ofSeconds(3);

  private static TenureServer server;
  private static LeaseClient client;
  private static LeaseClient other;
  private static LeaseClient unwatched;

  @BeforeAll
  static void start() throws Exception {
    server = TenureServer.start();
    client = LeaseClient.connect(server.target());
    other = LeaseClient.connect(server.target());
    unwatched =
        LeaseClient.connect(server.target(), ConnectOptions.builder().lossWatch(false).build());
    try (GroupSession probe =
        client.acquireGroup(List.of(name(), name()), "probe", TTL, Duration.ZERO)) {
      assertTrue(probe.isHeld());
    } catch (TenureException e) {
      // In CI nothing passes by skipping: the exception fails the class.
      if ("true".equals(System.getenv("CI"))) {
        throw e;
      }
      Assumptions.assumeFalse(
          e.getStatusCode() == Status.Code.UNIMPLEMENTED,
          "this Tenure has no AcquireGroup yet: " + e.getMessage());
      throw e;
    }
  }

  @AfterAll
  static void stop() throws Exception {
    for (AutoCloseable c : new AutoCloseable[] {client, other, unwatched, server}) {
      if (c != null) {
        c.close();
      }
    }
  }

  private static int counter;

  private static synchronized String name() {
    return "java.group.p" + ProcessHandle.current().pid() + "-" + (++counter);
  }

  private static CompletableFuture<Session.Loss> loss(GroupSession group) {
    CompletableFuture<Session.Loss> future = new CompletableFuture<>();
    group.addLossListener(future::complete);
    return future;
  }

  @Test
  void aGroupIsHeldRenewedAndReleasedAsAWholeWithATokenPerMember() throws Exception {
    List<String> names = List.of(name(), name(), name());
    try (GroupSession group = client.acquireGroup(names, "g", TTL, Duration.ZERO);
        LeaseWatch watch = client.watch(names.get(2), EventType.EVENT_TYPE_RENEWED)) {
      assertTrue(group.isHeld());
      assertEquals(names, group.getNames());
      assertEquals(3, new HashSet<>(group.getFencingTokens().values()).size());
      for (String n : names) {
        Lease lease = client.getLease(n);
        assertEquals(group.getFencingToken(n), lease.getFencingToken());
        assertEquals(names, lease.getGroupList());
      }
      // A renewal of the group renews its last member too, with the same token.
      LeaseEvent renewed =
          Await.event(
              watch, EventType.EVENT_TYPE_RENEWED, EventType.EVENT_TYPE_SNAPSHOT_COMPLETE);
      assertEquals(group.getFencingToken(names.get(2)), renewed.getFencingToken());
      assertTrue(group.isHeld());
      assertTrue(group.release());
      for (String n : names) {
        TenureException gone = assertThrows(TenureException.class, () -> client.getLease(n));
        assertEquals(ErrorReason.LEASE_NOT_FOUND, gone.getReason());
      }
    }
  }

  @Test
  void aHeldMemberRefusesTheGroupThenAWaitingGroupTakesAllAtOnce() throws Exception {
    String a = name();
    String b = name();
    Session single = other.acquire(b, "single", Duration.ofSeconds(10));
    TenureException held =
        assertThrows(
            TenureException.class, () -> client.acquireGroup(List.of(a, b), "g", TTL, Duration.ZERO));
    assertEquals(ErrorReason.LEASE_HELD, held.getReason());
    assertThrows(TenureException.class, () -> client.getLease(a), "no partial group");
    CompletableFuture<GroupSession> waiting =
        CompletableFuture.supplyAsync(
            () -> client.acquireGroup(List.of(a, b), "g", TTL, Duration.ofSeconds(30)));
    assertTrue(single.release());
    try (GroupSession group = waiting.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS)) {
      assertTrue(group.isHeld());
      assertTrue(group.getFencingToken(b) > single.getFencingToken());
    }
  }

  @Test
  void revokingOneMemberLosesTheWholeGroupAtOnce() throws Exception {
    List<String> names = List.of(name(), name());
    GroupSession group = client.acquireGroup(names, "g", Duration.ofSeconds(30), Duration.ZERO);
    CompletableFuture<Session.Loss> lost = loss(group);
    client.revokeLease(names.get(1), "test: end one member");
    Session.Loss loss = lost.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS);
    assertEquals(Session.LossReason.LEASE_ENDED, loss.getReason());
    assertFalse(group.isHeld());
    assertFalse(group.release(), "release after loss reports not held");
  }

  @Test
  void withoutTheLossWatchRenewGroupNoticesALostMember() throws Exception {
    List<String> names = List.of(name(), name());
    GroupSession group = unwatched.acquireGroup(names, "g", TTL, Duration.ZERO);
    CompletableFuture<Session.Loss> lost = loss(group);
    client.revokeLease(names.get(0), "test: end one member");
    Session.Loss loss = lost.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS);
    assertEquals(Session.LossReason.NOT_HELD, loss.getReason());
    assertEquals(ErrorReason.LEASE_NOT_HELD, loss.getCause().orElseThrow().getReason());
    assertFalse(group.release());
  }
}
