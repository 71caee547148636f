package dev.tenure.client;

import static java.util.concurrent.TimeUnit.NANOSECONDS;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.Lease;
import dev.tenure.v1.ReleaseRequest;
import dev.tenure.v1.ReleaseResponse;
import dev.tenure.v1.RenewRequest;
import dev.tenure.v1.RenewResponse;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * One holding of a lease, kept alive by background renewals until it is released or lost.
 *
 * <p>A session knows its lease's name, holder, fencing token, current revision, lease key and
 * granted TTL, and its <em>safe deadline</em>: the {@link System#nanoTime()} at which the last
 * successful Acquire or Renew was sent, plus the granted TTL, minus the safety margin. The server
 * counts the TTL from no earlier than that send time, so until the safe deadline nobody else can
 * hold the lease. {@link #isHeld()} is false from the safe deadline on, whatever the renewal
 * thread is doing: a holder never believes it holds the lease past it.
 *
 * <p>Renewals run on the client's scheduler every {@link AcquireOptions#getRenewFraction()} of the
 * granted TTL (1/3 by default), each with the revision of the last reply (and the slot of a
 * semaphore holder), over the client's one KeepAlive stream (unary Renew where the server has
 * none), and move the safe deadline forward from their own send time. A failed renewal that may succeed later (server or
 * NATS unreachable) is retried until the safe deadline.
 *
 * <p>Loss is final and is signalled once to every {@link LossListener}:
 *
 * <ul>
 *   <li>{@link LossReason#NOT_HELD} as soon as a renewal fails with {@code LEASE_NOT_HELD} (the
 *       lease expired and was taken, or was released or revoked elsewhere);
 *   <li>{@link LossReason#RENEW_REJECTED} as soon as a renewal fails with another error that a
 *       retry cannot fix;
 *   <li>{@link LossReason#DEADLINE_PASSED} at the safe deadline when no renewal got through.
 * </ul>
 *
 * <p>{@link #release()} or {@link #close()} (try-with-resources) ends the session and releases
 * the lease; listeners are not called for a release. All methods are thread-safe.
 */
public final class Session implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Session.class.getName());

  /** The longest pause between retries of a renewal that failed transiently. */
  private static final long MAX_RETRY_DELAY_NANOS = TimeUnit.MILLISECONDS.toNanos(200);

  /** Why a session lost its lease. */
  public enum LossReason {
    /** A renewal failed with {@code LEASE_NOT_HELD}: the server says someone else has it or nobody does. */
    NOT_HELD,
    /** A renewal failed with an error that retrying cannot fix (e.g. {@code INVALID_LEASE_KEY}). */
    RENEW_REJECTED,
    /** The safe deadline passed before a renewal got through (server unreachable, holder stalled). */
    DEADLINE_PASSED,
    /**
     * The client's shared lease watch showed the holding end (REVOKED, EXPIRED, RELEASED, or
     * another holder's token): noticed at once, not at the next renewal.
     */
    LEASE_ENDED
  }

  /** What ended a session's holding: a reason and the renewal error behind it, if any. */
  public static final class Loss {
    private final LossReason reason;
    private final TenureException cause;

    Loss(LossReason reason, TenureException cause) {
      this.reason = reason;
      this.cause = cause;
    }

    /** @return why the lease was lost */
    public LossReason getReason() {
      return reason;
    }

    /**
     * The error of the renewal that failed; for {@link LossReason#DEADLINE_PASSED}, the last
     * transient error seen, if any.
     *
     * @return the renewal error, if there was one
     */
    public Optional<TenureException> getCause() {
      return Optional.ofNullable(cause);
    }

    @Override
    public String toString() {
      return cause == null ? reason.name() : reason + " (" + cause.getMessage() + ")";
    }
  }

  /** Told once when a session loses its lease. */
  @FunctionalInterface
  public interface LossListener {
    /**
     * Called once, on the client's callback thread pool, when the lease is lost. It may block or
     * call {@link Session#close()}.
     *
     * @param loss why the lease was lost
     */
    void onLoss(Loss loss);
  }

  private enum State {
    HELD,
    LOST,
    RELEASED
  }

  private final LeaseClient client;
  private final AcquireOptions options;
  private final String name;
  private final String holder;
  private final String leaseKey;
  private final long fencingToken;
  private final int slot;
  private final LossWatch.Watched watched;

  // Everything below is guarded by `this`.
  private State state = State.HELD;
  private long revision;
  private Duration grantedTtl;
  private long lastSendNanos;
  private long deadlineNanos;
  private Loss loss;
  private TenureException lastError;
  private long releaseRevision;
  private final List<LossListener> listeners = new ArrayList<>();
  private ScheduledFuture<?> renewTask;
  private ScheduledFuture<?> watchdogTask;
  private boolean renewalsPaused;
  private Consumer<Lease> renewalObserver;

  Session(LeaseClient client, AcquireOptions options, Lease lease, String leaseKey, long sendNanos) {
    this.client = client;
    this.options = options;
    this.name = lease.getName();
    this.holder = lease.getHolder();
    this.leaseKey = leaseKey;
    this.fencingToken = lease.getFencingToken();
    this.slot = lease.getSlot();
    this.watched = new LossWatch.Watched(name, slot, fencingToken, this::endedByWatch);
    this.revision = lease.getRevision();
    this.grantedTtl = ttlOf(lease);
    this.lastSendNanos = sendNanos;
    this.deadlineNanos = sendNanos + grantedTtl.toNanos() - marginNanos();
  }

  /**
   * Starts the renewals. If the Acquire took longer than one renewal interval (it waited for the
   * lease), renews once first, so the caller gets a safe deadline counted from a recent send.
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

  /** A blocking renewal for {@link #start()}; throws when the lease cannot be kept. */
  private void renewOnce() {
    RenewRequest request;
    synchronized (this) {
      request = renewRequest();
    }
    long send = System.nanoTime();
    try {
      RenewResponse reply =
          client
              .blockingStub()
              .withDeadlineAfter(options.getRpcTimeout().toNanos(), NANOSECONDS)
              .renew(request);
      synchronized (this) {
        apply(send, reply.getLease());
      }
    } catch (StatusRuntimeException e) {
      TenureException error = client.error(e, "Renew");
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

  /** @return the lease name */
  public String getName() {
    return name;
  }

  /** @return who holds the lease through this session */
  public String getHolder() {
    return holder;
  }

  /**
   * The fencing token of this holding: the same for every renewal, and strictly greater for every
   * later holder of the name. Send it with every write to a downstream store (see {@link
   * FencingGuard}).
   *
   * @return the fencing token
   */
  public long getFencingToken() {
    return fencingToken;
  }

  /**
   * The semaphore slot of this holding (1 to the semaphore's limit), sent with every renewal and
   * the release; 0 for a plain lease.
   *
   * @return the slot, or 0
   */
  public int getSlot() {
    return slot;
  }

  /** What the client's loss watch follows for this session. */
  LossWatch.Watched watched() {
    return watched;
  }

  /**
   * The revision of the latest write of this holding (from the last Acquire or Renew reply).
   *
   * @return the current revision
   */
  public synchronized long getRevision() {
    return revision;
  }

  /**
   * The ownership secret presented with every Renew and Release.
   *
   * @return the lease key
   */
  public String getLeaseKey() {
    return leaseKey;
  }

  /**
   * The TTL the server granted (whole seconds) in its last reply.
   *
   * @return the granted TTL
   */
  public synchronized Duration getGrantedTtl() {
    return grantedTtl;
  }

  /**
   * The safe deadline on the {@link System#nanoTime()} clock: send time of the last successful
   * Acquire or Renew + granted TTL − safety margin.
   *
   * @return the safe deadline in {@code System.nanoTime()} units
   */
  public synchronized long getSafeDeadlineNanos() {
    return deadlineNanos;
  }

  /**
   * How long this session may still act as holder without another successful renewal.
   *
   * @return the time until the safe deadline, zero once the lease is not held
   */
  public synchronized Duration getTimeLeft() {
    if (state != State.HELD) {
      return Duration.ZERO;
    }
    return Duration.ofNanos(Math.max(0, deadlineNanos - System.nanoTime()));
  }

  /**
   * Whether this session may act as the lease's holder right now: it was neither lost nor released
   * and the safe deadline has not passed. Check it before each step of protected work, and pass
   * {@link #getFencingToken()} along with writes.
   *
   * @return true while the lease is safely held
   */
  public synchronized boolean isHeld() {
    return state == State.HELD && System.nanoTime() - deadlineNanos < 0;
  }

  /**
   * Why the lease was lost.
   *
   * @return the loss, or empty while held or after a release
   */
  public synchronized Optional<Loss> getLoss() {
    return Optional.ofNullable(loss);
  }

  /**
   * Registers a listener told once when the lease is lost. Added after the loss, it is called at
   * once (on the client's callback pool); it is never called for a session that was released.
   *
   * @param listener the listener
   */
  public void addLossListener(LossListener listener) {
    Loss already;
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
   * Stops the renewals and releases the lease with the current revision, so the next holder can
   * take it at once. After this call the session is not held, even if the call fails (the lease
   * then ends when its TTL runs out).
   *
   * <p>Release after loss is not an error: it reports "was not held" ({@code false}), as does a
   * second call. Only transport, auth and argument failures of a session that was still held
   * throw.
   *
   * @return true when this call released a held lease; false when it was not held any more (lost
   *     before, the server says it is gone, or released before)
   * @throws TenureException when a held lease could not be released (e.g. the server cannot be
   *     reached: the lease then expires after its TTL)
   */
  public boolean release() {
    ReleaseRequest request;
    boolean wasHeld;
    boolean refused;
    synchronized (this) {
      if (state == State.RELEASED) {
        return false;
      }
      wasHeld = isHeld();
      refused =
          loss != null
              && (loss.getReason() == LossReason.NOT_HELD
                  || loss.getReason() == LossReason.LEASE_ENDED);
      state = State.RELEASED;
      listeners.clear();
      cancelTasksLocked();
      request =
          ReleaseRequest.newBuilder()
              .setName(name)
              .setExpectedRevision(revision)
              .setLeaseKey(leaseKey)
              .setSlot(slot)
              .build();
    }
    client.forget(this);
    if (refused) {
      return false;
    }
    try {
      ReleaseResponse reply =
          client
              .blockingStub()
              .withDeadlineAfter(options.getRpcTimeout().toNanos(), NANOSECONDS)
              .release(request);
      synchronized (this) {
        releaseRevision = reply.getRevision();
      }
      return wasHeld;
    } catch (StatusRuntimeException e) {
      TenureException error = client.error(e, "Release");
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
   * Releases the lease like {@link #release()}, but never throws: a failure is logged and the
   * lease ends by expiry. Meant for try-with-resources.
   */
  @Override
  public void close() {
    closeQuietly();
  }

  private void closeQuietly() {
    try {
      release();
    } catch (TenureException e) {
      LOG.log(Level.FINE, "release of lease " + name + " failed; it will expire", e);
    }
  }

  @Override
  public synchronized String toString() {
    return "Session{name="
        + name
        + (slot != 0 ? ", slot=" + slot : "")
        + ", holder="
        + holder
        + ", fencingToken="
        + fencingToken
        + ", revision="
        + revision
        + ", grantedTtl="
        + grantedTtl
        + ", state="
        + state
        + (loss != null ? ", loss=" + loss : "")
        + "}";
  }

  // ---- Test hooks (package-private): simulate a stalled holder. ----

  /**
   * Stops sending renewals for good (the safe-deadline watchdog keeps running), as a holder that
   * stalled would.
   */
  synchronized void pauseRenewals() {
    renewalsPaused = true;
  }

  /** Called with the lease of every successful background renewal. */
  synchronized void setRenewalObserver(Consumer<Lease> observer) {
    this.renewalObserver = observer;
  }

  // ---- Renewal machinery. ----

  private long marginNanos() {
    return options.marginFor(grantedTtl).toNanos();
  }

  private long intervalNanos() {
    return (long) (grantedTtl.toNanos() * options.getRenewFraction());
  }

  private RenewRequest renewRequest() {
    return RenewRequest.newBuilder()
        .setName(name)
        .setExpectedRevision(revision)
        .setLeaseKey(leaseKey)
        .setSlot(slot)
        .build();
  }

  /** Takes in a successful reply to a request sent at {@code send}. Caller holds the lock. */
  private void apply(long send, Lease lease) {
    revision = lease.getRevision();
    grantedTtl = ttlOf(lease);
    lastSendNanos = send;
    long deadline = send + grantedTtl.toNanos() - marginNanos();
    if (deadline - deadlineNanos > 0) {
      deadlineNanos = deadline;
    }
    lastError = null;
  }

  private void scheduleRenewLocked(long atNanos) {
    if (state != State.HELD) {
      return;
    }
    long delay = Math.max(0, atNanos - System.nanoTime());
    try {
      renewTask = client.scheduler().schedule(this::renewNow, delay, NANOSECONDS);
    } catch (RejectedExecutionException e) {
      LOG.log(Level.FINE, "scheduler is shut down; renewals of " + name + " stop", e);
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
      LOG.log(Level.FINE, "scheduler is shut down; watchdog of " + name + " stops", e);
    }
  }

  /** Signals loss at the safe deadline unless a renewal has moved it since. */
  private void watchdog() {
    List<LossListener> toNotify;
    Loss lost;
    synchronized (this) {
      watchdogTask = null;
      if (state != State.HELD) {
        return;
      }
      if (System.nanoTime() - deadlineNanos < 0) {
        scheduleWatchdogLocked();
        return;
      }
      toNotify = loseLocked(LossReason.DEADLINE_PASSED, lastError);
      lost = loss;
    }
    notify(toNotify, lost);
  }

  /** Sends one renewal; its reply schedules the next one. */
  private void renewNow() {
    RenewRequest request;
    long send;
    long timeout;
    List<LossListener> toNotify;
    Loss lost;
    synchronized (this) {
      renewTask = null;
      if (state != State.HELD) {
        return;
      }
      if (renewalsPaused) {
        return;
      }
      send = System.nanoTime();
      long left = deadlineNanos - send;
      if (left > 0) {
        request = renewRequest();
        timeout = Math.min(left, options.getRpcTimeout().toNanos());
        toNotify = null;
        lost = null;
      } else {
        request = null;
        timeout = 0;
        toNotify = loseLocked(LossReason.DEADLINE_PASSED, lastError);
        lost = loss;
      }
    }
    if (request == null) {
      notify(toNotify, lost);
      return;
    }
    client
        .keepAlive()
        .renew(
            request,
            timeout,
            new KeepAliveStream.Callback() {
              @Override
              public void renewed(Lease lease) {
                Session.this.renewed(send, lease);
              }

              @Override
              public void failed(TenureException error) {
                renewFailed(error);
              }
            });
  }

  /**
   * Takes the reply of an election's Proclaim (a renewal that also wrote a new value): a newer
   * revision of this holding moves the session on; the renewal schedule stays as it is.
   */
  synchronized void proclaimed(long send, Lease lease) {
    if (state == State.HELD
        && lease.getFencingToken() == fencingToken
        && lease.getRevision() > revision
        && System.nanoTime() - deadlineNanos < 0) {
      apply(send, lease);
    }
  }

  private void renewed(long send, Lease lease) {
    List<LossListener> toNotify = null;
    Loss lost = null;
    Consumer<Lease> observer = null;
    synchronized (this) {
      if (state != State.HELD) {
        return;
      }
      if (System.nanoTime() - deadlineNanos >= 0) {
        // Too late: isHeld() has already said no, and loss is final.
        toNotify = loseLocked(LossReason.DEADLINE_PASSED, lastError);
        lost = loss;
      } else if (lease.getFencingToken() != fencingToken) {
        toNotify =
            loseLocked(
                LossReason.NOT_HELD,
                new TenureException(
                    io.grpc.Status.Code.FAILED_PRECONDITION,
                    ErrorReason.LEASE_NOT_HELD,
                    "",
                    "renewal returned fencing token "
                        + lease.getFencingToken()
                        + " instead of "
                        + fencingToken,
                    java.util.Map.of(),
                    null));
        lost = loss;
      } else {
        apply(send, lease);
        scheduleRenewLocked(send + intervalNanos());
        observer = renewalObserver;
      }
    }
    if (toNotify != null) {
      notify(toNotify, lost);
    } else if (observer != null) {
      observer.accept(lease);
    }
  }

  /** Called by the client's {@link LossWatch} when an event shows this holding ended. */
  void endedByWatch(dev.tenure.v1.LeaseEvent event) {
    List<LossListener> toNotify;
    Loss lost;
    synchronized (this) {
      if (state != State.HELD) {
        return;
      }
      toNotify = loseLocked(LossReason.LEASE_ENDED, null);
      lost = loss;
    }
    notify(toNotify, lost);
  }

  private void renewFailed(TenureException error) {
    List<LossListener> toNotify;
    Loss lost;
    synchronized (this) {
      if (state != State.HELD) {
        return;
      }
      long now = System.nanoTime();
      if (error.getReason() == ErrorReason.LEASE_NOT_HELD) {
        toNotify = loseLocked(LossReason.NOT_HELD, error);
      } else if (!error.isRetryable()) {
        toNotify = loseLocked(LossReason.RENEW_REJECTED, error);
      } else if (now - deadlineNanos >= 0) {
        toNotify = loseLocked(LossReason.DEADLINE_PASSED, error);
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

  /** Marks the session lost; returns the listeners to tell (outside the lock). */
  private List<LossListener> loseLocked(LossReason reason, TenureException cause) {
    state = State.LOST;
    loss = new Loss(reason, cause);
    cancelTasksLocked();
    List<LossListener> toNotify = new ArrayList<>(listeners);
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

  private void notify(List<LossListener> toNotify, Loss lost) {
    for (LossListener listener : toNotify) {
      client.callback(
          () -> {
            try {
              listener.onLoss(lost);
            } catch (RuntimeException e) {
              LOG.log(Level.WARNING, "loss listener of lease " + name + " failed", e);
            }
          });
    }
  }

  private static Duration ttlOf(Lease lease) {
    return Duration.ofSeconds(lease.getTtl().getSeconds(), lease.getTtl().getNanos());
  }
}
