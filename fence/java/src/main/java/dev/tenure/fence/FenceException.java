package dev.tenure.fence;

/**
 * Why a fence proof was refused. {@link #kind()} is one of four names, the same in every
 * language's verifier, in the shared test vectors and (upper-cased, after {@code FENCE_}) in the
 * HTTP middleware's 409 bodies: {@value #MALFORMED}, {@value #UNSUPPORTED_VERSION}, {@value
 * #UNKNOWN_KEY}, {@value #BAD_SIGNATURE}. The message is one line a person can act on.
 *
 * <p>It is a checked exception: a refused proof is an expected outcome a store must handle (by
 * refusing the write), not a bug.
 */
public final class FenceException extends Exception {
  private static final long serialVersionUID = 1L;

  /** Not a proof: bad base64url, wrong lengths, bad UTF-8, an empty name. */
  public static final String MALFORMED = "malformed";

  /** A format version this verifier does not read. */
  public static final String UNSUPPORTED_VERSION = "unsupported_version";

  /** Signed by a key the store has not pinned. */
  public static final String UNKNOWN_KEY = "unknown_key";

  /** The signature does not match the statement: the proof was altered or forged. */
  public static final String BAD_SIGNATURE = "bad_signature";

  /** One of the four kind names. */
  private final String kind;

  private FenceException(String kind, String message) {
    super(message);
    this.kind = kind;
  }

  /** A text or byte string that is not a proof; {@code detail} says what is wrong. */
  static FenceException malformed(String detail) {
    return new FenceException(MALFORMED, "malformed fence proof: " + detail);
  }

  /** A proof whose first byte is not a version this verifier reads. */
  static FenceException unsupportedVersion(int version) {
    return new FenceException(
        UNSUPPORTED_VERSION,
        "fence proof version " + version + " is not supported (this verifier reads version 1)");
  }

  /** A proof naming a key id that is not pinned. */
  static FenceException unknownKey(String keyId) {
    return new FenceException(
        UNKNOWN_KEY,
        "fence proof signed by unknown key "
            + keyId
            + ": refresh the pinned keys from `tenure fence-keys`");
  }

  /** A proof whose signature does not verify. */
  static FenceException badSignature() {
    return new FenceException(
        BAD_SIGNATURE, "fence proof signature does not verify: the proof was altered or forged");
  }

  /**
   * The kind of refusal, as the shared test vectors name it.
   *
   * @return {@code "malformed"}, {@code "unsupported_version"}, {@code "unknown_key"} or {@code
   *     "bad_signature"}
   */
  public String kind() {
    return kind;
  }
}
