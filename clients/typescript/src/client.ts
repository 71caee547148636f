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

import { LeaseLostError, TenureError } from "./errors";
import {
  AcquireRequest,
  EventType,
  GetLeaseRequest,
  LeaseServiceClient,
  ListLeasesRequest,
  RevokeLeaseRequest,
  WatchLeaseRequest,
  type AcquireResponse,
  type GetLeaseResponse,
  type Lease,
  type LeaseEvent,
  type ListLeasesResponse,
  type RevokeLeaseResponse,
  type WatchLeaseResponse,
} from "./gen/tenure/v1/lease";
import { LossWatch } from "./losswatch";
import { CallContext, unary, type TokenSource, type UnaryMethod } from "./rpc";
import { Session, type RenewalOptions } from "./session";
import { msToDuration } from "./time";

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

/** One page of {@link TenureClient.listLeases}. */
export interface LeasePage {
  /** The leases of this page, by name. */
  leases: Lease[];
  /** Pass as `pageToken` for the next page; `""` on the last one. */
  nextPageToken: string;
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
        this.#ctx,
        "Acquire",
        acquire,
        AcquireRequest.fromPartial({
          name,
          holder,
          ttl: options.ttlMs === undefined ? undefined : msToDuration(options.ttlMs),
          leaseKey,
          wait: waitMs > 0 ? msToDuration(waitMs) : undefined,
          metadata: options.metadata ?? {},
        }),
        waitMs + rpcTimeoutMs,
        options.signal,
      ).result;
      const lease = reply.lease;
      if (lease === undefined) {
        throw new TenureError(GrpcStatus.INTERNAL, undefined, "Acquire reply carried no lease", {}, {
          target: this.address,
          rpc: "Acquire",
        });
      }
      const session = new Session({
        stub: this.stub,
        ctx: this.#ctx,
        lossWatch: this.#lossWatch,
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
    const reply = await unary(
      this.#ctx,
      "GetLease",
      get,
      GetLeaseRequest.fromPartial({ name }),
      options.timeoutMs ?? this.#rpcTimeoutMs,
      options.signal,
    ).result;
    if (reply.lease === undefined) {
      throw new TenureError(GrpcStatus.INTERNAL, undefined, "GetLease reply carried no lease", {}, {
        target: this.address,
        rpc: "GetLease",
      });
    }
    return reply.lease;
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
   * revoked. Resolves with the revision of the removal.
   */
  async revokeLease(
    name: string,
    reason: string,
    options: { fencingToken?: bigint; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<bigint> {
    const revoke: UnaryMethod<RevokeLeaseRequest, RevokeLeaseResponse> = this.stub.revokeLease.bind(this.stub);
    const reply = await unary(
      this.#ctx,
      "RevokeLease",
      revoke,
      RevokeLeaseRequest.fromPartial({ name, reason, fencingToken: options.fencingToken ?? 0n }),
      options.timeoutMs ?? this.#rpcTimeoutMs,
      options.signal,
    ).result;
    return reply.revision;
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
    let md;
    try {
      md = await this.#ctx.metadata();
    } catch (err) {
      throw this.#ctx.error(err, "WatchLease");
    }
    const call: ClientReadableStream<WatchLeaseResponse> = this.stub.watchLease(
      WatchLeaseRequest.fromPartial({ name, eventTypes: options.eventTypes ?? [] }),
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
    } catch (err) {
      if (signal?.aborted) return;
      throw this.#ctx.error(err, "WatchLease");
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
