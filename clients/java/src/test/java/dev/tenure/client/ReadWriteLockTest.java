package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LockMode;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** The ReadWriteLock helper and Session.downgrade against a real Tenure. */
@Tag("integration")
class ReadWriteLockTest {
  private static final Duration TTL = Duration.ofSeconds(10);
  private static final Duration WAIT = Duration.ofSeconds(45);

  private static TenureServer server;
  private static final List<LeaseClient> clients = new ArrayList<>();
  private static ExecutorService pool;

  @BeforeAll
  static void start() throws Exception {
    server = TenureServer.start();
    pool = Executors.newCachedThreadPool();
  }

  @AfterAll
  static void stop() throws Exception {
    if (pool != null) {
      pool.shutdownNow();
    }
    for (LeaseClient c : clients) {
      c.close();
    }
    if (server != null) {
      server.close();
    }
  }

  /** A new client of the server, closed after the tests. */
  private static synchronized LeaseClient client() {
    LeaseClient c = LeaseClient.connect(server.target());
    clients.add(c);
    return c;
  }

  private static int counter;

  private static synchronized String name() {
    return "java.rwlock.p" + ProcessHandle.current().pid() + "-" + (++counter);
  }

  /** Runs {@code acquire} in the background. */
  private static CompletableFuture<Session> async(Supplier<Session> acquire) {
    return CompletableFuture.supplyAsync(acquire, pool);
  }

  /** The session a background acquire returned, waiting at most {@link Await#BOUND}. */
  private static Session granted(Future<Session> acquire) throws Exception {
    return acquire.get(Await.BOUND.toSeconds(), TimeUnit.SECONDS);
  }

  /**
   * Polls GetLease until {@code n} acquires wait for {@code name} (queueing has no event), failing
   * at once if one of the {@code pending} acquires (which should be queued) has returned.
   */
  private static void awaitQueued(
      LeaseClient via, String name, int n, Map<String, Future<Session>> pending)
      throws InterruptedException {
    Await.until(
        n + " waiting for " + name,
        () -> {
          pending.forEach((what, f) -> assertFalse(f.isDone(), what + " returned while queued"));
          return via.inspect(name).getWaiting() >= n;
        });
  }

  @Test
  void twoReadersHoldAtOnceAndAWriterWithoutAWaitIsRefused() {
    String name = name();
    Session r1 = client().readWriteLock(name).readLock().acquire("reader-1", TTL, Duration.ZERO);
    Session r2 = client().readWriteLock(name).readLock().acquire("reader-2", TTL, Duration.ZERO);
    try {
      for (Session r : List.of(r1, r2)) {
        assertEquals(LockMode.LOCK_MODE_SHARED, r.getMode(), r.toString());
        assertTrue(r.getSlot() > 0 && r.isHeld(), r.toString());
      }
      assertNotEquals(r1.getSlot(), r2.getSlot());
      assertTrue(r2.getFencingToken() > r1.getFencingToken(), r1 + " / " + r2);

      ReadWriteLock rw = client().readWriteLock(name);
      TenureException held =
          assertThrows(
              TenureException.class,
              () -> rw.writeLock().acquire("writer", TTL, Duration.ZERO));
      assertEquals(ErrorReason.LEASE_HELD, held.getReason(), held.getMessage());
      assertEquals(Status.Code.FAILED_PRECONDITION, held.getStatusCode());
      assertFalse(held.isRetryable());
      assertTrue(r1.isHeld() && r2.isHeld(), "a refused writer ended a reader");

      assertTrue(r1.release());
      assertTrue(r2.release());
      try (Session w = rw.writeLock().acquire("writer", TTL, Duration.ZERO)) {
        assertEquals(LockMode.LOCK_MODE_EXCLUSIVE, w.getMode());
        assertTrue(w.getFencingToken() > r2.getFencingToken(), w.toString());
        assertTrue(w.release());
      }
    } finally {
      r1.close();
      r2.close();
    }
  }

  @Test
  void aQueuedWriterGoesBeforeAReaderArrivingAfterIt() throws Exception {
    String name = name();
    LeaseClient via = client();
    Session r1 = via.readWriteLock(name).readLock().acquire("reader-1", TTL, Duration.ZERO);
    Session r2 = client().readWriteLock(name).readLock().acquire("reader-2", TTL, Duration.ZERO);
    List<String> log = Collections.synchronizedList(new ArrayList<>());
    ReadWriteLock writerSide = client().readWriteLock(name);
    ReadWriteLock readerSide = client().readWriteLock(name);
    CompletableFuture<Session> writer =
        async(
            () -> {
              Session s = writerSide.writeLock().acquire("writer", TTL, WAIT);
              log.add("writer granted");
              return s;
            });
    CompletableFuture<Session> late = null;
    try {
      awaitQueued(via, name, 1, Map.of("the queued writer", writer));

      // Without a wait a reader is refused while the writer is queued, although it is
      // compatible with the readers holding.
      TenureException queued =
          assertThrows(
              TenureException.class,
              () -> readerSide.readLock().acquire("eager-reader", TTL, Duration.ZERO));
      assertEquals(ErrorReason.LEASE_HELD, queued.getReason(), queued.getMessage());
      assertEquals("QUEUED", queued.getMetadata().get("state"), queued.getMetadata().toString());

      late =
          async(
              () -> {
                Session s = readerSide.readLock().acquire("late-reader", TTL, WAIT);
                log.add("late reader granted");
                return s;
              });
      awaitQueued(via, name, 2, Map.of("the queued writer", writer, "the late reader", late));

      log.add("readers releasing");
      assertTrue(r1.release());
      assertTrue(r2.release());
      Session w = granted(writer);
      try {
        assertEquals(LockMode.LOCK_MODE_EXCLUSIVE, w.getMode());
        assertTrue(w.isHeld());
        assertTrue(
            w.getFencingToken() > r1.getFencingToken()
                && w.getFencingToken() > r2.getFencingToken(),
            w + " after " + r1 + " and " + r2);
        assertFalse(late.isDone(), "the late reader got in beside the writer");
        log.add("writer releasing");
        assertTrue(w.release());
      } finally {
        w.close();
      }
      try (Session r3 = granted(late)) {
        assertEquals(LockMode.LOCK_MODE_SHARED, r3.getMode());
        assertTrue(r3.getFencingToken() > w.getFencingToken(), r3 + " after " + w);
        assertTrue(r3.release());
      }
      assertEquals(
          List.of("readers releasing", "writer granted", "writer releasing", "late reader granted"),
          new ArrayList<>(log));
    } finally {
      r1.close();
      r2.close();
      writer.thenAccept(Session::close);
      if (late != null) {
        late.thenAccept(Session::close);
      }
    }
  }

  @Test
  void downgradeLetsAWaitingReaderInAndKeepsRenewing() throws Exception {
    String name = name();
    LeaseClient mine = client();
    Session w =
        mine.readWriteLock(name).writeLock().acquire("writer", Duration.ofSeconds(2), Duration.ZERO);
    // A lease of the same client under a sibling name: the loss watch carries both names on its
    // one stream, in order.
    Session marker = mine.acquire(name + ".marker", "writer", Duration.ofSeconds(30));
    CompletableFuture<Session.Loss> markerLoss = Await.loss(marker);
    CompletableFuture<Session.Loss> writerLoss = Await.loss(w);
    long token0 = w.getFencingToken();
    long rev0 = w.getRevision();
    int slot = w.getSlot();
    String key = w.getLeaseKey();
    assertEquals(LockMode.LOCK_MODE_EXCLUSIVE, w.getMode());
    assertTrue(slot > 0);

    ReadWriteLock readerSide = client().readWriteLock(name);
    CompletableFuture<Session> reader =
        async(() -> readerSide.readLock().acquire("reader", TTL, WAIT));
    Session r = null;
    try {
      awaitQueued(mine, name, 1, Map.of("the reader (while exclusive)", reader));

      Lease shared = w.downgrade();
      assertEquals(LockMode.LOCK_MODE_SHARED, shared.getMode());
      assertEquals(LockMode.LOCK_MODE_SHARED, w.getMode());
      assertTrue(w.getFencingToken() > token0, w + " was token " + token0);
      assertEquals(shared.getFencingToken(), w.getFencingToken());
      assertTrue(w.getRevision() > rev0, w + " was revision " + rev0);
      assertEquals(slot, w.getSlot());
      assertEquals(key, w.getLeaseKey());
      long token1 = w.getFencingToken();

      r = granted(reader);
      assertEquals(LockMode.LOCK_MODE_SHARED, r.getMode());
      assertTrue(r.getFencingToken() > token1, r + " after " + w);
      assertTrue(w.isHeld(), "the downgraded session is not held once the reader joined: " + w);

      // The background renewals go on with the new revision (every 2/3 s for a 2 s TTL).
      BlockingQueue<Lease> renewals = Await.renewals(w);
      long rev1 = w.getRevision();
      Lease renewed;
      do {
        renewed = Await.renewal(renewals);
      } while (renewed.getRevision() <= rev1);
      assertEquals(token1, renewed.getFencingToken());
      assertEquals(token1, w.getFencingToken());
      assertTrue(w.isHeld(), w.toString());

      // Barrier: once the marker's revoke has ended it, the loss watch has seen every earlier
      // event, the downgrade's write among them.
      mine.revokeLease(marker.getName(), "test: barrier");
      assertEquals(Session.LossReason.LEASE_ENDED, Await.get(markerLoss).getReason());
      assertTrue(w.isHeld(), "the loss watch took the downgrade for a loss: " + w);
      assertFalse(writerLoss.isDone(), w.toString());
      assertTrue(r.isHeld(), r.toString());

      // A shared holding cannot be downgraded: MODE_MISMATCH, and the session is unchanged.
      TenureException mismatch = assertThrows(TenureException.class, w::downgrade);
      assertEquals(ErrorReason.MODE_MISMATCH, mismatch.getReason(), mismatch.getMessage());
      assertEquals(Status.Code.FAILED_PRECONDITION, mismatch.getStatusCode());
      assertFalse(mismatch.isRetryable());
      assertTrue(w.isHeld(), w.toString());
      assertEquals(token1, w.getFencingToken());
      assertEquals(LockMode.LOCK_MODE_SHARED, w.getMode());

      assertTrue(w.release());
      assertTrue(r.release());
    } finally {
      w.close();
      marker.close();
      if (r != null) {
        r.close();
      }
      reader.thenAccept(Session::close);
    }
  }

  @Test
  void aReadWriteLockNameIsRefusedToASemaphore() {
    String name = name();
    try (Session r = client().readWriteLock(name).readLock().acquire("reader", TTL, Duration.ZERO)) {
      TenureException e =
          assertThrows(
              TenureException.class,
              () -> new Semaphore(client(), name, 2).acquire("permit", TTL, Duration.ZERO));
      assertEquals(ErrorReason.MODE_MISMATCH, e.getReason(), e.getMessage());
      assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatusCode());
      assertFalse(e.isRetryable());
      assertTrue(r.isHeld(), r.toString());
      assertTrue(r.release());
    }
  }

  @Test
  void aModeDoesNotCombineWithALimitLockDelayOrPreference() {
    assertThrows(
        IllegalArgumentException.class,
        () ->
            AcquireOptions.builder("a", "h").mode(LockMode.LOCK_MODE_SHARED).limit(2).build());
    assertThrows(
        IllegalArgumentException.class,
        () ->
            AcquireOptions.builder("a", "h")
                .mode(LockMode.LOCK_MODE_EXCLUSIVE)
                .lockDelay(Duration.ofSeconds(1))
                .build());
    assertThrows(
        IllegalArgumentException.class,
        () ->
            AcquireOptions.builder("a", "h").mode(LockMode.LOCK_MODE_SHARED).preference(1).build());
    assertThrows(
        IllegalArgumentException.class,
        () ->
            client()
                .readWriteLock("a")
                .readLock()
                .acquire(AcquireOptions.builder("b", "h").ttl(TTL)));
  }
}
