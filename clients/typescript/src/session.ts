/**
 * A held lease that renews itself in the background and says, through an
 * AbortSignal, the moment it can no longer be trusted.
 */
import { performance } from "node:perf_hooks";

import { ErrorReason, LeaseLostError, TenureError, type LossReason } from "./errors";
import {
  ReleaseRequest,
  RenewRequest,
  type Lease,
  type LeaseEvent,
  type LeaseServiceClient,
  type ReleaseResponse,
  type RenewResponse,
} from "./gen/tenure/v1/lease";
import type { LossWatch } from "./losswatch";
import { unary, type CallContext, type PendingCall, type UnaryMethod } from "./rpc";
import { durationToMs } from "./time";

/** How a session renews; every field has a default. */
export interface RenewalOptions {
  /**
   * When to renew, as a fraction of the granted TTL counted from the last
   * successful request's send time. Default `1/3`. Must be in (0, 1).
   */
  renewFraction?: number;
  /**
   * How much earlier than send time + granted TTL the session stops
   * believing it holds the lease (covers clock-rate drift and scheduling
   * delays). Default: a tenth of the granted TTL.
   */
  safetyMarginMs?: number;
  /**
   * How soon a renewal that failed with a retryable error (server
   * unreachable, NATS unavailable, ...: `TenureError.retryable`) is retried.
   * Default: a quarter of the renewal interval, between 50 ms and 1 s.
   */
  retryIntervalMs?: number;
  /** Deadline of each Renew and Release call. Default 5000 ms. */
  rpcTimeoutMs?: number;
}

/** Everything a session starts from. Built by `TenureClient.acquire`. @internal */
export interface SessionInit {
  readonly stub: LeaseServiceClient;
  readonly ctx: CallContext;
  readonly lossWatch: LossWatch;
  readonly lease: Lease;
  readonly leaseKey: string;
  /** `performance.now()` when the Acquire that returned `lease` was sent. */
  readonly sentAt: number;
  readonly options: RenewalOptions;
}

/**
 * One holding of a lease, kept alive by a background renewal.
 *
 * - `signal` aborts as soon as the session is no longer held: a renewal was
 *   refused (`LEASE_NOT_HELD`) or failed with another permanent error, the
 *   safe deadline passed without a successful renewal, or `release()` was
 *   called. `signal.reason` is a
 *   {@link LeaseLostError} saying which.
 * - `isHeld()` is true only before the safe deadline (checked against the
 *   monotonic clock on every call) and while the signal has not aborted.
 * - `release()` (or `await using`) ends the holding at once.
 *
 * Pass `fencingToken` with every write to a downstream store, and stop
 * writing when `signal` aborts.
 */
export class Session implements AsyncDisposable {
  /** The lease name. */
  readonly name: string;
  /** Who holds it. */
  readonly holder: string;
  /** The fencing token: constant for this holding, greater for every later holder. */
  readonly fencingToken: bigint;
  /** The ownership secret presented on Renew and Release. */
  readonly leaseKey: string;
  /** Aborts when the session stops being held; its `reason` is a {@link LeaseLostError}. */
  readonly signal: AbortSignal;

  readonly #stub: LeaseServiceClient;
  readonly #ctx: CallContext;
  readonly #lossWatch: LossWatch;
  readonly #watched: { name: string; fencingToken: bigint; ended(event: LeaseEvent): void };
  readonly #controller = new AbortController();
  readonly #renewFraction: number;
  readonly #marginOption: number | undefined;
  readonly #retryOption: number | undefined;
  readonly #rpcTimeoutMs: number;
  #lease: Lease;
  #ttlMs = 0;
  #safeDeadline = 0;
  #renewTimer: NodeJS.Timeout | undefined;
  #deadlineTimer: NodeJS.Timeout | undefined;
  #inflight: PendingCall<RenewResponse> | undefined;
  #lastError: TenureError | undefined;
  #releasing: Promise<boolean> | undefined;

  /** Starts a session from an Acquire reply; use `TenureClient.acquire`. @internal */
  constructor(init: SessionInit) {
    const options = init.options;
    this.#stub = init.stub;
    this.#ctx = init.ctx;
    this.#lossWatch = init.lossWatch;
    this.#lease = init.lease;
    this.name = init.lease.name;
    this.holder = init.lease.holder;
    this.fencingToken = init.lease.fencingToken;
    this.leaseKey = init.leaseKey;
    this.signal = this.#controller.signal;
    this.#renewFraction = options.renewFraction ?? 1 / 3;
    this.#marginOption = options.safetyMarginMs;
    this.#retryOption = options.retryIntervalMs;
    this.#rpcTimeoutMs = options.rpcTimeoutMs ?? 5000;
    this.#granted(init.lease, init.sentAt);
    this.#watched = {
      name: this.name,
      fencingToken: this.fencingToken,
      ended: (event) => this.#lose("LEASE_ENDED", event),
    };
    if (!this.signal.aborted) this.#lossWatch.add(this.#watched);
  }

  /** A one-line summary for logs: name, holder, token (decimal) and whether held. */
  toString(): string {
    return `Session(${this.name} held by ${this.holder}, token ${this.fencingToken}, ${this.isHeld() ? "held" : "lost"})`;
  }

  /** How `console.log` and `util.inspect` show a session. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  /** A JSON form (tokens and revisions as decimal strings). */
  toJSON(): Record<string, string | boolean> {
    return {
      name: this.name,
      holder: this.holder,
      fencingToken: this.fencingToken.toString(),
      revision: this.revision.toString(),
      held: this.isHeld(),
    };
  }

  /** The latest holding as the server last returned it. */
  get lease(): Lease {
    return this.#lease;
  }

  /** The revision to present on the next Renew or Release. */
  get revision(): bigint {
    return this.#lease.revision;
  }

  /** The granted TTL in milliseconds (whole seconds on the server). */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /**
   * The safe deadline on the `performance.now()` clock: send time of the
   * last successful Acquire/Renew + granted TTL − safety margin. The session
   * never reports itself held at or after this instant.
   */
  get safeDeadline(): number {
    return this.#safeDeadline;
  }

  /** Milliseconds left before the safe deadline; 0 once the session is not held. */
  remainingMs(): number {
    return this.isHeld() ? this.#safeDeadline - performance.now() : 0;
  }

  /**
   * Whether this session still holds the lease: not released, no renewal
   * refused, and the safe deadline not reached. Reaching the deadline ends
   * the session here and now (the signal aborts) even if its timer has not
   * fired yet.
   */
  isHeld(): boolean {
    if (this.signal.aborted) return false;
    if (performance.now() >= this.#safeDeadline) {
      this.#lose("SAFE_DEADLINE_PASSED", this.#lastError);
      return false;
    }
    return true;
  }

  /** Throws the {@link LeaseLostError} unless {@link isHeld} is true. */
  assertHeld(): void {
    if (!this.isHeld()) throw this.signal.reason;
  }

  /**
   * Ends the holding: stops the renewals, aborts `signal` (reason
   * `RELEASED`, unless it was already lost) and sends Release with the
   * current revision so the next holder can take the lease at once.
   *
   * Resolves with `true` when this call released the holding, and `false`
   * when it was not held any more: the server says the lease is no longer
   * ours (`LEASE_NOT_HELD`, `LEASE_NOT_FOUND`), or the session had already
   * been lost before this call (the Release is then a best effort). A
   * release after loss is not an error. Rejects with a {@link TenureError}
   * only when a session that was still held could not be released
   * (transport, auth or argument failure; the lease then expires on its own
   * after its TTL). Calling it again returns the same promise.
   */
  release(): Promise<boolean> {
    this.#releasing ??= this.#release();
    return this.#releasing;
  }

  /** `await using session = await client.acquire(...)` releases on scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  async #release(): Promise<boolean> {
    const wasHeld = this.isHeld();
    const lostBy = wasHeld ? undefined : (this.signal.reason as LeaseLostError).reason;
    this.#lose("RELEASED");
    if (lostBy === "LEASE_NOT_HELD" || lostBy === "LEASE_ENDED") return false;
    const release: UnaryMethod<ReleaseRequest, ReleaseResponse> = this.#stub.release.bind(this.#stub);
    try {
      await unary(
        this.#ctx,
        "Release",
        release,
        ReleaseRequest.fromPartial({ name: this.name, expectedRevision: this.revision, leaseKey: this.leaseKey }),
        this.#rpcTimeoutMs,
      ).result;
      return wasHeld;
    } catch (err) {
      const error = TenureError.from(err);
      if (error.reason === ErrorReason.LEASE_NOT_HELD || error.reason === ErrorReason.LEASE_NOT_FOUND) return false;
      if (!wasHeld) return false;
      throw error;
    }
  }

  /** Takes a successful reply for a request sent at `sentAt` into account. */
  /**
   * Takes a reply that renewed this holding by another call (an election's
   * Proclaim): only a newer revision of a session still held moves it on.
   * @internal
   */
  _renewed(lease: Lease, sentAt: number): void {
    if (this.signal.aborted || lease.revision <= this.revision || lease.fencingToken !== this.fencingToken) return;
    this.#granted(lease, sentAt);
  }

  #granted(lease: Lease, sentAt: number): void {
    this.#lease = lease;
    this.#ttlMs = durationToMs(lease.ttl);
    const margin = this.#marginOption ?? this.#ttlMs / 10;
    this.#safeDeadline = sentAt + this.#ttlMs - margin;
    this.#lastError = undefined;
    this.#armDeadline();
    this.#scheduleRenew(sentAt + this.#ttlMs * this.#renewFraction - performance.now());
  }

  /** (Re)arms the timer that ends the session at the safe deadline. */
  #armDeadline(): void {
    clearTimeout(this.#deadlineTimer);
    const delay = this.#safeDeadline - performance.now();
    this.#deadlineTimer = setTimeout(() => {
      // A timer may fire a little early: isHeld() checks the clock and
      // re-arms for the rest when the deadline has not quite come.
      if (this.isHeld()) this.#armDeadline();
    }, Math.max(0, Math.ceil(delay)));
  }

  #scheduleRenew(delayMs: number): void {
    clearTimeout(this.#renewTimer);
    this.#renewTimer = setTimeout(() => void this.#renew(), Math.max(0, Math.ceil(delayMs)));
  }

  /** The renewal interval in ms, for the default retry interval. */
  #retryIntervalMs(): number {
    if (this.#retryOption !== undefined) return this.#retryOption;
    return Math.min(1000, Math.max(50, (this.#ttlMs * this.#renewFraction) / 4));
  }

  /** One renewal attempt; schedules the next one or ends the session. */
  async #renew(): Promise<void> {
    if (!this.isHeld()) return;
    const sentAt = performance.now();
    const timeout = Math.min(this.#rpcTimeoutMs, this.#safeDeadline - sentAt);
    const renew: UnaryMethod<RenewRequest, RenewResponse> = this.#stub.renew.bind(this.#stub);
    const pending = unary(
      this.#ctx,
      "Renew",
      renew,
      RenewRequest.fromPartial({ name: this.name, expectedRevision: this.revision, leaseKey: this.leaseKey }),
      timeout,
    );
    this.#inflight = pending;
    try {
      const reply = await pending.result;
      if (this.signal.aborted) return;
      if (performance.now() >= this.#safeDeadline || reply.lease === undefined) {
        // Too late: the session already passed its deadline; it stays lost.
        this.isHeld();
        return;
      }
      this.#granted(reply.lease, sentAt);
    } catch (err) {
      if (this.signal.aborted) return;
      const error = TenureError.from(err);
      this.#lastError = error;
      if (error.reason === ErrorReason.LEASE_NOT_HELD || error.reason === ErrorReason.LEASE_NOT_FOUND) {
        this.#lose("LEASE_NOT_HELD", error);
        return;
      }
      if (!error.retryable) {
        // A permanent error (clients/README.md's table): retrying cannot fix it.
        this.#lose("RENEW_FAILED", error);
        return;
      }
      // A retryable failure may pass (unreachable server, NATS away, a
      // deadline): retry until the safe deadline timer ends the session.
      if (this.isHeld()) this.#scheduleRenew(this.#retryIntervalMs());
    } finally {
      if (this.#inflight === pending) this.#inflight = undefined;
    }
  }

  /** Ends the session once: stops timers and the call in flight, aborts the signal. */
  #lose(reason: LossReason, cause?: unknown): void {
    if (this.signal.aborted) return;
    // Called from the constructor (a grant already past its deadline) before #watched is set.
    if (this.#watched !== undefined) this.#lossWatch.remove(this.#watched);
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#deadlineTimer);
    this.#renewTimer = undefined;
    this.#deadlineTimer = undefined;
    this.#inflight?.cancel();
    this.#inflight = undefined;
    const options = cause === undefined ? undefined : { cause };
    this.#controller.abort(new LeaseLostError(reason, this.name, this.fencingToken, options));
  }
}
