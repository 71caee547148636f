/**
 * The Tenure client: acquire sessions, read and watch leases.
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";

import {
  credentials as grpcCredentials,
  status as GrpcStatus,
  type ChannelCredentials,
  type ChannelOptions,
  type ClientReadableStream,
} from "@grpc/grpc-js";

import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

import { ErrorReason, LeaseLostError, TenureError } from "./errors";
import {
  AcquireGroupRequest,
  AcquireRequest,
  EventType,
  GetFenceKeysRequest,
  GetLeaseRequest,
  LeaseServiceClient,
  LockMode,
  ListLeasesRequest,
  RevokeLeaseRequest,
  WatchLeaseRequest,
  type AcquireGroupResponse,
  type AcquireResponse,
  type FenceKey,
  type GetFenceKeysResponse,
  type GetLeaseResponse,
  type Lease,
  type LeaseEvent,
  type ListLeasesResponse,
  type RevokeLeaseResponse,
  type WatchLeaseResponse,
} from "./gen/tenure/v1/lease";
import { GroupSession } from "./group";
import { type RenewalOptions } from "./holding";
import { Renewer, type RenewalStats } from "./keepalive";
import { LossWatch } from "./losswatch";
import { CallContext, unary, type TokenSource, type UnaryMethod } from "./rpc";
import { RWLock } from "./rwlock";
import { Session } from "./session";
import { msToDuration } from "./time";
import { resumingWatch, type ResumeOptions } from "./watch";

/** PEM material: the bytes, or the path of a file holding them. */
export type Pem = Buffer | string;

/** TLS to the server; every field is optional. */
export interface TlsOptions {
  /** CA certificate(s) the server's certificate must chain to. Default: the system roots. */
  ca?: Pem;
  /** Client certificate chain, for mTLS (with `key`). */
  cert?: Pem;
  /** Client private key, for mTLS (with `cert`). */
  key?: Pem;
  /** The name to verify the server's certificate against. Default: the address's host. */
  serverName?: string;
}

/** How to reach a Tenure server. */
export interface ClientOptions {
  /**
   * TLS (`true` for the system roots, or a CA and optionally a client
   * certificate for mTLS). Default: plaintext.
   */
  tls?: boolean | TlsOptions;
  /**
   * Bearer token sent as `authorization: Bearer <token>` on every call: a
   * string, or a function called before each call (for tokens that
   * expire). Works over TLS and, for local development, over plaintext.
   */
  token?: TokenSource;
  /** Extra metadata (headers) sent with every call. */
  metadata?: Record<string, string>;
  /** Channel credentials, overriding `tls`. Default: from `tls`, else plaintext. */
  credentials?: ChannelCredentials;
  /**
   * Keep one WatchLease stream that follows the names of this client's live
   * sessions, so a revoke, expiry or takeover ends a session at once
   * (`LEASE_ENDED`) instead of at its next renewal. Default `true`. Without
   * it (or when the server refuses the watch: no `watch` grant) loss is
   * noticed at the next renewal, as before.
   */
  lossWatch?: boolean;
  /** grpc-js channel options (keepalive, message sizes, ...). */
  channelOptions?: ChannelOptions;
  /** Deadline of each unary call (an Acquire gets its wait on top). Default 5000 ms. */
  rpcTimeoutMs?: number;
  /**
   * Send the renewals of all this client's lease and semaphore sessions over
   * one KeepAlive stream, batching those due together into one message.
   * Default `true`; `false` renews each with a unary Renew. A server
   * without KeepAlive (UNIMPLEMENTED) gets unary Renews either way.
   */
  keepAlive?: boolean;
}

/** What to ask for in {@link TenureClient.acquire}; the renewal options apply to the session. */
export interface AcquireOptions extends RenewalOptions {
  /**
   * Requested time to live. The server rounds it up to whole seconds (and
   * to its minimum, 1 s by default). Default: the server's default (10 s).
   */
  ttlMs?: number;
  /**
   * How long to wait for a held lease to become free. Default 0: fail at
   * once with `LEASE_HELD`.
   */
  waitMs?: number;
  /** Small key/value map stored with the lease and shown to watchers. */
  metadata?: Record<string, string>;
  /**
   * The ownership secret (16 to 256 printable ASCII characters). Default: a
   * random key minted here, so that a retried Acquire is safe.
   */
  leaseKey?: string;
  /** Cancels a pending (e.g. waiting) Acquire; rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Lock-delay: after this holding *expires or is revoked* (never after a
   * release) nobody may acquire the name for this long (rounded up to
   * whole seconds, at most the server's `--max-lock-delay`). For
   * downstream systems that cannot check fencing tokens. Not combinable
   * with a semaphore's `limit`. Default: none.
   */
  lockDelayMs?: number;
  /**
   * Makes the name a counting semaphore of this many slots (see
   * {@link Semaphore}, which sets it for you). Default 0: an exclusive lease.
   */
  limit?: number;
  /**
   * An election candidate's preference (an integer from 0 to 2^32 - 1),
   * kept with its place while it waits (with `waitMs`): Observe names the
   * waiting candidate of the highest preference (the earliest of equals),
   * and a `LeaderElector` leading with a lower preference hands over
   * to it. A `LeaderElector` sets it from its own `preference`. Not
   * combinable with `limit`. Default 0: asks for nothing.
   */
  preference?: number;
  /**
   * Makes the Acquire a read-write lock's: `LockMode.EXCLUSIVE` or
   * `LockMode.SHARED` (see {@link RWLock}, which sets it for you). Not
   * combinable with `limit`, `lockDelayMs` or `preference`. Default
   * `LockMode.UNSPECIFIED`: a plain lease (or a semaphore slot).
   */
  mode?: LockMode;
}

/** What to ask for in {@link TenureClient.acquireGroup}: a lease's options but `limit`, `preference` and `mode`. */
export type GroupAcquireOptions = Omit<AcquireOptions, "limit" | "preference" | "mode">;

/**
 * The state of a name as `GetLease` reports it ({@link TenureClient.inspect}).
 */
export interface LeaseState {
  /** The current holding; for a semaphore, the holder with the lowest fencing token. */
  lease: Lease;
  /** How many Acquires with a wait are queued for the name, across every replica. */
  waiting: number;
  /** A semaphore's live holders, by slot; empty for a plain lease. */
  holders: Lease[];
  /** A semaphore's limit in force; 0 for a plain lease. */
  limit: number;
  /** How many more holders a semaphore admits now; 0 for a plain lease. */
  freeSlots: number;
}

/**
 * What to watch in {@link TenureClient.watch}, and how it reconnects
 * ({@link ResumeOptions}: `startRevision`, `reconnect`, backoff, `onReconnect`,
 * `onResync`, `signal`).
 */
export interface WatchOptions extends ResumeOptions {
  /** Only these kinds of change (SNAPSHOT_COMPLETE and MISSED are always sent). Default: all. */
  eventTypes?: EventType[];
}

/** One page of {@link TenureClient.listLeases}. */
export interface LeasePage {
  /** The leases of this page, by name. */
  leases: Lease[];
  /** Pass as `pageToken` for the next page; `""` on the last one. */
  nextPageToken: string;
}

/** The fence proof verification keys of {@link TenureClient.fenceKeys}. */
export interface FenceKeys {
  /** The keys, the active one (that signs new proofs) first. */
  keys: FenceKey[];
  /** The same keys in the keyset text form every fence verifier reads (`Keyset.parse` of `@tenure/fence`). */
  keyset: string;
}

/** Channel credentials from the TLS options (plaintext without them). */
function channelCredentials(options: ClientOptions): ChannelCredentials {
  if (options.credentials !== undefined) return options.credentials;
  if (options.tls === undefined || options.tls === false) return grpcCredentials.createInsecure();
  const tls = options.tls === true ? {} : options.tls;
  const pem = (value: Pem | undefined) =>
    value === undefined ? null : typeof value === "string" ? readFileSync(value) : value;
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw new RangeError("tls.cert and tls.key go together (mTLS needs both)");
  }
  return grpcCredentials.createSsl(pem(tls.ca), pem(tls.key), pem(tls.cert));
}

/** How many times an Acquire is re-sent when its reply came after its own safe deadline. */
const MAX_REANCHORS = 3;

/**
 * A client of one Tenure server (or load-balanced address).
 *
 * @example
 * ```ts
 * const client = new TenureClient("127.0.0.1:7419");
 * await using session = await client.acquire("jobs.nightly", "worker-1", { ttlMs: 10_000 });
 * await doWork(session.fencingToken, session.signal);
 * ```
 */
export class TenureClient {
  /** The generated grpc-js stub, for calls the helper does not wrap. */
  readonly stub: LeaseServiceClient;
  /** The server address as given. */
  readonly address: string;
  readonly #rpcTimeoutMs: number;
  readonly #ctx: CallContext;
  readonly #lossWatch: LossWatch;
  readonly #renewer: Renewer;

  /** A client of the server at `address` ("host:port"). */
  constructor(address: string, options: ClientOptions = {}) {
    const tls = typeof options.tls === "object" ? options.tls : undefined;
    const channelOptions: ChannelOptions = { ...options.channelOptions };
    if (tls?.serverName !== undefined) channelOptions["grpc.ssl_target_name_override"] = tls.serverName;
    this.stub = new LeaseServiceClient(address, channelCredentials(options), channelOptions);
    this.address = address;
    this.#rpcTimeoutMs = options.rpcTimeoutMs ?? 5000;
    this.#ctx = new CallContext(address, options.token, options.metadata);
    this.#lossWatch = new LossWatch(this.stub, this.#ctx, options.lossWatch ?? true);
    this.#renewer = new Renewer(this.stub, this.#ctx, options.keepAlive ?? true);
  }

  /**
   * How this client's session renewals went: messages and entries sent over
   * KeepAlive streams, unary Renews, and whether the server lacks KeepAlive.
   */
  get renewalStats(): RenewalStats {
    return this.#renewer.stats;
  }

  /**
   * Takes the lease `name` for `holder` and returns a {@link Session} that
   * renews it in the background until released or lost.
   *
   * Rejects with a {@link TenureError} (`reason` `LEASE_HELD` when another
   * holder has it and the wait, if any, ran out). If a (waiting) Acquire's
   * reply arrives after its own safe deadline, it is re-sent with the same
   * lease key: the server renews the same holding (or grants a new one if it
   * expired meanwhile), so the session starts with a fresh deadline.
   */
  async acquire(name: string, holder: string, options: AcquireOptions = {}): Promise<Session> {
    checkRenewalOptions(options);
    const acquire: UnaryMethod<AcquireRequest, AcquireResponse> = this.stub.acquire.bind(this.stub);
    return this.#grant(options, (leaseKey, wait, timeoutMs) =>
      unary(
        this.#ctx,
        "Acquire",
        acquire,
        AcquireRequest.fromPartial({
          name,
          holder,
          ttl: options.ttlMs === undefined ? undefined : msToDuration(options.ttlMs),
          leaseKey,
          wait,
          metadata: options.metadata ?? {},
          lockDelay: options.lockDelayMs ? msToDuration(options.lockDelayMs) : undefined,
          limit: options.limit ?? 0,
          preference: options.preference ?? 0,
          mode: options.mode ?? LockMode.UNSPECIFIED,
        }),
        timeoutMs,
        options.signal,
      ).result.then((reply) => {
        const lease = this.#required(reply.lease, "Acquire");
        return {
          session: (sentAt: number, rpcTimeoutMs: number) =>
            new Session({
              stub: this.stub,
              ctx: this.#ctx,
              lossWatch: this.#lossWatch,
              renewer: this.#renewer,
              lease,
              leaseKey: reply.leaseKey || leaseKey,
              sentAt,
              options: { ...options, rpcTimeoutMs },
            }),
          name,
          token: lease.fencingToken,
        };
      }),
    );
  }

  /**
   * The read-write lock `name`: one exclusive holder ({@link RWLock.lock})
   * or any number of shared ones ({@link RWLock.lockShared}) at once. Makes
   * no call: acquiring does.
   */
  rwlock(name: string): RWLock {
    return new RWLock(this, name);
  }

  /**
   * Takes every name of `names` (2 to the server's --max-group-size, 16 by
   * default) for `holder` in one all-or-nothing AcquireGroup, each member
   * with its own fencing token, and returns a {@link GroupSession} that
   * renews them together (RenewGroup) until released or lost. With
   * `waitMs`, waits until every name is free at once (it never holds some
   * while waiting for others). Rejects like {@link acquire}.
   */
  async acquireGroup(names: readonly string[], holder: string, options: GroupAcquireOptions = {}): Promise<GroupSession> {
    checkRenewalOptions(options);
    const acquire: UnaryMethod<AcquireGroupRequest, AcquireGroupResponse> = this.stub.acquireGroup.bind(this.stub);
    return this.#grant(options, (leaseKey, wait, timeoutMs) =>
      unary(
        this.#ctx,
        "AcquireGroup",
        acquire,
        AcquireGroupRequest.fromPartial({
          names: [...names],
          holder,
          ttl: options.ttlMs === undefined ? undefined : msToDuration(options.ttlMs),
          leaseKey,
          wait,
          metadata: options.metadata ?? {},
          lockDelay: options.lockDelayMs ? msToDuration(options.lockDelayMs) : undefined,
        }),
        timeoutMs,
        options.signal,
      ).result.then((reply) => {
        if (reply.leases.length === 0) this.#required(undefined, "AcquireGroup");
        return {
          session: (sentAt: number, rpcTimeoutMs: number) =>
            new GroupSession({
              stub: this.stub,
              ctx: this.#ctx,
              lossWatch: this.#lossWatch,
              leases: reply.leases,
              leaseKey: reply.leaseKey || leaseKey,
              sentAt,
              options: { ...options, rpcTimeoutMs },
            }),
          name: names.join(" + "),
          token: reply.leases[0]!.fencingToken,
        };
      }),
    );
  }

  /**
   * The acquire loop shared by leases, semaphores and groups. `send` makes
   * one call with the lease key, the wait left and the call's deadline.
   *
   * - A `TOO_MANY_WAITERS` refusal (the name's queue is full) is retried
   *   after the server's RetryInfo delay (2 s when it gives none) when the
   *   wait lasts beyond it; otherwise it is thrown.
   * - A grant whose reply came after half of its safe time had passed (a
   *   long wait) is asked again with the same key for a fresh send time (the
   *   server renews the same holding), at most {@link MAX_REANCHORS} times.
   */
  async #grant<S extends Session | GroupSession>(
    options: GroupAcquireOptions,
    send: (
      leaseKey: string,
      wait: ReturnType<typeof msToDuration> | undefined,
      timeoutMs: number,
    ) => Promise<{ session: (sentAt: number, rpcTimeoutMs: number) => S; name: string; token: bigint }>,
  ): Promise<S> {
    const leaseKey = options.leaseKey ?? randomBytes(24).toString("base64url");
    const rpcTimeoutMs = options.rpcTimeoutMs ?? this.#rpcTimeoutMs;
    const waitUntil = performance.now() + (options.waitMs ?? 0);
    for (let attempt = 0; ; ) {
      const waitMs = Math.max(0, waitUntil - performance.now());
      const sentAt = performance.now();
      let granted: Awaited<ReturnType<typeof send>>;
      try {
        granted = await send(leaseKey, waitMs > 0 ? msToDuration(waitMs) : undefined, waitMs + rpcTimeoutMs);
      } catch (err) {
        if (!(err instanceof TenureError) || err.reason !== ErrorReason.TOO_MANY_WAITERS) throw err;
        // The queue is full: come back when a place may have freed, if
        // that is still within the wait.
        const delayMs = err.retryDelayMs ?? 2000;
        if (waitUntil - performance.now() <= delayMs) throw err;
        await sleep(delayMs, undefined, { signal: options.signal }).catch(() => {
          throw options.signal?.reason;
        });
        continue;
      }
      const session = granted.session(sentAt, rpcTimeoutMs);
      if (session.freshEnough()) return session;
      // Granted, but the reply came too late to trust, or so late that the
      // first renewal could not get through in the time left: ask again with
      // the same key for a fresh send time (the server renews the same
      // holding).
      if (++attempt >= MAX_REANCHORS) {
        await session.release().catch(() => undefined);
        throw new LeaseLostError("SAFE_DEADLINE_PASSED", granted.name, granted.token);
      }
    }
  }

  /** `value`, or an INTERNAL error saying the reply of `rpc` lacked its lease. */
  #required(value: Lease | undefined, rpc: string): Lease {
    if (value === undefined) {
      throw new TenureError(GrpcStatus.INTERNAL, undefined, `${rpc} reply carried no lease`, {}, { target: this.address, rpc });
    }
    return value;
  }

  /**
   * Everything `GetLease` says about `name`: the holding, how many Acquires
   * wait for it, and for a semaphore its holders, limit and free slots.
   * Rejects with `LEASE_NOT_FOUND` when nobody holds it.
   */
  async inspect(name: string, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<LeaseState> {
    const get: UnaryMethod<GetLeaseRequest, GetLeaseResponse> = this.stub.getLease.bind(this.stub);
    const reply = await unary(
      this.#ctx,
      "GetLease",
      get,
      GetLeaseRequest.fromPartial({ name }),
      options.timeoutMs ?? this.#rpcTimeoutMs,
      options.signal,
    ).result;
    return {
      lease: this.#required(reply.lease, "GetLease"),
      waiting: reply.waiting,
      holders: reply.holders,
      limit: reply.limit,
      freeSlots: reply.freeSlots,
    };
  }

  /**
   * The current holding of `name` (for a semaphore, its holder with the
   * lowest token); rejects with `LEASE_NOT_FOUND` when nobody holds it.
   * {@link inspect} also says how many wait, and a semaphore's holders.
   */
  async getLease(name: string, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<Lease> {
    return (await this.inspect(name, options)).lease;
  }

  /**
   * The public keys fence proofs are signed with (`GetFenceKeys`), for a
   * store to pin: `keyset` is what `Keyset.parse` of `@tenure/fence` reads.
   * Empty when the server signs no proofs (no `--fence-signing-key`).
   */
  async fenceKeys(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<FenceKeys> {
    const get: UnaryMethod<GetFenceKeysRequest, GetFenceKeysResponse> = this.stub.getFenceKeys.bind(this.stub);
    const reply = await unary(
      this.#ctx,
      "GetFenceKeys",
      get,
      GetFenceKeysRequest.fromPartial({}),
      options.timeoutMs ?? this.#rpcTimeoutMs,
      options.signal,
    ).result;
    return { keys: reply.keys, keyset: reply.keyset };
  }

  /**
   * One page of the held leases whose names start with `prefix` (admin
   * grant needed when auth is on). Pass the returned `nextPageToken` as
   * `pageToken` for the next page.
   */
  async listLeases(
    prefix = "",
    options: { pageSize?: number; pageToken?: string; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<LeasePage> {
    const list: UnaryMethod<ListLeasesRequest, ListLeasesResponse> = this.stub.listLeases.bind(this.stub);
    const reply = await unary(
      this.#ctx,
      "ListLeases",
      list,
      ListLeasesRequest.fromPartial({ prefix, pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "" }),
      options.timeoutMs ?? this.#rpcTimeoutMs,
      options.signal,
    ).result;
    return { leases: reply.leases, nextPageToken: reply.nextPageToken };
  }

  /** Every held lease under `prefix`, all pages. */
  async *allLeases(prefix = "", options: { pageSize?: number; signal?: AbortSignal } = {}): AsyncGenerator<Lease> {
    let pageToken = "";
    do {
      const page = await this.listLeases(prefix, { ...options, pageToken });
      yield* page.leases;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /**
   * Removes the holding of `name` at once (admin grant needed when auth is
   * on); its holder sees REVOKED. `reason` (1 to 256 printable bytes) is
   * logged by the server. With `fencingToken`, only that holding is
   * revoked; with `slot`, the holder of that slot of the semaphore `name`.
   * Resolves with the revision of the removal.
   */
  async revokeLease(
    name: string,
    reason: string,
    options: { fencingToken?: bigint; slot?: number; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<bigint> {
    const revoke: UnaryMethod<RevokeLeaseRequest, RevokeLeaseResponse> = this.stub.revokeLease.bind(this.stub);
    const reply = await unary(
      this.#ctx,
      "RevokeLease",
      revoke,
      RevokeLeaseRequest.fromPartial({ name, reason, fencingToken: options.fencingToken ?? 0n, slot: options.slot ?? 0 }),
      options.timeoutMs ?? this.#rpcTimeoutMs,
      options.signal,
    ).result;
    return reply.revision;
  }

  /**
   * Watches one lease name, or a subtree (`"jobs.>"`, or `">"` for all), as
   * an async iterator: first a CURRENT event per held lease, then one
   * SNAPSHOT_COMPLETE, then every change (ACQUIRED, RENEWED, RELEASED,
   * EXPIRED, REVOKED) as it happens, in revision order. The stream starts on
   * the first `next()`; leaving the `for await` loop (or aborting `signal`)
   * cancels it.
   *
   * A MISSED event says the stream did not see every change of its name
   * (the server's watcher fell behind the bucket, which keeps one message
   * per name): the changes after `missedAfterRevision` and before
   * `revision` are gone, the holding in `holder`/`fencingToken` (when known,
   * token != 0n) has ended, and other holdings may have come and gone. The
   * events after it are the name's changes from `revision` on.
   *
   * When the stream ends or fails retryably (a Tenure restart, UNAVAILABLE,
   * a broken connection) the watch reopens it with capped exponential
   * backoff and resumes after the last revision it delivered: no duplicate,
   * no gap (the resumed part ends with another SNAPSHOT_COMPLETE, "caught
   * up"). If the server cannot resume (WATCH_HISTORY_COMPACTED) it starts
   * over with a fresh snapshot and calls `onResync`. A permanent failure
   * (PERMISSION_DENIED, UNAUTHENTICATED, INVALID_ARGUMENT, ...) is thrown
   * as a {@link TenureError}; with `reconnect: false` every failure is.
   */
  watch(name: string, options: WatchOptions = {}): AsyncGenerator<LeaseEvent, void, undefined> {
    return resumingWatch(
      (startRevision) => this.#watchStream(name, options.eventTypes ?? [], startRevision, options.signal),
      (err) => this.#ctx.error(err, "WatchLease"),
      options,
    );
  }

  /** One WatchLease stream; cancelled when the iteration stops or `signal` aborts. */
  async *#watchStream(
    name: string,
    eventTypes: EventType[],
    startRevision: bigint,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<LeaseEvent, void, undefined> {
    if (signal?.aborted) return;
    const md = await this.#ctx.metadata();
    const call: ClientReadableStream<WatchLeaseResponse> = this.stub.watchLease(
      WatchLeaseRequest.fromPartial({ name, eventTypes, startRevision }),
      md,
    );
    // After a cancel the stream may still emit its CANCELLED status.
    call.on("error", () => undefined);
    const onAbort = () => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const message of call as AsyncIterable<WatchLeaseResponse>) {
        if (message.event !== undefined) yield message.event;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      call.cancel();
    }
  }

  /** The credentials and target every call of this client carries. @internal */
  get callContext(): CallContext {
    return this.#ctx;
  }

  /** Closes the channel. Sessions of this client can no longer renew or release. */
  close(): void {
    this.#lossWatch.close();
    this.#renewer.close();
    this.stub.close();
  }
}

/** Whether `n` is a valid election preference (a uint32). */
export function isPreference(n: number): boolean {
  return Number.isInteger(n) && n >= 0 && n <= 0xffff_ffff;
}

/** Rejects option values that cannot work, before anything is sent. */
function checkRenewalOptions(options: AcquireOptions): void {
  const { renewFraction, safetyMarginMs, retryIntervalMs, rpcTimeoutMs, ttlMs, waitMs, lockDelayMs, limit, preference, mode } = options;
  if (mode !== undefined && !(mode === LockMode.UNSPECIFIED || mode === LockMode.EXCLUSIVE || mode === LockMode.SHARED)) {
    throw new RangeError(`mode must be a LockMode, got ${String(mode)}`);
  }
  if (renewFraction !== undefined && !(renewFraction > 0 && renewFraction < 1)) {
    throw new RangeError(`renewFraction must be in (0, 1), got ${renewFraction}`);
  }
  if (limit !== undefined && !(Number.isInteger(limit) && limit >= 0)) {
    throw new RangeError(`limit must be a non-negative integer, got ${limit}`);
  }
  if (preference !== undefined && !isPreference(preference)) {
    throw new RangeError(`preference must be an integer from 0 to 2^32 - 1, got ${preference}`);
  }
  for (const [key, value] of Object.entries({ safetyMarginMs, retryIntervalMs, ttlMs, waitMs, lockDelayMs })) {
    if (value !== undefined && !(Number.isFinite(value) && value >= 0)) {
      throw new RangeError(`${key} must be a non-negative number of milliseconds, got ${value}`);
    }
  }
  if (rpcTimeoutMs !== undefined && !(Number.isFinite(rpcTimeoutMs) && rpcTimeoutMs > 0)) {
    throw new RangeError(`rpcTimeoutMs must be positive, got ${rpcTimeoutMs}`);
  }
}

