/**
 * The reconnecting, resuming watch behind `TenureClient.watch`: one
 * WatchLease stream at a time, reopened with capped exponential backoff
 * (with jitter) after a stream ends or fails retryably, from the revision of
 * the last event it delivered (`start_revision`), so a Tenure restart costs
 * neither a duplicate nor a gap. Kept apart from the client so that tests can
 * drive it with fake streams.
 */
import { setTimeout as sleep } from "node:timers/promises";

import { TenureError } from "./errors";
import { ErrorReason } from "./gen/tenure/v1/error_reason";
import { EventType, type LeaseEvent } from "./gen/tenure/v1/lease";
import { jittered } from "./losswatch";

/** Why and from where a watch reconnects ({@link ResumeOptions.onReconnect}). */
export interface WatchReconnect {
  /** What ended the previous stream; undefined when the server ended it cleanly. */
  error: TenureError | undefined;
  /** The revision the next stream resumes after (0: a fresh snapshot). */
  startRevision: bigint;
  /** How long the watch waits before reopening, in milliseconds. */
  delayMs: number;
}

/** How a watch reconnects; part of `WatchOptions`. */
export interface ResumeOptions {
  /**
   * Resume after this revision instead of starting with a snapshot (e.g.
   * the last revision a previous run processed). Default 0: CURRENT events,
   * SNAPSHOT_COMPLETE, then live changes.
   */
  startRevision?: bigint;
  /**
   * Reopen the stream after it ends or fails retryably (UNAVAILABLE, a
   * restart, a broken connection), resuming after the last delivered
   * revision. Default `true`; `false` ends the iteration with the error.
   */
  reconnect?: boolean;
  /** First reconnect delay (doubled per failure, jittered). Default 100 ms. */
  minBackoffMs?: number;
  /** Longest reconnect delay. Default 5000 ms. */
  maxBackoffMs?: number;
  /** Called before each reconnect (for logs). */
  onReconnect?: (info: WatchReconnect) => void;
  /**
   * Called when the server could not resume (WATCH_HISTORY_COMPACTED) and
   * the watch starts over: the snapshot (CURRENT events, then
   * SNAPSHOT_COMPLETE) arrives again and is the truth from then on;
   * changes in between may have been coalesced.
   */
  onResync?: (cause: TenureError) => void;
  /** Stops the watch; the iteration then ends without an error. */
  signal?: AbortSignal;
}

/** Opens one stream from `startRevision`; a failure is thrown from the iteration. */
export type OpenStream = (startRevision: bigint) => AsyncIterable<LeaseEvent>;

/**
 * Yields the events of streams opened by `open`, reconnecting as
 * {@link ResumeOptions} says. Errors thrown by `open`'s iteration are
 * converted with `toError`.
 */
export async function* resumingWatch(
  open: OpenStream,
  toError: (err: unknown) => TenureError,
  options: ResumeOptions = {},
): AsyncGenerator<LeaseEvent, void, undefined> {
  const { signal } = options;
  const minBackoff = options.minBackoffMs ?? 100;
  const maxBackoff = Math.max(minBackoff, options.maxBackoffMs ?? 5000);
  let last = options.startRevision ?? 0n;
  let backoff = minBackoff;
  for (;;) {
    if (signal?.aborted) return;
    const start = last;
    let error: TenureError | undefined;
    try {
      for await (const event of open(start)) {
        if (event.type === EventType.SNAPSHOT_COMPLETE) {
          backoff = minBackoff; // connected and caught up
          if (event.revision > last) last = event.revision;
        } else {
          // A resumed stream sends only changes after `start`; a server
          // without resume sends its snapshot again: skip what was delivered.
          if (start !== 0n && event.revision <= start) continue;
          if (event.revision > last) last = event.revision;
        }
        yield event;
      }
    } catch (err) {
      if (signal?.aborted) return;
      error = toError(err);
    }
    if (signal?.aborted) return;
    if (options.reconnect === false) {
      if (error !== undefined) throw error;
      return;
    }
    if (error?.reason === ErrorReason.WATCH_HISTORY_COMPACTED && start !== 0n) {
      last = 0n;
      options.onResync?.(error);
      continue;
    }
    if (error !== undefined && !error.retryable) throw error;
    const delayMs = jittered(backoff);
    options.onReconnect?.({ error, startRevision: last, delayMs });
    try {
      await sleep(delayMs, undefined, { signal });
    } catch {
      return; // aborted while waiting
    }
    backoff = Math.min(maxBackoff, backoff * 2);
  }
}
