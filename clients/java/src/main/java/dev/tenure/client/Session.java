package dev.tenure.client;

import static java.util.concurrent.TimeUnit.NANOSECONDS;

import com.google.protobuf.ByteString;
import dev.tenure.v1.DowngradeRequest;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.LockMode;
import dev.tenure.v1.ReleaseRequest;
import dev.tenure.v1.ReleaseResponse;
import dev.tenure.v1.RenewRequest;
import dev.tenure.v1.RenewResponse;
import dev.tenure.v1.TransferRequest;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import java.util.function.Consumer;
import java.util.function.Function;
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
 *   <li>{@link LossReason#DEADLINE_PASSED} at the safe deadline when no renewal got through;
 *   <li>{@link LossReason#LEASE_ENDED} as soon as the client's shared lease watch shows the
 *       holding end, and {@link LossReason#MISSED} as soon as it says it missed changes among
 *       which the holding ended.
 * </ul>
 *
 * <p>{@link #release()} or {@link #close()} (try-with-resources) ends the session and releases
 * the lease; {@link #transfer(String)} ends it by handing the lease to a waiting acquire;
 * listeners are not called for either. All methods are thread-safe.
 */
public final class Session implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Session.class.getName());

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
    LEASE_ENDED,
    /**
     * The client's shared lease watch said it missed changes of the name (an {@code
     * EVENT_TYPE_MISSED} event: its server's watcher fell behind the bucket) and named this
     * holding's fencing token (and slot) as one that ended among them; how it ended (revoked,
     * expired, taken over) is unknown. A MISSED naming another token, or none, does not end the
     * session. {@link Loss#getEvent()} is the MISSED event.
     */
    MISSED
  }

  /** What ended a session's holding: a reason and the renewal error behind it, if any. */
  public static final class Loss {
    private final LossReason reason;
    private final TenureException cause;
    private final LeaseEvent event;

    Loss(LossReason reason, TenureException cause) {
      this(reason, cause, null);
    }

    Loss(LossReason reason, TenureException cause, LeaseEvent event) {
      this.reason = reason;
      this.cause = cause;
      this.event = event;
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

    /**
     * For {@link LossReason#LEASE_ENDED} and {@link LossReason#MISSED}, the watch event that showed
     * the loss (for a holding missing from a reopened watch's snapshot, that snapshot's
     * SNAPSHOT_COMPLETE, naming the holding); empty for the other reasons.
     *
     * @return the watch event, if the watch ended the session
     */
    public Optional<LeaseEvent> getEvent() {
      return Optional.ofNullable(event);
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

  private final LeaseClient client;
  private final String name;
  private final String holder;
  private final String leaseKey;
  private final int slot;
  /** The life of the holding; its lock guards the last lease and {@code releaseRevision}. */
  private final Lifecycle<Lease> life;

  // Written under the lock of {@code life} (by a Downgrade, which no renewal runs beside), read
  // without it too.
  private volatile long fencingToken;
  /** The fence proof of the grant (the Acquire or Downgrade reply's; renewal replies carry none). */
  private volatile ByteString fenceProof;
  private volatile LockMode mode;
  private volatile LossWatch.Watched watched;

  private long releaseRevision;

  Session(LeaseClient client, AcquireOptions options, Lease lease, String leaseKey, long sendNanos) {
    this.client = client;
    this.name = lease.getName();
    this.holder = lease.getHolder();
    this.leaseKey = leaseKey;
    this.fencingToken = lease.getFencingToken();
    this.fenceProof = lease.getFenceProof();
    this.mode = lease.getMode();
    this.slot = lease.getSlot();
    this.life = new Lifecycle<>(client, options, new LeaseHolding(), LOG, lease, sendNanos);
    this.watched = watchedFor(fencingToken);
  }

  /** What the loss watch follows for this holding while its fencing token is {@code token}. */
  private LossWatch.Watched watchedFor(long token) {
    return new LossWatch.Watched(name, slot, token, event -> endedByWatch(token, event));
  }

  /**
   * The loss watch saw the holding it followed with {@code token} end. After a downgrade replaced
   * that token (the watch may have judged the downgrade's own write against the old one just as
   * its reply came), the event counts only if it shows the current holding ended.
   */
  private void endedByWatch(long token, LeaseEvent event) {
    synchronized (life) {
      if (token != fencingToken && !LossWatch.showsLoss(name, slot, fencingToken, event)) {
        return;
      }
      life.endedByWatch(event);
    }
  }

  /**
   * Starts the renewals. If the Acquire took longer than one renewal interval (it waited for the
   * lease), renews once first, so the caller gets a safe deadline counted from a recent send.
   */
  void start() {
    life.start();
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
   * FencingGuard}). {@link #downgrade()} replaces it with a greater one.
   *
   * @return the fencing token
   */
  public long getFencingToken() {
    return fencingToken;
  }

  /**
   * The fence proof of this holding: an Ed25519-signed statement of (bucket, lease name, slot,
   * fencing token, holder, grant time, TTL) that a downstream store verifies offline before it
   * trusts the token, so that a forged or foreign token can never become its highest ({@code
   * docs/fencing.md}). The same for every renewal; {@link #downgrade()} replaces it with its
   * reply's (empty when that carries none). Send it with every write, e.g. as the headers of
   * {@link #fenceHeaders()}.
   *
   * @return a copy of the proof bytes; empty when the server signs no proofs (it was started
   *     without {@code --fence-signing-key})
   */
  public byte[] fenceProof() {
    return fenceProof.toByteArray();
  }

  /**
   * The HTTP headers to send with each write to a fenced store: {@value FenceHeaders#FENCE} (the
   * proof in its text form, base64url without padding) and {@value FenceHeaders#TOKEN} (the
   * fencing token as an unsigned decimal). Only the token when the server signs no proofs.
   *
   * @return the header names and values, in that order (unmodifiable)
   */
  public Map<String, String> fenceHeaders() {
    synchronized (life) {
      return FenceHeaders.of(fenceProof, fencingToken);
    }
  }

  /**
   * The slot of this holding, sent with every renewal and the release: a semaphore's (1 to the
   * semaphore's limit) or a read-write lock holding's; 0 for a plain lease.
   *
   * @return the slot, or 0
   */
  public int getSlot() {
    return slot;
  }

  /**
   * How a read-write lock's holding holds the name ({@link ReadWriteLock}): {@code
   * LOCK_MODE_EXCLUSIVE} or {@code LOCK_MODE_SHARED} ({@code LOCK_MODE_SHARED} after a {@link
   * #downgrade()}); {@code LOCK_MODE_UNSPECIFIED} for a plain lease or a semaphore slot.
   *
   * @return the mode
   */
  public LockMode getMode() {
    return mode;
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
  public long getRevision() {
    return life.held().getRevision();
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
  public Duration getGrantedTtl() {
    return life.getGrantedTtl();
  }

  /**
   * The safe deadline on the {@link System#nanoTime()} clock: send time of the last successful
   * Acquire or Renew + granted TTL − safety margin.
   *
   * @return the safe deadline in {@code System.nanoTime()} units
   */
  public long getSafeDeadlineNanos() {
    return life.getSafeDeadlineNanos();
  }

  /**
   * How long this session may still act as holder without another successful renewal.
   *
   * @return the time until the safe deadline, zero once the lease is not held
   */
  public Duration getTimeLeft() {
    return life.getTimeLeft();
  }

  /**
   * Whether this session may act as the lease's holder right now: it was neither lost nor released
   * and the safe deadline has not passed. Check it before each step of protected work, and pass
   * {@link #getFencingToken()} along with writes.
   *
   * @return true while the lease is safely held
   */
  public boolean isHeld() {
    return life.isHeld();
  }

  /**
   * Why the lease was lost.
   *
   * @return the loss, or empty while held or after a release
   */
  public Optional<Loss> getLoss() {
    return life.getLoss();
  }

  /**
   * Registers a listener told once when the lease is lost. Added after the loss, it is called at
   * once (on the client's callback pool); it is never called for a session that was released.
   *
   * @param listener the listener
   */
  public void addLossListener(LossListener listener) {
    life.addLossListener(listener);
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
    return life.release();
  }

  /**
   * Hands the holding to a waiting acquire of another holder, with no moment in which the lease is
   * free ({@code LeaseService.Transfer}): to the earliest waiting acquire of holder {@code to}, or,
   * with {@code null} (or ""), to the head of the queue. The recipient's waiting acquire returns
   * the holding, whose fencing token is greater than this session's.
   *
   * <p>On success the session ends exactly as after a successful {@link #release()}: renewals
   * stop, {@link #isHeld()} is false, {@link #getLoss()} stays empty and no {@link LossListener} is
   * called (it was handed over, not lost), and a later {@link #release()} returns false. The
   * lease key stops working at the transfer's write, so stop acting as holder before calling it.
   *
   * @param to the holder of the waiting acquire to hand it to; null for the first in line
   * @return the recipient's lease
   * @throws TenureException {@code NO_WAITER} when nobody (or not {@code to}) waits: the session
   *     is unchanged and still held (release it, or transfer once the recipient waits); {@code
   *     LEASE_NOT_HELD} when the holding has ended (the session is then lost), also without a call
   *     when the session is not held; any other failure leaves the session as it was
   * @throws IllegalStateException for a semaphore slot (only a plain lease is handed over)
   */
  public Lease transfer(String to) {
    if (slot != 0) {
      throw new IllegalStateException(
          "lease " + name + " slot " + slot + " is a semaphore slot: only a plain lease can be handed over");
    }
    return handOver(
        held -> {
          TransferRequest request =
              TransferRequest.newBuilder()
                  .setName(name)
                  .setExpectedRevision(held.getRevision())
                  .setLeaseKey(leaseKey)
                  .setToHolder(to == null ? "" : to)
                  .build();
          try {
            return client
                .blockingStub()
                .withDeadlineAfter(AcquireOptions.DEFAULT_RPC_TIMEOUT.toNanos(), NANOSECONDS)
                .transfer(request)
                .getLease();
          } catch (StatusRuntimeException e) {
            throw client.error(e, "Transfer");
          }
        });
  }

  /**
   * Turns an exclusive read-write lock holding ({@link ReadWriteLock#writeLock()}) into a shared
   * one with no gap ({@code LeaseService.Downgrade}): the session holds the name throughout, keeps
   * its slot and lease key, and from this call on is a shared holder with a new, greater fencing
   * token, so waiting readers may join it. The session is updated in place: {@link
   * #getFencingToken()}, {@link #getRevision()}, {@link #getMode()} ({@code LOCK_MODE_SHARED}) and
   * {@link #fenceProof()} are the reply's, and the background renewals go on with the new
   * revision. The exclusive token is superseded (a store that fences by token refuses it from now
   * on): send the new token with later writes. The call waits for a renewal in flight; renewals
   * and a release wait for it.
   *
   * <p>If the call fails without an answer (deadline, connection), the holding may have been
   * downgraded all the same: the session then learns it from its loss watch or next renewal and
   * is lost.
   *
   * @return the shared holding, as the server returned it
   * @throws TenureException {@code MODE_MISMATCH} (permanent) when the holding is not an exclusive
   *     read-write lock holding: the session is unchanged and still held; {@code LEASE_NOT_HELD}
   *     when the holding has ended (the session is then lost), also without a call when the session
   *     is not held; any other failure leaves the session as it was
   */
  public Lease downgrade() {
    return life.change(
        held -> {
          DowngradeRequest request =
              DowngradeRequest.newBuilder()
                  .setName(name)
                  .setExpectedRevision(held.getRevision())
                  .setLeaseKey(leaseKey)
                  .setSlot(slot)
                  .build();
          try {
            return client
                .blockingStub()
                .withDeadlineAfter(AcquireOptions.DEFAULT_RPC_TIMEOUT.toNanos(), NANOSECONDS)
                .downgrade(request)
                .getLease();
          } catch (StatusRuntimeException e) {
            throw client.error(e, "Downgrade");
          }
        },
        // Under the lock of life, with no renewal in flight.
        lease -> {
          fencingToken = lease.getFencingToken();
          fenceProof = lease.getFenceProof();
          mode = lease.getMode();
          LossWatch.Watched previous = watched;
          watched = watchedFor(fencingToken);
          client.lossWatch().replace(previous, watched);
          return lease;
        },
        event -> LossWatch.showsLoss(name, slot, fencingToken, event));
  }

  /** Hands the holding over with {@code send} (see {@link Lifecycle#handOver}). */
  <T> T handOver(Function<Lease, T> send) {
    return life.handOver(send);
  }

  /**
   * Releases the lease like {@link #release()}, but never throws: a failure is logged and the
   * lease ends by expiry. Meant for try-with-resources.
   */
  @Override
  public void close() {
    life.closeQuietly();
  }

  @Override
  public String toString() {
    synchronized (life) {
      return "Session{name="
          + name
          + (slot != 0 ? ", slot=" + slot : "")
          + (mode != LockMode.LOCK_MODE_UNSPECIFIED ? ", mode=" + mode : "")
          + ", holder="
          + holder
          + ", fencingToken="
          + fencingToken
          + ", revision="
          + life.held().getRevision()
          + ", grantedTtl="
          + life.getGrantedTtl()
          + ", "
          + life.stateString()
          + "}";
    }
  }

  // ---- Test hooks (package-private): simulate a stalled holder. ----

  /**
   * Stops sending renewals for good (the safe-deadline watchdog keeps running), as a holder that
   * stalled would.
   */
  void pauseRenewals() {
    life.pauseRenewals();
  }

  /** Called with the lease of every successful background renewal. */
  void setRenewalObserver(Consumer<Lease> observer) {
    life.setRenewalObserver(observer);
  }

  /**
   * Takes the reply of an election's Proclaim (a renewal that also wrote a new value): a newer
   * revision of this holding moves the session on; the renewal schedule stays as it is.
   */
  void proclaimed(long send, Lease lease) {
    synchronized (life) {
      if (life.isHeld()
          && lease.getFencingToken() == fencingToken
          && lease.getRevision() > life.held().getRevision()) {
        life.apply(send, lease);
      }
    }
  }

  /** The lease of this session: renewed over the client's KeepAlive stream, released unary. */
  private final class LeaseHolding implements Lifecycle.Holding<Lease> {
    @Override
    public String kind() {
      return "lease";
    }

    @Override
    public String label() {
      return name;
    }

    @Override
    public Duration ttl(Lease lease) {
      return Duration.ofSeconds(lease.getTtl().getSeconds(), lease.getTtl().getNanos());
    }

    @Override
    public String mismatch(Lease lease) {
      if (lease.getFencingToken() == fencingToken) {
        return null;
      }
      return "renewal returned fencing token "
          + lease.getFencingToken()
          + " instead of "
          + fencingToken;
    }

    @Override
    public void renewAsync(
        Lease held,
        long timeoutNanos,
        Consumer<Lease> renewed,
        Consumer<TenureException> failed) {
      client
          .keepAlive()
          .renew(
              renewRequest(held),
              timeoutNanos,
              new KeepAliveStream.Callback() {
                @Override
                public void renewed(Lease lease) {
                  renewed.accept(lease);
                }

                @Override
                public void failed(TenureException error) {
                  failed.accept(error);
                }
              });
    }

    @Override
    public Lease renewBlocking(Lease held, long timeoutNanos) {
      try {
        RenewResponse reply =
            client
                .blockingStub()
                .withDeadlineAfter(timeoutNanos, NANOSECONDS)
                .renew(renewRequest(held));
        return reply.getLease();
      } catch (StatusRuntimeException e) {
        throw client.error(e, "Renew");
      }
    }

    @Override
    public boolean release(Lease held, long timeoutNanos) {
      ReleaseRequest request =
          ReleaseRequest.newBuilder()
              .setName(name)
              .setExpectedRevision(held.getRevision())
              .setLeaseKey(leaseKey)
              .setSlot(slot)
              .build();
      try {
        ReleaseResponse reply =
            client.blockingStub().withDeadlineAfter(timeoutNanos, NANOSECONDS).release(request);
        synchronized (life) {
          releaseRevision = reply.getRevision();
        }
        return true;
      } catch (StatusRuntimeException e) {
        throw client.error(e, "Release");
      }
    }

    @Override
    public boolean releasesAfterLoss() {
      return false;
    }

    @Override
    public void forget() {
      client.forget(Session.this);
    }

    private RenewRequest renewRequest(Lease held) {
      return RenewRequest.newBuilder()
          .setName(name)
          .setExpectedRevision(held.getRevision())
          .setLeaseKey(leaseKey)
          .setSlot(slot)
          .build();
    }
  }
}
