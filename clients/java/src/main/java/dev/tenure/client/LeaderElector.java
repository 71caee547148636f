package dev.tenure.client;

import static java.util.concurrent.TimeUnit.MILLISECONDS;

import dev.tenure.v1.ErrorReason;
import java.time.Duration;
import java.util.Objects;
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
 */
public final class LeaderElector implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(LeaderElector.class.getName());
  private static final Duration CAMPAIGN_WAIT = Duration.ofSeconds(30);

  /** What the elector tells its user. */
  public interface Listener {
    /**
     * Runs on the elector's thread while this participant leads; the thread is interrupted when
     * the term ends. Returning (or throwing) resigns the term.
     *
     * @param term the term: its fencing token goes with every downstream write
     * @throws Exception anything: it is logged and the term is resigned
     */
    void takeLeadership(Session term) throws Exception;

    /** Called once per term, after {@link #takeLeadership} returned. */
    default void stoppedLeading() {}

    /**
     * Called with every change of leader (including this participant), on another thread.
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
  private final Listener listener;
  private final Thread thread;
  private final AutoCloseable observer;
  private volatile boolean closed;
  private volatile TenureException failure;

  private LeaderElector(
      LeaseClient client,
      String name,
      String identity,
      String value,
      Duration ttl,
      Listener listener,
      boolean observe) {
    this.election = new Election(client, name);
    this.identity = Objects.requireNonNull(identity, "identity");
    this.value = Objects.requireNonNull(value, "value");
    this.ttl = Objects.requireNonNull(ttl, "ttl");
    this.listener = Objects.requireNonNull(listener, "listener");
    this.observer = observe ? election.observe(listener::newLeader) : null;
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
    LeaderElector elector = new LeaderElector(client, name, identity, value, ttl, listener, true);
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
        term = election.campaign(identity, value, ttl, CAMPAIGN_WAIT);
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

  private void lead(Session term) {
    Thread self = Thread.currentThread();
    term.addLossListener(loss -> self.interrupt());
    try {
      if (!closed) {
        listener.takeLeadership(term);
      }
    } catch (InterruptedException e) {
      // The term ended or the elector is closing.
    } catch (Exception e) {
      LOG.log(Level.WARNING, "takeLeadership of " + election.name() + " failed; resigning", e);
    } finally {
      Thread.interrupted(); // clear a pending interrupt before the release call
      try {
        term.release();
      } catch (TenureException e) {
        LOG.log(Level.FINE, "resigning " + election.name() + " (the term expires at its TTL)", e);
      }
      listener.stoppedLeading();
    }
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
