package dev.tenure.fence;

/**
 * Where {@link FenceFilter} keeps the highest fencing token it admitted per lease name.
 *
 * <p>{@link MemoryTokenStore} keeps them in memory, for one process. To fence writes across the
 * replicas of a service, or across restarts, keep them in your database and implement {@link
 * #advance} as one conditional write (for example {@code INSERT ... ON CONFLICT (name) DO UPDATE
 * SET highest = :token WHERE fence.highest <= :token}, comparing as unsigned 64-bit numbers or
 * {@code numeric}).
 */
public interface TokenStore {
  /**
   * The outcome of {@link #advance}.
   *
   * @param ok whether the token was admitted (it is not lower than the highest seen)
   * @param highest the highest token for the name after the call, unsigned: the admitted token
   *     when {@code ok}, the higher one that refused it otherwise
   */
  record Advance(boolean ok, long highest) {
    /**
     * {@link #highest()} as an unsigned decimal.
     *
     * @return the highest token, e.g. {@code "18446744073709551615"}
     */
    public String highestText() {
      return Long.toUnsignedString(highest);
    }
  }

  /**
   * Atomically admits {@code unsignedToken} for lease {@code name} if no higher token was
   * admitted for it before, and then records it as the highest. Equal tokens are admitted: one
   * holder writes many times with the same token. Tokens compare as unsigned 64-bit integers
   * ({@link Long#compareUnsigned}).
   *
   * @param name the lease name (already checked against a verified proof)
   * @param unsignedToken the verified fencing token, unsigned
   * @return whether it was admitted, and the highest token for the name after the call
   */
  Advance advance(String name, long unsignedToken);
}
