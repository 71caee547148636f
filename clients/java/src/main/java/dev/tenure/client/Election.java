package dev.tenure.client;

import static java.util.concurrent.TimeUnit.MILLISECONDS;
import static java.util.concurrent.TimeUnit.NANOSECONDS;

import dev.tenure.v1.ChangeType;
import dev.tenure.v1.ElectionServiceGrpc;
import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LeaderRequest;
import dev.tenure.v1.Leadership;
import dev.tenure.v1.ObserveRequest;
import dev.tenure.v1.ObserveResponse;
import dev.tenure.v1.ProclaimRequest;
import dev.tenure.v1.ProclaimResponse;
import dev.tenure.v1.ResignRequest;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.Iterator;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.Consumer;

/**
 * One election of a {@link LeaseClient}: an election is the lease of the same name ({@code
 * tenure.v1.ElectionService}), so a term is a {@link Session} whose fencing token is the term's
 * token, renewed in the background and lost at its safe deadline. {@link LeaderElector} runs the
 * campaign loop with callbacks; this class has the single calls.
 */
public final class Election {
  /** The lease metadata key that holds a leader's value. */
  public static final String VALUE_KEY = "value";

  /**
   * Who leads an election.
   *
   * @param identity the leader's holder name; empty when nobody leads (or it is unknown)
   * @param value what the leader published (e.g. its address)
   * @param fencingToken the term's token; 0 when nobody leads (or it is unknown)
   * @param missed true for an Observe change of type {@code CHANGE_TYPE_MISSED}: the stream did not
   *     see every change of the election (its server's watcher fell behind), so who leads is
   *     unknown until the next change; the leader in {@code endedIdentity} and {@code
   *     endedFencingToken} (when known, token != 0) no longer leads, and other terms may have come
   *     and gone
   * @param endedIdentity with {@code missed}, the leader known to have ended (empty when unknown)
   * @param endedFencingToken with {@code missed}, that term's token (0 when unknown)
   */
  public record Leader(
      String identity,
      String value,
      long fencingToken,
      boolean missed,
      String endedIdentity,
      long endedFencingToken) {
    /** Nobody leads. */
    public static final Leader NOBODY = new Leader("", "", 0);

    /**
     * A known leader (or {@link #NOBODY}).
     *
     * @param identity the leader's holder name; empty when nobody leads
     * @param value what the leader published
     * @param fencingToken the term's token; 0 when nobody leads
     */
    public Leader(String identity, String value, long fencingToken) {
      this(identity, value, fencingToken, false, "", 0);
    }

    /**
     * Whether somebody leads.
     *
     * @return true unless this is {@link #NOBODY} or a missed change (leader unknown)
     */
    public boolean present() {
      return !identity.isEmpty();
    }

    static Leader of(Leadership l) {
      return new Leader(l.getHolder(), l.getValue(), l.getFencingToken());
    }

    /** Who leads after one Observe change: unknown ({@code missed}) after a MISSED. */
    static Leader after(ObserveResponse change) {
      if (change.getType() == ChangeType.CHANGE_TYPE_MISSED) {
        return new Leader(
            "", "", 0, true, change.getEndedHolder(), change.getEndedFencingToken());
      }
      return change.hasLeader() ? of(change.getLeader()) : NOBODY;
    }
  }

  /**
   * A candidate waiting to lead, as Observe names the preferred one ({@code
   * ObserveResponse.preferred}): the waiting candidate with the highest preference above 0, the
   * earliest of equals.
   *
   * @param identity the candidate's holder name (the successor to name in {@link
   *     #resignTo(Session, String)}); empty for {@link #NONE}
   * @param preference its campaign's preference (an unsigned 32-bit number); 0 for {@link #NONE}
   */
  public record Candidate(String identity, int preference) {
    /** No candidate with a preference waits. */
    public static final Candidate NONE = new Candidate("", 0);

    /**
     * Whether a candidate is named.
     *
     * @return false for {@link #NONE}
     */
    public boolean present() {
      return !identity.isEmpty();
    }

    /**
     * Whether this candidate's preference is greater than {@code preference} (compared as unsigned
     * 32-bit numbers, as the proto's {@code uint32}).
     *
     * @param preference another preference (a leader's own)
     * @return true when this candidate is named and outranks it
     */
    public boolean outranks(int preference) {
      return present() && Integer.compareUnsigned(this.preference, preference) > 0;
    }

    static Candidate of(ObserveResponse change) {
      if (!change.hasPreferred() || change.getPreferred().getHolder().isEmpty()) {
        return NONE;
      }
      return new Candidate(change.getPreferred().getHolder(), change.getPreferred().getPreference());
    }
  }

  private final LeaseClient client;
  private final String name;
  private final ElectionServiceGrpc.ElectionServiceBlockingStub stub;

  /**
   * The election {@code name} over {@code client}'s connection and credentials.
   *
   * @param client the client
   * @param name the election (a lease name)
   */
  public Election(LeaseClient client, String name) {
    this.client = Objects.requireNonNull(client, "client");
    this.name = Objects.requireNonNull(name, "name");
    this.stub = ElectionServiceGrpc.newBlockingStub(client.channel());
  }

  /**
   * The election's name.
   *
   * @return the name
   */
  public String name() {
    return name;
  }

  /**
   * Campaigns once: waits up to {@code wait} for the election to have no leader, then makes
   * {@code identity} its leader publishing {@code value}.
   *
   * @param identity who campaigns
   * @param value published while leading
   * @param ttl the term TTL to ask for
   * @param wait how long to wait for the election to be free ({@link Duration#ZERO}: not at all)
   * @return the term; {@link Session#release()} resigns
   * @throws TenureException {@code LEASE_HELD} when the wait ran out with another leader
   */
  public Session campaign(String identity, String value, Duration ttl, Duration wait) {
    return campaign(identity, value, ttl, wait, 0);
  }

  /**
   * Campaigns once with a preference ({@link AcquireOptions.Builder#preference(int)}): while this
   * campaign waits, Observe names it as the preferred candidate when its preference is the highest
   * above 0 (the earliest of equals), and a {@link LeaderElector} leading with a lower preference
   * hands over to it.
   *
   * @param identity who campaigns
   * @param value published while leading
   * @param ttl the term TTL to ask for
   * @param wait how long to wait for the election to be free ({@link Duration#ZERO}: not at all,
   *     and then the preference does nothing: only a waiting campaign is a candidate)
   * @param preference 0 for none, or a positive number: higher is preferred
   * @return the term; {@link Session#release()} resigns
   * @throws TenureException {@code LEASE_HELD} when the wait ran out with another leader
   */
  public Session campaign(
      String identity, String value, Duration ttl, Duration wait, int preference) {
    return client.acquire(
        AcquireOptions.builder(name, identity)
            .ttl(ttl)
            .wait(wait)
            .metadata(VALUE_KEY, value)
            .preference(preference)
            .build());
  }

  /**
   * Replaces the value the term's leader publishes, without a new term.
   *
   * @param term a term of this election
   * @param value the new value
   * @throws TenureException {@code LEASE_NOT_HELD} when the term has ended
   */
  public void proclaim(Session term, String value) {
    if (!term.isHeld()) {
      throw new TenureException(
          Status.Code.FAILED_PRECONDITION,
          ErrorReason.LEASE_NOT_HELD,
          "",
          "the term of " + name + " has ended",
          java.util.Map.of(),
          null);
    }
    long send = System.nanoTime();
    ProclaimResponse reply;
    try {
      reply =
          stub.withDeadlineAfter(AcquireOptions.DEFAULT_RPC_TIMEOUT.toNanos(), NANOSECONDS)
              .proclaim(
                  ProclaimRequest.newBuilder()
                      .setName(name)
                      .setExpectedRevision(term.getRevision())
                      .setLeaseKey(term.getLeaseKey())
                      .setValue(value)
                      .build());
    } catch (StatusRuntimeException e) {
      throw client.error(e, "Proclaim");
    }
    Leadership l = reply.getLeadership();
    term.proclaimed(
        send,
        Lease.newBuilder()
            .setName(l.getName())
            .setHolder(l.getHolder())
            .setFencingToken(l.getFencingToken())
            .setRevision(l.getRevision())
            .setTtl(l.getTtl())
            .build());
  }

  /**
   * Hands {@code term}'s leadership to a waiting candidate, with no moment without a leader
   * ({@code ElectionService.Resign} with a successor): to the candidate whose identity is {@code
   * successor}, or, with null, to the earliest waiting candidate. The term then ends as handed
   * over (as after a release: not held, no loss). A {@link LeaderElector} does this with {@link
   * LeaderElector#resignTo(String)}, stopping its leader first.
   *
   * @param term a term of this election
   * @param successor the identity of the waiting candidate; null for the next one
   * @return the successor, whose fencing token is greater
   * @throws TenureException {@code NO_WAITER} when that candidate does not wait (the term is
   *     unchanged and still held); {@code LEASE_NOT_HELD} when the term has ended
   */
  public Leader resignTo(Session term, String successor) {
    return term.handOver(
        held -> {
          ResignRequest.Builder request =
              ResignRequest.newBuilder()
                  .setName(name)
                  .setExpectedRevision(held.getRevision())
                  .setLeaseKey(term.getLeaseKey());
          if (successor == null || successor.isEmpty()) {
            request.setToNextCandidate(true);
          } else {
            request.setSuccessor(successor);
          }
          try {
            return Leader.of(
                stub.withDeadlineAfter(AcquireOptions.DEFAULT_RPC_TIMEOUT.toNanos(), NANOSECONDS)
                    .resign(request.build())
                    .getSuccessor());
          } catch (StatusRuntimeException e) {
            throw client.error(e, "Resign");
          }
        });
  }

  /**
   * Who leads now.
   *
   * @return the leader, or {@link Leader#NOBODY}
   */
  public Leader leader() {
    try {
      return Leader.of(
          stub.withDeadlineAfter(AcquireOptions.DEFAULT_RPC_TIMEOUT.toNanos(), NANOSECONDS)
              .leader(LeaderRequest.newBuilder().setName(name).build())
              .getLeadership());
    } catch (StatusRuntimeException e) {
      TenureException error = client.error(e, "Leader");
      if (error.getReason() == ErrorReason.LEASE_NOT_FOUND) {
        return Leader.NOBODY;
      }
      throw error;
    }
  }

  /**
   * Calls {@code onNewLeader} with every change of leader (from the current one on) on a daemon
   * thread, reopening the Observe stream after errors (it starts with the current state, so a
   * reconnect never leaves a stale leader), until the returned handle is closed or the server
   * refuses for good (grants, credentials, arguments).
   *
   * @param onNewLeader told each new leader, {@link Leader#NOBODY} when there is none, and a
   *     {@link Leader#missed()} one when the stream missed changes (who leads is then unknown)
   * @return close it to stop observing
   */
  public AutoCloseable observe(Consumer<Leader> onNewLeader) {
    return observe(onNewLeader, preferred -> {});
  }

  /**
   * Like {@link #observe(Consumer)}, and also calls {@code onPreferred} (on the same thread) with
   * every change of the preferred candidate: the waiting candidate with the highest preference
   * above 0 (see {@link AcquireOptions.Builder#preference(int)}), from the current one on. A
   * change of the preferred candidate alone ({@code CHANGE_TYPE_PREFERRED}) does not call {@code
   * onNewLeader}: the leader is unchanged.
   *
   * @param onNewLeader told each new leader, as with {@link #observe(Consumer)}
   * @param onPreferred told each new preferred candidate, {@link Candidate#NONE} when none waits
   * @return close it to stop observing
   */
  public AutoCloseable observe(Consumer<Leader> onNewLeader, Consumer<Candidate> onPreferred) {
    Objects.requireNonNull(onNewLeader, "onNewLeader");
    Objects.requireNonNull(onPreferred, "onPreferred");
    Context.CancellableContext context = Context.current().withCancellation();
    Thread thread =
        new Thread(
            () -> context.run(() -> observeLoop(context, onNewLeader, onPreferred)),
            "tenure-observe-" + name);
    thread.setDaemon(true);
    thread.start();
    return () -> {
      context.cancel(null);
      thread.interrupt();
    };
  }

  private void observeLoop(
      Context.CancellableContext context,
      Consumer<Leader> onNewLeader,
      Consumer<Candidate> onPreferred) {
    Leader last = null;
    Candidate lastPreferred = null;
    long backoffMs = 100;
    while (!context.isCancelled()) {
      try {
        Iterator<ObserveResponse> it =
            ElectionServiceGrpc.newBlockingStub(client.channel())
                .observe(ObserveRequest.newBuilder().setName(name).build());
        while (it.hasNext()) {
          ObserveResponse msg = it.next();
          backoffMs = 100;
          // A PREFERRED change carries the unchanged leader: it never differs from the last one.
          Leader now = Leader.after(msg);
          if (!now.equals(last)) {
            last = now;
            onNewLeader.accept(now);
          }
          Candidate preferred = Candidate.of(msg);
          if (!preferred.equals(lastPreferred)) {
            lastPreferred = preferred;
            onPreferred.accept(preferred);
          }
        }
      } catch (StatusRuntimeException e) {
        Status.Code code = e.getStatus().getCode();
        if (context.isCancelled()
            || code == Status.Code.PERMISSION_DENIED
            || code == Status.Code.UNAUTHENTICATED
            || code == Status.Code.INVALID_ARGUMENT) {
          return;
        }
      }
      try {
        MILLISECONDS.sleep(backoffMs + ThreadLocalRandom.current().nextLong(backoffMs / 2 + 1));
      } catch (InterruptedException e) {
        return;
      }
      backoffMs = Math.min(backoffMs * 2, 5000);
    }
  }
}
