package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Leader election helpers against a real Tenure: hand-over, revoke, proclaim, leader, preference.
 */
@Tag("integration")
class ElectionTest {
  private static final Duration TTL = Duration.ofSeconds(10);

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
    return "java.election.p" + ProcessHandle.current().pid() + "-" + (++counter);
  }

  private static <T> T next(BlockingQueue<T> queue, String what) throws InterruptedException {
    T v = queue.poll(Await.BOUND.toMillis(), TimeUnit.MILLISECONDS);
    assertNotNull(v, "no " + what + " within " + Await.BOUND);
    return v;
  }

  /** One participant and what its callbacks saw. */
  static final class Participant implements LeaderElector.Listener {
    final String identity;
    final BlockingQueue<Long> started = new LinkedBlockingQueue<>();
    final BlockingQueue<String> stopped = new LinkedBlockingQueue<>();
    final BlockingQueue<Election.Leader> leaders = new LinkedBlockingQueue<>();
    final Set<String> leading;
    final AtomicInteger maxLeading;

    Participant(String identity, Set<String> leading, AtomicInteger maxLeading) {
      this.identity = identity;
      this.leading = leading;
      this.maxLeading = maxLeading;
    }

    @Override
    public void takeLeadership(Session term) throws InterruptedException {
      leading.add(identity);
      maxLeading.accumulateAndGet(leading.size(), Math::max);
      started.add(term.getFencingToken());
      try {
        Thread.sleep(Long.MAX_VALUE); // lead until interrupted
      } finally {
        leading.remove(identity);
      }
    }

    @Override
    public void stoppedLeading() {
      stopped.add(identity);
    }

    @Override
    public void newLeader(Election.Leader leader) {
      leaders.add(leader);
    }

    Election.Leader leaderIs(String who) throws InterruptedException {
      while (true) {
        Election.Leader l = next(leaders, who + " as leader");
        if (l.identity().equals(who)) {
          return l;
        }
      }
    }
  }

  @Test
  void handsOverWhenTheLeaderCloses() throws Exception {
    String name = name();
    Set<String> leading = ConcurrentHashMap.newKeySet();
    AtomicInteger max = new AtomicInteger();
    Participant a = new Participant("node-a", leading, max);
    Participant b = new Participant("node-b", leading, max);
    LeaderElector ea = LeaderElector.start(client, name, "node-a", "node-a:5432", TTL, a);
    long tokenA = next(a.started, "node-a's term");
    a.leaderIs("node-a");
    try (LeaderElector eb = LeaderElector.start(other, name, "node-b", "node-b:5432", TTL, b)) {
      Election.Leader seen = b.leaderIs("node-a");
      assertEquals("node-a:5432", seen.value());
      assertEquals(tokenA, seen.fencingToken());
      assertEquals("node-a", new Election(other, name).leader().identity());

      ea.close();
      assertEquals("node-a", next(a.stopped, "node-a stopped"));
      long tokenB = next(b.started, "node-b's term");
      assertTrue(tokenB > tokenA, "node-b's token " + tokenB + " is not above " + tokenA);
      b.leaderIs("node-b");
    }
    assertEquals("node-b", next(b.stopped, "node-b stopped"));
    assertEquals(1, max.get());
    assertFalse(new Election(client, name).leader().present());
  }

  @Test
  void revokedLeaderStopsAndCampaignsAgain() throws Exception {
    String name = name();
    Participant p = new Participant("node-a", ConcurrentHashMap.newKeySet(), new AtomicInteger());
    try (LeaderElector e = LeaderElector.start(client, name, "node-a", "v", TTL, p)) {
      long first = next(p.started, "first term");
      other.revokeLease(name, "test");
      assertEquals("node-a", next(p.stopped, "stopped after revoke"));
      long second = next(p.started, "second term");
      assertTrue(second > first);
    }
    assertEquals("node-a", next(p.stopped, "stopped after close"));
  }

  @Test
  void proclaimChangesTheValueWithoutANewTerm() throws Exception {
    String name = name();
    Election election = new Election(client, name);
    Session term = election.campaign("node-a", "10.0.0.1:5432", TTL, Duration.ZERO);
    election.proclaim(term, "10.0.0.1:6432");
    assertEquals(
        new Election.Leader("node-a", "10.0.0.1:6432", term.getFencingToken()),
        election.leader());
    other.revokeLease(name, "test");
    Await.get(Await.loss(term));
    TenureException e =
        assertThrows(TenureException.class, () -> election.proclaim(term, "x"));
    assertEquals(ErrorReason.LEASE_NOT_HELD, e.getReason());
  }

  /** A participant whose start and stop go to a log shared by all, in order. */
  static final class Ranked implements LeaderElector.Listener {
    final String identity;
    final List<String> log;
    final BlockingQueue<Long> started = new LinkedBlockingQueue<>();
    final BlockingQueue<Election.Leader> leaders = new LinkedBlockingQueue<>();
    final List<Election.Leader> seen = Collections.synchronizedList(new ArrayList<>());

    Ranked(String identity, List<String> log) {
      this.identity = identity;
      this.log = log;
    }

    @Override
    public void takeLeadership(Session term) throws InterruptedException {
      log.add(identity + " started " + term.getFencingToken());
      started.add(term.getFencingToken());
      Thread.sleep(Long.MAX_VALUE); // lead until interrupted
    }

    @Override
    public void stoppedLeading() {
      log.add(identity + " stopped");
    }

    @Override
    public void newLeader(Election.Leader leader) {
      seen.add(leader);
      leaders.add(leader);
    }
  }

  private static List<String> snapshot(List<String> log) {
    synchronized (log) {
      return new ArrayList<>(log);
    }
  }

  private static void awaitPreferred(
      BlockingQueue<Election.Candidate> preferred, Election.Candidate want)
      throws InterruptedException {
    while (!next(preferred, "preferred candidate " + want).equals(want)) {
      // an earlier naming
    }
  }

  /**
   * A waiting candidate of a greater preference takes over from the leader at once: with a 30 s TTL
   * that the leader keeps renewing, and a test timeout well under it, only the hand-over can make
   * node-b lead in time.
   */
  @Test
  @Timeout(value = 20, unit = TimeUnit.SECONDS)
  void aCandidateOfGreaterPreferenceTakesOverWithoutWaitingForTheTtl() throws Exception {
    String name = name();
    Duration ttl = Duration.ofSeconds(30);
    List<String> log = Collections.synchronizedList(new ArrayList<>());
    Ranked a = new Ranked("node-a", log);
    Ranked b = new Ranked("node-b", log);
    BlockingQueue<Election.Candidate> preferred = new LinkedBlockingQueue<>();
    try (AutoCloseable observing = new Election(other, name).observe(leader -> {}, preferred::add);
        LeaderElector ea = LeaderElector.start(client, name, "node-a", "node-a:5432", ttl, 1, a)) {
      long tokenA = next(a.started, "node-a's term");
      long tokenB;
      try (LeaderElector eb =
          LeaderElector.start(other, name, "node-b", "node-b:5432", ttl, 2, b)) {
        awaitPreferred(preferred, new Election.Candidate("node-b", 2));
        tokenB = next(b.started, "node-b's term");
        assertTrue(tokenB > tokenA, "node-b's token " + tokenB + " is not above " + tokenA);
        // node-a stopped before node-b started.
        assertEquals(
            List.of("node-a started " + tokenA, "node-a stopped", "node-b started " + tokenB),
            snapshot(log));

        // node-a's newLeader saw node-a, then node-b: naming node-b as the preferred candidate
        // (the leader unchanged) did not call it.
        while (!next(a.leaders, "node-b as leader").identity().equals("node-b")) {
          // earlier leaders
        }
        List<Election.Leader> seen = new ArrayList<>(a.seen);
        seen.removeIf(l -> !l.present());
        assertEquals(
            List.of(
                new Election.Leader("node-a", "node-a:5432", tokenA),
                new Election.Leader("node-b", "node-b:5432", tokenB)),
            seen);

        // node-a campaigns again and waits with its lower preference: named preferred, it does
        // not displace node-b.
        awaitPreferred(preferred, new Election.Candidate("node-a", 1));
        Election.Leader now = new Election(client, name).leader();
        assertEquals("node-b", now.identity());
        assertEquals(tokenB, now.fencingToken());
      }
      // node-b resigned on close (a release, not a hand-over: node-b's stop and node-a's start
      // may come in either order): node-a leads again.
      long tokenA2 = next(a.started, "node-a's second term");
      assertTrue(tokenA2 > tokenB);
      List<String> all = snapshot(log);
      assertEquals(5, all.size(), () -> "log " + all);
      assertEquals(
          Set.of("node-b stopped", "node-a started " + tokenA2), Set.copyOf(all.subList(3, 5)));
    }
  }
}
