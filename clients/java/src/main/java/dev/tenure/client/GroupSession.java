package dev.tenure.client;

import static java.util.concurrent.TimeUnit.NANOSECONDS;

import com.google.protobuf.ByteString;
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
import java.util.function.Consumer;
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

  private final LeaseClient client;
  private final String holder;
  private final String leaseKey;
  private final List<String> names;
  private final Map<String, Long> tokens;
  /** Every member's fence proof, by name (from the AcquireGroup reply). */
  private final Map<String, ByteString> proofs;
  private final List<LossWatch.Watched> watched;
  /** The life of the group; its lock guards the members' last leases. */
  private final Lifecycle<List<Lease>> life;

  // Guarded by `this`.
  private List<String> notHeldAtRelease = List.of();

  GroupSession(
      LeaseClient client, AcquireOptions options, List<Lease> leases, String leaseKey, long send) {
    this.client = client;
    this.holder = options.getHolder();
    this.leaseKey = leaseKey;
    this.life =
        new Lifecycle<>(client, options, new GroupHolding(), LOG, List.copyOf(leases), send);
    List<String> n = new ArrayList<>();
    Map<String, Long> t = new LinkedHashMap<>();
    Map<String, ByteString> p = new LinkedHashMap<>();
    List<LossWatch.Watched> w = new ArrayList<>();
    for (Lease lease : leases) {
      n.add(lease.getName());
      t.put(lease.getName(), lease.getFencingToken());
      p.put(lease.getName(), lease.getFenceProof());
      w.add(new LossWatch.Watched(lease.getName(), 0, lease.getFencingToken(), life::endedByWatch));
    }
    this.names = Collections.unmodifiableList(n);
    this.tokens = Collections.unmodifiableMap(t);
    this.proofs = Collections.unmodifiableMap(p);
    this.watched = List.copyOf(w);
  }

  /** Starts renewals (renewing once first when the AcquireGroup waited longer than an interval). */
  void start() {
    life.start();
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

  /**
   * The fence proof of member {@code name} (see {@link Session#fenceProof()}): what a store
   * guarding that member's resource verifies before it trusts the member's token.
   *
   * @param name a member's name
   * @return a copy of its proof bytes; empty when the server signs no proofs
   * @throws IllegalArgumentException when {@code name} is not a member
   */
  public byte[] fenceProof(String name) {
    getFencingToken(name); // throws for a non-member
    return proofs.get(name).toByteArray();
  }

  /**
   * The HTTP headers of member {@code name} for a write to what it guards (see {@link
   * Session#fenceHeaders()}): {@value FenceHeaders#FENCE} and {@value FenceHeaders#TOKEN}.
   *
   * @param name a member's name
   * @return the header names and values (unmodifiable); only the token when the server signs no
   *     proofs
   * @throws IllegalArgumentException when {@code name} is not a member
   */
  public Map<String, String> fenceHeaders(String name) {
    long token = getFencingToken(name); // throws for a non-member
    return FenceHeaders.of(proofs.get(name), token);
  }

  /** @return the TTL every member was granted in the last reply */
  public Duration getGrantedTtl() {
    return life.getGrantedTtl();
  }

  /** @return the group's safe deadline on the {@link System#nanoTime()} clock */
  public long getSafeDeadlineNanos() {
    return life.getSafeDeadlineNanos();
  }

  /** @return the time until the safe deadline; zero once not held */
  public Duration getTimeLeft() {
    return life.getTimeLeft();
  }

  /** @return true while every member is safely held: not lost, not released, before the deadline */
  public boolean isHeld() {
    return life.isHeld();
  }

  /** @return why the group was lost; empty while held or after a release */
  public Optional<Session.Loss> getLoss() {
    return life.getLoss();
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
    life.addLossListener(listener);
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
    return life.release();
  }

  /** {@link #release()} that never throws (try-with-resources); a failure is logged. */
  @Override
  public void close() {
    life.closeQuietly();
  }

  @Override
  public String toString() {
    return "GroupSession{tokens=" + tokens + ", holder=" + holder + ", " + life.stateString() + "}";
  }

  private static List<GroupMember> members(List<Lease> leases) {
    List<GroupMember> members = new ArrayList<>(leases.size());
    for (Lease lease : leases) {
      members.add(
          GroupMember.newBuilder()
              .setName(lease.getName())
              .setExpectedRevision(lease.getRevision())
              .build());
    }
    return members;
  }

  /** The members: renewed with RenewGroup, released with ReleaseGroup, all or none. */
  private final class GroupHolding implements Lifecycle.Holding<List<Lease>> {
    @Override
    public String kind() {
      return "group";
    }

    @Override
    public String label() {
      return names.toString();
    }

    @Override
    public Duration ttl(List<Lease> leases) {
      Lease first = leases.get(0);
      return Duration.ofSeconds(first.getTtl().getSeconds(), first.getTtl().getNanos());
    }

    @Override
    public String mismatch(List<Lease> leases) {
      boolean same = leases.size() == names.size();
      for (int i = 0; same && i < leases.size(); i++) {
        same =
            leases.get(i).getName().equals(names.get(i))
                && leases.get(i).getFencingToken() == tokens.get(names.get(i));
      }
      return same ? null : "RenewGroup returned other holdings than the group's";
    }

    @Override
    public void renewAsync(
        List<Lease> held,
        long timeoutNanos,
        Consumer<List<Lease>> renewed,
        Consumer<TenureException> failed) {
      client
          .asyncStub()
          .withDeadlineAfter(timeoutNanos, NANOSECONDS)
          .renewGroup(
              renewRequest(held),
              new StreamObserver<RenewGroupResponse>() {
                @Override
                public void onNext(RenewGroupResponse reply) {
                  renewed.accept(reply.getLeasesList());
                }

                @Override
                public void onError(Throwable t) {
                  failed.accept(client.error(t, "RenewGroup"));
                }

                @Override
                public void onCompleted() {}
              });
    }

    @Override
    public List<Lease> renewBlocking(List<Lease> held, long timeoutNanos) {
      try {
        RenewGroupResponse reply =
            client
                .blockingStub()
                .withDeadlineAfter(timeoutNanos, NANOSECONDS)
                .renewGroup(renewRequest(held));
        return reply.getLeasesList();
      } catch (StatusRuntimeException e) {
        throw client.error(e, "RenewGroup");
      }
    }

    @Override
    public boolean release(List<Lease> held, long timeoutNanos) {
      ReleaseGroupRequest request =
          ReleaseGroupRequest.newBuilder()
              .addAllMembers(members(held))
              .setLeaseKey(leaseKey)
              .build();
      try {
        ReleaseGroupResponse reply =
            client
                .blockingStub()
                .withDeadlineAfter(timeoutNanos, NANOSECONDS)
                .releaseGroup(request);
        synchronized (GroupSession.this) {
          notHeldAtRelease = List.copyOf(reply.getNotHeldList());
        }
        return reply.getNotHeldCount() == 0;
      } catch (StatusRuntimeException e) {
        throw client.error(e, "ReleaseGroup");
      }
    }

    @Override
    public boolean releasesAfterLoss() {
      return true;
    }

    @Override
    public void forget() {
      client.forget(GroupSession.this);
    }

    private RenewGroupRequest renewRequest(List<Lease> held) {
      return RenewGroupRequest.newBuilder()
          .addAllMembers(members(held))
          .setLeaseKey(leaseKey)
          .build();
    }
  }
}
