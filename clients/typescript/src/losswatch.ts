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
 * failures reopen the stream with backoff.
 * @internal
 */
import { status as GrpcStatus, type ClientReadableStream } from "@grpc/grpc-js";

import {
  EventType,
  WatchLeaseRequest,
  type LeaseEvent,
  type LeaseServiceClient,
  type WatchLeaseResponse,
} from "./gen/tenure/v1/lease";
import type { CallContext } from "./rpc";

/** What the loss watch needs of a session. */
export interface Watched {
  readonly name: string;
  readonly fencingToken: bigint;
  /** Called once an event shows the holding ended. */
  ended(event: LeaseEvent): void;
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

/** Whether `event` shows that the holding of `session` has ended. */
export function showsLoss(session: Watched, event: LeaseEvent): boolean {
  if (event.name !== session.name || event.revision <= session.fencingToken) return false;
  switch (event.type) {
    case EventType.REVOKED:
    case EventType.EXPIRED:
    case EventType.RELEASED:
      return true;
    case EventType.ACQUIRED:
    case EventType.CURRENT:
      return event.fencingToken !== session.fencingToken;
    default:
      return false;
  }
}

const MIN_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5000;

/** One client's shared loss watch. */
export class LossWatch {
  readonly #stub: LeaseServiceClient;
  readonly #ctx: CallContext;
  readonly #sessions = new Set<Watched>();
  #filter: string | undefined;
  #call: ClientReadableStream<WatchLeaseResponse> | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #backoffMs = MIN_BACKOFF_MS;
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
    if (this.#filter === undefined || !covers(this.#filter, session.name)) this.#open();
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
    const call = this.#call;
    this.#call = undefined;
    if (call === undefined) return;
    // A stream cancelled before its response headers arrived keeps the
    // grpc-js connection referenced after close() (the process then never
    // exits): cancel such a stream once its headers are in.
    if (this.#started.has(call)) call.cancel();
    else call.once("metadata", () => call.cancel());
  }

  /** (Re)opens the stream with the filter covering every live session. */
  #open(): void {
    this.#stop();
    if (this.#sessions.size === 0 || this.#closed || this.#refused) return;
    const filter = coveringFilter([...this.#sessions].map((session) => session.name));
    this.#filter = filter;
    void this.#ctx.metadata().then(
      (md) => {
        if (this.#filter !== filter || this.#call !== undefined) return;
        const call = this.#stub.watchLease(WatchLeaseRequest.fromPartial({ name: filter }), md);
        this.#call = call;
        call.once("metadata", () => this.#started.add(call));
        call.on("data", (message: WatchLeaseResponse) => {
          const event = message.event;
          if (event === undefined || call !== this.#call) return;
          if (event.type === EventType.SNAPSHOT_COMPLETE) this.#backoffMs = MIN_BACKOFF_MS;
          for (const session of [...this.#sessions]) {
            if (showsLoss(session, event)) {
              this.#sessions.delete(session);
              session.ended(event);
            }
          }
        });
        call.on("error", (err: { code?: number }) => this.#failed(call, err.code));
        call.on("end", () => this.#failed(call, undefined));
      },
      () => this.#failed(undefined, GrpcStatus.UNAUTHENTICATED),
    );
  }

  /** The stream of `call` ended: give up when refused, else reopen after a backoff. */
  #failed(call: ClientReadableStream<WatchLeaseResponse> | undefined, code: number | undefined): void {
    if (call !== undefined && call !== this.#call) return; // an old stream we cancelled
    this.#call = undefined;
    this.#filter = undefined;
    if (this.#closed || this.#sessions.size === 0) return;
    if (code === GrpcStatus.PERMISSION_DENIED || code === GrpcStatus.UNAUTHENTICATED) {
      this.#refused = true;
      return;
    }
    clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => this.#open(), this.#backoffMs);
    this.#retryTimer.unref();
    this.#backoffMs = Math.min(MAX_BACKOFF_MS, this.#backoffMs * 2);
  }
}
