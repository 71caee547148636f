package dev.tenure.client;

import static java.util.concurrent.TimeUnit.NANOSECONDS;

import dev.tenure.v1.AcquireGroupRequest;
import dev.tenure.v1.AcquireGroupResponse;
import dev.tenure.v1.AcquireRequest;
import dev.tenure.v1.AcquireResponse;
import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.EventType;
import dev.tenure.v1.GetLeaseRequest;
import dev.tenure.v1.GetLeaseResponse;
import dev.tenure.v1.Lease;
import dev.tenure.v1.LeaseEvent;
import dev.tenure.v1.LeaseServiceGrpc;
import dev.tenure.v1.ListLeasesRequest;
import dev.tenure.v1.ListLeasesResponse;
import dev.tenure.v1.RevokeLeaseRequest;
import dev.tenure.v1.WatchLeaseRequest;
import dev.tenure.v1.WatchLeaseResponse;
import io.grpc.Channel;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The entry point of the Tenure Java client: acquires leases as {@link Session}s, reads and
 * watches leases, and gives access to the raw generated stubs.
 *
 * <pre>{@code
 * try (LeaseClient client = LeaseClient.connect("127.0.0.1:7419");
 *     Session session = client.acquire("jobs.nightly", "worker-1", Duration.ofSeconds(10))) {
 *   while (session.isHeld()) { ... write with session.getFencingToken() ... }
 * }
 * }</pre>
 *
 * <p>A client is thread-safe and meant to be shared. Its renewals run on one {@link
 * ScheduledExecutorService} (its own daemon thread unless one is given), and loss listeners on a
 * small pool of daemon threads of its own.
 */
public final class LeaseClient implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(LeaseClient.class.getName());
  private static final SecureRandom RANDOM = new SecureRandom();

  /** A running watch fed to a {@link StreamObserver}; close it to stop the stream. */
  public interface Subscription extends AutoCloseable {
    /** Cancels the watch; the observer is called no more. */
    @Override
    void close();
  }

  private final ManagedChannel ownedChannel;
  private final Channel channel;
  private final String target;
  private final LeaseServiceGrpc.LeaseServiceBlockingStub blockingStub;
  private final LeaseServiceGrpc.LeaseServiceStub asyncStub;
  private final ScheduledExecutorService scheduler;
  private final boolean ownsScheduler;
  private final ExecutorService callbacks;
  private final Set<Session> sessions = ConcurrentHashMap.newKeySet();
  private final Set<GroupSession> groups = ConcurrentHashMap.newKeySet();
  private final LossWatch lossWatch;
  private final KeepAliveStream keepAlive;

  /**
   * Connects to a Tenure server over plaintext gRPC. The client owns the channel and shuts it
   * down on {@link #close()}.
   *
   * @param target a gRPC target such as {@code "127.0.0.1:7419"} or {@code "dns:///tenure:7419"}
   * @return a client
   */
  public static LeaseClient connect(String target) {
    ManagedChannel channel = ManagedChannelBuilder.forTarget(target).usePlaintext().build();
    return new LeaseClient(channel, channel, null);
  }

  /**
   * Connects to a Tenure server with TLS, mTLS, a bearer token or extra metadata as {@code
   * options} say. The client owns the channel and shuts it down on {@link #close()}.
   *
   * @param target a gRPC target such as {@code "tenure.example:7419"}
   * @param options how to connect and authenticate
   * @return a client
   */
  public static LeaseClient connect(String target, ConnectOptions options) {
    ManagedChannel channel = options.channel(target);
    return new LeaseClient(
        channel, channel, null, options.lossWatch(), options.keepAliveStream());
  }

  /**
   * A client over a channel the caller owns (and shuts down after closing this client), e.g. one
   * with TLS or interceptors.
   *
   * @param channel the channel to the Tenure server
   */
  public LeaseClient(Channel channel) {
    this(channel, null, null);
  }

  /**
   * A client over a channel and a scheduler the caller owns; renewals run on {@code scheduler}.
   *
   * @param channel the channel to the Tenure server
   * @param scheduler where renewals and safe-deadline checks run; tasks must not be delayed much
   */
  public LeaseClient(Channel channel, ScheduledExecutorService scheduler) {
    this(channel, null, Objects.requireNonNull(scheduler, "scheduler"));
  }

  private LeaseClient(
      Channel channel, ManagedChannel ownedChannel, ScheduledExecutorService scheduler) {
    this(channel, ownedChannel, scheduler, true, true);
  }

  private LeaseClient(
      Channel channel,
      ManagedChannel ownedChannel,
      ScheduledExecutorService scheduler,
      boolean followLosses,
      boolean keepAliveStream) {
    Objects.requireNonNull(channel, "channel");
    this.lossWatch = new LossWatch(this, followLosses);
    this.keepAlive = new KeepAliveStream(this, keepAliveStream);
    this.ownedChannel = ownedChannel;
    this.channel = channel;
    this.target = channel.authority();
    this.blockingStub = LeaseServiceGrpc.newBlockingStub(channel);
    this.asyncStub = LeaseServiceGrpc.newStub(channel);
    this.ownsScheduler = scheduler == null;
    this.scheduler =
        scheduler != null
            ? scheduler
            : Executors.newSingleThreadScheduledExecutor(daemonThreads("tenure-renewal"));
    this.callbacks = Executors.newCachedThreadPool(daemonThreads("tenure-callback"));
  }

  /**
   * Takes lease {@code name} for {@code holder}, failing at once if someone else holds it.
   *
   * @param name the lease name
   * @param holder who takes it
   * @param ttl the TTL to ask for (rounded up to whole seconds by the server)
   * @return the held session, renewing in the background
   * @throws TenureException {@code LEASE_HELD} (with {@link TenureException#getHolder()}) when
   *     another holder has it, {@code INVALID_*} for bad arguments, or a transport failure
   */
  public Session acquire(String name, String holder, Duration ttl) {
    return acquire(AcquireOptions.builder(name, holder).ttl(ttl).build());
  }

  /**
   * Takes lease {@code name} for {@code holder}, waiting up to {@code wait} for it to become free.
   *
   * @param name the lease name
   * @param holder who takes it
   * @param ttl the TTL to ask for (rounded up to whole seconds by the server)
   * @param wait how long to wait while someone else holds it; zero fails at once
   * @return the held session, renewing in the background
   * @throws TenureException {@code LEASE_HELD} when the wait ran out, and as {@link
   *     #acquire(String, String, Duration)}
   */
  public Session acquire(String name, String holder, Duration ttl, Duration wait) {
    return acquire(AcquireOptions.builder(name, holder).ttl(ttl).wait(wait).build());
  }

  /**
   * Takes a lease as {@code options} say. Without a lease key in the options, the client mints a
   * random one, so the caller may retry a failed call with the same key (see {@link
   * AcquireOptions.Builder#leaseKey(String)}).
   *
   * @param options name, holder, TTL, wait, metadata and renewal settings
   * @return the held session, renewing in the background
   * @throws TenureException when the server refuses or cannot be reached
   */
  public Session acquire(AcquireOptions options) {
    String key = options.getLeaseKey() != null ? options.getLeaseKey() : mintKey();
    AcquireRequest.Builder request =
        AcquireRequest.newBuilder()
            .setName(options.getName())
            .setHolder(options.getHolder())
            .setLeaseKey(key)
            .putAllMetadata(options.getMetadata());
    if (options.getTtl() != null) {
      request.setTtl(toProto(options.getTtl()));
    }
    if (!options.getWait().isZero()) {
      request.setWait(toProto(options.getWait()));
    }
    if (options.getLimit() > 0) {
      request.setLimit(options.getLimit());
    }
    if (options.getPreference() > 0) {
      request.setPreference(options.getPreference());
    }
    if (options.getLockDelay() != null) {
      request.setLockDelay(toProto(options.getLockDelay()));
    }
    request.setMode(options.getMode());
    Duration timeout = options.getRpcTimeout().plus(options.getWait());
    long send = System.nanoTime();
    AcquireResponse reply;
    try {
      reply =
          blockingStub.withDeadlineAfter(timeout.toNanos(), NANOSECONDS).acquire(request.build());
    } catch (StatusRuntimeException e) {
      throw error(e, "Acquire");
    }
    Session session = new Session(this, options, reply.getLease(), reply.getLeaseKey(), send);
    sessions.add(session);
    session.start();
    lossWatch.add(session.watched());
    return session;
  }

  /**
   * The read-write lock {@code name} over this client's connection; it makes no call ({@link
   * ReadWriteLock#writeLock()} and {@link ReadWriteLock#readLock()} acquire).
   *
   * @param name the lock's name (a lease name)
   * @return the lock
   */
  public ReadWriteLock readWriteLock(String name) {
    return new ReadWriteLock(this, name);
  }

  /**
   * Takes the leases {@code names} for {@code holder} all at once, or none, waiting up to {@code
   * wait} until every one is free at once (never holding some while waiting for others).
   *
   * @param names 2 to the server's {@code --max-group-size} (default 16) distinct plain lease names
   * @param holder who takes them
   * @param ttl the TTL of every member
   * @param wait how long to wait; zero fails at once with {@code LEASE_HELD} (metadata {@code name}:
   *     a member that is held)
   * @return the group, renewing in the background
   * @throws TenureException when the server refuses ({@code UNIMPLEMENTED} from a server without
   *     groups) or cannot be reached
   */
  public GroupSession acquireGroup(List<String> names, String holder, Duration ttl, Duration wait) {
    return acquireGroup(AcquireOptions.groupBuilder(names, holder).ttl(ttl).wait(wait).build());
  }

  /**
   * Takes a group as {@code options} (from {@link AcquireOptions#groupBuilder}) say:
   * AcquireGroup, then renewals with RenewGroup on the session schedule; lost as a whole the
   * moment any member is lost.
   *
   * @param options names, holder, TTL, wait, lease key, metadata, lock delay, renewal settings
   * @return the group, renewing in the background
   * @throws TenureException when the server refuses or cannot be reached
   */
  public GroupSession acquireGroup(AcquireOptions options) {
    if (options.getNames() == null) {
      throw new IllegalArgumentException("use AcquireOptions.groupBuilder(names, holder)");
    }
    String key = options.getLeaseKey() != null ? options.getLeaseKey() : mintKey();
    AcquireGroupRequest.Builder request =
        AcquireGroupRequest.newBuilder()
            .addAllNames(options.getNames())
            .setHolder(options.getHolder())
            .setLeaseKey(key)
            .putAllMetadata(options.getMetadata());
    if (options.getTtl() != null) {
      request.setTtl(toProto(options.getTtl()));
    }
    if (!options.getWait().isZero()) {
      request.setWait(toProto(options.getWait()));
    }
    if (options.getLockDelay() != null) {
      request.setLockDelay(toProto(options.getLockDelay()));
    }
    Duration timeout = options.getRpcTimeout().plus(options.getWait());
    long send = System.nanoTime();
    AcquireGroupResponse reply;
    try {
      reply =
          blockingStub
              .withDeadlineAfter(timeout.toNanos(), NANOSECONDS)
              .acquireGroup(request.build());
    } catch (StatusRuntimeException e) {
      throw error(e, "AcquireGroup");
    }
    GroupSession group =
        new GroupSession(this, options, reply.getLeasesList(), reply.getLeaseKey(), send);
    groups.add(group);
    group.start();
    for (LossWatch.Watched member : group.watched()) {
      lossWatch.add(member);
    }
    return group;
  }

  /**
   * The current holding of a name.
   *
   * @param name the lease name
   * @return the lease as stored
   * @throws TenureException {@code LEASE_NOT_FOUND} when nobody holds it
   */
  public Lease getLease(String name) {
    try {
      return blockingStub
          .withDeadlineAfter(AcquireOptions.DEFAULT_RPC_TIMEOUT.toNanos(), NANOSECONDS)
          .getLease(GetLeaseRequest.newBuilder().setName(name).build())
          .getLease();
    } catch (StatusRuntimeException e) {
      throw error(e, "GetLease");
    }
  }

  /**
   * Everything the server says about a name: the holding ({@code getLease()}; for a semaphore the
   * holder with the lowest token), how many waiting Acquires are queued for it ({@code
   * getWaiting()}, in every replica), and for a semaphore its holders, limit and free slots.
   *
   * @param name the lease or semaphore name
   * @return the server's reply
   * @throws TenureException {@code LEASE_NOT_FOUND} when nobody holds it
   */
  public GetLeaseResponse inspect(String name) {
    try {
      return blockingStub
          .withDeadlineAfter(AcquireOptions.DEFAULT_RPC_TIMEOUT.toNanos(), NANOSECONDS)
          .getLease(GetLeaseRequest.newBuilder().setName(name).build());
    } catch (StatusRuntimeException e) {
      throw error(e, "GetLease");
    }
  }

  /**
   * Watches one lease name or a subtree ({@code "jobs.>"}, or {@code ">"} for all) as a blocking
   * iterator: first a {@code CURRENT} event per held lease, then {@code SNAPSHOT_COMPLETE}, then
   * every change. The watch reconnects and resumes after a Tenure restart or a broken connection
   * (see {@link LeaseWatch}). Close it to stop.
   *
   * <p>An {@code EVENT_TYPE_MISSED} event says the stream did not see every change of its name
   * (the server's watcher fell behind the bucket, which keeps one message per name): the changes
   * after {@code getMissedAfterRevision()} and before {@code getRevision()} are gone, the holding
   * in {@code getHolder()}/{@code getFencingToken()} (when known, token != 0) has ended, and other
   * holdings may have come and gone. The events after it are the name's changes from its revision
   * on.
   *
   * @param nameOrPrefix the name or subtree
   * @param types the event types to keep; none means all ({@code SNAPSHOT_COMPLETE} and {@code
   *     MISSED} always come)
   * @return the running watch
   */
  public LeaseWatch watch(String nameOrPrefix, EventType... types) {
    return watch(nameOrPrefix, WatchOptions.DEFAULTS.withEventTypes(types));
  }

  /**
   * Watches one lease name or a subtree as a blocking iterator, with the event types, start
   * revision and reconnect behaviour of {@code options}.
   *
   * @param nameOrPrefix the name or subtree
   * @param options what to keep, where to start, how to reconnect
   * @return the running watch
   */
  public LeaseWatch watch(String nameOrPrefix, WatchOptions options) {
    Objects.requireNonNull(nameOrPrefix, "name");
    Objects.requireNonNull(options, "options");
    return new LeaseWatch(asyncStub::watchLease, nameOrPrefix, options, target);
  }

  /**
   * Watches one lease name or a subtree, pushing each event to {@code observer} (on a gRPC
   * thread). Reconnects and resumes like {@link #watch(String, EventType...)}; a permanent failure
   * reaches {@code observer.onError} as a {@link TenureException}. After {@link
   * Subscription#close()}, the observer is called no more.
   *
   * @param nameOrPrefix the name or subtree
   * @param observer receives the events
   * @param types the event types to keep; none means all ({@code SNAPSHOT_COMPLETE} and {@code
   *     MISSED} always come)
   * @return a handle that cancels the watch
   */
  public Subscription watch(
      String nameOrPrefix, StreamObserver<LeaseEvent> observer, EventType... types) {
    return watch(nameOrPrefix, observer, WatchOptions.DEFAULTS.withEventTypes(types));
  }

  /**
   * Watches one lease name or a subtree, pushing each event to {@code observer} (on a gRPC
   * thread), with the event types, start revision and reconnect behaviour of {@code options}.
   * With reconnect off, the first failure goes to {@code onError} and a clean end of the stream
   * to {@code onCompleted}.
   *
   * @param nameOrPrefix the name or subtree
   * @param observer receives the events
   * @param options what to keep, where to start, how to reconnect
   * @return a handle that cancels the watch
   */
  public Subscription watch(
      String nameOrPrefix, StreamObserver<LeaseEvent> observer, WatchOptions options) {
    Objects.requireNonNull(nameOrPrefix, "name");
    Objects.requireNonNull(observer, "observer");
    Objects.requireNonNull(options, "options");
    ObserverWatch watch = new ObserverWatch(nameOrPrefix, observer, options);
    watch.open(options.startRevision());
    return watch;
  }

  /**
   * The server this client talks to, as named in error messages (the channel's authority).
   *
   * @return e.g. {@code "127.0.0.1:7419"}
   */
  public String target() {
    return target;
  }

  /** The channel every call of this client goes through (for the election stubs). */
  Channel channel() {
    return channel;
  }

  /** {@code t} as a TenureException whose message names this server and {@code rpc}. */
  TenureException error(Throwable t, String rpc) {
    return TenureException.from(t, target, rpc);
  }

  /**
   * One page of the held leases whose names start with {@code prefix} (admin grant needed when
   * auth is on).
   *
   * @param prefix the name prefix; {@code ""} lists every lease
   * @param pageSize at most this many (0: the server's default)
   * @param pageToken {@code ""} for the first page, else the previous page's next token
   * @return the page; {@code getNextPageToken()} is empty on the last one
   * @throws TenureException {@code PERMISSION_DENIED} without the grant, or a transport failure
   */
  public ListLeasesResponse listLeases(String prefix, int pageSize, String pageToken) {
    try {
      return blockingStub
          .withDeadlineAfter(5, TimeUnit.SECONDS)
          .listLeases(
              ListLeasesRequest.newBuilder()
                  .setPrefix(prefix)
                  .setPageSize(pageSize)
                  .setPageToken(pageToken)
                  .build());
    } catch (StatusRuntimeException e) {
      throw error(e, "ListLeases");
    }
  }

  /**
   * Ends the holding of {@code name} at once (admin grant needed when auth is on); its holder sees
   * REVOKED.
   *
   * @param name the lease name
   * @param reason why, 1 to 256 printable bytes (logged by the server)
   * @return the bucket revision of the removal
   * @throws TenureException {@code LEASE_NOT_FOUND} when nobody holds it, {@code
   *     PERMISSION_DENIED} without the grant, or a transport failure
   */
  public long revokeLease(String name, String reason) {
    return revokeLease(name, 0, reason);
  }

  /**
   * Ends the holding of slot {@code slot} of semaphore {@code name} at once (0: the plain lease
   * {@code name}); that holder sees REVOKED, the other holders keep their slots.
   *
   * @param name the lease or semaphore name
   * @param slot the semaphore slot ({@link Session#getSlot()}, {@code Lease.slot}); 0 for a plain
   *     lease
   * @param reason why, 1 to 256 printable bytes (logged by the server)
   * @return the bucket revision of the removal
   * @throws TenureException as {@link #revokeLease(String, String)}
   */
  public long revokeLease(String name, int slot, String reason) {
    try {
      return blockingStub
          .withDeadlineAfter(5, TimeUnit.SECONDS)
          .revokeLease(
              RevokeLeaseRequest.newBuilder()
                  .setName(name)
                  .setSlot(slot)
                  .setReason(reason)
                  .build())
          .getRevision();
    } catch (StatusRuntimeException e) {
      throw error(e, "RevokeLease");
    }
  }

  /**
   * The generated blocking stub over this client's channel, for calls the helper does not wrap.
   *
   * @return the blocking stub
   */
  public LeaseServiceGrpc.LeaseServiceBlockingStub blockingStub() {
    return blockingStub;
  }

  /**
   * The generated asynchronous stub over this client's channel.
   *
   * @return the async stub
   */
  public LeaseServiceGrpc.LeaseServiceStub asyncStub() {
    return asyncStub;
  }

  /**
   * Releases every session still open (best effort), stops the renewal scheduler if the client
   * owns it, and shuts down the channel if the client opened it.
   */
  @Override
  public void close() {
    for (Session session : new ArrayList<>(sessions)) {
      session.close();
    }
    for (GroupSession group : new ArrayList<>(groups)) {
      group.close();
    }
    lossWatch.close();
    keepAlive.close();
    if (ownsScheduler) {
      scheduler.shutdownNow();
    }
    callbacks.shutdown();
    if (ownedChannel != null) {
      ownedChannel.shutdown();
      try {
        if (!ownedChannel.awaitTermination(5, TimeUnit.SECONDS)) {
          ownedChannel.shutdownNow();
        }
      } catch (InterruptedException e) {
        ownedChannel.shutdownNow();
        Thread.currentThread().interrupt();
      }
    }
  }

  ScheduledExecutorService scheduler() {
    return scheduler;
  }

  void forget(Session session) {
    sessions.remove(session);
    lossWatch.remove(session.watched());
    if (sessions.isEmpty()) {
      keepAlive.idle();
    }
  }

  /** The KeepAlive stream the sessions' renewals go through. */
  KeepAliveStream keepAlive() {
    return keepAlive;
  }

  /** The one watch that follows every live session. */
  LossWatch lossWatch() {
    return lossWatch;
  }

  void forget(GroupSession group) {
    groups.remove(group);
    for (LossWatch.Watched member : group.watched()) {
      lossWatch.remove(member);
    }
  }

  void callback(Runnable task) {
    try {
      callbacks.execute(task);
    } catch (RejectedExecutionException e) {
      LOG.log(Level.FINE, "client closed; running the callback inline", e);
      task.run();
    }
  }

  static com.google.protobuf.Duration toProto(Duration d) {
    return com.google.protobuf.Duration.newBuilder()
        .setSeconds(d.getSeconds())
        .setNanos(d.getNano())
        .build();
  }

  private static String mintKey() {
    byte[] bytes = new byte[32];
    RANDOM.nextBytes(bytes);
    return HexFormat.of().formatHex(bytes);
  }

  private static ThreadFactory daemonThreads(String prefix) {
    AtomicInteger count = new AtomicInteger();
    return runnable -> {
      Thread thread = new Thread(runnable, prefix + "-" + count.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  /**
   * The push form of a watch: one stream at a time, reopened after it ends or fails retryably
   * (with jittered backoff, on the scheduler), resuming after the last delivered revision.
   */
  private final class ObserverWatch implements Subscription {
    private final String name;
    private final StreamObserver<LeaseEvent> observer;
    private final WatchOptions options;
    private volatile boolean closed;
    /** The generation of the current stream; callbacks of older ones are ignored. */
    private volatile int generation;
    private ClientCallStreamObserver<WatchLeaseRequest> call;
    private ScheduledFuture<?> retry;
    /** The revision the current stream started from (0: a snapshot). */
    private volatile long start;
    /** The highest revision delivered. */
    private volatile long last;
    private long backoffNanos;

    ObserverWatch(String name, StreamObserver<LeaseEvent> observer, WatchOptions options) {
      this.name = name;
      this.observer = observer;
      this.options = options;
      this.last = options.startRevision();
      this.backoffNanos = options.minBackoff().toNanos();
    }

    synchronized void open(long startRevision) {
      retry = null;
      if (closed) {
        return;
      }
      int gen = ++generation;
      start = startRevision;
      WatchLeaseRequest request =
          WatchLeaseRequest.newBuilder()
              .setName(name)
              .addAllEventTypes(options.eventTypes())
              .setStartRevision(startRevision)
              .build();
      asyncStub.watchLease(
          request,
          new ClientResponseObserver<WatchLeaseRequest, WatchLeaseResponse>() {
            @Override
            public void beforeStart(ClientCallStreamObserver<WatchLeaseRequest> requestStream) {
              call = requestStream; // inside open(), under the lock
            }

            @Override
            public void onNext(WatchLeaseResponse value) {
              deliver(gen, value.getEvent());
            }

            @Override
            public void onError(Throwable t) {
              ended(gen, t);
            }

            @Override
            public void onCompleted() {
              ended(gen, null);
            }
          });
    }

    /** Passes one event of stream {@code gen} on, unless delivered before. */
    private void deliver(int gen, LeaseEvent event) {
      if (closed || gen != generation) {
        return;
      }
      if (event.getType() == EventType.EVENT_TYPE_SNAPSHOT_COMPLETE) {
        synchronized (this) {
          backoffNanos = options.minBackoff().toNanos(); // connected and caught up
        }
      } else if (start != 0 && Long.compareUnsigned(event.getRevision(), start) <= 0) {
        return; // a server without resume sends its snapshot again
      }
      if (Long.compareUnsigned(event.getRevision(), last) > 0) {
        last = event.getRevision();
      }
      observer.onNext(event);
    }

    /** Stream {@code gen} ended: reconnect, start over, or tell the observer. */
    private void ended(int gen, Throwable t) {
      TenureException error = t == null ? null : TenureException.from(t, target, "WatchLease");
      synchronized (this) {
        if (closed || gen != generation) {
          return;
        }
        call = null;
        if (options.reconnect()) {
          if (error != null
              && error.getReason() == ErrorReason.WATCH_HISTORY_COMPACTED
              && start != 0) {
            last = 0;
            options.listener().onResync(error);
            if (schedule(() -> open(0), 0)) {
              return;
            }
          }
          if (error == null || error.isRetryable()) {
            long delay =
                backoffNanos / 2 + ThreadLocalRandom.current().nextLong(backoffNanos / 2 + 1);
            backoffNanos = Math.min(options.maxBackoff().toNanos(), backoffNanos * 2);
            options.listener().onReconnect(error, last, Duration.ofNanos(delay));
            long from = last;
            if (schedule(() -> open(from), delay)) {
              return;
            }
          }
        }
        closed = true;
      }
      if (error != null) {
        observer.onError(error);
      } else {
        observer.onCompleted();
      }
    }

    /** Schedules a reopen; false when the client is closed (its scheduler stopped). */
    private boolean schedule(Runnable reopen, long delayNanos) {
      try {
        retry = scheduler.schedule(reopen, delayNanos, NANOSECONDS);
        return true;
      } catch (RejectedExecutionException e) {
        return false;
      }
    }

    @Override
    public void close() {
      ClientCallStreamObserver<WatchLeaseRequest> c;
      synchronized (this) {
        closed = true;
        if (retry != null) {
          retry.cancel(false);
        }
        c = call;
      }
      if (c != null) {
        c.cancel("watch closed by the client", null);
      }
    }
  }
}
