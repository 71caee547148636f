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

import { LeaseLostError, TenureError } from "./errors";
import {
  EventType,
  LeaseServiceClient,
  type AcquireRequest,
  type AcquireResponse,
  type GetLeaseRequest,
  type GetLeaseResponse,
  type Lease,
  type LeaseEvent,
  type WatchLeaseResponse,
} from "./gen/tenure/v1/lease";
import { unary, type UnaryMethod } from "./rpc";
import { Session, type RenewalOptions } from "./session";
import { msToDuration } from "./time";

/** How to reach a Tenure server. */
export interface ClientOptions {
  /** Channel credentials. Default: insecure (plaintext). */
  credentials?: ChannelCredentials;
  /** grpc-js channel options (keepalive, message sizes, ...). */
  channelOptions?: ChannelOptions;
  /** Deadline of each unary call (an Acquire gets its wait on top). Default 5000 ms. */
  rpcTimeoutMs?: number;
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
}

/** What to watch in {@link TenureClient.watch}. */
export interface WatchOptions {
  /** Only these kinds of change (SNAPSHOT_COMPLETE is always sent). Default: all. */
  eventTypes?: EventType[];
  /** Ends the watch: the iteration then finishes without an error. */
  signal?: AbortSignal;
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
  readonly #rpcTimeoutMs: number;

  /** A client of the server at `address` ("host:port"). */
  constructor(address: string, options: ClientOptions = {}) {
    this.stub = new LeaseServiceClient(
      address,
      options.credentials ?? grpcCredentials.createInsecure(),
      options.channelOptions,
    );
    this.#rpcTimeoutMs = options.rpcTimeoutMs ?? 5000;
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
    const leaseKey = options.leaseKey ?? randomBytes(24).toString("base64url");
    const acquire: UnaryMethod<AcquireRequest, AcquireResponse> = this.stub.acquire.bind(this.stub);
    const rpcTimeoutMs = options.rpcTimeoutMs ?? this.#rpcTimeoutMs;
    const waitUntil = performance.now() + (options.waitMs ?? 0);
    for (let attempt = 0; ; attempt++) {
      const waitMs = Math.max(0, waitUntil - performance.now());
      const sentAt = performance.now();
      const reply = await unary(
        acquire,
        {
          name,
          holder,
          ttl: options.ttlMs === undefined ? undefined : msToDuration(options.ttlMs),
          leaseKey,
          wait: waitMs > 0 ? msToDuration(waitMs) : undefined,
          lockDelay: undefined,
          metadata: options.metadata ?? {},
        },
        waitMs + rpcTimeoutMs,
        options.signal,
      ).result;
      const lease = reply.lease;
      if (lease === undefined) {
        throw new TenureError(GrpcStatus.INTERNAL, undefined, "Acquire reply carried no lease");
      }
      const session = new Session({
        stub: this.stub,
        lease,
        leaseKey: reply.leaseKey || leaseKey,
        sentAt,
        options: { ...options, rpcTimeoutMs },
      });
      if (session.isHeld()) return session;
      // Granted, but the reply came too late to trust: ask again with the
      // same key for a fresh send time (the server renews the same holding).
      if (attempt + 1 >= MAX_REANCHORS) {
        await session.release().catch(() => undefined);
        throw new LeaseLostError("SAFE_DEADLINE_PASSED", name, lease.fencingToken);
      }
    }
  }

  /** The current holding of `name`; rejects with `LEASE_NOT_FOUND` when nobody holds it. */
  async getLease(name: string, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<Lease> {
    const get: UnaryMethod<GetLeaseRequest, GetLeaseResponse> = this.stub.getLease.bind(this.stub);
    const reply = await unary(get, { name }, options.timeoutMs ?? this.#rpcTimeoutMs, options.signal).result;
    if (reply.lease === undefined) throw new TenureError(GrpcStatus.INTERNAL, undefined, "GetLease reply carried no lease");
    return reply.lease;
  }

  /**
   * Watches one lease name, or a subtree (`"jobs.>"`, or `">"` for all), as
   * an async iterator: first a CURRENT event per held lease, then one
   * SNAPSHOT_COMPLETE, then every change (ACQUIRED, RENEWED, RELEASED,
   * EXPIRED, REVOKED) as it happens. The stream starts on the first
   * `next()`; leaving the `for await` loop (or aborting `signal`) cancels
   * it. A failure of the stream is thrown as a {@link TenureError}.
   */
  async *watch(name: string, options: WatchOptions = {}): AsyncGenerator<LeaseEvent, void, undefined> {
    const { signal } = options;
    if (signal?.aborted) return;
    const call: ClientReadableStream<WatchLeaseResponse> = this.stub.watchLease({
      name,
      eventTypes: options.eventTypes ?? [],
      startRevision: 0n,
    });
    // After a cancel the stream may still emit its CANCELLED status.
    call.on("error", () => undefined);
    const onAbort = () => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const message of call as AsyncIterable<WatchLeaseResponse>) {
        if (message.event !== undefined) yield message.event;
      }
    } catch (err) {
      if (signal?.aborted) return;
      throw TenureError.from(err);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      call.cancel();
    }
  }

  /** Closes the channel. Sessions of this client can no longer renew or release. */
  close(): void {
    this.stub.close();
  }
}

/** Rejects option values that cannot work, before anything is sent. */
function checkRenewalOptions(options: AcquireOptions): void {
  const { renewFraction, safetyMarginMs, retryIntervalMs, rpcTimeoutMs, ttlMs, waitMs } = options;
  if (renewFraction !== undefined && !(renewFraction > 0 && renewFraction < 1)) {
    throw new RangeError(`renewFraction must be in (0, 1), got ${renewFraction}`);
  }
  for (const [key, value] of Object.entries({ safetyMarginMs, retryIntervalMs, ttlMs, waitMs })) {
    if (value !== undefined && !(Number.isFinite(value) && value >= 0)) {
      throw new RangeError(`${key} must be a non-negative number of milliseconds, got ${value}`);
    }
  }
  if (rpcTimeoutMs !== undefined && !(Number.isFinite(rpcTimeoutMs) && rpcTimeoutMs > 0)) {
    throw new RangeError(`rpcTimeoutMs must be positive, got ${rpcTimeoutMs}`);
  }
}
