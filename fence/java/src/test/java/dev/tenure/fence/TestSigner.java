package dev.tenure.fence;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.Signature;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Arrays;
import java.util.HexFormat;

/**
 * Signs fence proofs in the tests, as Tenure does, with the JDK's Ed25519 and a test seed of the
 * vectors (the Java artifact verifies only; Tenure holds the signing key). Ed25519 signatures are
 * deterministic, so re-signing a vector's statement reproduces its bytes exactly.
 */
final class TestSigner {
  /** The DER prefix of a PKCS#8 Ed25519 private key, before the 32-byte seed. */
  private static final byte[] PKCS8_PREFIX =
      HexFormat.of().parseHex("302e020100300506032b657004220420");

  private final PrivateKey key;
  private final byte[] keyId;

  /** A signer of test key {@code key} of the vectors. */
  TestSigner(Vectors.Key key) {
    try {
      byte[] der = Arrays.copyOf(PKCS8_PREFIX, PKCS8_PREFIX.length + key.seed().length);
      System.arraycopy(key.seed(), 0, der, PKCS8_PREFIX.length, key.seed().length);
      this.key = KeyFactory.getInstance("Ed25519").generatePrivate(new PKCS8EncodedKeySpec(der));
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException(e);
    }
    this.keyId = HexFormat.of().parseHex(Keyset.keyId(key.publicKey()));
  }

  /** The proof of {@code fence}, bytes. */
  byte[] sign(Fence fence) {
    return sign(fence, keyId);
  }

  /** The proof of {@code fence}, text form. */
  String signText(Fence fence) {
    return Base64Url.encode(sign(fence));
  }

  /** A proof of {@code fence} naming key id {@code keyId}, whatever key this signer has. */
  byte[] sign(Fence fence, byte[] keyId) {
    byte[] statement = statement(fence, keyId);
    byte[] signature = signRaw(concat(ProofFormat.SIGNING_CONTEXT, statement));
    return concat(statement, signature);
  }

  /** The plain Ed25519 signature of {@code message}. */
  byte[] signRaw(byte[] message) {
    try {
      Signature signer = Signature.getInstance("Ed25519");
      signer.initSign(key);
      signer.update(message);
      return signer.sign();
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException(e);
    }
  }

  /** The statement bytes of format version 1 (docs/fencing.md), without the signature. */
  static byte[] statement(Fence fence, byte[] keyId) {
    byte[] bucket = fence.bucket().getBytes(StandardCharsets.UTF_8);
    byte[] name = fence.name().getBytes(StandardCharsets.UTF_8);
    byte[] holder = fence.holder().getBytes(StandardCharsets.UTF_8);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(1);
    out.writeBytes(keyId);
    out.writeBytes(ByteBuffer.allocate(8).putLong(fence.token()).array());
    out.writeBytes(ByteBuffer.allocate(4).putInt((int) fence.slot()).array());
    out.writeBytes(ByteBuffer.allocate(8).putLong(fence.grantedAtMs()).array());
    out.writeBytes(ByteBuffer.allocate(4).putInt((int) fence.ttlSeconds()).array());
    out.write(bucket.length);
    out.writeBytes(bucket);
    out.write(name.length);
    out.writeBytes(name);
    out.writeBytes(ByteBuffer.allocate(2).putShort((short) holder.length).array());
    out.writeBytes(holder);
    return out.toByteArray();
  }

  /** {@code a} followed by {@code b}. */
  static byte[] concat(byte[] a, byte[] b) {
    byte[] out = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }
}
