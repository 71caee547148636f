package dev.tenure.client;

import static java.util.concurrent.TimeUnit.MILLISECONDS;

import dev.tenure.v1.ErrorReason;
import io.grpc.Status;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Takes part in an election until closed, in the shape of client-go's leaderelection and
 * Curator's {@code LeaderSelector}: it campaigns, calls {@link Listener#takeLeadership} on its own
 * thread while it leads, and campaigns again after each term.
 *
 * <p>The rule: {@code takeLeadership} must stop acting as leader when its thread is interrupted
 * (the term ended: its safe deadline passed, it was revoked or expired, a watch said it missed
 * changes among which the term ended, or the elector is being closed) and must pass {@link Session#getFencingToken()} with every downstream write. Returning
 * from it resigns the term.
 *
 * <pre>{@code
 * LeaderElector elector = LeaderElector.start(client, "db.primary", "node-1", "10.0.0.1:5432",
 *     Duration.ofSeconds(10), new LeaderElector.Listener() {
 *       public void takeLeadership(Session term) throws InterruptedException {
 *         while (true) { ... write with term.getFencingToken() ...; Thread.sleep(100); }
 *       }
 *     });
 * ...
 * elector.close(); // resigns: the next participant leads at once, not after the TTL
 * }</pre>
 *
 * <p><b>Preference.</b> An elector started with a {@code preference} ({@link #start(LeaseClient,
 * String, String, String, Duration, int, Listener)}) campaigns with it ({@link
 * AcquireOptions.Builder#preference(int)}), and every elector follows the election's Observe
 * stream, remembering the latest preferred candidate: the waiting candidate with the highest
 * preference above 0, the earliest of equals. While it leads, and already at the moment it wins a
 * term, an elector hands over to the preferred candidate when that candidate's preference is
 * greater than its own, through the same path as {@link #resignTo(String)}: {@code
 * takeLeadership} is interrupted and {@link Listener#stoppedLeading} runs before the hand-over is
 * sent, so the successor (with a greater fencing token) cannot start leading before this leader
 * stopped, and the election has a leader at every moment. (A term handed over at the moment it
 * is won is not started: neither {@code takeLeadership} nor {@code stoppedLeading} runs for it.)
 * If the hand-over fails (e.g. {@code NO_WAITER}: the candidate left) the elector leads the same
 * term again and tries again only when Observe names a preferred candidate anew, never in a loop.
 * A change of the preferred candidate alone does not call {@link Listener#newLeader}.
 *
 * <p>The rolling update: every replica campaigns with its deployment's generation as preference.
 * While old-version replicas lead, the first new-version candidate to wait takes over once, with
 * no leaderless moment; the other new-version candidates have the same preference and never
 * displace each other (only a strictly greater preference takes over), and the old-version
 * replicas that campaign again wait behind them. An elector without a preference (0) hands over
 * to any candidate that has one.
 */
public final class LeaderElector implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(LeaderElector.class.getName());
  private static final Duration CAMPAIGN_WAIT = Duration.ofSeconds(30);

  /** What the elector tells its user. */
  public interface Listener {
    /**
     * Runs on the elector's thread while this participant leads; the thread is interrupted when
     * the term ends or {@link LeaderElector#resignTo(String)} (or a preferred candidate of a
     * greater preference, see the class comment) hands it over. Returning (or throwing) resigns
     * the term.
     *
     * @param term the term: its fencing token goes with every downstream write
     * @throws Exception anything: it is logged and the term is resigned
     */
    void takeLeadership(Session term) throws Exception;

    /**
     * Called once per term, after {@link #takeLeadership} returned (once per {@code
     * takeLeadership} call: a failed {@link LeaderElector#resignTo(String)} leads the same term
     * again). When it runs before a hand-over, the successor has not started leading yet.
     */
    default void stoppedLeading() {}

    /**
     * Called with every change of leader (including this participant), on another thread; not
     * when only the preferred candidate changed.
     *
     * @param leader the new leader, {@link Election.Leader#NOBODY}, or a leader with {@link
     *     Election.Leader#missed()} set when the Observe stream missed changes (who leads is unknown
     *     until the next call)
     */
    default void newLeader(Election.Leader leader) {}
  }

  private final Election election;
  private final String identity;
  private final String value;
  private final Duration ttl;
  private final int preference;
  private final Listener listener;
  private final Thread thread;
  private final AutoCloseable observer;
  private volatile boolean closed;
  private volatile TenureException failure;
  /** Guards {@code leading}, {@code handover} and the preferred candidate's fields. */
  private final Object lock = new Object();
  /** The term while {@code takeLeadership} may run; null otherwise. */
  private Session leading;
  /** The hand-over asked for in the period of leading under way. */
  private Handover handover;
  /** The latest preferred candidate Observe named. */
  private Election.Candidate preferred = Election.Candidate.NONE;
  /** Counts Observe's changes of the preferred candidate: which naming {@code preferred} is. */
  private long preferredSeq;
  /** The naming whose hand-over failed: not tried again until Observe names a candidate anew. */
  private long failedSeq = -1;

  /** One hand-over request ({@link #resignTo} or to the preferred candidate) and its answer. */
  private static final class Handover {
    final String successor;
    /** For a hand-over to the preferred candidate, its {@code preferredSeq}; -1 otherwise. */
    final long seq;
    final CompletableFuture<Election.Leader> answer = new CompletableFuture<>();

    Handover(String successor, long seq) {
      this.successor = successor;
      this.seq = seq;
    }
  }

  private LeaderElector(
      LeaseClient client,
      String name,
      String identity,
      String value,
      Duration ttl,
      int preference,
      Listener listener,
      boolean observe) {
    if (preference < 0) {
      throw new IllegalArgumentException("preference must not be negative, got " + preference);
    }
    this.election = new Election(client, name);
    this.identity = Objects.requireNonNull(identity, "identity");
    this.value = Objects.requireNonNull(value, "value");
    this.ttl = Objects.requireNonNull(ttl, "ttl");
    this.preference = preference;
    this.listener = Objects.requireNonNull(listener, "listener");
    this.observer = observe ? election.observe(listener::newLeader, this::preferredChanged) : null;
    this.thread = new Thread(this::run, "tenure-elector-" + name);
    this.thread.setDaemon(true);
  }

  /**
   * Starts taking part in election {@code name}, and observing its leaders.
   *
   * @param client the client
   * @param name the election (a lease name)
   * @param identity this participant's holder name
   * @param value published while leading (e.g. this replica's address)
   * @param ttl the term TTL to ask for
   * @param listener the callbacks
   * @return the running elector; close it to stop (and resign)
   */
  public static LeaderElector start(
      LeaseClient client,
      String name,
      String identity,
      String value,
      Duration ttl,
      Listener listener) {
    return start(client, name, identity, value, ttl, 0, listener);
  }

  /**
   * Starts taking part in election {@code name} with a preference, and observing its leaders and
   * its preferred candidate: while this elector waits, a leader of a lower preference hands over
   * to it; while it leads, it hands over to a waiting candidate of a greater preference (see the
   * class comment). For a rolling update, pass the deployment's generation.
   *
   * @param client the client
   * @param name the election (a lease name)
   * @param identity this participant's holder name
   * @param value published while leading (e.g. this replica's address)
   * @param ttl the term TTL to ask for
   * @param preference 0 for none, or a positive number: higher is preferred
   * @param listener the callbacks
   * @return the running elector; close it to stop (and resign)
   */
  public static LeaderElector start(
      LeaseClient client,
      String name,
      String identity,
      String value,
      Duration ttl,
      int preference,
      Listener listener) {
    LeaderElector elector =
        new LeaderElector(client, name, identity, value, ttl, preference, listener, true);
    elector.thread.start();
    return elector;
  }

  /**
   * The permanent error that stopped the elector (bad arguments, credentials or grants), if any.
   *
   * @return the error, or null while running or after a plain close
   */
  public TenureException failure() {
    return failure;
  }

  /**
   * Stops: interrupts a running {@code takeLeadership}, resigns a term still held, stops
   * observing, and waits for the elector's thread to end.
   */
  @Override
  public void close() {
    closed = true;
    thread.interrupt();
    try {
      thread.join();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (observer != null) {
      try {
        observer.close();
      } catch (Exception e) {
        LOG.log(Level.FINE, "closing the observer", e);
      }
    }
  }

  private void run() {
    long backoffMs = 100;
    while (!closed) {
      Session term;
      try {
        term = election.campaign(identity, value, ttl, CAMPAIGN_WAIT, preference);
      } catch (TenureException e) {
        if (closed) {
          return;
        }
        if (e.getReason() == ErrorReason.LEASE_HELD) {
          continue;
        }
        if (!e.isRetryable()) {
          failure = e;
          LOG.log(Level.WARNING, "election " + election.name() + " stopped", e);
          return;
        }
        if (!pause(backoffMs)) {
          return;
        }
        backoffMs = Math.min(backoffMs * 2, 5000);
        continue;
      }
      backoffMs = 100;
      lead(term);
    }
  }

  /**
   * Hands the leadership to a waiting candidate, with no moment without a leader: to the candidate
   * whose identity is {@code successor}, or, with null, to the earliest waiting one. Call it from
   * another thread than the elector's (not from {@code takeLeadership}).
   *
   * <p>Before the hand-over is sent this leader stops: the elector's thread is interrupted, {@link
   * Listener#takeLeadership} returns, and {@link Listener#stoppedLeading} runs; so the successor
   * cannot start leading before this leader stopped, and {@code stoppedLeading} has run when this
   * returns. The term then ends as handed over (not lost) and the elector campaigns again ({@link
   * #close()} it to leave the election).
   *
   * @param successor the identity of the waiting candidate; null for the next one
   * @return the successor, whose fencing token is greater
   * @throws TenureException {@code NO_WAITER} when that candidate does not wait: the leader keeps
   *     the term and leads it again ({@code takeLeadership} is called anew with it), as after any
   *     other failure while the term is still held; {@code LEASE_NOT_HELD} when this elector does
   *     not lead
   * @throws IllegalStateException when called on the elector's own thread
   */
  public Election.Leader resignTo(String successor) {
    if (Thread.currentThread() == thread) {
      throw new IllegalStateException("resignTo must be called from another thread than the elector's");
    }
    Handover asked = new Handover(successor, -1);
    synchronized (lock) {
      if (leading == null || handover != null) {
        throw notLeading();
      }
      handover = asked;
      thread.interrupt(); // under the lock: the elector clears it under the lock too
    }
    try {
      return asked.answer.join();
    } catch (CompletionException e) {
      if (e.getCause() instanceof RuntimeException) {
        throw (RuntimeException) e.getCause();
      }
      throw e;
    }
  }

  /** Observe named a new preferred candidate (or none): remember it, and act on it while leading. */
  private void preferredChanged(Election.Candidate candidate) {
    synchronized (lock) {
      preferred = candidate;
      preferredSeq++;
      if (leading != null && handOverToPreferred()) {
        thread.interrupt(); // under the lock: the elector clears it under the lock too
      }
    }
  }

  /**
   * Under {@code lock}, while leading: asks for a hand-over to the preferred candidate when it
   * outranks this elector, no other hand-over is asked for, and this naming of it has not failed.
   *
   * @return whether a hand-over was asked for
   */
  private boolean handOverToPreferred() {
    if (closed
        || handover != null
        || preferredSeq == failedSeq
        || !preferred.outranks(preference)) {
      return false;
    }
    handover = new Handover(preferred.identity(), preferredSeq);
    return true;
  }

  private TenureException notLeading() {
    return new TenureException(
        Status.Code.FAILED_PRECONDITION,
        ErrorReason.LEASE_NOT_HELD,
        "",
        identity + " does not lead " + election.name(),
        Map.of(),
        null);
  }

  private void lead(Session term) {
    while (true) {
      Handover asked = leadOnce(term);
      if (asked == null) {
        return;
      }
      // This leader has stopped: hand the term over.
      try {
        Election.Leader successor = election.resignTo(term, asked.successor);
        if (asked.seq >= 0) {
          LOG.log(
              Level.FINE,
              "{0} handed {1} over to the preferred candidate {2}",
              new Object[] {identity, election.name(), successor.identity()});
        }
        asked.answer.complete(successor);
        return;
      } catch (RuntimeException e) {
        if (asked.seq >= 0) {
          // Not again for this naming: only when Observe names a preferred candidate anew.
          synchronized (lock) {
            failedSeq = asked.seq;
          }
          LOG.log(
              Level.FINE,
              identity + " could not hand " + election.name() + " over to " + asked.successor,
              e);
        }
        asked.answer.completeExceptionally(e);
        if (term.isHeld() && !closed) {
          continue; // NO_WAITER (or a failed call): lead the term again
        }
        term.close();
        return;
      }
    }
  }

  /**
   * One period of leading {@code term}: {@code takeLeadership} until the term ends, the elector
   * closes or a hand-over is asked for ({@link #resignTo} or a preferred candidate); then resigns
   * a term still held (not for a hand-over) and calls {@code stoppedLeading}. When a preferred
   * candidate outranks this elector already as it starts, neither callback runs.
   *
   * @return the hand-over asked for, or null
   */
  private Handover leadOnce(Session term) {
    Thread self = Thread.currentThread();
    term.addLossListener(loss -> self.interrupt());
    Handover taken;
    boolean handingOverAtOnce;
    synchronized (lock) {
      leading = term;
      // Observe may have named a preferred candidate before this term began.
      handingOverAtOnce = handOverToPreferred();
    }
    try {
      if (!closed && !handingOverAtOnce) {
        listener.takeLeadership(term);
      }
    } catch (InterruptedException e) {
      // The term ended, the elector is closing, or a hand-over was asked for.
    } catch (Exception e) {
      LOG.log(Level.WARNING, "takeLeadership of " + election.name() + " failed; resigning", e);
    } finally {
      synchronized (lock) {
        leading = null;
        taken = handover;
        handover = null;
        Thread.interrupted(); // clear a pending interrupt before the release call
      }
      if (taken == null) {
        try {
          term.release();
        } catch (TenureException e) {
          LOG.log(Level.FINE, "resigning " + election.name() + " (the term expires at its TTL)", e);
        }
      }
      if (!handingOverAtOnce) {
        listener.stoppedLeading();
      }
    }
    return taken;
  }

  /** Sleeps with jitter; false when interrupted (the elector is closing). */
  private boolean pause(long ms) {
    try {
      MILLISECONDS.sleep(ms + ThreadLocalRandom.current().nextLong(ms / 2 + 1));
      return !closed;
    } catch (InterruptedException e) {
      return false;
    }
  }
}
