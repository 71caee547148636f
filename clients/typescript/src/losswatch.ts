/**
 * The one WatchLease stream a client keeps open to notice the loss of any of
 * its sessions the moment the server records it (a revoke, an expiry, a
 * release by someone holding the key, another holder), instead of at the
 * next renewal.
 *
 * The stream follows the narrowest filter covering the names of all live
 * sessions (one name, the common dotted prefix `a.b.>`, or `>`), and is
 * reopened when a new session's name is not covered. If the server refuses
 * the watch (no `watch` grant: PERMISSION_DENIED / UNAUTHENTICATED), the
 * client stops trying and sessions rely on their renewals alone. Other
 * failures (a Tenure restart, a broken connection) reopen the stream with
 * capped exponential backoff and jitter, resuming after the last revision
 * seen (`start_revision`), so a revoke, expiry or takeover that happened
 * while disconnected still arrives as its event. When the server cannot
 * resume (WATCH_HISTORY_COMPACTED) the stream starts fresh, and a session
 * whose name (and slot) the fresh snapshot shows with another token, or not
 * at all, is lost. A semaphore holder is followed by (name, slot): other
 * holders acquiring and releasing other slots never end it.
 * @internal
 */
import { status as GrpcStatus, type ClientReadableStream } from "@grpc/grpc-js";

import {
  EventType,
  LeaseEvent as LeaseEventMessage,
  WatchLeaseRequest,
  type LeaseEvent,
  type LeaseServiceClient,
  type WatchLeaseResponse,
} from "./gen/tenure/v1/lease";
import { TenureError, type LossReason } from "./errors";
import { ErrorReason } from "./gen/tenure/v1/error_reason";
import type { CallContext } from "./rpc";

/** What the loss watch needs of a session. */
export interface Watched {
  readonly name: string;
  /** The semaphore slot of the holding; 0 for a plain lease (or a group member). */
  readonly slot: number;
  /** The holding's current fencing token (a read-write lock's downgrade replaces it). */
  readonly fencingToken: bigint;
  /**
   * Called once an event shows the holding ended. Returning `false` keeps
   * the session followed: it holds the event back (a downgrade in flight,
   * whose reply tells whether the event ended the holding).
   */
  ended(event: LeaseEvent): boolean | void;
}

/** The narrowest watch filter covering every name in `names` (non-empty). */
export function coveringFilter(names: readonly string[]): string {
  const first = names[0] as string;
  if (names.every((name) => name === first)) return first;
  const split = names.map((name) => name.split("."));
  const shortest = Math.min(...split.map((parts) => parts.length));
  let common = 0;
  // A filter "a.b.>" covers names below a.b only, so keep at least one
  // segment of every name below the prefix.
  while (common < shortest - 1 && split.every((parts) => parts[common] === split[0]![common])) common++;
  return common === 0 ? ">" : `${split[0]!.slice(0, common).join(".")}.>`;
}

/** Whether the watch filter `filter` covers the lease name `name`. */
export function covers(filter: string, name: string): boolean {
  if (filter === name || filter === ">") return true;
  return filter.endsWith(".>") && name.startsWith(filter.slice(0, -1));
}

/**
 * Whether `event` shows that the holding of `session` has ended. A
 * semaphore's events carry its name and the slot concerned: only events of
 * the session's own slot count (other holders come and go in other slots),
 * and a plain lease's session ignores slot events and the other way round.
 * A MISSED (the stream did not see every change of the name) ends the
 * session only when it names the session's fencing token: a MISSED of
 * another token, or of none (0), says nothing of this holding.
 */
export function showsLoss(session: Watched, event: LeaseEvent): boolean {
  if (event.name !== session.name || event.slot !== session.slot || event.revision <= session.fencingToken) return false;
  switch (event.type) {
    case EventType.REVOKED:
    case EventType.EXPIRED:
    case EventType.RELEASED:
      return true;
    case EventType.ACQUIRED:
    case EventType.CURRENT:
      return event.fencingToken !== session.fencingToken;
    case EventType.MISSED:
      return session.fencingToken !== 0n && event.fencingToken === session.fencingToken;
    default:
      return false;
  }
}

/**
 * The loss reason of a session ended by `event` (one {@link showsLoss}
 * accepted, or the SNAPSHOT_COMPLETE of a snapshot that lacked it): `MISSED`
 * for a MISSED event, else `LEASE_ENDED`.
 */
export function lossReasonOf(event: LeaseEvent): LossReason {
  return event.type === EventType.MISSED ? "MISSED" : "LEASE_ENDED";
}

const MIN_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5000;

/** A delay in [backoff/2, backoff): spread reconnects of many clients after a restart. */
export function jittered(backoffMs: number): number {
  return backoffMs / 2 + Math.random() * (backoffMs / 2);
}

/** What a stream learned before its SNAPSHOT_COMPLETE. */
interface StreamState {
  /** The revision the stream was opened from (0: fresh snapshot). */
  readonly startRevision: bigint;
  /** The sessions followed when it opened: a fresh snapshot must show each. */
  readonly expected: ReadonlySet<Watched>;
  /** Sessions the snapshot showed with their own token. */
  readonly shown: Set<Watched>;
  /** Whether CURRENT events came (a snapshot, also from a server without resume). */
  sawCurrent: boolean;
  /** Whether SNAPSHOT_COMPLETE came. */
  complete: boolean;
}

/** One client's shared loss watch. */
export class LossWatch {
  readonly #stub: LeaseServiceClient;
  readonly #ctx: CallContext;
  readonly #sessions = new Set<Watched>();
  #filter: string | undefined;
  #call: ClientReadableStream<WatchLeaseResponse> | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #backoffMs = MIN_BACKOFF_MS;
  /** The highest revision the current filter's streams delivered (0: none yet). */
  #lastRevision = 0n;
  #refused = false;
  #closed = false;
  readonly #started = new WeakSet<ClientReadableStream<WatchLeaseResponse>>();

  constructor(stub: LeaseServiceClient, ctx: CallContext, enabled = true) {
    this.#stub = stub;
    this.#ctx = ctx;
    this.#closed = !enabled;
  }

  /** True once the server refused the watch: sessions then rely on renewals alone. */
  get refused(): boolean {
    return this.#refused;
  }

  /** Follows `session` from now on. */
  add(session: Watched): void {
    if (this.#closed) return;
    this.#sessions.add(session);
    if (this.#refused) return;
    if (this.#filter === undefined || !covers(this.#filter, session.name)) this.#open(0n);
  }

  /** Stops following `session`; closes the stream when no session is left. */
  remove(session: Watched): void {
    this.#sessions.delete(session);
    if (this.#sessions.size === 0) this.#stop();
  }

  /** Closes the stream for good. */
  close(): void {
    this.#closed = true;
    this.#sessions.clear();
    this.#stop();
  }

  #stop(): void {
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    this.#filter = undefined;
    this.#lastRevision = 0n;
    const call = this.#call;
    this.#call = undefined;
    if (call === undefined) return;
    // A stream cancelled before its response headers arrived keeps the
    // grpc-js connection referenced after close() (the process then never
    // exits): cancel such a stream once its headers are in.
    if (this.#started.has(call)) call.cancel();
    else call.once("metadata", () => call.cancel());
  }

  /**
   * (Re)opens the stream with the filter covering every live session: fresh
   * (`startRevision` 0) for a new filter, else resuming after the last
   * revision the previous stream of the same filter delivered.
   */
  #open(startRevision: bigint): void {
    this.#stop();
    if (this.#sessions.size === 0 || this.#closed || this.#refused) return;
    const filter = coveringFilter([...this.#sessions].map((session) => session.name));
    this.#filter = filter;
    this.#lastRevision = startRevision;
    const state: StreamState = {
      startRevision,
      expected: new Set(this.#sessions),
      shown: new Set(),
      sawCurrent: false,
      complete: false,
    };
    void this.#ctx.metadata().then(
      (md) => {
        if (this.#filter !== filter || this.#call !== undefined) return;
        const call = this.#stub.watchLease(WatchLeaseRequest.fromPartial({ name: filter, startRevision }), md);
        this.#call = call;
        call.once("metadata", () => this.#started.add(call));
        call.on("data", (message: WatchLeaseResponse) => {
          const event = message.event;
          if (event === undefined || call !== this.#call) return;
          this.#deliver(state, event);
        });
        call.on("error", (err: unknown) => this.#failed(call, err));
        call.on("end", () => this.#failed(call, undefined));
      },
      // The token callback failed: treated like a refusal (renewals still check).
      (err: unknown) => this.#failed(undefined, new TenureError(GrpcStatus.UNAUTHENTICATED, undefined, String(err))),
    );
  }

  /** Applies one event of the stream opened as `state`. */
  #deliver(state: StreamState, event: LeaseEvent): void {
    if (event.type === EventType.SNAPSHOT_COMPLETE) {
      this.#backoffMs = MIN_BACKOFF_MS;
      if (event.revision > this.#lastRevision) this.#lastRevision = event.revision;
      if (state.complete) return;
      state.complete = true;
      // A snapshot (fresh, or a server that ignored start_revision) lists
      // every holding: a session it did not show ended while unobserved.
      if (state.startRevision !== 0n && !state.sawCurrent) return;
      for (const session of state.expected) {
        if (state.shown.has(session) || !this.#sessions.has(session)) continue;
        const kept =
          session.ended(
            LeaseEventMessage.fromPartial({ type: EventType.SNAPSHOT_COMPLETE, name: session.name, slot: session.slot }),
          ) === false;
        if (!kept) this.#sessions.delete(session);
      }
      return;
    }
    if (event.revision > this.#lastRevision) this.#lastRevision = event.revision;
    if (event.type === EventType.CURRENT) {
      state.sawCurrent = true;
      for (const session of state.expected) {
        if (session.name === event.name && session.slot === event.slot && session.fencingToken === event.fencingToken) {
          state.shown.add(session);
        }
      }
    }
    for (const session of [...this.#sessions]) {
      if (showsLoss(session, event) && session.ended(event) !== false) this.#sessions.delete(session);
    }
  }

  /**
   * The stream of `call` ended: give up when refused, start fresh when the
   * server cannot resume, else resume after a backoff.
   */
  #failed(call: ClientReadableStream<WatchLeaseResponse> | undefined, err: unknown): void {
    if (call !== undefined && call !== this.#call) return; // an old stream we cancelled
    const resumeFrom = this.#lastRevision;
    this.#call = undefined;
    this.#filter = undefined;
    if (this.#closed || this.#sessions.size === 0) return;
    const error = err === undefined ? undefined : TenureError.from(err);
    if (error?.code === GrpcStatus.PERMISSION_DENIED || error?.code === GrpcStatus.UNAUTHENTICATED) {
      this.#refused = true;
      return;
    }
    // The history after resumeFrom is gone, or (INVALID_ARGUMENT) the
    // bucket is not the one the revision came from: start over.
    const fresh =
      error?.reason === ErrorReason.WATCH_HISTORY_COMPACTED ||
      (error?.code === GrpcStatus.INVALID_ARGUMENT && resumeFrom !== 0n);
    clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => this.#open(fresh ? 0n : resumeFrom), fresh ? 0 : jittered(this.#backoffMs));
    this.#retryTimer.unref();
    if (!fresh) this.#backoffMs = Math.min(MAX_BACKOFF_MS, this.#backoffMs * 2);
  }
}
