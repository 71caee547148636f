/**
 * What every session kind shares: the safe deadline on the monotonic clock,
 * the background renewal schedule with retries, the loss signal and the
 * release skeleton. {@link Session} (one lease or one semaphore slot) and
 * {@link GroupSession} (an all-or-nothing group) differ only in how they
 * renew, release and describe themselves.
 * @internal
 */
import { performance } from "node:perf_hooks";

import { ErrorReason, LeaseLostError, TenureError, type LossReason } from "./errors";
import type { PendingCall } from "./rpc";

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

/**
 * A holding renewed in the background. Subclasses send the renewals and the
 * release; this class decides when, keeps the safe deadline and ends the
 * session exactly once.
 * @internal
 */
export abstract class Renewing<R> implements AsyncDisposable {
  /** Aborts when the session stops being held; its `reason` is a {@link LeaseLostError}. */
  readonly signal: AbortSignal;

  readonly #controller = new AbortController();
  readonly #renewFraction: number;
  readonly #marginOption: number | undefined;
  readonly #retryOption: number | undefined;
  /** Deadline of each renewal and release call. */
  protected readonly rpcTimeoutMs: number;
  #ttlMs = 0;
  #safeDeadline = 0;
  #renewTimer: NodeJS.Timeout | undefined;
  #deadlineTimer: NodeJS.Timeout | undefined;
  #inflight: PendingCall<R> | undefined;
  #lastError: TenureError | undefined;
  #releasing: Promise<boolean> | undefined;
  /** A hand-over is in flight: renewals wait, a watch's loss is held back. */
  #handing = false;
  #heldBack: { reason: LossReason; cause: unknown } | undefined;
  /** A call that changes the holding in place (a Downgrade) is in flight: renewals wait for it. */
  #changing: Promise<unknown> | undefined;

  protected constructor(options: RenewalOptions) {
    this.signal = this.#controller.signal;
    this.#renewFraction = options.renewFraction ?? 1 / 3;
    this.#marginOption = options.safetyMarginMs;
    this.#retryOption = options.retryIntervalMs;
    this.rpcTimeoutMs = options.rpcTimeoutMs ?? 5000;
  }

  /** Sends one renewal with a deadline `timeoutMs` from now. */
  protected abstract sendRenew(timeoutMs: number): PendingCall<R>;
  /** Takes a successful renewal in; returns the granted TTL in ms. */
  protected abstract renewed(reply: R): number;
  /** Sends the release; resolves true when everything was still held and is now released. */
  protected abstract sendRelease(): Promise<boolean>;
  /** Whether to send the release even after a loss (a group frees its other members). */
  protected abstract get releaseAfterLoss(): boolean;
  /** The error that says this session ended. */
  protected abstract lostError(reason: LossReason, cause: unknown): LeaseLostError;
  /** Called once when the session ends (stop following it on the loss watch...). */
  protected abstract ended(): void;

  /**
   * Whether a fresh grant leaves the session at least half of its safe time
   * (TTL minus the margin), so that its first renewal has time to get
   * through; a grant whose reply came late (after a long wait) does not,
   * and is anchored again. A session that is not fresh enough is ended
   * here, without a release.
   * @internal
   */
  freshEnough(): boolean {
    const margin = this.#marginOption ?? this.#ttlMs / 10;
    if (this.isHeld() && (this.#safeDeadline - performance.now()) * 2 >= this.#ttlMs - margin) return true;
    this.lose("SAFE_DEADLINE_PASSED", this.#lastError);
    return false;
  }

  /** The granted TTL in milliseconds (whole seconds on the server). */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /**
   * The safe deadline on the `performance.now()` clock: send time of the
   * last successful acquire/renewal + granted TTL − safety margin. The
   * session never reports itself held at or after this instant.
   */
  get safeDeadline(): number {
    return this.#safeDeadline;
  }

  /** Milliseconds left before the safe deadline; 0 once the session is not held. */
  remainingMs(): number {
    return this.isHeld() ? this.#safeDeadline - performance.now() : 0;
  }

  /**
   * Whether this session still holds: not released, no renewal refused, no
   * loss seen, and the safe deadline not reached. Reaching the deadline ends
   * the session here and now (the signal aborts) even if its timer has not
   * fired yet.
   */
  isHeld(): boolean {
    if (this.signal.aborted) return false;
    if (performance.now() >= this.#safeDeadline) {
      this.lose("SAFE_DEADLINE_PASSED", this.#lastError);
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
   * `RELEASED`, unless it was already lost) and sends the release so the
   * next holder can take it at once.
   *
   * Resolves with `true` when this call released the holding, and `false`
   * when it was not held any more: the server says it is no longer ours
   * (`LEASE_NOT_HELD`, `LEASE_NOT_FOUND`), or the session had already been
   * lost before this call. A release after loss is not an error. Rejects
   * with a {@link TenureError} only when a session that was still held
   * could not be released (transport, auth or argument failure; it then
   * expires on its own after its TTL). Calling it again returns the same
   * promise.
   */
  release(): Promise<boolean> {
    this.#releasing ??= this.#release();
    return this.#releasing;
  }

  /** `await using session = ...` releases on scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  async #release(): Promise<boolean> {
    const wasHeld = this.isHeld();
    const lostBy = wasHeld ? undefined : (this.signal.reason as LeaseLostError).reason;
    this.lose("RELEASED");
    // A downgrade in flight moves the revision: present the one it leaves.
    await this.#changing?.catch(() => undefined);
    if ((lostBy === "LEASE_NOT_HELD" || lostBy === "LEASE_ENDED" || lostBy === "MISSED") && !this.releaseAfterLoss) {
      return false;
    }
    try {
      return (await this.sendRelease()) && wasHeld;
    } catch (err) {
      const error = TenureError.from(err);
      if (error.reason === ErrorReason.LEASE_NOT_HELD || error.reason === ErrorReason.LEASE_NOT_FOUND) return false;
      if (!wasHeld) return false;
      throw error;
    }
  }

  /**
   * Hands the holding over with `send` (a Transfer, or a Resign to a
   * successor), with no renewal in flight beside it. On success the session
   * ends as after a release, with reason `TRANSFERRED`, and a later
   * `release()` resolves false. On failure it is unchanged, unless the
   * server says the holding ended (`LEASE_NOT_HELD`, `LEASE_NOT_FOUND`) or
   * the loss watch saw it end meanwhile.
   * @internal
   */
  protected async handOver<T>(send: () => Promise<T>): Promise<T> {
    this.assertHeld();
    if (this.#handing || this.#changing !== undefined || this.#releasing !== undefined) {
      throw new RangeError("a hand-over, downgrade or release of this session is already under way");
    }
    this.#handing = true;
    let handed = false;
    try {
      // Let a renewal in flight land first: the hand-over presents the
      // latest revision, and no renewal crosses it.
      await this.#inflight?.result.catch(() => undefined);
      this.assertHeld();
      const out = await send();
      handed = true;
      return out;
    } catch (err) {
      const error = err instanceof TenureError ? err : undefined;
      if (
        this.#heldBack === undefined &&
        (error?.reason === ErrorReason.LEASE_NOT_HELD || error?.reason === ErrorReason.LEASE_NOT_FOUND)
      ) {
        this.#handing = false;
        this.lose("LEASE_NOT_HELD", error);
      }
      throw err;
    } finally {
      this.#handing = false;
      const back = this.#heldBack;
      this.#heldBack = undefined;
      if (handed) {
        this.#releasing = Promise.resolve(false);
        this.lose("TRANSFERRED");
      } else if (back !== undefined) {
        this.lose(back.reason, back.cause);
      }
    }
  }

  /**
   * Changes the holding in place with `send` (a Downgrade, which takes the
   * reply in before it resolves), with no renewal in flight beside it: a
   * renewal in flight lands first, and renewals due meanwhile wait until it
   * is done (then they present the revision it left). The session stays as
   * it is on failure, unless the server says the holding ended
   * (`LEASE_NOT_HELD`, `LEASE_NOT_FOUND`: the session is then lost).
   * @internal
   */
  protected async changeInPlace<T>(send: () => Promise<T>): Promise<T> {
    this.assertHeld();
    if (this.#handing || this.#changing !== undefined || this.#releasing !== undefined) {
      throw new RangeError("a hand-over, downgrade or release of this session is already under way");
    }
    const change = (async () => {
      await this.#inflight?.result.catch(() => undefined);
      this.assertHeld();
      try {
        return await send();
      } catch (err) {
        const error = err instanceof TenureError ? err : undefined;
        if (error?.reason === ErrorReason.LEASE_NOT_HELD || error?.reason === ErrorReason.LEASE_NOT_FOUND) {
          this.lose("LEASE_NOT_HELD", error);
        }
        throw err;
      }
    })();
    this.#changing = change;
    try {
      return await change;
    } finally {
      this.#changing = undefined;
    }
  }

  /**
   * Ends the session for a loss the loss watch saw; while a hand-over is in
   * flight (whose own RELEASED it most likely is) its reply decides.
   * @internal
   */
  protected lostOnWatch(reason: LossReason, cause: unknown): void {
    if (this.#handing) {
      this.#heldBack ??= { reason, cause };
      return;
    }
    this.lose(reason, cause);
  }

  /**
   * Starts (or moves on) the schedule after a grant of `ttlMs` for a
   * request sent at `sentAt`: a new safe deadline and the next renewal.
   */
  protected granted(ttlMs: number, sentAt: number): void {
    this.#ttlMs = ttlMs;
    const margin = this.#marginOption ?? ttlMs / 10;
    this.#safeDeadline = sentAt + ttlMs - margin;
    this.#lastError = undefined;
    this.#armDeadline();
    this.#scheduleRenew(sentAt + ttlMs * this.#renewFraction - performance.now());
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

  /** The retry delay after a retryable renewal failure. */
  #retryIntervalMs(): number {
    if (this.#retryOption !== undefined) return this.#retryOption;
    return Math.min(1000, Math.max(50, (this.#ttlMs * this.#renewFraction) / 4));
  }

  /** One renewal attempt; schedules the next one or ends the session. */
  async #renew(): Promise<void> {
    if (!this.isHeld()) return;
    if (this.#handing || this.#changing !== undefined) {
      // A hand-over is in flight (renew after it, if it fails), or a
      // downgrade (renew after it, with the revision it leaves).
      this.#scheduleRenew(this.#retryIntervalMs());
      return;
    }
    const sentAt = performance.now();
    const pending = this.sendRenew(Math.min(this.rpcTimeoutMs, this.#safeDeadline - sentAt));
    this.#inflight = pending;
    try {
      const reply = await pending.result;
      if (this.signal.aborted) return;
      if (performance.now() >= this.#safeDeadline) {
        // Too late: the session already passed its deadline; it stays lost.
        this.isHeld();
        return;
      }
      this.granted(this.renewed(reply), sentAt);
    } catch (err) {
      if (this.signal.aborted) return;
      const error = TenureError.from(err);
      this.#lastError = error;
      if (error.reason === ErrorReason.LEASE_NOT_HELD || error.reason === ErrorReason.LEASE_NOT_FOUND) {
        this.lose("LEASE_NOT_HELD", error);
        return;
      }
      if (!error.retryable) {
        // A permanent error (clients/README.md's table): retrying cannot fix it.
        this.lose("RENEW_FAILED", error);
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
  protected lose(reason: LossReason, cause?: unknown): void {
    if (this.signal.aborted) return;
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#deadlineTimer);
    this.#renewTimer = undefined;
    this.#deadlineTimer = undefined;
    this.#inflight?.cancel();
    this.#inflight = undefined;
    this.#controller.abort(this.lostError(reason, cause));
    this.ended();
  }
}
