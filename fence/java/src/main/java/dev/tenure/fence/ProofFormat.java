package dev.tenure.fence;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The fence proof byte format, version 1 ({@code docs/fencing.md}), and its text form. Every
 * integer is unsigned big-endian:
 *
 * <pre>
 * offset  bytes  field
 * 0       1      version: 1
 * 1       8      key id: the first 8 bytes of SHA-256 of the signer's 32-byte Ed25519 public key
 * 9       8      fencing token
 * 17      4      slot
 * 21      8      granted at, Unix milliseconds
 * 29      4      TTL granted, whole seconds
 * 33      1 + n  bucket: length, then UTF-8 bytes (1 to 255)
 *         1 + n  lease name: length, then UTF-8 bytes (1 to 255)
 *         2 + n  holder: length, then UTF-8 bytes (0 to 1024)
 * end-64  64     Ed25519 signature over SIGNING_CONTEXT followed by every byte before it
 * </pre>
 *
 * <p>This class splits a proof and checks its shape (steps 1 to 3 of the verification order);
 * {@link Keyset} checks the key and the signature (steps 4 and 5).
 */
final class ProofFormat {
  /** The format version this verifier reads. */
  static final int VERSION = 1;

  /**
   * Signed before the proof bytes, so that a signature made for anything else with the same key
   * can never pass as a proof.
   */
  static final byte[] SIGNING_CONTEXT = "tenure-fence/v1".getBytes(StandardCharsets.US_ASCII);

  /** The longest proof read (the longest valid one is 1,635 bytes). */
  static final int MAX_PROOF_BYTES = 2048;

  /** Bytes before the variable-length fields. */
  private static final int FIXED = 33;

  /** An Ed25519 signature's length. */
  static final int SIGNATURE_BYTES = 64;

  /** The shortest proof: one-byte bucket and name, empty holder. */
  static final int MIN_PROOF_BYTES = FIXED + 1 + 1 + 1 + 1 + 2 + SIGNATURE_BYTES;

  /** The longest text form: longer text is refused before decoding. */
  static final int MAX_TEXT_CHARS = (MAX_PROOF_BYTES + 2) / 3 * 4;

  /** The longest holder a proof carries. */
  private static final int MAX_HOLDER = 1024;

  private ProofFormat() {}

  /**
   * A proof split into its parts, before its key and signature are checked.
   *
   * @param keyId the signing key's id
   * @param fence the statement
   * @param signed the signed bytes: the statement, without the context
   * @param signature the signature
   */
  record Parsed(byte[] keyId, Fence fence, byte[] signed, byte[] signature) {}

  /**
   * The bytes of a proof's text form: step 1 of the verification order.
   *
   * @throws FenceException {@code malformed} when the text is longer than any proof or not
   *     base64url without padding
   */
  static byte[] fromText(String text) throws FenceException {
    if (text.length() > MAX_TEXT_CHARS) {
      throw FenceException.malformed("longer than any proof");
    }
    byte[] bytes = Base64Url.decode(text);
    if (bytes == null) {
      throw FenceException.malformed("not base64url without padding");
    }
    return bytes;
  }

  /**
   * Splits a proof's bytes; checks lengths, version, field bounds and UTF-8, not the key or the
   * signature (steps 1 to 3 of the verification order, in that order).
   *
   * @throws FenceException {@code malformed} or {@code unsupported_version}
   */
  static Parsed parse(byte[] bytes) throws FenceException {
    if (bytes.length > MAX_PROOF_BYTES) {
      throw FenceException.malformed("longer than any proof");
    }
    if (bytes.length < MIN_PROOF_BYTES) {
      throw FenceException.malformed("shorter than any proof");
    }
    int version = bytes[0] & 0xff;
    if (version != VERSION) {
      throw FenceException.unsupportedVersion(version);
    }
    byte[] signed = Arrays.copyOf(bytes, bytes.length - SIGNATURE_BYTES);
    byte[] signature = Arrays.copyOfRange(bytes, signed.length, bytes.length);
    // The fixed fields fit: the statement is at least MIN_PROOF_BYTES - 64 = 39 bytes.
    ByteBuffer in = ByteBuffer.wrap(signed);
    in.position(1);
    byte[] keyId = take(in, 8);
    long token = in.getLong();
    long slot = Integer.toUnsignedLong(in.getInt());
    long grantedAtMs = in.getLong();
    long ttlSeconds = Integer.toUnsignedLong(in.getInt());
    String bucket = text(in, Byte.toUnsignedInt(take(in, 1)[0]));
    String name = text(in, Byte.toUnsignedInt(take(in, 1)[0]));
    byte[] holderLength = take(in, 2);
    int n = ((holderLength[0] & 0xff) << 8) | (holderLength[1] & 0xff);
    if (n > MAX_HOLDER) {
      throw FenceException.malformed("holder longer than 1024 bytes");
    }
    String holder = text(in, n);
    if (in.hasRemaining()) {
      throw FenceException.malformed("bytes after the holder");
    }
    if (bucket.isEmpty() || name.isEmpty()) {
      throw FenceException.malformed("empty bucket or name");
    }
    Fence fence = new Fence(bucket, name, slot, token, grantedAtMs, ttlSeconds, holder);
    return new Parsed(keyId, fence, signed, signature);
  }

  /** The next {@code n} bytes, or {@code malformed} when the statement ends first. */
  private static byte[] take(ByteBuffer in, int n) throws FenceException {
    if (in.remaining() < n) {
      throw FenceException.malformed("a field runs past the signature");
    }
    byte[] out = new byte[n];
    in.get(out);
    return out;
  }

  /** The next {@code n} bytes as strict UTF-8 (invalid sequences refused, never replaced). */
  private static String text(ByteBuffer in, int n) throws FenceException {
    byte[] raw = take(in, n);
    try {
      return StandardCharsets.UTF_8
          .newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(raw))
          .toString();
    } catch (CharacterCodingException e) {
      throw FenceException.malformed("a text field is not UTF-8");
    }
  }
}
