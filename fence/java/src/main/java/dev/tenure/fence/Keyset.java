package dev.tenure.fence;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.PublicKey;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;

/**
 * The Tenure public keys a store accepts fence proofs from, and the verifier.
 *
 * <p>The text form is what {@code tenure fence-keys} prints and the {@code GetFenceKeys} RPC
 * returns as {@code keyset}: one public key per line, its 32 bytes in base64url without padding,
 * {@code #} starting a comment. Keep the older keys of a rotation in it until their proofs are no
 * longer in use. A key's id is derived from the key (the first 8 bytes of its SHA-256), never
 * configured, so a keyset cannot name a key wrongly.
 *
 * <pre>{@code
 * Keyset keys = Keyset.parse(Files.readString(Path.of("/etc/store/tenure-fence-keys")));
 * Verified v = keys.verifyText(request.getHeader("Tenure-Fence")); // throws FenceException
 * if (!v.isFor("orders")) { ... refuse: a proof for another lease name ... }
 * // then: accept v.fence().token() if it is not lower (unsigned) than the highest seen
 * }</pre>
 *
 * <p>Immutable and thread-safe. A verification takes tens of microseconds and calls nothing.
 */
public final class Keyset {
  /** The longest keyset line read (a key is 43 characters; the rest is comment and spaces). */
  private static final int MAX_LINE_CHARS = 4096;

  /** Every pinned key, in the order of the text. */
  private final List<Key> keys;

  /**
   * One pinned key.
   *
   * @param id its id, 8 bytes
   * @param idText its id, 16 hex digits
   * @param key the verifying key
   */
  private record Key(byte[] id, String idText, PublicKey key) {}

  private Keyset(List<Key> keys) {
    this.keys = List.copyOf(keys);
  }

  /**
   * A keyset from its text form. Blank lines and comments are skipped; a key listed twice is
   * pinned once.
   *
   * @param text the keyset text ({@code tenure fence-keys}, or {@code GetFenceKeysResponse.keyset})
   * @return the keyset
   * @throws IllegalArgumentException naming the line, when a line is not a valid Ed25519 public
   *     key in base64url without padding, or when there is no key at all
   */
  public static Keyset parse(String text) {
    Objects.requireNonNull(text, "text");
    List<Key> keys = new ArrayList<>();
    int number = 0;
    for (Iterator<String> lines = text.lines().iterator(); lines.hasNext(); ) {
      String line = lines.next();
      number++;
      if (line.length() > MAX_LINE_CHARS) {
        throw new IllegalArgumentException(
            "keyset line " + number + ": longer than " + MAX_LINE_CHARS + " characters");
      }
      int comment = line.indexOf('#');
      String field = (comment < 0 ? line : line.substring(0, comment)).strip();
      if (field.isEmpty()) {
        continue;
      }
      byte[] raw = Base64Url.decode(field);
      if (raw == null) {
        throw new IllegalArgumentException(
            "keyset line " + number + ": not base64url without padding");
      }
      if (raw.length != Ed25519.PUBLIC_KEY_BYTES) {
        throw new IllegalArgumentException(
            "keyset line " + number + ": an Ed25519 public key is 32 bytes, not " + raw.length);
      }
      PublicKey key;
      try {
        key = Ed25519.publicKey(raw);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("keyset line " + number + ": " + e.getMessage(), e);
      }
      byte[] id = keyIdBytes(raw);
      if (keys.stream().noneMatch(k -> Arrays.equals(k.id(), id))) {
        keys.add(new Key(id, HexFormat.of().formatHex(id), key));
      }
    }
    if (keys.isEmpty()) {
      throw new IllegalArgumentException(
          "the keyset has no key: pin the output of `tenure fence-keys`");
    }
    return new Keyset(keys);
  }

  /**
   * The id proofs name a public key by: the first 8 bytes of SHA-256 of its 32 bytes.
   *
   * @param publicKey a raw 32-byte Ed25519 public key
   * @return the id as 16 lower-case hex digits
   * @throws IllegalArgumentException when {@code publicKey} is not 32 bytes
   */
  public static String keyId(byte[] publicKey) {
    if (publicKey.length != Ed25519.PUBLIC_KEY_BYTES) {
      throw new IllegalArgumentException("an Ed25519 public key is 32 bytes");
    }
    return HexFormat.of().formatHex(keyIdBytes(publicKey));
  }

  /**
   * The ids of the pinned keys, in the order of the text.
   *
   * @return 16 lower-case hex digits each
   */
  public List<String> keyIds() {
    return keys.stream().map(Key::idText).toList();
  }

  /**
   * Verifies a proof's bytes, in the order of {@code docs/fencing.md}: lengths (103 to 2,048
   * bytes), version, fields, a pinned key, the signature (strict Ed25519). It does not check the
   * lease name or the token: see {@link Verified#isFor(String)}.
   *
   * @param proof the proof bytes ({@code Lease.fence_proof})
   * @return what the proof states, and which key signed it
   * @throws FenceException at the first failed step, with its {@link FenceException#kind()}
   */
  public Verified verify(byte[] proof) throws FenceException {
    Objects.requireNonNull(proof, "proof");
    ProofFormat.Parsed parsed = ProofFormat.parse(proof);
    Key key = null;
    for (Key k : keys) {
      if (Arrays.equals(k.id(), parsed.keyId())) {
        key = k;
        break;
      }
    }
    if (key == null) {
      throw FenceException.unknownKey(HexFormat.of().formatHex(parsed.keyId()));
    }
    byte[] context = ProofFormat.SIGNING_CONTEXT;
    byte[] message = Arrays.copyOf(context, context.length + parsed.signed().length);
    System.arraycopy(parsed.signed(), 0, message, context.length, parsed.signed().length);
    if (!Ed25519.verify(key.key(), message, parsed.signature())) {
      throw FenceException.badSignature();
    }
    return new Verified(parsed.fence(), key.idText());
  }

  /**
   * Verifies a proof's text form (the {@code Tenure-Fence} header): base64url without padding,
   * at most 2,732 characters (longer text is refused before decoding), then as {@link
   * #verify(byte[])}.
   *
   * @param proofText the text form
   * @return what the proof states, and which key signed it
   * @throws FenceException at the first failed step, with its {@link FenceException#kind()}
   */
  public Verified verifyText(String proofText) throws FenceException {
    Objects.requireNonNull(proofText, "proofText");
    return verify(ProofFormat.fromText(proofText));
  }

  @Override
  public String toString() {
    return "Keyset" + keyIds();
  }

  private static byte[] keyIdBytes(byte[] publicKey) {
    try {
      return Arrays.copyOf(MessageDigest.getInstance("SHA-256").digest(publicKey), 8);
    } catch (NoSuchAlgorithmException e) {
      // Every Java platform has SHA-256 (java.security.MessageDigest's required algorithms).
      throw new IllegalStateException("this JVM has no SHA-256", e);
    }
  }
}
