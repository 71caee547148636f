/**
 * Leader election in the shape of client-go's leaderelection. An election
 * is the lease of the same name (`tenure.v1.ElectionService`), so a term is
 * a {@link Session}: its fencing token is the term's token, it renews in the
 * background, and its `signal` aborts at the safe deadline or on loss.
 * {@link LeaderElector} campaigns, calls `onStartedLeading` with a signal
 * that aborts when the term ends, `onStoppedLeading` once per term, and
 * `onNewLeader` with every change of leader (from `Observe`); it hands over
 * to a waiting candidate of a higher `preference` than its own, and resigns
 * when stopped.
 */
import { credentials, type ClientReadableStream } from "@grpc/grpc-js";

import { isPreference, type AcquireOptions, type TenureClient } from "./client";
import { LeaseLostError, Reason, TenureError } from "./errors";
import {
  type Candidate,
  ChangeType,
  ElectionServiceClient,
  LeaderRequest,
  ProclaimRequest,
  ResignRequest,
  type ResignResponse,
  type Leadership,
  ObserveRequest,
  type ObserveResponse,
  type ProclaimResponse,
  type LeaderResponse,
} from "./gen/tenure/v1/election";
import { unary, type UnaryMethod } from "./rpc";
import type { Session } from "./session";

/** The lease metadata key that holds a leader's value. */
export const ELECTION_VALUE_KEY = "value";

/** Who leads an election. */
export interface Leader {
  /** The leader's holder name; "" when nobody leads. */
  readonly identity: string;
  /** What the leader published (e.g. its address). */
  readonly value: string;
  /** The term's fencing token; 0n when nobody leads. */
  readonly fencingToken: bigint;
  /**
   * Set (true) only for an Observe change of type MISSED: the stream did not
   * see every change of the election (its server's watcher fell behind),
   * so who leads is unknown until the next change (identity, value and
   * fencingToken are empty). The leader in `endedIdentity` and
   * `endedFencingToken` (when known, token != 0n) no longer leads; other
   * terms may have come and gone.
   */
  readonly missed?: boolean;
  /** With `missed`: the leader known to have ended ("" when unknown). */
  readonly endedIdentity?: string;
  /** With `missed`: that term's fencing token (0n when unknown). */
  readonly endedFencingToken?: bigint;
}

const NOBODY: Leader = { identity: "", value: "", fencingToken: 0n };

function leaderOf(l: Leadership | undefined): Leader {
  return l === undefined ? NOBODY : { identity: l.holder, value: l.value, fencingToken: l.fencingToken };
}

/** Who leads after one Observe change: unknown (`missed`) after a MISSED. */
function leaderAfter(change: ObserveResponse): Leader {
  if (change.type !== ChangeType.MISSED) return leaderOf(change.leader);
  return {
    ...NOBODY,
    missed: true,
    endedIdentity: change.endedHolder,
    endedFencingToken: change.endedFencingToken,
  };
}

/**
 * The leader an Observe change reports when it differs from `last` (the
 * one reported before; undefined: none yet); undefined when it reports no
 * change of leader (the same leader, or a PREFERRED change, which only
 * names another candidate). Exported for the tests, not from the package.
 *
 * @internal
 */
export function newLeader(change: ObserveResponse, last: Leader | undefined): Leader | undefined {
  if (change.type === ChangeType.PREFERRED) return undefined;
  const now = leaderAfter(change);
  return last !== undefined && sameLeader(now, last) ? undefined : now;
}

function sameLeader(a: Leader, b: Leader): boolean {
  return (
    a.identity === b.identity &&
    a.value === b.value &&
    a.fencingToken === b.fencingToken &&
    a.missed === b.missed &&
    a.endedIdentity === b.endedIdentity &&
    a.endedFencingToken === b.endedFencingToken
  );
}

/** What {@link LeaderElector} is told. */
export interface ElectorOptions {
  /** The election (a lease name). */
  readonly name: string;
  /** This participant's holder name. */
  readonly identity: string;
  /** Published while leading (e.g. this replica's address). */
  readonly value?: string;
  /** Requested term TTL in milliseconds (default: the server's). */
  readonly ttlMs?: number;
  /** How long one campaign waits before it is re-sent (default 30 s; the server caps it). */
  readonly campaignWaitMs?: number;
  /**
   * Runs while leading. `signal` aborts when the term ends (its safe
   * deadline, a revoke or expiry, a MISSED naming the term's token, or the
   * elector being stopped): stop acting
   * as leader then, and pass `term.fencingToken` with every downstream write.
   */
  readonly onStartedLeading: (term: Session, signal: AbortSignal) => void | Promise<void>;
  /**
   * Called once per term, after `onStartedLeading`'s signal aborted and its
   * promise settled (once per `onStartedLeading` call: a failed
   * {@link LeaderElector.resignTo} leads the same term again).
   */
  readonly onStoppedLeading: () => void | Promise<void>;
  /**
   * Called with every change of leader (a {@link Leader} with an empty
   * identity for "nobody", and `missed: true` when the Observe stream
   * missed changes and who leads is unknown until the next call). A throw
   * is ignored: the elector keeps following Observe.
   */
  readonly onNewLeader?: (leader: Leader) => void;
  /**
   * This candidate's preference, an integer from 0 to 2^32 - 1 (default 0):
   * it campaigns with it, and while it leads it hands over to a waiting
   * candidate of a greater preference (see {@link LeaderElector}). For a
   * rolling update, the deployment's generation.
   */
  readonly preference?: number;
  /** Renewal options of each term (renewFraction, safetyMarginMs, ...). */
  readonly sessionOptions?: Omit<AcquireOptions, "ttlMs" | "waitMs" | "metadata" | "signal" | "limit" | "preference">;
}

/** The election calls of one {@link TenureClient}. */
export class Elections {
  readonly #client: TenureClient;
  readonly #stub: ElectionServiceClient;

  constructor(client: TenureClient) {
    this.#client = client;
    this.#stub = new ElectionServiceClient(client.address, credentials.createInsecure(), {
      channelOverride: client.stub.getChannel(),
    });
  }

  /**
   * Campaigns once: waits up to `waitMs` for `name` to have no leader, then
   * makes `identity` its leader publishing `value`, and returns the term
   * (`release()` resigns). Rejects with `LEASE_HELD` when the wait ran out.
   */
  elect(name: string, identity: string, value: string, options: AcquireOptions = {}): Promise<Session> {
    return this.#client.acquire(name, identity, {
      ...options,
      metadata: { ...options.metadata, [ELECTION_VALUE_KEY]: value },
    });
  }

  /**
   * Replaces the value the term's leader publishes, without a new term.
   * Rejects with `LEASE_NOT_HELD` when the term has ended.
   */
  async proclaim(term: Session, value: string, timeoutMs = 5000): Promise<void> {
    term.assertHeld();
    const sentAt = performance.now();
    const proclaim: UnaryMethod<ProclaimRequest, ProclaimResponse> = this.#stub.proclaim.bind(this.#stub);
    const reply = await unary(
      this.#client.callContext,
      "Proclaim",
      proclaim,
      ProclaimRequest.fromPartial({
        name: term.name,
        expectedRevision: term.revision,
        leaseKey: term.leaseKey,
        value,
      }),
      timeoutMs,
    ).result;
    const l = reply.leadership;
    if (l !== undefined) {
      term._renewed(
        {
          ...term.lease,
          revision: l.revision,
          ttl: l.ttl ?? term.lease.ttl,
          metadata: { ...term.lease.metadata, [ELECTION_VALUE_KEY]: value },
        },
        sentAt,
      );
    }
  }

  /**
   * Hands `term`'s leadership to a waiting candidate, with no moment without
   * a leader (`ElectionService.Resign` with a successor): to the candidate
   * whose identity is `successor`, or, without one, to the earliest waiting
   * candidate. Resolves with the successor (a greater fencing token); the
   * term then ends as handed over (its signal's reason is `TRANSFERRED`).
   * Rejects with `NO_WAITER` when that candidate does not wait (the term is
   * unchanged and still held). A {@link LeaderElector} does this with
   * {@link LeaderElector.resignTo}, stopping its leader first.
   */
  resignTo(term: Session, successor?: string, timeoutMs = 5000): Promise<Leader> {
    const resign: UnaryMethod<ResignRequest, ResignResponse> = this.#stub.resign.bind(this.#stub);
    return term._handOver(async () => {
      const reply = await unary(
        this.#client.callContext,
        "Resign",
        resign,
        ResignRequest.fromPartial({
          name: term.name,
          expectedRevision: term.revision,
          leaseKey: term.leaseKey,
          successor: successor ?? "",
          toNextCandidate: successor === undefined || successor === "",
        }),
        timeoutMs,
      ).result;
      return leaderOf(reply.successor);
    });
  }

  /** Who leads `name` now (an empty identity when nobody does). */
  async leader(name: string, timeoutMs = 5000): Promise<Leader> {
    const leader: UnaryMethod<LeaderRequest, LeaderResponse> = this.#stub.leader.bind(this.#stub);
    try {
      const reply = await unary(
        this.#client.callContext,
        "Leader",
        leader,
        LeaderRequest.fromPartial({ name }),
        timeoutMs,
      ).result;
      return leaderOf(reply.leadership);
    } catch (err) {
      if (err instanceof TenureError && err.reason === Reason.LEASE_NOT_FOUND) return NOBODY;
      throw err;
    }
  }

  /**
   * The changes of leader of `name` until `signal` aborts, reopening the
   * Observe stream after errors (it starts with the current state, so a
   * reconnect never leaves a stale leader). Ends with a thrown TenureError
   * only on a permanent refusal (grants, credentials, arguments).
   */
  async *observe(name: string, signal: AbortSignal): AsyncGenerator<Leader, void, undefined> {
    let last: Leader | undefined;
    for await (const change of this._changes(name, signal)) {
      const now = newLeader(change, last);
      if (now !== undefined) yield (last = now);
    }
  }

  /**
   * Every Observe message of `name` until `signal` aborts, reopening the
   * stream after errors as {@link observe} does (each stream starts with
   * the current state). For {@link LeaderElector}, which also reads each
   * message's preferred candidate.
   *
   * @internal
   */
  async *_changes(name: string, signal: AbortSignal): AsyncGenerator<ObserveResponse, void, undefined> {
    let backoffMs = 100;
    while (!signal.aborted) {
      const md = await this.#client.callContext.metadata();
      const call: ClientReadableStream<ObserveResponse> = this.#stub.observe(ObserveRequest.fromPartial({ name }), md);
      call.on("error", () => undefined);
      const onAbort = () => call.cancel();
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        for await (const message of call as AsyncIterable<ObserveResponse>) {
          backoffMs = 100;
          yield message;
        }
      } catch (err) {
        if (signal.aborted) return;
        const error = this.#client.callContext.error(err, "Observe");
        if (PERMANENT_CODES.has(error.code)) throw error;
      } finally {
        signal.removeEventListener("abort", onAbort);
        call.cancel();
      }
      if (!(await sleep(backoffMs * (1 + Math.random() / 2), signal))) return;
      backoffMs = Math.min(backoffMs * 2, 5000);
    }
  }
}

/** gRPC codes that end an observer: retrying cannot fix them. */
const PERMANENT_CODES = new Set([3 /* INVALID_ARGUMENT */, 7 /* PERMISSION_DENIED */, 16 /* UNAUTHENTICATED */]);

/**
 * Takes part in an election until {@link run}'s signal aborts: campaigns,
 * leads while it holds a term, and campaigns again after each term.
 *
 * ```ts
 * const elector = new LeaderElector(client, {
 *   name: "db.primary", identity: "node-1", value: "10.0.0.1:5432", ttlMs: 10_000,
 *   onStartedLeading: async (term, signal) => { ... },
 *   onStoppedLeading: () => console.log("stopped leading"),
 *   onNewLeader: (l) => console.log("leader:", l.identity || "none"),
 * });
 * const stop = new AbortController();
 * const done = elector.run(stop.signal);
 * ...
 * stop.abort(); await done; // resigns: the next participant leads at once
 * ```
 *
 * **Preference.** The elector campaigns with `preference` (default 0) and
 * always follows `Observe` (with or without `onNewLeader`), remembering the
 * preferred candidate it names: the waiting candidate of the highest
 * preference above 0, the earliest of equals. While it leads, including the
 * moment it starts leading with one already named, a preferred candidate
 * whose preference is greater than the elector's own gets the leadership
 * through {@link resignTo}: `onStartedLeading`'s signal aborts, its promise
 * is awaited and `onStoppedLeading` has run before the successor can start
 * leading; the successor leads from the write that ends this term (no
 * moment without a leader) with a greater fencing token, and this elector
 * campaigns again. If that hand-over fails (`NO_WAITER`: the candidate
 * left), the elector leads the same term again and tries again only when
 * Observe names a candidate anew, never in a loop. A change of the
 * preferred candidate alone does not call `onNewLeader`. For a rolling
 * update, campaign with the deployment's generation as the preference: the
 * first candidate of the new version takes over once, and candidates of
 * equal preference never displace each other.
 */
export class LeaderElector {
  readonly #elections: Elections;
  readonly #options: ElectorOptions;
  /** The current term while leading. */
  term: Session | undefined;
  /** Takes a resignTo request while leading; undefined otherwise. */
  #ask: ((request: HandoverRequest) => void) | undefined;
  /** Whom to hand over to, from what Observe names. */
  readonly #preferred: PreferredCandidate;

  constructor(client: TenureClient, options: ElectorOptions) {
    if (options.name === "" || options.identity === "") throw new RangeError("LeaderElector needs a name and an identity");
    if (options.preference !== undefined && !isPreference(options.preference)) {
      throw new RangeError(`preference must be an integer from 0 to 2^32 - 1, got ${options.preference}`);
    }
    this.#preferred = new PreferredCandidate(options.preference ?? 0, options.identity);
    this.#elections = new Elections(client);
    this.#options = options;
  }

  /**
   * Runs until `signal` aborts (then resigns a term it holds and resolves),
   * or rejects with a permanent TenureError (arguments, credentials, grants).
   */
  async run(signal: AbortSignal): Promise<void> {
    const o = this.#options;
    // The observer ends with run(), also when a permanent error ends it.
    const ended = new AbortController();
    const observing = this.#observe(AbortSignal.any([signal, ended.signal]));
    let backoffMs = 100;
    try {
      while (!signal.aborted) {
        let term: Session;
        try {
          term = await this.#elections.elect(o.name, o.identity, o.value ?? "", {
            ...o.sessionOptions,
            ttlMs: o.ttlMs,
            waitMs: o.campaignWaitMs ?? 30_000,
            preference: o.preference ?? 0,
            signal,
          });
        } catch (err) {
          if (signal.aborted) break;
          if (err instanceof TenureError && err.reason === Reason.LEASE_HELD) continue;
          if (!(err instanceof TenureError) || !err.retryable) throw err;
          if (!(await sleep(backoffMs * (1 + Math.random() / 2), signal))) break;
          backoffMs = Math.min(backoffMs * 2, 5000);
          continue;
        }
        backoffMs = 100;
        await this.#lead(term, signal);
      }
    } finally {
      ended.abort();
      await observing;
    }
  }

  /**
   * Hands the leadership to a waiting candidate, with no moment without a
   * leader: to the candidate whose identity is `successor`, or, without
   * one, to the earliest waiting candidate. Resolves with the successor,
   * whose fencing token is greater.
   *
   * Before the hand-over is sent this leader stops: `onStartedLeading`'s
   * signal aborts (reason: a {@link LeaseLostError} `TRANSFERRED`), its
   * promise is awaited, and `onStoppedLeading` runs; so the successor
   * cannot start leading before this leader stopped, and
   * `onStoppedLeading` has run when this resolves. The elector then
   * campaigns again (abort {@link run}'s signal to leave).
   *
   * Rejects with `NO_WAITER` when that candidate does not wait: the leader
   * keeps the term and leads it again (`onStartedLeading` is called anew
   * with it), as after any other failure while the term is still held;
   * with `LEASE_NOT_HELD` when this elector does not lead.
   */
  resignTo(successor?: string, timeoutMs = 5000): Promise<Leader> {
    const ask = this.#ask;
    if (ask === undefined) return Promise.reject(this.#notLeading());
    return new Promise((resolve, reject) => ask({ successor, timeoutMs, resolve, reject }));
  }

  #notLeading(): TenureError {
    return new TenureError(
      9 /* FAILED_PRECONDITION */,
      Reason.LEASE_NOT_HELD,
      `${JSON.stringify(this.#options.identity)} does not lead ${JSON.stringify(this.#options.name)}`,
    );
  }

  async #lead(term: Session, stop: AbortSignal): Promise<void> {
    this.term = term;
    try {
      for (;;) {
        const request = await this.#leadOnce(term, stop);
        if (request === undefined) return;
        // This leader has stopped: hand the term over.
        try {
          request.resolve(await this.#elections.resignTo(term, request.successor, request.timeoutMs));
          return;
        } catch (err) {
          request.reject(err);
          // NO_WAITER (or a failed call) with the term still held: lead it again.
          if (term.isHeld() && !stop.aborted) continue;
          if (term.isHeld()) await term.release().catch(() => false);
          return;
        }
      }
    } finally {
      this.term = undefined;
    }
  }

  /**
   * One period of leading `term`: `onStartedLeading` until the term ends,
   * `stop` aborts, the callback returns, or {@link resignTo} asks for a
   * hand-over; then resigns a term still held (not for a hand-over) and
   * calls `onStoppedLeading`. Resolves with the hand-over asked for, if any.
   */
  async #leadOnce(term: Session, stop: AbortSignal): Promise<HandoverRequest | undefined> {
    const ended = AbortSignal.any([term.signal, stop]);
    const ending = new AbortController();
    const termSignal = AbortSignal.any([ended, ending.signal]);
    let request: HandoverRequest | undefined;
    this.#ask = (asked) => {
      if (request !== undefined || termSignal.aborted) {
        asked.reject(this.#notLeading());
        return;
      }
      request = asked;
      ending.abort(new LeaseLostError("TRANSFERRED", term.name, term.fencingToken));
    };
    this.#deferToPreferred(); // one named before this term (or period) began
    try {
      const leading = Promise.resolve()
        .then(() => this.#options.onStartedLeading(term, termSignal))
        .catch(() => undefined);
      await Promise.race([leading, new Promise((ok) => termSignal.addEventListener("abort", ok, { once: true }))]);
      ending.abort(); // the callback returned early: the term ends too
      await leading;
    } finally {
      this.#ask = undefined;
      // Resign a term still held (the elector stopped, or the callback
      // returned): the next participant leads at once, not after the TTL.
      if (request === undefined && term.isHeld()) await term.release().catch(() => false);
      await this.#options.onStoppedLeading();
    }
    return request;
  }

  /**
   * While leading, asks for a hand-over to the preferred candidate Observe
   * named when its preference is greater than this elector's, once per
   * naming (the outcome is the elector's: it leads on after a failure).
   */
  #deferToPreferred(): void {
    const ask = this.#ask;
    if (ask === undefined) return;
    const successor = this.#preferred.take();
    if (successor === undefined) return;
    ask({ successor, timeoutMs: HANDOVER_TIMEOUT_MS, resolve: () => undefined, reject: () => undefined });
  }

  /** Follows Observe: remembers the preferred candidate and reports each change of leader. */
  async #observe(signal: AbortSignal): Promise<void> {
    let last: Leader | undefined;
    try {
      for await (const change of this.#elections._changes(this.#options.name, signal)) {
        this.#preferred.note(change.preferred);
        this.#deferToPreferred();
        const now = newLeader(change, last);
        if (now === undefined) continue;
        last = now;
        try {
          this.#options.onNewLeader?.(now);
        } catch {
          // Keep following Observe: the hand-over to a preferred candidate depends on it.
        }
      }
    } catch {
      // A permanent refusal of Observe: leadership itself still works.
    }
  }
}

/**
 * Whom a {@link LeaderElector} of preference `preference` hands over to:
 * the preferred candidate Observe named last, when its preference is
 * greater than the elector's own (and it is not the elector itself), once
 * per naming, so a failed hand-over is not repeated until Observe names a
 * candidate again. Exported for the tests, not from the package.
 *
 * @internal
 */
export class PreferredCandidate {
  /** The candidate named last (undefined: none waits). */
  #candidate: Candidate | undefined;
  /** How many Observe messages named a candidate. */
  #namings = 0;
  /** The naming last taken. */
  #taken = 0;

  constructor(
    readonly preference: number,
    readonly identity: string,
  ) {}

  /** Remembers the preferred candidate of one Observe message (every message carries it; undefined: none). */
  note(candidate: Candidate | undefined): void {
    this.#candidate = candidate?.holder ? candidate : undefined;
    if (this.#candidate !== undefined) this.#namings++;
  }

  /** The holder to hand over to now, if any; taken once per naming. */
  take(): string | undefined {
    const c = this.#candidate;
    if (c === undefined || this.#taken === this.#namings) return undefined;
    if (c.preference <= this.preference || c.holder === this.identity) return undefined;
    this.#taken = this.#namings;
    return c.holder;
  }
}

/** The deadline of the Resign call of a hand-over to a preferred candidate. */
const HANDOVER_TIMEOUT_MS = 5000;

/** One {@link LeaderElector.resignTo} request and where its answer goes. */
interface HandoverRequest {
  readonly successor: string | undefined;
  readonly timeoutMs: number;
  readonly resolve: (successor: Leader) => void;
  readonly reject: (err: unknown) => void;
}

/** Sleeps `ms`; resolves false at once if `signal` aborts first. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((ok) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      ok(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      ok(false);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
