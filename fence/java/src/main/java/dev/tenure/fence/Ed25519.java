package dev.tenure.fence;

import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.Signature;
import java.security.spec.X509EncodedKeySpec;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

/**
 * Strict Ed25519 verification on the JDK's own implementation (Java 15+).
 *
 * <p>The JDK verifies RFC 8032 signatures and refuses a non-canonical {@code S} ({@code S >= L}),
 * a public key off the curve and a non-canonical point encoding. It accepts small-order points,
 * which the Rust reference ({@code ed25519-dalek}'s {@code verify_strict}) refuses; this class
 * refuses them too, as a public key and as a signature's {@code R}, so that every language accepts
 * exactly the same proofs.
 */
final class Ed25519 {
  /** The DER prefix of an X.509 SubjectPublicKeyInfo for Ed25519, before the raw 32 bytes. */
  private static final byte[] X509_PREFIX = HexFormat.of().parseHex("302a300506032b6570032100");

  /** A raw public key's length. */
  static final int PUBLIC_KEY_BYTES = 32;

  /**
   * The canonical encodings of the eight points of order dividing 8. The JDK refuses every
   * non-canonical encoding, so these are all the small-order points it would accept.
   */
  private static final List<byte[]> SMALL_ORDER =
      List.of(
          hex("0100000000000000000000000000000000000000000000000000000000000000"),
          hex("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
          hex("0000000000000000000000000000000000000000000000000000000000000000"),
          hex("0000000000000000000000000000000000000000000000000000000000000080"),
          hex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"),
          hex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85"),
          hex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"),
          hex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa"));

  private Ed25519() {}

  /**
   * A verifying key from its raw 32 bytes, checked now rather than at the first proof.
   *
   * @throws IllegalArgumentException when the bytes are not a point of the curve in canonical
   *     form, or a small-order (weak) point no signing key has
   */
  static PublicKey publicKey(byte[] raw) {
    if (raw.length != PUBLIC_KEY_BYTES) {
      throw new IllegalArgumentException("an Ed25519 public key is 32 bytes");
    }
    if (isSmallOrder(raw)) {
      throw new IllegalArgumentException("a small-order Ed25519 point, never a signing key");
    }
    byte[] der = Arrays.copyOf(X509_PREFIX, X509_PREFIX.length + raw.length);
    System.arraycopy(raw, 0, der, X509_PREFIX.length, raw.length);
    try {
      PublicKey key = KeyFactory.getInstance("Ed25519").generatePublic(new X509EncodedKeySpec(der));
      // The JDK decodes the point when a verification starts: do it now.
      Signature.getInstance("Ed25519").initVerify(key);
      return key;
    } catch (GeneralSecurityException e) {
      throw new IllegalArgumentException("not a valid Ed25519 public key (" + e.getMessage() + ")");
    }
  }

  /**
   * Whether {@code signature} is {@code key}'s strict Ed25519 signature of {@code message}.
   *
   * @return false for every signature that does not verify, including malformed ones
   */
  static boolean verify(PublicKey key, byte[] message, byte[] signature) {
    if (signature.length != 64 || isSmallOrder(Arrays.copyOf(signature, 32))) {
      return false;
    }
    try {
      Signature verifier = Signature.getInstance("Ed25519");
      verifier.initVerify(key);
      verifier.update(message);
      return verifier.verify(signature);
    } catch (GeneralSecurityException e) {
      // The JDK throws for an S that is not below the group order and for an R off the curve.
      return false;
    }
  }

  /** Whether {@code encoded} is the canonical encoding of a point of order dividing 8. */
  private static boolean isSmallOrder(byte[] encoded) {
    for (byte[] point : SMALL_ORDER) {
      if (Arrays.equals(point, encoded)) {
        return true;
      }
    }
    return false;
  }

  private static byte[] hex(String text) {
    return HexFormat.of().parseHex(text);
  }
}
