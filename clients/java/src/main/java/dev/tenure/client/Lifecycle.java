package dev.tenure.client;

import static java.util.concurrent.TimeUnit.NANOSECONDS;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.EventType;
import dev.tenure.v1.LeaseEvent;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.Predicate;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The life of a holding, written once for a {@link Session} (one lease) and a {@link
 * GroupSession} (its members): the safe deadline, the renewals every {@code renewFraction} of the
 * granted TTL and their retries, the watchdog at the safe deadline, loss (final, told once to
 * every {@link Session.LossListener}), the loss watch's word, and the release.
 *
 * <p>What differs between the two is a {@link Holding}: what is held and how a renewal and a
 * release are sent. Everything here is guarded by {@code this}.
 *
 * @param <R> the holding as the server returns it: a {@code Lease}, or the members' leases
 */
final class Lifecycle<R> {
  /** The longest pause between retries of a renewal that failed transiently. */
  private static final long MAX_RETRY_DELAY_NANOS = TimeUnit.MILLISECONDS.toNanos(200);

  /** What differs between a {@link Session} and a {@link GroupSession}. */
  interface Holding<R> {
    /**
     * What messages call it.
     *
     * @return "lease" or "group"
     */
    String kind();

    /**
     * What messages name it.
     *
     * @return the lease name, or the members' names
     */
    String label();

    /**
     * The granted TTL of a reply.
     *
     * @param reply a renewal's (or the acquire's) reply
     * @return its TTL
     */
    Duration ttl(R reply);

    /**
     * Why a renewal's reply is not this holding (other fencing tokens or members).
     *
     * @param reply the reply
     * @return the reason, or null when the reply is this holding
     */
    String mismatch(R reply);

    /**
     * Sends one renewal of {@code held} (its revisions) in the background.
     *
     * @param held the last holding
     * @param timeoutNanos the call's deadline
     * @param renewed told the reply
     * @param failed told why there is none
     */
    void renewAsync(
        R held, long timeoutNanos, Consumer<R> renewed, Consumer<TenureException> failed);

    /**
     * Sends one renewal of {@code held} and waits for it.
     *
     * @param held the last holding
     * @param timeoutNanos the call's deadline
     * @return the reply
     * @throws TenureException when it failed
     */
    R renewBlocking(R held, long timeoutNanos);

    /**
     * Sends the release of {@code held} and waits for it.
     *
     * @param held the last holding
     * @param timeoutNanos the call's deadline
     * @return whether it released every holding
     * @throws TenureException when it failed
     */
    boolean release(R held, long timeoutNanos);

    /**
     * Whether a release is sent after a loss that says the holding is gone ({@code NOT_HELD},
     * {@code LEASE_ENDED}): a group's members still held are freed at once.
     *
     * @return true to send it anyway
     */
    boolean releasesAfterLoss();

    /** The client stops following the holding (it was released). */
    void forget();
  }

  private enum State {
    HELD,
    LOST,
    RELEASED
  }

  private final LeaseClient client;
  private final AcquireOptions options;
  private final Holding<R> holding;
  private final Logger log;

  private State state = State.HELD;
  private R held;
  private Duration grantedTtl;
  private long lastSendNanos;
  private long deadlineNanos;
  private Session.Loss loss;
  private TenureException lastError;
  private final List<Session.LossListener> listeners = new ArrayList<>();
  private ScheduledFuture<?> renewTask;
  private ScheduledFuture<?> watchdogTask;
  private boolean renewalsPaused;
  private Consumer<R> renewalObserver;
  /** A renewal was sent and has not been answered yet. */
  private boolean renewInFlight;
  /**
   * A hand-over or a change (a Downgrade) is in flight: renewals and a release wait, a watch's
   * loss is held back.
   */
  private boolean handing;
  /** A watch event that ended the holding while a hand-over or a change was in flight. */
  private LeaseEvent heldBack;
  /**
   * Counts the changes of the holding ({@link #change}): the answer to a renewal sent before one
   * (with the old revision) is ignored.
   */
  private long generation;

  /**
   * The life of {@code held}, acquired by a request sent at {@code sendNanos}, logging to {@code
   * log} (the logger of the session's class); not started yet.
   */
  Lifecycle(
      LeaseClient client,
      AcquireOptions options,
      Holding<R> holding,
      Logger log,
      R held,
      long sendNanos) {
    this.client = client;
    this.options = options;
    this.holding = holding;
    this.log = log;
    this.held = held;
    this.grantedTtl = holding.ttl(held);
    this.lastSendNanos = sendNanos;
    this.deadlineNanos = sendNanos + grantedTtl.toNanos() - marginNanos();
  }

  /**
   * Starts the renewals. If the acquire took longer than one renewal interval (it waited), renews
   * once first, so the caller gets a safe deadline counted from a recent send.
   */
  void start() {
    if (marginNanos() >= (long) (grantedTtl.toNanos() * (1 - options.getRenewFraction()))) {
      closeQuietly();
      throw new IllegalArgumentException(
          "safety margin "
              + options.marginFor(grantedTtl)
              + " leaves no time to renew a TTL of "
              + grantedTtl
              + " every "
              + options.getRenewFraction()
              + " of it");
    }
    boolean slow;
    synchronized (this) {
      slow = System.nanoTime() - lastSendNanos >= intervalNanos();
    }
    if (slow) {
      renewOnce();
    }
    synchronized (this) {
      scheduleRenewLocked(lastSendNanos + intervalNanos());
      scheduleWatchdogLocked();
    }
  }

  /** A blocking renewal for {@link #start()}; throws when the holding cannot be kept. */
  private void renewOnce() {
    R request;
    long gen;
    synchronized (this) {
      request = held;
      gen = generation;
    }
    long send = System.nanoTime();
    try {
      R reply = holding.renewBlocking(request, options.getRpcTimeout().toNanos());
      // The safe deadline may have passed during a long wait: this reply counts from a recent
      // send, so it is taken all the same.
      renewed(gen, send, reply, false);
    } catch (TenureException error) {
      boolean expired;
      synchronized (this) {
        expired = System.nanoTime() >= deadlineNanos;
        lastError = error;
      }
      if (!error.isRetryable() || expired) {
        closeQuietly();
        throw error;
      }
    }
  }

  /** @return the last holding the server returned */
  synchronized R held() {
    return held;
  }

  /** @return the TTL of the last reply */
  synchronized Duration getGrantedTtl() {
    return grantedTtl;
  }

  /** @return the safe deadline in {@code System.nanoTime()} units */
  synchronized long getSafeDeadlineNanos() {
    return deadlineNanos;
  }

  /** @return the time until the safe deadline, zero once not held */
  synchronized Duration getTimeLeft() {
    if (state != State.HELD) {
      return Duration.ZERO;
    }
    return Duration.ofNanos(Math.max(0, deadlineNanos - System.nanoTime()));
  }

  /** @return true while neither lost nor released and before the safe deadline */
  synchronized boolean isHeld() {
    return state == State.HELD && System.nanoTime() - deadlineNanos < 0;
  }

  /** @return the loss, or empty while held or after a release */
  synchronized Optional<Session.Loss> getLoss() {
    return Optional.ofNullable(loss);
  }

  /** @return the state and the loss, for {@code toString} */
  synchronized String stateString() {
    return "state=" + state + (loss != null ? ", loss=" + loss : "");
  }

  /** See {@link Session#addLossListener}. */
  void addLossListener(Session.LossListener listener) {
    Session.Loss already;
    synchronized (this) {
      if (state == State.RELEASED) {
        return;
      }
      if (state == State.HELD) {
        listeners.add(listener);
        return;
      }
      already = loss;
    }
    notify(List.of(listener), already);
  }

  /**
   * Stops the renewals and releases the holding. After this call it is not held, even if the call
   * fails (the holding then ends when its TTL runs out).
   *
   * @return true when this call released a held holding (every member of a group); false when it
   *     was not held (lost before, the server says it is gone, or released before)
   * @throws TenureException when a held holding could not be released
   */
  boolean release() {
    R toRelease;
    boolean wasHeld;
    boolean refused;
    synchronized (this) {
      // A hand-over or change in flight decides what there is to release (and with which
      // revision): wait for its answer.
      awaitLocked(() -> handing);
      if (state == State.RELEASED) {
        return false;
      }
      wasHeld = isHeld();
      refused =
          !holding.releasesAfterLoss()
              && loss != null
              && (loss.getReason() == Session.LossReason.NOT_HELD
                  || loss.getReason() == Session.LossReason.LEASE_ENDED
                  || loss.getReason() == Session.LossReason.MISSED);
      state = State.RELEASED;
      listeners.clear();
      cancelTasksLocked();
      toRelease = held;
    }
    holding.forget();
    if (refused) {
      return false;
    }
    try {
      boolean all = holding.release(toRelease, options.getRpcTimeout().toNanos());
      return wasHeld && all;
    } catch (TenureException error) {
      ErrorReason reason = error.getReason();
      if (!wasHeld
          || reason == ErrorReason.LEASE_NOT_HELD
          || reason == ErrorReason.LEASE_NOT_FOUND) {
        return false;
      }
      throw error;
    }
  }

  /**
   * Hands the holding over with {@code send} (a Transfer, or a Resign to a successor), after the
   * renewal in flight (if any) landed and with no renewal beside it. On success the holding ends
   * as after a release: not held, no loss, no listener called, and {@link #release()} returns
   * false. On failure it is unchanged, unless the server says it ended ({@code LEASE_NOT_HELD},
   * {@code LEASE_NOT_FOUND}) or the loss watch saw it end meanwhile: then it is lost.
   *
   * @param send sends the hand-over of the given (latest) holding; throws on failure
   * @param <T> what the hand-over returns
   * @return what {@code send} returned
   * @throws TenureException {@code LEASE_NOT_HELD} without a call when the holding is not held;
   *     the failure of {@code send}
   */
  <T> T handOver(Function<R, T> send) {
    R toSend = beginExclusive("hand-over");
    T out;
    try {
      out = send.apply(toSend);
    } catch (RuntimeException error) {
      exclusiveFailed(error);
      throw error;
    }
    synchronized (this) {
      endExclusiveLocked();
      heldBack = null;
      if (state == State.HELD) {
        state = State.RELEASED;
        listeners.clear();
        cancelTasksLocked();
      }
    }
    holding.forget();
    return out;
  }

  /**
   * Changes the holding in place with {@code send} (a Downgrade: a new fencing token and revision,
   * the same holding otherwise), after the renewal in flight (if any) landed and with no renewal
   * beside it; a {@link #release()} meanwhile waits for it. On success {@code apply} (called
   * under this lock with what {@code send} returned, also if the holding was lost meanwhile, so
   * that a release sends the new revision) returns the new holding, which the renewals send from
   * then on; a watch event held back meanwhile (most likely the change's own write) ends the
   * holding only if {@code endsNew} says it shows the new holding ended. On failure it is as
   * after a failed hand-over: unchanged, unless the server says it ended ({@code LEASE_NOT_HELD},
   * {@code LEASE_NOT_FOUND}) or the loss watch saw it end meanwhile.
   *
   * @param send sends the change of the given (latest) holding; throws on failure
   * @param apply takes the reply in (under this lock) and returns the new holding
   * @param endsNew whether a held-back watch event shows the new holding ended
   * @param <T> what the change returns
   * @return what {@code send} returned
   * @throws TenureException {@code LEASE_NOT_HELD} without a call when the holding is not held;
   *     the failure of {@code send}
   */
  <T> T change(Function<R, T> send, Function<T, R> apply, Predicate<LeaseEvent> endsNew) {
    R toSend = beginExclusive("change");
    T out;
    try {
      out = send.apply(toSend);
    } catch (RuntimeException error) {
      exclusiveFailed(error);
      throw error;
    }
    List<Session.LossListener> toNotify = null;
    Session.Loss lost = null;
    synchronized (this) {
      endExclusiveLocked();
      LeaseEvent back = heldBack;
      heldBack = null;
      held = apply.apply(out);
      // A renewal still unanswered (its wait timed out) carries the old revision: ignore it.
      generation++;
      renewInFlight = false;
      if (state == State.HELD) {
        if (back != null && endsNew.test(back)) {
          toNotify = loseLocked(watchReason(back), null, back);
          lost = loss;
        } else if (renewTask == null) {
          // Skipped while the change was in flight, or its answer is now ignored: renew (when due).
          scheduleRenewLocked(lastSendNanos + intervalNanos());
        }
      }
    }
    if (toNotify != null) {
      notify(toNotify, lost);
    }
    return out;
  }

  /**
   * Starts a hand-over or change: marks it in flight (renewals wait, a watch's loss is held back)
   * and waits for the renewal in flight, if any, to land.
   *
   * @param what "hand-over" or "change", for messages
   * @return the latest holding, to send
   */
  private synchronized R beginExclusive(String what) {
    if (!isHeld()) {
      throw notHeldLocked();
    }
    if (handing) {
      throw new IllegalStateException(
          "cannot start a "
              + what
              + " of "
              + holding.kind()
              + " "
              + holding.label()
              + ": a hand-over or change is already under way");
    }
    handing = true;
    awaitLocked(() -> renewInFlight);
    if (!isHeld()) {
      endExclusiveLocked();
      throw notHeldLocked();
    }
    return held;
  }

  /** A hand-over or change is over: renewals and a release may go. Caller holds the lock. */
  private void endExclusiveLocked() {
    handing = false;
    notifyAll();
  }

  /** Waits (at most the RPC timeout) while {@code condition} holds. Caller holds the lock. */
  private void awaitLocked(java.util.function.BooleanSupplier condition) {
    long until = System.nanoTime() + options.getRpcTimeout().toNanos();
    boolean interrupted = false;
    while (condition.getAsBoolean() && until - System.nanoTime() > 0) {
      try {
        NANOSECONDS.timedWait(this, Math.max(1, until - System.nanoTime()));
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * A hand-over or change failed with {@code error}: the holding is unchanged, unless the server
   * says it ended or the loss watch saw it end meanwhile (then it is lost).
   */
  private void exclusiveFailed(RuntimeException error) {
    List<Session.LossListener> toNotify = null;
    Session.Loss lost = null;
    synchronized (this) {
      endExclusiveLocked();
      LeaseEvent back = heldBack;
      heldBack = null;
      if (state == State.HELD) {
        ErrorReason reason =
            error instanceof TenureException ? ((TenureException) error).getReason() : null;
        if (back != null) {
          toNotify = loseLocked(watchReason(back), null, back);
        } else if (reason == ErrorReason.LEASE_NOT_HELD || reason == ErrorReason.LEASE_NOT_FOUND) {
          toNotify = loseLocked(Session.LossReason.NOT_HELD, (TenureException) error);
        } else if (renewTask == null) {
          scheduleRenewLocked(System.nanoTime()); // one may have been skipped meanwhile
        }
        lost = loss;
      }
    }
    if (toNotify != null) {
      notify(toNotify, lost);
    }
  }

  private TenureException notHeldLocked() {
    return new TenureException(
        io.grpc.Status.Code.FAILED_PRECONDITION,
        ErrorReason.LEASE_NOT_HELD,
        "",
        holding.kind() + " " + holding.label() + " is not held (" + stateString() + ")",
        java.util.Map.of(),
        null);
  }

  private static Session.LossReason watchReason(LeaseEvent event) {
    return event.getType() == EventType.EVENT_TYPE_MISSED
        ? Session.LossReason.MISSED
        : Session.LossReason.LEASE_ENDED;
  }

  /** {@link #release()} that never throws: a failure is logged and the holding expires. */
  void closeQuietly() {
    try {
      release();
    } catch (TenureException e) {
      log.log(
          Level.FINE,
          "release of " + holding.kind() + " " + holding.label() + " failed; it will expire",
          e);
    }
  }

  /** Stops sending renewals for good (the watchdog keeps running): a test hook. */
  synchronized void pauseRenewals() {
    renewalsPaused = true;
  }

  /** Called with the reply of every successful background renewal: a test hook. */
  synchronized void setRenewalObserver(Consumer<R> observer) {
    this.renewalObserver = observer;
  }

  /**
   * Takes in a successful reply to a request sent at {@code send}. Caller holds the lock.
   *
   * @param send when the request was sent
   * @param reply the reply
   */
  void apply(long send, R reply) {
    held = reply;
    grantedTtl = holding.ttl(reply);
    lastSendNanos = send;
    long deadline = send + grantedTtl.toNanos() - marginNanos();
    if (deadline - deadlineNanos > 0) {
      deadlineNanos = deadline;
    }
    lastError = null;
  }

  /**
   * Called by the client's {@link LossWatch} when an event shows the holding ended: {@link
   * Session.LossReason#MISSED} for a MISSED event, else {@link Session.LossReason#LEASE_ENDED}.
   */
  void endedByWatch(LeaseEvent event) {
    List<Session.LossListener> toNotify;
    Session.Loss lost;
    synchronized (this) {
      if (state != State.HELD) {
        return;
      }
      if (handing) {
        // Most likely the hand-over's own RELEASED, or the change's own write: its reply decides.
        if (heldBack == null) {
          heldBack = event;
        }
        return;
      }
      toNotify = loseLocked(watchReason(event), null, event);
      lost = loss;
    }
    notify(toNotify, lost);
  }

  // ---- Renewal machinery. ----

  private long marginNanos() {
    return options.marginFor(grantedTtl).toNanos();
  }

  private long intervalNanos() {
    return (long) (grantedTtl.toNanos() * options.getRenewFraction());
  }

  private void scheduleRenewLocked(long atNanos) {
    if (state != State.HELD) {
      return;
    }
    long delay = Math.max(0, atNanos - System.nanoTime());
    try {
      renewTask = client.scheduler().schedule(this::renewNow, delay, NANOSECONDS);
    } catch (RejectedExecutionException e) {
      log.log(Level.FINE, "scheduler is shut down; renewals of " + holding.label() + " stop", e);
    }
  }

  private void scheduleWatchdogLocked() {
    if (state != State.HELD) {
      return;
    }
    long delay = Math.max(0, deadlineNanos - System.nanoTime());
    try {
      watchdogTask = client.scheduler().schedule(this::watchdog, delay, NANOSECONDS);
    } catch (RejectedExecutionException e) {
      log.log(Level.FINE, "scheduler is shut down; watchdog of " + holding.label() + " stops", e);
    }
  }

  /** Signals loss at the safe deadline unless a renewal has moved it since. */
  private void watchdog() {
    List<Session.LossListener> toNotify;
    Session.Loss lost;
    synchronized (this) {
      watchdogTask = null;
      if (state != State.HELD) {
        return;
      }
      if (System.nanoTime() - deadlineNanos < 0) {
        scheduleWatchdogLocked();
        return;
      }
      toNotify = loseLocked(Session.LossReason.DEADLINE_PASSED, lastError);
      lost = loss;
    }
    notify(toNotify, lost);
  }

  /** Sends one renewal; its reply schedules the next one. */
  private void renewNow() {
    R request;
    long send;
    long timeout;
    long gen;
    List<Session.LossListener> toNotify;
    Session.Loss lost;
    synchronized (this) {
      renewTask = null;
      if (state != State.HELD) {
        return;
      }
      if (renewalsPaused || handing) {
        return; // a change, or a failed hand-over, schedules the next one
      }
      send = System.nanoTime();
      gen = generation;
      long left = deadlineNanos - send;
      if (left > 0) {
        request = held;
        timeout = Math.min(left, options.getRpcTimeout().toNanos());
        renewInFlight = true;
        toNotify = null;
        lost = null;
      } else {
        request = null;
        timeout = 0;
        toNotify = loseLocked(Session.LossReason.DEADLINE_PASSED, lastError);
        lost = loss;
      }
    }
    if (request == null) {
      notify(toNotify, lost);
      return;
    }
    holding.renewAsync(
        request, timeout, reply -> renewed(gen, send, reply, true), error -> renewFailed(gen, error));
  }

  private void renewed(long gen, long send, R reply, boolean reschedule) {
    List<Session.LossListener> toNotify = null;
    Session.Loss lost = null;
    Consumer<R> observer = null;
    synchronized (this) {
      if (gen != generation) {
        return; // sent before a change, with the old revision; the change renews anew
      }
      landedLocked();
      if (state != State.HELD) {
        return;
      }
      String mismatch = holding.mismatch(reply);
      if (reschedule && System.nanoTime() - deadlineNanos >= 0) {
        // Too late: isHeld() has already said no, and loss is final.
        toNotify = loseLocked(Session.LossReason.DEADLINE_PASSED, lastError);
        lost = loss;
      } else if (mismatch != null) {
        toNotify =
            loseLocked(
                Session.LossReason.NOT_HELD,
                new TenureException(
                    io.grpc.Status.Code.FAILED_PRECONDITION,
                    ErrorReason.LEASE_NOT_HELD,
                    "",
                    mismatch,
                    java.util.Map.of(),
                    null));
        lost = loss;
      } else {
        apply(send, reply);
        if (reschedule) {
          scheduleRenewLocked(send + intervalNanos());
          observer = renewalObserver;
        }
      }
    }
    if (toNotify != null) {
      notify(toNotify, lost);
    } else if (observer != null) {
      observer.accept(reply);
    }
  }

  private void renewFailed(long gen, TenureException error) {
    List<Session.LossListener> toNotify;
    Session.Loss lost;
    synchronized (this) {
      if (gen != generation) {
        return; // sent before a change, with the old revision; the change renews anew
      }
      landedLocked();
      if (state != State.HELD) {
        return;
      }
      long now = System.nanoTime();
      if (error.getReason() == ErrorReason.LEASE_NOT_HELD) {
        toNotify = loseLocked(Session.LossReason.NOT_HELD, error);
      } else if (!error.isRetryable()) {
        toNotify = loseLocked(Session.LossReason.RENEW_REJECTED, error);
      } else if (now - deadlineNanos >= 0) {
        toNotify = loseLocked(Session.LossReason.DEADLINE_PASSED, error);
      } else {
        lastError = error;
        long retryDelay = Math.min(MAX_RETRY_DELAY_NANOS, intervalNanos() / 2);
        scheduleRenewLocked(now + retryDelay);
        return;
      }
      lost = loss;
    }
    notify(toNotify, lost);
  }

  /** A renewal's answer came: a hand-over waiting for it may go. */
  private void landedLocked() {
    if (renewInFlight) {
      renewInFlight = false;
      notifyAll();
    }
  }

  /** Marks the holding lost; returns the listeners to tell (outside the lock). */
  private List<Session.LossListener> loseLocked(
      Session.LossReason reason, TenureException cause) {
    return loseLocked(reason, cause, null);
  }

  /** Marks the holding lost by a watch {@code event}; returns the listeners to tell. */
  private List<Session.LossListener> loseLocked(
      Session.LossReason reason, TenureException cause, LeaseEvent event) {
    state = State.LOST;
    loss = new Session.Loss(reason, cause, event);
    cancelTasksLocked();
    List<Session.LossListener> toNotify = new ArrayList<>(listeners);
    listeners.clear();
    return toNotify;
  }

  private void cancelTasksLocked() {
    if (renewTask != null) {
      renewTask.cancel(false);
      renewTask = null;
    }
    if (watchdogTask != null) {
      watchdogTask.cancel(false);
      watchdogTask = null;
    }
  }

  private void notify(List<Session.LossListener> toNotify, Session.Loss lost) {
    for (Session.LossListener listener : toNotify) {
      client.callback(
          () -> {
            try {
              listener.onLoss(lost);
            } catch (RuntimeException e) {
              log.log(
                  Level.WARNING,
                  "loss listener of " + holding.kind() + " " + holding.label() + " failed",
                  e);
            }
          });
    }
  }
}
