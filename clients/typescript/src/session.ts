/**
 * A held lease (or one slot of a semaphore, or one holding of a read-write
 * lock) that renews itself in the background and says, through an
 * AbortSignal, the moment it can no longer be trusted.
 */
import { LeaseLostError, TenureError, type LossReason } from "./errors";
import { fenceHeaders } from "./fenceproof";
import {
  DowngradeRequest,
  EventType,
  LockMode,
  ReleaseRequest,
  RenewRequest,
  TransferRequest,
  type DowngradeResponse,
  type Lease,
  type LeaseEvent,
  type LeaseServiceClient,
  type ReleaseResponse,
  type TransferResponse,
} from "./gen/tenure/v1/lease";
import { Renewing, type RenewalOptions } from "./holding";
import type { Renewer } from "./keepalive";
import { lossReasonOf, showsLoss, type LossWatch, type Watched } from "./losswatch";
import { unary, type CallContext, type PendingCall, type UnaryMethod } from "./rpc";
import { durationToMs } from "./time";

export type { RenewalOptions } from "./holding";

/** Everything a session starts from. Built by `TenureClient.acquire`. @internal */
export interface SessionInit {
  readonly stub: LeaseServiceClient;
  readonly ctx: CallContext;
  readonly lossWatch: LossWatch;
  /** Sends the renewals: over the client's KeepAlive stream, or unary Renew. */
  readonly renewer: Renewer;
  readonly lease: Lease;
  readonly leaseKey: string;
  /** `performance.now()` when the Acquire that returned `lease` was sent. */
  readonly sentAt: number;
  readonly options: RenewalOptions;
}

/**
 * One holding of a lease, of one slot of a semaphore, or of a read-write
 * lock (exclusive or shared), kept alive by a background renewal.
 *
 * - `signal` aborts as soon as the session is no longer held: the client's
 *   loss watch saw the holding end, a renewal was refused (`LEASE_NOT_HELD`)
 *   or failed with another permanent error, the safe deadline passed without
 *   a successful renewal, or `release()` was called. `signal.reason` is a
 *   {@link LeaseLostError} saying which.
 * - `isHeld()` is true only before the safe deadline (checked against the
 *   monotonic clock on every call) and while the signal has not aborted.
 * - `release()` (or `await using`) ends the holding at once; `transfer()`
 *   hands it to a waiting acquire; `downgrade()` turns an exclusive
 *   read-write lock holding shared, in place.
 *
 * Pass `fencingToken` (and, to a store that verifies proofs, `fenceProof`:
 * {@link fenceHeaders} gives both as HTTP headers) with every write to a
 * downstream store, and stop writing when `signal` aborts.
 */
export class Session extends Renewing<Lease> {
  /** The lease (or semaphore) name. */
  readonly name: string;
  /** Who holds it. */
  readonly holder: string;
  /** The ownership secret presented on Renew and Release. */
  readonly leaseKey: string;
  /**
   * The semaphore slot of this holding (1 to the limit), or a read-write
   * lock holding's own slot; 0 for a plain lease.
   */
  readonly slot: number;

  readonly #stub: LeaseServiceClient;
  readonly #ctx: CallContext;
  readonly #lossWatch: LossWatch;
  readonly #renewer: Renewer;
  readonly #watched: Watched;
  #lease: Lease;
  #following = false;
  #fencingToken: bigint;
  #fenceProof: Uint8Array;
  #mode: LockMode;
  /** The loss watch's events of this holding while a downgrade is in flight (judged by its reply). */
  #duringDowngrade: LeaseEvent[] | undefined;

  /** Starts a session from an Acquire reply; use `TenureClient.acquire`. @internal */
  constructor(init: SessionInit) {
    super(init.options);
    this.#stub = init.stub;
    this.#ctx = init.ctx;
    this.#lossWatch = init.lossWatch;
    this.#renewer = init.renewer;
    this.#lease = init.lease;
    this.name = init.lease.name;
    this.holder = init.lease.holder;
    this.#fencingToken = init.lease.fencingToken;
    this.slot = init.lease.slot;
    this.#fenceProof = init.lease.fenceProof;
    this.#mode = init.lease.mode ?? LockMode.UNSPECIFIED;
    this.leaseKey = init.leaseKey;
    const session = this;
    this.#watched = {
      name: this.name,
      slot: this.slot,
      // The current token: a downgrade replaces it.
      get fencingToken() {
        return session.fencingToken;
      },
      ended: (event: LeaseEvent) => {
        if (this.#duringDowngrade !== undefined) {
          // The downgrade changes the token: its reply judges the event.
          this.#duringDowngrade.push(event);
          return false;
        }
        this.lostOnWatch(lossReasonOf(event), event);
        return true;
      },
    };
    this.granted(durationToMs(init.lease.ttl), init.sentAt);
    if (this.isHeld()) {
      this.#following = true;
      this.#renewer.hold();
      this.#lossWatch.add(this.#watched);
    }
  }

  /**
   * The fencing token: constant across renewals, greater for every later
   * holder. A {@link downgrade} replaces it with a greater one.
   */
  get fencingToken(): bigint {
    return this.#fencingToken;
  }

  /**
   * The grant's fence proof: Tenure's Ed25519-signed statement of this
   * holding (bucket, name, slot, token, holder, grant time, TTL) that a
   * store verifies offline before it compares tokens (docs/fencing.md).
   * Constant across renewals (a {@link downgrade} replaces it with the
   * shared holding's); empty when the server signs no proofs (it runs
   * without `--fence-signing-key`).
   */
  get fenceProof(): Uint8Array {
    return this.#fenceProof;
  }

  /**
   * How a read-write lock's holding holds it: `LockMode.EXCLUSIVE`
   * ({@link RWLock.lock}) or `LockMode.SHARED` ({@link RWLock.lockShared},
   * or after {@link downgrade}); `LockMode.UNSPECIFIED` for a plain lease or
   * a semaphore slot.
   */
  get mode(): LockMode {
    return this.#mode;
  }

  /** A one-line summary for logs: name, slot, mode, holder, token (decimal) and whether held. */
  override toString(): string {
    const mode = this.#mode === LockMode.EXCLUSIVE ? " exclusive" : this.#mode === LockMode.SHARED ? " shared" : "";
    const slot = this.slot === 0 ? "" : ` slot ${this.slot}${mode}`;
    return `Session(${this.name}${slot} held by ${this.holder}, token ${this.fencingToken}, ${this.isHeld() ? "held" : "lost"})`;
  }

  /** How `console.log` and `util.inspect` show a session. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  /** A JSON form (tokens and revisions as decimal strings). */
  toJSON(): Record<string, string | number | boolean> {
    return {
      name: this.name,
      holder: this.holder,
      fencingToken: this.fencingToken.toString(),
      revision: this.revision.toString(),
      slot: this.slot,
      held: this.isHeld(),
    };
  }

  /**
   * The HTTP headers of a write under this holding: `Tenure-Fence` (the
   * proof, base64url) and `Tenure-Fencing-Token` (the token, decimal);
   * only the latter when {@link fenceProof} is empty.
   *
   * ```ts
   * await fetch(url, { method: "PUT", headers: { ...session.fenceHeaders() }, body });
   * ```
   */
  fenceHeaders(): Record<string, string> {
    return fenceHeaders(this.fenceProof, this.fencingToken);
  }

  /** The latest holding as the server last returned it. */
  get lease(): Lease {
    return this.#lease;
  }

  /** The revision to present on the next Renew or Release. */
  get revision(): bigint {
    return this.#lease.revision;
  }

  /**
   * Takes a reply that renewed this holding by another call (an election's
   * Proclaim): only a newer revision of a session still held moves it on.
   * @internal
   */
  _renewed(lease: Lease, sentAt: number): void {
    if (this.signal.aborted || lease.revision <= this.revision || lease.fencingToken !== this.fencingToken) return;
    this.granted(this.renewed(lease), sentAt);
  }

  /**
   * Hands the holding to a waiting acquire of another holder, with no moment
   * in which the lease is free (`LeaseService.Transfer`): to the earliest
   * waiting acquire of holder `to`, or, without `to`, to the head of the
   * queue. Resolves with the recipient's lease, whose fencing token is
   * greater than this session's.
   *
   * On success the session ends exactly as after a successful `release()`:
   * renewals stop, `isHeld()` is false, `signal` aborts with a
   * {@link LeaseLostError} of reason `TRANSFERRED` (not a loss), and
   * `release()` resolves false. The lease key stops working at the
   * transfer's write, so stop acting as holder before calling it.
   *
   * Rejects with a {@link TenureError} `NO_WAITER` when nobody (or not `to`)
   * waits: the session is unchanged and still held (release it, or transfer
   * once the recipient waits); `LEASE_NOT_HELD` when the holding has ended
   * (the session is then lost); with the {@link LeaseLostError} when the
   * session is not held. Plain leases only (not a semaphore slot, a group,
   * or a holding with a lock delay).
   */
  async transfer(to?: string, timeoutMs = this.rpcTimeoutMs): Promise<Lease> {
    if (this.slot !== 0) {
      const kind = this.#mode === LockMode.UNSPECIFIED ? "semaphore slot" : "read-write lock holding";
      throw new RangeError(`lease ${JSON.stringify(this.name)} slot ${this.slot} is a ${kind}: only a plain lease can be handed over`);
    }
    const transfer: UnaryMethod<TransferRequest, TransferResponse> = this.#stub.transfer.bind(this.#stub);
    const reply = await this.handOver(
      () =>
        unary(
          this.#ctx,
          "Transfer",
          transfer,
          TransferRequest.fromPartial({
            name: this.name,
            expectedRevision: this.revision,
            leaseKey: this.leaseKey,
            toHolder: to ?? "",
          }),
          timeoutMs,
        ).result,
    );
    if (reply.lease === undefined) throw new TenureError(13 /* INTERNAL */, undefined, "Transfer replied without a lease", {}, { rpc: "Transfer" });
    return reply.lease;
  }

  /**
   * Turns this exclusive read-write lock holding ({@link RWLock.lock}) into
   * a shared one with no gap (`LeaseService.Downgrade`): the session holds
   * the lock throughout, from now on beside shared holders, whose waiting
   * {@link RWLock.lockShared} calls may get in at once. Resolves with the
   * shared lease.
   *
   * The session goes on as the shared holding, in place: same `slot` and
   * `leaseKey`, {@link mode} `SHARED`, a new and greater
   * {@link fencingToken} (the exclusive one is superseded: a store that
   * fences by token refuses writes made with it from now on), the reply's
   * {@link fenceProof} and {@link revision}, which the background renewals
   * present from now on. No renewal is in flight beside it. The safe
   * deadline stays as it was (the next renewal moves it).
   *
   * Rejects with a {@link TenureError} `MODE_MISMATCH` (FAILED_PRECONDITION,
   * permanent) when the holding is not an exclusive read-write lock holding
   * (a shared one, a plain lease, a semaphore slot): the session is
   * unchanged; `LEASE_NOT_HELD` when the holding has ended (the session is
   * then lost); with the {@link LeaseLostError} when the session is not
   * held. Any other failure leaves the session as it was, unless the loss
   * watch saw the holding end meanwhile.
   */
  async downgrade(timeoutMs = this.rpcTimeoutMs): Promise<Lease> {
    const downgrade: UnaryMethod<DowngradeRequest, DowngradeResponse> = this.#stub.downgrade.bind(this.#stub);
    return this.changeInPlace(async () => {
      this.#duringDowngrade = [];
      let reply: DowngradeResponse;
      try {
        reply = await unary(
          this.#ctx,
          "Downgrade",
          downgrade,
          DowngradeRequest.fromPartial({
            name: this.name,
            expectedRevision: this.revision,
            leaseKey: this.leaseKey,
            slot: this.slot,
          }),
          timeoutMs,
        ).result;
      } catch (err) {
        // The holding as it was judges what the loss watch saw meanwhile.
        this.#judgeDuringDowngrade();
        throw err;
      }
      const lease = reply.lease;
      if (lease === undefined) {
        this.#judgeDuringDowngrade();
        throw new TenureError(13 /* INTERNAL */, undefined, "Downgrade replied without a lease", {}, { target: this.#ctx.target, rpc: "Downgrade" });
      }
      // The shared holding replaces the exclusive one: renewals present its
      // revision, the loss watch follows its token.
      this.#lease = lease;
      this.#fencingToken = lease.fencingToken;
      this.#fenceProof = lease.fenceProof;
      this.#mode = lease.mode;
      this.#judgeDuringDowngrade();
      return lease;
    });
  }

  /**
   * Ends the hold-back of a downgrade: the events the loss watch saw
   * meanwhile are judged by the holding as it is now. A snapshot that
   * lacked the holding (its SNAPSHOT_COMPLETE) ends it, unless the snapshot
   * showed it with the current token (it was told apart by the old one).
   */
  #judgeDuringDowngrade(): void {
    const events = this.#duringDowngrade ?? [];
    this.#duringDowngrade = undefined;
    const shown = events.some((event) => event.type === EventType.CURRENT && event.fencingToken === this.fencingToken);
    const gone = events.find((event) =>
      event.type === EventType.SNAPSHOT_COMPLETE ? !shown : showsLoss(this.#watched, event),
    );
    if (gone !== undefined) this.lostOnWatch(lossReasonOf(gone), gone);
  }

  /**
   * Hands this term over with `send` (an election's Resign to a successor).
   * @internal
   */
  _handOver<T>(send: () => Promise<T>): Promise<T> {
    return this.handOver(send);
  }

  protected sendRenew(timeoutMs: number): PendingCall<Lease> {
    return this.#renewer.renew(
      RenewRequest.fromPartial({
        name: this.name,
        expectedRevision: this.revision,
        leaseKey: this.leaseKey,
        slot: this.slot,
      }),
      timeoutMs,
    );
  }

  protected renewed(lease: Lease): number {
    this.#lease = lease;
    return durationToMs(lease.ttl);
  }

  protected async sendRelease(): Promise<boolean> {
    const release: UnaryMethod<ReleaseRequest, ReleaseResponse> = this.#stub.release.bind(this.#stub);
    await unary(
      this.#ctx,
      "Release",
      release,
      ReleaseRequest.fromPartial({
        name: this.name,
        expectedRevision: this.revision,
        leaseKey: this.leaseKey,
        slot: this.slot,
      }),
      this.rpcTimeoutMs,
    ).result;
    return true;
  }

  protected get releaseAfterLoss(): boolean {
    return false;
  }

  protected lostError(reason: LossReason, cause: unknown): LeaseLostError {
    return new LeaseLostError(reason, this.name, this.fencingToken, cause === undefined ? undefined : { cause });
  }

  protected ended(): void {
    if (!this.#following) return;
    this.#following = false;
    this.#lossWatch.remove(this.#watched);
    this.#renewer.letGo();
  }
}
