/**
 * Conversions between milliseconds and `google.protobuf.Duration`.
 * @internal
 */
import type { Duration } from "./gen/google/protobuf/duration";

/** A non-negative millisecond count as a Duration. */
export function msToDuration(ms: number): Duration {
  if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`invalid duration ${ms} ms`);
  const nanos = BigInt(Math.round(ms * 1_000_000));
  return { seconds: nanos / 1_000_000_000n, nanos: Number(nanos % 1_000_000_000n) };
}

/** A Duration in milliseconds (0 when absent). */
export function durationToMs(d: Duration | undefined): number {
  if (d === undefined) return 0;
  return Number(d.seconds) * 1000 + d.nanos / 1_000_000;
}
