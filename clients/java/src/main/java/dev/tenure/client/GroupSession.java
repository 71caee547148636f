package dev.tenure.client;

import static java.util.concurrent.TimeUnit.NANOSECONDS;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.GroupMember;
import dev.tenure.v1.Lease;
import dev.tenure.v1.ReleaseGroupRequest;
import dev.tenure.v1.ReleaseGroupResponse;
import dev.tenure.v1.RenewGroupRequest;
import dev.tenure.v1.RenewGroupResponse;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * A group of leases taken all at once by {@link LeaseClient#acquireGroup(AcquireOptions)} ({@code
 * AcquireGroup}), renewed together ({@code RenewGroup}: all members or none) and released together
 * ({@code ReleaseGroup}). Each member has its own fencing token ({@link #getFencingToken(String)});
 * all share one lease key, one TTL and one send time, hence one safe deadline.
 *
 * <p>The group is held as a whole or not at all: it is lost the moment any member is lost (the
 * client's loss watch sees an event ending a member, a RenewGroup fails with {@code
 * LEASE_NOT_HELD} naming a lost member, another error that a retry cannot fix, or the safe
 * deadline passes without a renewal), with the same {@link Session.LossReason}s as a {@link
 * Session}. Renewals follow the session rules: every {@code renewFraction} of the granted TTL,
 * transient failures retried until the safe deadline. All methods are thread-safe.
 */
public final class GroupSession implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(GroupSession.class.getName());
  private static final long MAX_RETRY_DELAY_NANOS = TimeUnit.MILLISECONDS.toNanos(200);

  private enum State {
    HELD,
    LOST,
    RELEASED
  }

  private final LeaseClient client;
  private final AcquireOptions options;
  private final String holder;
  private final String leaseKey;
  private final List<String> names;
  private final Map<String, Long> tokens;
  private final List<LossWatch.Watched> watched;

  // Everything below is guarded by `this`.
  private State state = State.HELD;
  private final long[] revisions;
  private Duration grantedTtl;
  private long lastSendNanos;
  private long deadlineNanos;
  private Session.Loss loss;
  private TenureException lastError;
  private final List<Session.LossListener> listeners = new ArrayList<>();
  private ScheduledFuture<?> renewTask;
  private ScheduledFuture<?> watchdogTask;
  private List<String> notHeldAtRelease = List.of();

  GroupSession(
      LeaseClient client, AcquireOptions options, List<Lease> leases, String leaseKey, long send) {
    this.client = client;
    this.options = options;
    this.holder = options.getHolder();
    this.leaseKey = leaseKey;
    List<String> n = new ArrayList<>();
    Map<String, Long> t = new LinkedHashMap<>();
    List<LossWatch.Watched> w = new ArrayList<>();
    this.revisions = new long[leases.size()];
    for (int i = 0; i < leases.size(); i++) {
      Lease lease = leases.get(i);
      n.add(lease.getName());
      t.put(lease.getName(), lease.getFencingToken());
      w.add(new LossWatch.Watched(lease.getName(), 0, lease.getFencingToken(), this::endedByWatch));
      revisions[i] = lease.getRevision();
    }
    this.names = Collections.unmodifiableList(n);
    this.tokens = Collections.unmodifiableMap(t);
    this.watched = List.copyOf(w);
    this.grantedTtl = ttlOf(leases.get(0));
    this.lastSendNanos = send;
    this.deadlineNanos = send + grantedTtl.toNanos() - marginNanos();
  }

  /** Starts renewals (renewing once first when the AcquireGroup waited longer than an interval). */
  void start() {
    if (marginNanos() >= (long) (grantedTtl.toNanos() * (1 - options.getRenewFraction()))) {
      closeQuietly();
      throw new IllegalArgumentException(
          "safety margin "
              + options.marginFor(grantedTtl)
              + " leaves no time to renew a TTL of "
              + grantedTtl);
    }
    boolean slow;
    synchronized (this) {
      slow = System.nanoTime() - lastSendNanos >= intervalNanos();
    }
    if (slow) {
      long send = System.nanoTime();
      try {
        RenewGroupResponse reply =
            client
                .blockingStub()
                .withDeadlineAfter(options.getRpcTimeout().toNanos(), NANOSECONDS)
                .renewGroup(renewRequest());
        renewed(send, reply.getLeasesList(), false);
      } catch (StatusRuntimeException e) {
        TenureException error = client.error(e, "RenewGroup");
        if (!error.isRetryable() || !isHeld()) {
          closeQuietly();
          throw error;
        }
      }
    }
    synchronized (this) {
      scheduleRenewLocked(lastSendNanos + intervalNanos());
      scheduleWatchdogLocked();
    }
  }

  /** What the client's loss watch follows: one holding per member. */
  List<LossWatch.Watched> watched() {
    return watched;
  }

  /** @return the members' names, in the order of the AcquireGroup call */
  public List<String> getNames() {
    return names;
  }

  /** @return who holds the group */
  public String getHolder() {
    return holder;
  }

  /** @return the group's one ownership secret */
  public String getLeaseKey() {
    return leaseKey;
  }

  /**
   * The fencing token of member {@code name}: constant across renewals, strictly greater for every
   * later holder of that name. Send it with every write that member protects.
   *
   * @param name a member's name
   * @return its token
   * @throws IllegalArgumentException when {@code name} is not a member
   */
  public long getFencingToken(String name) {
    Long token = tokens.get(name);
    if (token == null) {
      throw new IllegalArgumentException(name + " is not a member of " + names);
    }
    return token;
  }

  /** @return every member's fencing token, by name in the group's order */
  public Map<String, Long> getFencingTokens() {
    return tokens;
  }

  /** @return the TTL every member was granted in the last reply */
  public synchronized Duration getGrantedTtl() {
    return grantedTtl;
  }

  /** @return the group's safe deadline on the {@link System#nanoTime()} clock */
  public synchronized long getSafeDeadlineNanos() {
    return deadlineNanos;
  }

  /** @return the time until the safe deadline; zero once not held */
  public synchronized Duration getTimeLeft() {
    if (state != State.HELD) {
      return Duration.ZERO;
    }
    return Duration.ofNanos(Math.max(0, deadlineNanos - System.nanoTime()));
  }

  /** @return true while every member is safely held: not lost, not released, before the deadline */
  public synchronized boolean isHeld() {
    return state == State.HELD && System.nanoTime() - deadlineNanos < 0;
  }

  /** @return why the group was lost; empty while held or after a release */
  public synchronized Optional<Session.Loss> getLoss() {
    return Optional.ofNullable(loss);
  }

  /**
   * The members the last {@link #release()} found already lost (ReleaseGroup's {@code not_held}).
   *
   * @return their names; empty before a release or when all were released
   */
  public synchronized List<String> getNotHeldAtRelease() {
    return notHeldAtRelease;
  }

  /**
   * Registers a listener told once when the group is lost (any member lost).
   *
   * @param listener the listener
   */
  public void addLossListener(Session.LossListener listener) {
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
   * Stops renewing and releases every member still held ({@code ReleaseGroup}). Release after loss
   * is not an error: it returns false.
   *
   * @return true when this call released the held group, every member; false when it was not held
   *     (lost, released before, or the server found some member already lost: see {@link
   *     #getNotHeldAtRelease()})
   * @throws TenureException when a held group could not be released (transport, auth)
   */
  public boolean release() {
    ReleaseGroupRequest request;
    boolean wasHeld;
    synchronized (this) {
      if (state == State.RELEASED) {
        return false;
      }
      wasHeld = isHeld();
      state = State.RELEASED;
      listeners.clear();
      cancelTasksLocked();
      request =
          ReleaseGroupRequest.newBuilder().addAllMembers(members()).setLeaseKey(leaseKey).build();
    }
    client.forget(this);
    try {
      ReleaseGroupResponse reply =
          client
              .blockingStub()
              .withDeadlineAfter(options.getRpcTimeout().toNanos(), NANOSECONDS)
              .releaseGroup(request);
      synchronized (this) {
        notHeldAtRelease = List.copyOf(reply.getNotHeldList());
      }
      return wasHeld && reply.getNotHeldCount() == 0;
    } catch (StatusRuntimeException e) {
      TenureException error = client.error(e, "ReleaseGroup");
      if (!wasHeld
          || error.getReason() == ErrorReason.LEASE_NOT_HELD
          || error.getReason() == ErrorReason.LEASE_NOT_FOUND) {
        return false;
      }
      throw error;
    }
  }

  /** {@link #release()} that never throws (try-with-resources); a failure is logged. */
  @Override
  public void close() {
    closeQuietly();
  }

  private void closeQuietly() {
    try {
      release();
    } catch (TenureException e) {
      LOG.log(Level.FINE, "release of group " + names + " failed; it will expire", e);
    }
  }

  @Override
  public synchronized String toString() {
    return "GroupSession{tokens=" + tokens + ", holder=" + holder + ", state=" + state
        + (loss != null ? ", loss=" + loss : "") + "}";
  }

  // ---- Renewal machinery (the rules of Session, for RenewGroup). ----

  private long marginNanos() {
    return options.marginFor(grantedTtl).toNanos();
  }

  private long intervalNanos() {
    return (long) (grantedTtl.toNanos() * options.getRenewFraction());
  }

  private synchronized List<GroupMember> members() {
    List<GroupMember> members = new ArrayList<>(names.size());
    for (int i = 0; i < names.size(); i++) {
      members.add(
          GroupMember.newBuilder().setName(names.get(i)).setExpectedRevision(revisions[i]).build());
    }
    return members;
  }

  private RenewGroupRequest renewRequest() {
    return RenewGroupRequest.newBuilder().addAllMembers(members()).setLeaseKey(leaseKey).build();
  }

  private void scheduleRenewLocked(long atNanos) {
    if (state != State.HELD) {
      return;
    }
    try {
      renewTask =
          client
              .scheduler()
              .schedule(this::renewNow, Math.max(0, atNanos - System.nanoTime()), NANOSECONDS);
    } catch (RejectedExecutionException e) {
      LOG.log(Level.FINE, "scheduler is shut down; renewals of " + names + " stop", e);
    }
  }

  private void scheduleWatchdogLocked() {
    if (state != State.HELD) {
      return;
    }
    try {
      watchdogTask =
          client
              .scheduler()
              .schedule(
                  this::watchdog, Math.max(0, deadlineNanos - System.nanoTime()), NANOSECONDS);
    } catch (RejectedExecutionException e) {
      LOG.log(Level.FINE, "scheduler is shut down; watchdog of " + names + " stops", e);
    }
  }

  private void watchdog() {
    List<Session.LossListener> toNotify;
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
    }
    notify(toNotify, loss());
  }

  private void renewNow() {
    RenewGroupRequest request;
    long send;
    long timeout;
    synchronized (this) {
      renewTask = null;
      if (state != State.HELD) {
        return;
      }
      send = System.nanoTime();
      long left = deadlineNanos - send;
      if (left <= 0) {
        List<Session.LossListener> toNotify =
            loseLocked(Session.LossReason.DEADLINE_PASSED, lastError);
        notify(toNotify, loss);
        return;
      }
      request = renewRequest();
      timeout = Math.min(left, options.getRpcTimeout().toNanos());
    }
    client
        .asyncStub()
        .withDeadlineAfter(timeout, NANOSECONDS)
        .renewGroup(
            request,
            new StreamObserver<RenewGroupResponse>() {
              @Override
              public void onNext(RenewGroupResponse reply) {
                renewed(send, reply.getLeasesList(), true);
              }

              @Override
              public void onError(Throwable t) {
                renewFailed(client.error(t, "RenewGroup"));
              }

              @Override
              public void onCompleted() {}
            });
  }

  private void renewed(long send, List<Lease> leases, boolean reschedule) {
    List<Session.LossListener> toNotify = null;
    synchronized (this) {
      if (state != State.HELD) {
        return;
      }
      if (System.nanoTime() - deadlineNanos >= 0) {
        toNotify = loseLocked(Session.LossReason.DEADLINE_PASSED, lastError);
      } else {
        boolean same = leases.size() == names.size();
        for (int i = 0; same && i < leases.size(); i++) {
          same =
              leases.get(i).getName().equals(names.get(i))
                  && leases.get(i).getFencingToken() == tokens.get(names.get(i));
        }
        if (!same) {
          toNotify =
              loseLocked(
                  Session.LossReason.NOT_HELD,
                  new TenureException(
                      io.grpc.Status.Code.FAILED_PRECONDITION,
                      ErrorReason.LEASE_NOT_HELD,
                      "",
                      "RenewGroup returned other holdings than the group's",
                      Map.of(),
                      null));
        } else {
          for (int i = 0; i < leases.size(); i++) {
            revisions[i] = leases.get(i).getRevision();
          }
          grantedTtl = ttlOf(leases.get(0));
          lastSendNanos = send;
          long deadline = send + grantedTtl.toNanos() - marginNanos();
          if (deadline - deadlineNanos > 0) {
            deadlineNanos = deadline;
          }
          lastError = null;
          if (reschedule) {
            scheduleRenewLocked(send + intervalNanos());
          }
        }
      }
    }
    if (toNotify != null) {
      notify(toNotify, loss());
    }
  }

  private void renewFailed(TenureException error) {
    List<Session.LossListener> toNotify;
    synchronized (this) {
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
        scheduleRenewLocked(now + Math.min(MAX_RETRY_DELAY_NANOS, intervalNanos() / 2));
        return;
      }
    }
    notify(toNotify, loss());
  }

  /** A member's holding ended on the loss watch: the group is lost as a whole. */
  private void endedByWatch(dev.tenure.v1.LeaseEvent event) {
    List<Session.LossListener> toNotify;
    synchronized (this) {
      if (state != State.HELD) {
        return;
      }
      toNotify = loseLocked(Session.LossReason.LEASE_ENDED, null);
    }
    notify(toNotify, loss());
  }

  private synchronized Session.Loss loss() {
    return loss;
  }

  private List<Session.LossListener> loseLocked(Session.LossReason reason, TenureException cause) {
    state = State.LOST;
    loss = new Session.Loss(reason, cause);
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
              LOG.log(Level.WARNING, "loss listener of group " + names + " failed", e);
            }
          });
    }
  }

  private static Duration ttlOf(Lease lease) {
    return Duration.ofSeconds(lease.getTtl().getSeconds(), lease.getTtl().getNanos());
  }
}
