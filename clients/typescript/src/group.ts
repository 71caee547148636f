/**
 * A group session: several plain leases taken all or none by one
 * AcquireGroup, each with its own fencing token, renewed together by
 * RenewGroup (all or none), and lost as a whole the moment any member is
 * lost (the client's loss watch shows a member end, or RenewGroup answers
 * LEASE_NOT_HELD). Its safe deadline is the group's: every member shares
 * one TTL and one send time.
 */
import { LeaseLostError, type LossReason } from "./errors";
import { fenceHeaders } from "./fenceproof";
import {
  GroupMember,
  ReleaseGroupRequest,
  RenewGroupRequest,
  type Lease,
  type LeaseEvent,
  type LeaseServiceClient,
  type ReleaseGroupResponse,
  type RenewGroupResponse,
} from "./gen/tenure/v1/lease";
import { Renewing, type RenewalOptions } from "./holding";
import { lossReasonOf, type LossWatch, type Watched } from "./losswatch";
import { unary, type CallContext, type PendingCall, type UnaryMethod } from "./rpc";
import { durationToMs } from "./time";

/** Everything a group session starts from. Built by `TenureClient.acquireGroup`. @internal */
export interface GroupSessionInit {
  readonly stub: LeaseServiceClient;
  readonly ctx: CallContext;
  readonly lossWatch: LossWatch;
  /** The AcquireGroup reply's leases, in request order. */
  readonly leases: readonly Lease[];
  readonly leaseKey: string;
  /** `performance.now()` when the AcquireGroup that returned `leases` was sent. */
  readonly sentAt: number;
  readonly options: RenewalOptions;
}

/**
 * The holdings of one AcquireGroup, kept alive together.
 *
 * `signal` aborts when the group stops being held as a whole: any member
 * lost (revoked, expired, taken over, or a RenewGroup refused with
 * `LEASE_NOT_HELD`), the group's safe deadline passed, or `release()`.
 * Pass each member's token ({@link fencingToken}) and proof
 * ({@link fenceProof}; {@link fenceHeaders} gives both as HTTP headers)
 * with the writes that concern that member.
 */
export class GroupSession extends Renewing<readonly Lease[]> {
  /** The member names, in the order they were asked for. */
  readonly names: readonly string[];
  /** Who holds the group. */
  readonly holder: string;
  /** The one ownership secret of every member. */
  readonly leaseKey: string;
  /** Each member's fencing token, by name (constant for the group's life). */
  readonly fencingTokens: ReadonlyMap<string, bigint>;
  /**
   * Each member's fence proof, by name (constant for the group's life;
   * empty when the server signs no proofs). See `Session.fenceProof`.
   */
  readonly fenceProofs: ReadonlyMap<string, Uint8Array>;

  readonly #stub: LeaseServiceClient;
  readonly #ctx: CallContext;
  readonly #lossWatch: LossWatch;
  readonly #watched: Watched[];
  #leases: readonly Lease[];
  #following = false;

  /** Starts a group session from an AcquireGroup reply; use `TenureClient.acquireGroup`. @internal */
  constructor(init: GroupSessionInit) {
    super(init.options);
    if (init.leases.length === 0) throw new RangeError("a group session needs at least one member");
    this.#stub = init.stub;
    this.#ctx = init.ctx;
    this.#lossWatch = init.lossWatch;
    this.#leases = init.leases;
    this.names = init.leases.map((lease) => lease.name);
    this.holder = init.leases[0]!.holder;
    this.leaseKey = init.leaseKey;
    this.fencingTokens = new Map(init.leases.map((lease) => [lease.name, lease.fencingToken]));
    this.fenceProofs = new Map(init.leases.map((lease) => [lease.name, lease.fenceProof]));
    this.#watched = init.leases.map((lease) => ({
      name: lease.name,
      slot: 0,
      fencingToken: lease.fencingToken,
      ended: (event: LeaseEvent) => this.lose(lossReasonOf(event), event),
    }));
    this.granted(durationToMs(init.leases[0]!.ttl), init.sentAt);
    if (this.isHeld()) {
      this.#following = true;
      for (const watched of this.#watched) this.#lossWatch.add(watched);
    }
  }

  /** The fencing token of member `name`; throws for a name not in the group. */
  fencingToken(name: string): bigint {
    const token = this.fencingTokens.get(name);
    if (token === undefined) throw new RangeError(`${JSON.stringify(name)} is not a member of this group`);
    return token;
  }

  /** The fence proof of member `name`; throws for a name not in the group. */
  fenceProof(name: string): Uint8Array {
    const proof = this.fenceProofs.get(name);
    if (proof === undefined) throw new RangeError(`${JSON.stringify(name)} is not a member of this group`);
    return proof;
  }

  /**
   * The HTTP headers of a write that concerns member `name`:
   * `Tenure-Fence` (its proof) and `Tenure-Fencing-Token` (its token); see
   * `Session.fenceHeaders`. Throws for a name not in the group.
   */
  fenceHeaders(name: string): Record<string, string> {
    return fenceHeaders(this.fenceProof(name), this.fencingToken(name));
  }

  /** The members' latest holdings as the server last returned them, in request order. */
  get leases(): readonly Lease[] {
    return this.#leases;
  }

  /** A one-line summary for logs. */
  override toString(): string {
    const members = this.#leases.map((lease) => `${lease.name}#${lease.fencingToken}`).join(", ");
    return `GroupSession(${members} held by ${this.holder}, ${this.isHeld() ? "held" : "lost"})`;
  }

  /** How `console.log` and `util.inspect` show a group session. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  #members(): GroupMember[] {
    return this.#leases.map((lease) => GroupMember.fromPartial({ name: lease.name, expectedRevision: lease.revision }));
  }

  protected sendRenew(timeoutMs: number): PendingCall<readonly Lease[]> {
    const renew: UnaryMethod<RenewGroupRequest, RenewGroupResponse> = this.#stub.renewGroup.bind(this.#stub);
    const pending = unary(
      this.#ctx,
      "RenewGroup",
      renew,
      RenewGroupRequest.fromPartial({ members: this.#members(), leaseKey: this.leaseKey }),
      timeoutMs,
    );
    return { result: pending.result.then((reply) => reply.leases), cancel: pending.cancel };
  }

  protected renewed(leases: readonly Lease[]): number {
    if (leases.length === this.#leases.length) this.#leases = leases;
    return durationToMs(leases[0]?.ttl);
  }

  /**
   * ReleaseGroup: true when every member was still held and is now
   * released; false when some member had been lost (those are reported
   * `not_held` by the server and the others are released all the same).
   */
  protected async sendRelease(): Promise<boolean> {
    const release: UnaryMethod<ReleaseGroupRequest, ReleaseGroupResponse> = this.#stub.releaseGroup.bind(this.#stub);
    const reply = await unary(
      this.#ctx,
      "ReleaseGroup",
      release,
      ReleaseGroupRequest.fromPartial({ members: this.#members(), leaseKey: this.leaseKey }),
      this.rpcTimeoutMs,
    ).result;
    return reply.notHeld.length === 0;
  }

  /** A lost group still releases its other members, so they free at once. */
  protected get releaseAfterLoss(): boolean {
    return true;
  }

  protected lostError(reason: LossReason, cause: unknown): LeaseLostError {
    const token = this.#leases.reduce((min, lease) => (lease.fencingToken < min ? lease.fencingToken : min), this.#leases[0]!.fencingToken);
    return new LeaseLostError(reason, this.names.join(" + "), token, cause === undefined ? undefined : { cause });
  }

  protected ended(): void {
    if (!this.#following) return;
    this.#following = false;
    for (const watched of this.#watched) this.#lossWatch.remove(watched);
  }
}
