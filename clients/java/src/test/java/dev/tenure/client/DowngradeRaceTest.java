package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import dev.tenure.v1.AcquireRequest;
import dev.tenure.v1.AcquireResponse;
import dev.tenure.v1.DowngradeRequest;
import dev.tenure.v1.DowngradeResponse;
import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.EventType;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.LeaseServiceGrpc;
import dev.tenure.v1.LockMode;
import dev.tenure.v1.ReleaseRequest;
import dev.tenure.v1.ReleaseResponse;
import dev.tenure.v1.RenewRequest;
import dev.tenure.v1.RenewResponse;
import dev.tenure.v1.WatchLeaseRequest;
import dev.tenure.v1.WatchLeaseResponse;
import io.grpc.Server;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Session.downgrade against a scripted gRPC server on 127.0.0.1 that has the loss watch deliver
 * the downgrade's own write (the exclusive token RELEASED, the shared one ACQUIRED) before the
 * Downgrade's reply, the race the session must survive, and a marker lease's REVOKED after it so
 * the test knows the watch has delivered them.
 */
class DowngradeRaceTest {
  private static final Duration TTL = Duration.ofSeconds(3);
  private static final String RW = "jobs.rw";
  private static final String MARKER = "jobs.marker";

  /** The scripted Tenure. Its Downgrade answers once {@link #answer} is counted down. */
  private static final class Fake implements AutoCloseable {
    final Server server;
    final String target;
    final CountDownLatch started = new CountDownLatch(1);
    final CountDownLatch answer = new CountDownLatch(1);
    /** Downgrade's failure, or null to succeed. */
    volatile io.grpc.StatusRuntimeException failure;
    /** jobs.rw's current revision and token (under this fake's lock). */
    private long revision = 10;

    private long token = 10;
    /** The revision (and token) of the downgrade's write, once Downgrade was called. */
    private volatile long downgradedAt;

    Fake() throws Exception {
      server =
          NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
              .addService(new Leases())
              .build()
              .start();
      target = "127.0.0.1:" + server.getPort();
    }

    private synchronized Lease rw(LockMode mode) {
      return lease(RW, token, revision, 1, mode);
    }

    private final class Leases extends LeaseServiceGrpc.LeaseServiceImplBase {
      @Override
      public void acquire(AcquireRequest request, StreamObserver<AcquireResponse> out) {
        Lease l =
            request.getName().equals(RW)
                ? rw(request.getMode())
                : lease(MARKER, 11, 11, 0, LockMode.LOCK_MODE_UNSPECIFIED);
        out.onNext(AcquireResponse.newBuilder().setLease(l).setLeaseKey(request.getLeaseKey()).build());
        out.onCompleted();
      }

      @Override
      public void renew(RenewRequest request, StreamObserver<RenewResponse> out) {
        if (request.getName().equals(MARKER)) {
          out.onNext(RenewResponse.newBuilder().setLease(lease(MARKER, 11, 11, 0, LockMode.LOCK_MODE_UNSPECIFIED)).build());
          out.onCompleted();
          return;
        }
        Lease renewed;
        synchronized (Fake.this) {
          if (request.getExpectedRevision() != revision || request.getSlot() != 1) {
            out.onError(error(Code.FAILED_PRECONDITION, "LEASE_NOT_HELD"));
            return;
          }
          revision++;
          renewed = lease(RW, token, revision, 1, token == 10 ? LockMode.LOCK_MODE_EXCLUSIVE : LockMode.LOCK_MODE_SHARED);
        }
        out.onNext(RenewResponse.newBuilder().setLease(renewed).build());
        out.onCompleted();
      }

      @Override
      public void downgrade(DowngradeRequest request, StreamObserver<DowngradeResponse> out) {
        synchronized (Fake.this) {
          if (request.getExpectedRevision() != revision || request.getSlot() != 1) {
            out.onError(error(Code.FAILED_PRECONDITION, "LEASE_NOT_HELD"));
            return;
          }
          downgradedAt = revision + 1;
        }
        started.countDown();
        try {
          answer.await();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        if (failure != null) {
          out.onError(failure);
          return;
        }
        Lease shared;
        synchronized (Fake.this) {
          revision = token = downgradedAt;
          shared = rw(LockMode.LOCK_MODE_SHARED);
        }
        out.onNext(DowngradeResponse.newBuilder().setLease(shared).build());
        out.onCompleted();
      }

      @Override
      public void release(ReleaseRequest request, StreamObserver<ReleaseResponse> out) {
        out.onNext(ReleaseResponse.newBuilder().setRevision(100).build());
        out.onCompleted();
      }

      @Override
      public void watchLease(WatchLeaseRequest request, StreamObserver<WatchLeaseResponse> out) {
        send(out, event(EventType.EVENT_TYPE_CURRENT, RW, 10, 10, 1));
        if (request.getName().equals(RW)) {
          send(out, event(EventType.EVENT_TYPE_SNAPSHOT_COMPLETE, "", 0, 11, 0));
          return; // stays open
        }
        send(out, event(EventType.EVENT_TYPE_CURRENT, MARKER, 11, 11, 0));
        send(out, event(EventType.EVENT_TYPE_SNAPSHOT_COMPLETE, "", 0, 11, 0));
        try {
          started.await();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return;
        }
        long at = downgradedAt;
        send(out, event(EventType.EVENT_TYPE_RELEASED, RW, 10, at, 1));
        send(out, event(EventType.EVENT_TYPE_ACQUIRED, RW, at, at, 1));
        send(out, event(EventType.EVENT_TYPE_REVOKED, MARKER, 11, at + 1, 0));
      }
    }

    @Override
    public void close() {
      answer.countDown();
      try {
        server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private static Lease lease(String name, long token, long revision, int slot, LockMode mode) {
    return Lease.newBuilder()
        .setName(name)
        .setHolder("me")
        .setFencingToken(token)
        .setRevision(revision)
        .setSlot(slot)
        .setMode(mode)
        .setTtl(com.google.protobuf.Duration.newBuilder().setSeconds(TTL.toSeconds()))
        .build();
  }

  private static LeaseEvent event(EventType type, String name, long token, long revision, int slot) {
    return LeaseEvent.newBuilder()
        .setType(type)
        .setName(name)
        .setFencingToken(token)
        .setRevision(revision)
        .setSlot(slot)
        .build();
  }

  private static void send(StreamObserver<WatchLeaseResponse> out, LeaseEvent e) {
    out.onNext(WatchLeaseResponse.newBuilder().setEvent(e).build());
  }

  private static io.grpc.StatusRuntimeException error(Code code, String reason) {
    return StatusProto.toStatusRuntimeException(
        com.google.rpc.Status.newBuilder()
            .setCode(code.getNumber())
            .setMessage(reason)
            .addDetails(
                Any.pack(ErrorInfo.newBuilder().setDomain("tenure.v1").setReason(reason).build()))
            .build());
  }

  /**
   * Takes jobs.rw exclusively and the marker, starts a downgrade, and returns once the loss watch
   * has delivered the downgrade's write and the marker's revoke while the downgrade is unanswered.
   */
  private static CompletableFuture<Lease> race(LeaseClient client, Session w) throws Exception {
    Session marker = client.acquire(MARKER, "me", TTL);
    CompletableFuture<Session.Loss> markerLoss = Await.loss(marker);
    CompletableFuture<Lease> downgrade = CompletableFuture.supplyAsync(w::downgrade);
    assertEquals(Session.LossReason.LEASE_ENDED, Await.get(markerLoss).getReason());
    assertFalse(downgrade.isDone(), "the downgrade answered before the fake let it");
    assertTrue(w.isHeld(), "the downgrade's own write on the watch ended the session: " + w);
    return downgrade;
  }

  private static LeaseClient client(Fake fake) {
    return LeaseClient.connect(fake.target, ConnectOptions.builder().keepAliveStream(false).build());
  }

  @Test
  void downgradeSurvivesItsOwnWriteOnTheWatchAndRenewsWithTheNewRevision() throws Exception {
    try (Fake fake = new Fake();
        LeaseClient client = client(fake)) {
      Session w = client.readWriteLock(RW).writeLock().acquire("me", TTL, Duration.ZERO);
      CompletableFuture<Session.Loss> loss = Await.loss(w);
      assertEquals(LockMode.LOCK_MODE_EXCLUSIVE, w.getMode());
      CompletableFuture<Lease> downgrade = race(client, w);
      fake.answer.countDown();
      Lease shared = downgrade.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS);
      long at = shared.getRevision();
      assertEquals(at, w.getFencingToken());
      assertEquals(at, w.getRevision());
      assertEquals(LockMode.LOCK_MODE_SHARED, w.getMode());
      assertTrue(w.isHeld(), w.toString());

      BlockingQueue<Lease> renewals = Await.renewals(w);
      Lease renewed = Await.renewal(renewals);
      assertTrue(renewed.getRevision() > at, renewed.toString());
      assertEquals(at, renewed.getFencingToken());
      assertTrue(w.isHeld(), w.toString());
      assertFalse(loss.isDone(), w.toString());
      assertTrue(w.release());
    }
  }

  @Test
  void aFailedDowngradeJudgesTheEventsSeenMeanwhileAgainstTheExclusiveHolding() throws Exception {
    try (Fake fake = new Fake();
        LeaseClient client = client(fake)) {
      fake.failure = error(Code.UNAVAILABLE, "NATS_UNAVAILABLE");
      Session w = client.readWriteLock(RW).writeLock().acquire("me", TTL, Duration.ZERO);
      CompletableFuture<Session.Loss> loss = Await.loss(w);
      CompletableFuture<Lease> downgrade = race(client, w);
      fake.answer.countDown();
      ExecutionException failed =
          org.junit.jupiter.api.Assertions.assertThrows(
              ExecutionException.class,
              () -> downgrade.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS));
      assertEquals(
          ErrorReason.NATS_UNAVAILABLE, ((TenureException) failed.getCause()).getReason());
      Session.Loss lost = Await.get(loss);
      assertEquals(Session.LossReason.LEASE_ENDED, lost.getReason());
      assertEquals(EventType.EVENT_TYPE_RELEASED, lost.getEvent().orElseThrow().getType());
      assertEquals(10, w.getFencingToken());
      assertEquals(LockMode.LOCK_MODE_EXCLUSIVE, w.getMode());
      assertFalse(w.isHeld());
    }
  }
}
