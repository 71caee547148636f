package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LeaseServiceGrpc;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Renewals over the one KeepAlive stream of a client, and the unary fallback. */
@Tag("integration")
class KeepAliveTest {
  /** Renewed every second (a third of it); safe deadline 2.7 s after each send. */
  private static final Duration TTL = Duration.ofSeconds(3);

  private static TenureServer server;
  private static final List<AutoCloseable> open = new ArrayList<>();

  @BeforeAll
  static void start() throws Exception {
    server = TenureServer.start();
  }

  @AfterAll
  static void stop() throws Exception {
    for (int i = open.size() - 1; i >= 0; i--) {
      open.get(i).close();
    }
    if (server != null) {
      server.close();
    }
  }

  private static int counter;

  private static synchronized String name() {
    return "java.keepalive.p" + ProcessHandle.current().pid() + "-" + (++counter);
  }

  private static <T extends AutoCloseable> T keep(T c) {
    open.add(c);
    return c;
  }

  @Test
  void renewalsDueTogetherGoOutAsOneMessageOnOneStream() throws Exception {
    ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor();
    keep(scheduler::shutdownNow);
    ManagedChannel channel =
        ManagedChannelBuilder.forTarget(server.target()).usePlaintext().build();
    keep(channel::shutdownNow);
    LeaseClient client = keep(new LeaseClient(channel, scheduler));
    int count = 20;
    List<Session> sessions = new ArrayList<>();
    List<BlockingQueue<Lease>> renewals = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      Session s = client.acquire(name(), "h" + i, TTL);
      sessions.add(s);
      renewals.add(Await.renewals(s));
    }
    // Hold the renewal thread until every first renewal is due, so they all run back to back.
    long due = 0;
    for (Session s : sessions) {
      long at = s.getSafeDeadlineNanos() - TTL.toNanos() + TTL.toNanos() / 10 + TTL.toNanos() / 3;
      due = Math.max(due, at);
    }
    long dueAt = due;
    scheduler.execute(
        () -> {
          while (System.nanoTime() - dueAt < 0) {
            Thread.onSpinWait();
          }
        });
    for (int i = 0; i < count; i++) {
      Lease lease = Await.renewal(renewals.get(i));
      assertEquals(sessions.get(i).getFencingToken(), lease.getFencingToken());
      assertTrue(sessions.get(i).isHeld());
    }
    KeepAliveStream ka = client.keepAlive();
    assertEquals(1, ka.streamsOpened());
    assertEquals(count, ka.largestMessage(), "the due renewals went out in one message");
    assertEquals(0, ka.unaryRenewals());
    for (Session s : sessions) {
      assertTrue(s.release());
    }
  }

  @Test
  void aSemaphoreHolderRenewsItsOwnSlotOverTheStream() throws Exception {
    LeaseClient client = keep(LeaseClient.connect(server.target()));
    String name = name();
    Semaphore sem = new Semaphore(client, name, 2);
    Session first = sem.acquire("a", TTL, Duration.ZERO);
    Session second = sem.acquire("b", TTL, Duration.ZERO);
    BlockingQueue<Lease> renewals = Await.renewals(second);
    Lease renewed = Await.renewal(renewals);
    assertEquals(second.getSlot(), renewed.getSlot());
    assertEquals(second.getFencingToken(), renewed.getFencingToken());
    assertTrue(first.isHeld());
    assertTrue(client.keepAlive().entriesSent() >= 1);
    assertEquals(0, client.keepAlive().unaryRenewals());
  }

  @Test
  void aLostHoldingFailsItsEntryWithTheTypedErrorOfARenew() throws Exception {
    LeaseClient client =
        keep(
            LeaseClient.connect(
                server.target(), ConnectOptions.builder().lossWatch(false).build()));
    String name = name();
    Session session = client.acquire(name, "h", TTL);
    CompletableFuture<Session.Loss> loss = Await.loss(session);
    client.revokeLease(name, "test: the next renewal must fail");
    Session.Loss lost = Await.get(loss);
    assertEquals(Session.LossReason.NOT_HELD, lost.getReason());
    TenureException cause = lost.getCause().orElseThrow();
    assertEquals(ErrorReason.LEASE_NOT_HELD, cause.getReason());
    assertEquals(Status.Code.FAILED_PRECONDITION, cause.getStatusCode());
    assertTrue(cause.getMessage().contains(": KeepAlive: LEASE_NOT_HELD"), cause.getMessage());
  }

  @Test
  void aServerWithoutTheStreamGetsUnaryRenewals() throws Exception {
    ManagedChannel raw = ManagedChannelBuilder.forTarget(server.target()).usePlaintext().build();
    keep(raw::shutdownNow);
    Channel channel = ClientInterceptors.intercept(raw, new RefuseKeepAlive());
    LeaseClient client = keep(new LeaseClient(channel));
    Session session = client.acquire(name(), "h", TTL);
    BlockingQueue<Lease> renewals = Await.renewals(session);
    Await.renewal(renewals);
    Await.renewal(renewals);
    assertTrue(session.isHeld());
    KeepAliveStream ka = client.keepAlive();
    assertEquals(1, ka.streamsOpened(), "no second attempt after UNIMPLEMENTED");
    assertTrue(ka.unaryRenewals() >= 2, "renewals fell back to unary Renew");
    assertTrue(session.release());
  }

  /** Answers KeepAlive calls with UNIMPLEMENTED, as a server without the stream does. */
  private static final class RefuseKeepAlive implements ClientInterceptor {
    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(
        MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      if (!method.equals(LeaseServiceGrpc.getKeepAliveMethod())) {
        return next.newCall(method, options);
      }
      return new ClientCall<>() {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          listener.onClose(Status.UNIMPLEMENTED.withDescription("no KeepAlive here"), new Metadata());
        }

        @Override
        public void request(int n) {}

        @Override
        public void cancel(String message, Throwable cause) {}

        @Override
        public void halfClose() {}

        @Override
        public void sendMessage(Q message) {}
      };
    }
  }
}
