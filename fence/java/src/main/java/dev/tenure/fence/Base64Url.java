package dev.tenure.fence;

import java.util.Base64;

/**
 * Strict base64url without padding (RFC 4648 section 5), the text form of proofs and keyset
 * keys.
 *
 * <p>The JDK's URL decoder alone is lenient: it accepts padding and ignores the unused low bits
 * of the last character, so several texts would decode to the same bytes. Here a text decodes only
 * if it uses the URL alphabet, has no padding, and is the one canonical encoding of its bytes: the
 * same texts the Rust reference accepts.
 */
final class Base64Url {
  private static final Base64.Decoder DECODER = Base64.getUrlDecoder();
  private static final Base64.Encoder ENCODER = Base64.getUrlEncoder().withoutPadding();

  private Base64Url() {}

  /**
   * Decodes {@code text}. Callers bound its length first.
   *
   * @return the bytes, or null when {@code text} is not canonical base64url without padding
   */
  static byte[] decode(String text) {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      boolean alphabet =
          (c >= 'A' && c <= 'Z')
              || (c >= 'a' && c <= 'z')
              || (c >= '0' && c <= '9')
              || c == '-'
              || c == '_';
      if (!alphabet) {
        return null;
      }
    }
    byte[] bytes;
    try {
      bytes = DECODER.decode(text);
    } catch (IllegalArgumentException e) {
      // A length of 4n + 1 characters: no byte string encodes to it.
      return null;
    }
    // Non-zero unused bits in the last character decode too; only the canonical text is accepted.
    return ENCODER.encodeToString(bytes).equals(text) ? bytes : null;
  }

  /** The text form of {@code bytes}. */
  static String encode(byte[] bytes) {
    return ENCODER.encodeToString(bytes);
  }
}
