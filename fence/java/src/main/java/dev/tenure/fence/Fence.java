package dev.tenure.fence;

import java.util.Objects;

/**
 * What a fence proof states: one grant of one lease name by Tenure.
 *
 * <p>The proof carries the fencing token and the grant time as unsigned 64-bit integers and the
 * slot and TTL as unsigned 32-bit ones. Java has no unsigned {@code long}: {@link #token()} and
 * {@link #grantedAtMs()} hold the same 64 bits, so compare tokens with {@link
 * Long#compareUnsigned} and print them with {@link #tokenText()} ({@link Long#toUnsignedString});
 * a token above {@code Long.MAX_VALUE} is negative as a signed {@code long}. The 32-bit fields fit
 * a {@code long} exactly.
 *
 * @param bucket the Tenure bucket (deployment) that granted the holding
 * @param name the lease name
 * @param slot the semaphore slot; 0 for a plain lease, a group member or an election term
 * @param token the fencing token, unsigned: strictly greater for every later holder of the name
 * @param grantedAtMs when the holding was granted, Unix milliseconds on Tenure's clock, unsigned
 * @param ttlSeconds the TTL granted, whole seconds
 * @param holder who the holding was granted to (the holder the client named; may be empty)
 */
public record Fence(
    String bucket,
    String name,
    long slot,
    long token,
    long grantedAtMs,
    long ttlSeconds,
    String holder) {

  /**
   * A statement; the strings must be present, the numbers are whatever the proof states.
   *
   * @param bucket the Tenure bucket
   * @param name the lease name
   * @param slot the semaphore slot, 0 when none
   * @param token the fencing token, unsigned
   * @param grantedAtMs the grant time, Unix milliseconds, unsigned
   * @param ttlSeconds the TTL granted, seconds
   * @param holder the holder, possibly empty
   */
  public Fence {
    Objects.requireNonNull(bucket, "bucket");
    Objects.requireNonNull(name, "name");
    Objects.requireNonNull(holder, "holder");
  }

  /**
   * The fencing token as an unsigned decimal, as the {@code Tenure-Fencing-Token} header and the
   * 409 bodies write it.
   *
   * @return the token, e.g. {@code "18446744073709551615"} for the largest
   */
  public String tokenText() {
    return Long.toUnsignedString(token);
  }

  /**
   * The grant time as an unsigned decimal of Unix milliseconds.
   *
   * @return the grant time
   */
  public String grantedAtMsText() {
    return Long.toUnsignedString(grantedAtMs);
  }
}
