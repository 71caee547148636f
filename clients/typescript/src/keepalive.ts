/**
 * The renewals of every plain-lease and semaphore session of one client,
 * sent over one KeepAlive stream (`tenure.v1.LeaseService/KeepAlive`)
 * instead of one unary Renew each.
 *
 * Renewals that fall due together (in the same turn of the event loop) go
 * out as one request message (split to stay within the server's default
 * bounds: 1,000 entries and 16 KiB per message; halved after a
 * REQUEST_TOO_LARGE from a server with lower ones); the server answers each message with one
 * response, in order, holding one result per entry. A per-entry error is
 * turned into the same {@link TenureError} a unary Renew's status would
 * have given, so a session cannot tell which way its renewal went.
 *
 * Fallback: a server without KeepAlive (UNIMPLEMENTED) makes the client use
 * unary Renew from then on. When a stream breaks for any other reason, its
 * unanswered entries are sent again at once as unary Renews (each within
 * what is left of its own deadline; a failure there is retried by the
 * session like any failed renewal), and the next renewals open a new
 * stream. The stream is half-closed when no session is left.
 * @internal
 */
import { Metadata, status as GrpcStatus, type ClientDuplexStream } from "@grpc/grpc-js";
import { performance } from "node:perf_hooks";

import { ErrorReason, TenureError } from "./errors";
import {
  KeepAliveEntry,
  type KeepAliveError,
  KeepAliveRequest,
  type KeepAliveResponse,
  type KeepAliveResult,
  type Lease,
  type LeaseServiceClient,
  type RenewRequest,
  type RenewResponse,
} from "./gen/tenure/v1/lease";
import { unary, type CallContext, type PendingCall, type UnaryMethod } from "./rpc";
import { durationToMs } from "./time";

/** The most entries one request message carries (the server's default `--max-keepalive-entries`). */
export const MAX_ENTRIES_PER_MESSAGE = 1000;

/**
 * The most bytes one request message carries: below the server's default
 * `--max-request-bytes` (16 KiB), which bounds KeepAlive messages too.
 */
export const MAX_MESSAGE_BYTES = 15 * 1024;

/** How the renewals of one client went, for logs and tests. */
export interface RenewalStats {
  /** KeepAlive request messages sent. */
  readonly streamMessages: number;
  /** Renewals sent over KeepAlive streams. */
  readonly streamEntries: number;
  /** KeepAlive streams opened. */
  readonly streamsOpened: number;
  /** Unary Renew calls (fallback, or resends after a broken stream). */
  readonly unaryRenews: number;
  /** True once the server answered KeepAlive with UNIMPLEMENTED: unary from then on. */
  readonly unaryOnly: boolean;
}

/** One renewal waiting for its result. */
interface Entry {
  readonly id: bigint;
  readonly request: RenewRequest;
  /** `performance.now()` after which the renewal counts as failed. */
  readonly deadline: number;
  readonly resolve: (lease: Lease) => void;
  readonly reject: (err: unknown) => void;
  readonly timer: NodeJS.Timeout;
  done: boolean;
}

/** One open stream and the messages it still owes a response for, in order. */
interface Stream {
  readonly call: ClientDuplexStream<KeepAliveRequest, KeepAliveResponse>;
  readonly sent: Entry[][];
  broken: boolean;
}

/** Sends one client's renewals over a KeepAlive stream, or unary Renew. */
export class Renewer {
  readonly #stub: LeaseServiceClient;
  readonly #ctx: CallContext;
  #unaryOnly: boolean;
  #stream: Stream | undefined;
  #opening: Promise<Stream | undefined> | undefined;
  #queue: Entry[] = [];
  #flushing = false;
  #nextId = 1n;
  #holders = 0;
  #closed = false;
  /** Message bounds; halved when a server with lower bounds ends a stream with REQUEST_TOO_LARGE. */
  #maxEntries = MAX_ENTRIES_PER_MESSAGE;
  #maxBytes = MAX_MESSAGE_BYTES;
  #stats = { streamMessages: 0, streamEntries: 0, streamsOpened: 0, unaryRenews: 0 };

  /** `useStream` false: unary Renew only (the client's `keepAlive: false`). */
  constructor(stub: LeaseServiceClient, ctx: CallContext, useStream: boolean) {
    this.#stub = stub;
    this.#ctx = ctx;
    this.#unaryOnly = !useStream;
  }

  /** How the renewals went so far. */
  get stats(): RenewalStats {
    return { ...this.#stats, unaryOnly: this.#unaryOnly };
  }

  /** A session starts using this renewer. */
  hold(): void {
    this.#holders++;
  }

  /** A session stopped; the stream is half-closed when none is left. */
  letGo(): void {
    this.#holders = Math.max(0, this.#holders - 1);
    if (this.#holders > 0) return;
    const stream = this.#stream;
    this.#stream = undefined;
    // The server answers what is pending, then ends the stream with OK.
    stream?.call.end();
  }

  /** Cancels the stream for good; renewals still queued fail with CANCELLED. */
  close(): void {
    this.#closed = true;
    const stream = this.#stream;
    this.#stream = undefined;
    if (stream !== undefined) {
      stream.broken = true;
      stream.call.cancel();
    }
    for (const entry of this.#queue) this.#settle(entry, undefined, this.#cancelled());
    this.#queue = [];
  }

  /** Renews one holding within `timeoutMs`; resolves with the renewed lease. */
  renew(request: RenewRequest, timeoutMs: number): PendingCall<Lease> {
    if (this.#unaryOnly || this.#closed) return this.#unary(request, timeoutMs);
    let entry!: Entry;
    const result = new Promise<Lease>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#settle(entry, undefined, new TenureError(GrpcStatus.DEADLINE_EXCEEDED, undefined, "no KeepAlive result within the renewal's deadline", {}, {
          target: this.#ctx.target,
          rpc: "KeepAlive",
        }));
      }, Math.max(1, Math.ceil(timeoutMs)));
      entry = { id: this.#nextId++, request, deadline: performance.now() + timeoutMs, resolve, reject, timer, done: false };
    });
    this.#queue.push(entry);
    if (!this.#flushing) {
      this.#flushing = true;
      // Renewals whose timers fire in this turn of the event loop share one message.
      setImmediate(() => void this.#flush());
    }
    return { result, cancel: () => this.#settle(entry, undefined, this.#cancelled()) };
  }

  #cancelled(): TenureError {
    return new TenureError(GrpcStatus.CANCELLED, undefined, "renewal cancelled", {}, { target: this.#ctx.target, rpc: "KeepAlive" });
  }

  /** Settles `entry` once (a late result or a second failure is ignored). */
  #settle(entry: Entry, lease: Lease | undefined, err?: unknown): void {
    if (entry.done) return;
    entry.done = true;
    clearTimeout(entry.timer);
    if (lease !== undefined) entry.resolve(lease);
    else entry.reject(err);
  }

  /** Sends the queued renewals: as messages on the stream, or unary. */
  async #flush(): Promise<void> {
    const stream = this.#unaryOnly ? undefined : await this.#open();
    this.#flushing = false;
    const entries = this.#queue.filter((entry) => !entry.done);
    this.#queue = [];
    if (entries.length === 0) return;
    if (stream === undefined || stream.broken) {
      for (const entry of entries) this.#resendUnary(entry);
      return;
    }
    for (const batch of this.#messages(entries)) {
      stream.sent.push(batch.map(([entry]) => entry));
      this.#stats.streamMessages++;
      this.#stats.streamEntries += batch.length;
      stream.call.write(KeepAliveRequest.fromPartial({ entries: batch.map(([, wire]) => wire) }));
    }
  }

  /** `entries` split into request messages within the entry and byte bounds. */
  #messages(entries: readonly Entry[]): [Entry, KeepAliveEntry][][] {
    const messages: [Entry, KeepAliveEntry][][] = [];
    let current: [Entry, KeepAliveEntry][] = [];
    let bytes = 0;
    for (const entry of entries) {
      const wire = KeepAliveEntry.fromPartial({
        id: entry.id,
        name: entry.request.name,
        expectedRevision: entry.request.expectedRevision,
        leaseKey: entry.request.leaseKey,
        ttl: entry.request.ttl,
        slot: entry.request.slot,
      });
      // The entry's bytes plus its field tag and length prefix.
      const size = KeepAliveEntry.encode(wire).finish().length + 4;
      if (current.length > 0 && (current.length >= this.#maxEntries || bytes + size > this.#maxBytes)) {
        messages.push(current);
        current = [];
        bytes = 0;
      }
      current.push([entry, wire]);
      bytes += size;
    }
    if (current.length > 0) messages.push(current);
    return messages;
  }

  /** The open stream, opening one if needed; undefined when it cannot be opened. */
  #open(): Promise<Stream | undefined> {
    if (this.#stream !== undefined && !this.#stream.broken) return Promise.resolve(this.#stream);
    this.#opening ??= this.#ctx
      .metadata()
      .then(
        (md: Metadata) => {
          if (this.#closed) return undefined;
          const call = this.#stub.keepAlive(md);
          const stream: Stream = { call, sent: [], broken: false };
          this.#stats.streamsOpened++;
          call.on("data", (response: KeepAliveResponse) => this.#answered(stream, response));
          call.on("error", (err: unknown) => this.#broken(stream, err));
          call.on("end", () => this.#broken(stream, undefined));
          this.#stream = stream;
          return stream;
        },
        // The token callback failed: the unary Renew reports it as its error.
        () => undefined,
      )
      .finally(() => (this.#opening = undefined));
    return this.#opening;
  }

  /** One response: the results of the oldest message still unanswered. */
  #answered(stream: Stream, response: KeepAliveResponse): void {
    const batch = stream.sent.shift() ?? [];
    const byId = new Map<bigint, [KeepAliveResult, number]>(response.results.map((r, i) => [r.id, [r, i]]));
    for (const entry of batch) {
      const [result, index] = byId.get(entry.id) ?? [undefined, -1];
      if (result?.lease !== undefined) this.#settle(entry, result.lease);
      else if (result?.error !== undefined) {
        const e = expanded(response.results, index);
        const retryDelayMs = e.retryDelay === undefined ? undefined : durationToMs(e.retryDelay);
        const error = new TenureError(e.code, e.reason, e.message, e.metadata, { target: this.#ctx.target, rpc: "KeepAlive", retryDelayMs });
        this.#settle(entry, undefined, error);
      } else this.#resendUnary(entry);
    }
  }

  /**
   * The stream ended or failed: its unanswered entries go out again as
   * unary Renews; UNIMPLEMENTED switches this client to unary for good.
   */
  #broken(stream: Stream, err: unknown): void {
    stream.broken = true;
    if (this.#stream === stream) this.#stream = undefined;
    const error = err === undefined ? undefined : TenureError.from(err);
    if (error?.code === GrpcStatus.UNIMPLEMENTED) this.#unaryOnly = true;
    if (error?.reason === ErrorReason.REQUEST_TOO_LARGE) {
      // A server with lower bounds than the defaults: send smaller messages.
      this.#maxEntries = Math.max(1, Math.floor(this.#maxEntries / 2));
      this.#maxBytes = Math.max(1024, Math.floor(this.#maxBytes / 2));
    }
    const pending = stream.sent.flat();
    stream.sent.length = 0;
    for (const entry of pending) this.#resendUnary(entry);
  }

  /** Sends `entry` as a unary Renew within what is left of its deadline. */
  #resendUnary(entry: Entry): void {
    if (entry.done) return;
    const left = entry.deadline - performance.now();
    if (left <= 0) return; // its timer fails it
    const pending = this.#unary(entry.request, left);
    pending.result.then(
      (lease) => this.#settle(entry, lease),
      (err: unknown) => this.#settle(entry, undefined, err),
    );
  }

  /** One unary Renew. */
  #unary(request: RenewRequest, timeoutMs: number): PendingCall<Lease> {
    this.#stats.unaryRenews++;
    const renew: UnaryMethod<RenewRequest, RenewResponse> = this.#stub.renew.bind(this.#stub);
    const pending = unary(this.#ctx, "Renew", renew, request, timeoutMs);
    const result = pending.result.then((reply) => {
      if (reply.lease === undefined) {
        throw new TenureError(GrpcStatus.INTERNAL, undefined, "Renew reply carried no lease", {}, { target: this.#ctx.target, rpc: "Renew" });
      }
      return reply.lease;
    });
    return { result, cancel: pending.cancel };
  }
}

/**
 * The error of result `i`: one that repeats an earlier error of the same
 * response (`sameAs`: sent as code, reason and that result's index) gets
 * its message, metadata and retry delay.
 */
function expanded(results: KeepAliveResult[], i: number): KeepAliveError {
  const e = results[i].error!;
  const first = e.sameAs !== undefined && e.sameAs < i ? results[e.sameAs].error : undefined;
  if (first === undefined) return e;
  return { ...e, message: first.message, metadata: first.metadata, retryDelay: first.retryDelay, sameAs: undefined };
}
