package dev.tenure.fence;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.Base64;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The verifier beyond the shared vectors: the keyset text form, the order of the checks, and the
 * strictness the JDK alone lacks (canonical base64url, small-order signature points), so that Java
 * accepts exactly the proofs the Rust reference accepts.
 */
class KeysetTest {
  /** The order of the Ed25519 base point. */
  private static final BigInteger L =
      BigInteger.ONE.shiftLeft(252).add(new BigInteger("27742317777372353535851937790883648493"));

  private static Vectors vectors;
  private static Keyset keyset;
  private static TestSigner active;
  private static TestSigner stranger;

  @BeforeAll
  static void load() throws Exception {
    vectors = Vectors.load();
    keyset = Keyset.parse(vectors.keyset());
    active = new TestSigner(vectors.key("active"));
    stranger = new TestSigner(vectors.key("stranger"));
  }

  private static Fence fence(String name, long token, String holder) {
    return new Fence("tenure", name, 0, token, 1_767_225_600_123L, 10, holder);
  }

  private static String kindOf(byte[] proof) {
    return assertThrows(FenceException.class, () -> keyset.verify(proof)).kind();
  }

  private static String kindOf(String text) {
    return assertThrows(FenceException.class, () -> keyset.verifyText(text)).kind();
  }

  @Test
  void parseSkipsCommentsAndBlankLinesAndPinsARepeatedKeyOnce() {
    String a = Base64Url.encode(vectors.key("active").publicKey());
    String b = Base64Url.encode(vectors.key("older").publicKey());
    Keyset parsed = Keyset.parse("# keys\r\n\r\n  " + a + "  # active\r\n" + b + "\n" + a + "\n");
    assertEquals(
        List.of(vectors.key("active").keyId(), vectors.key("older").keyId()), parsed.keyIds());
  }

  @Test
  void parseRefusesTextThatPinsNothingOrIsNotAKey() {
    assertEquals(
        "the keyset has no key: pin the output of `tenure fence-keys`",
        assertThrows(IllegalArgumentException.class, () -> Keyset.parse("# nothing\n\n"))
            .getMessage());
    String a = Base64Url.encode(vectors.key("active").publicKey());
    assertEquals(
        "keyset line 2: not base64url without padding",
        assertThrows(IllegalArgumentException.class, () -> Keyset.parse(a + "\n" + a + "=\n"))
            .getMessage());
    assertEquals(
        "keyset line 1: an Ed25519 public key is 32 bytes, not 31",
        assertThrows(
                IllegalArgumentException.class, () -> Keyset.parse(Base64Url.encode(new byte[31])))
            .getMessage());
    assertTrue(
        assertThrows(IllegalArgumentException.class, () -> Keyset.parse("x".repeat(5000)))
            .getMessage()
            .startsWith("keyset line 1: longer than"));
  }

  @Test
  void parseRefusesPointsThatAreNoSigningKey() {
    HexFormat hex = HexFormat.of();
    for (String bad :
        List.of(
            // Not on the curve.
            "0200000000000000000000000000000000000000000000000000000000000000",
            // y = p + 1: a non-canonical encoding.
            "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
            // Small order: the identity and a point of order 8 (every signature "verifies").
            "0100000000000000000000000000000000000000000000000000000000000000",
            "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")) {
      String text = Base64Url.encode(hex.parseHex(bad));
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> Keyset.parse(text), bad);
      assertTrue(e.getMessage().startsWith("keyset line 1: "), e.getMessage());
    }
  }

  @Test
  void keyIdIsTheFirstEightBytesOfSha256() throws Exception {
    byte[] key = vectors.key("older").publicKey();
    byte[] digest = MessageDigest.getInstance("SHA-256").digest(key);
    assertEquals(HexFormat.of().formatHex(digest, 0, 8), Keyset.keyId(key));
    assertEquals("6a3803d5f059902a", Keyset.keyId(key));
  }

  @Test
  void lengthIsCheckedBeforeTheVersion() {
    byte[] proof = active.sign(new Fence("t", "a", 0, 1, 0, 1, ""));
    assertEquals(103, proof.length, "the shortest proof");
    proof[0] = 2;
    assertEquals("unsupported_version", kindOf(proof));
    assertEquals("malformed", kindOf(Arrays.copyOf(proof, 102)));
    assertEquals("malformed", kindOf(new byte[2049]));
  }

  @Test
  void theTextMustBeTheCanonicalBase64urlOfItsBytes() throws Exception {
    String text = active.signText(fence("orders", 42, "worker-1"));
    assertEquals(162, text.length(), "121 bytes: the last character has 4 unused bits");
    keyset.verifyText(text);
    // The JDK's decoder alone ignores unused bits: "…A" and "…B" decode to the same bytes.
    char last = text.charAt(text.length() - 1);
    String unusedBitsSet = text.substring(0, text.length() - 1) + (char) (last + 1);
    assertArrayEquals(
        Base64.getUrlDecoder().decode(text), Base64.getUrlDecoder().decode(unusedBitsSet));
    assertEquals("malformed", kindOf(unusedBitsSet));
    assertEquals("malformed", kindOf(text + "\n"));
    assertEquals("malformed", kindOf(" " + text));
    assertEquals("malformed", kindOf(text.substring(0, 161)));
  }

  @Test
  void fieldsAreCheckedBeforeTheKeyAndTheKeyBeforeTheSignature() {
    // Signed by a pinned key, but the holder is over 1,024 bytes: malformed.
    assertEquals("malformed", kindOf(active.sign(fence("orders", 1, "h".repeat(1025)))));
    // Signed by a pinned key, but the holder is not UTF-8: malformed.
    byte[] statement = TestSigner.statement(fence("orders", 1, "ab"), idOf("active"));
    statement[statement.length - 1] = (byte) 0xff;
    byte[] signature =
        active.signRaw(TestSigner.concat(ProofFormat.SIGNING_CONTEXT, statement));
    assertEquals("malformed", kindOf(TestSigner.concat(statement, signature)));
    // An unpinned key with a junk signature: unknown_key, not bad_signature.
    byte[] foreign = stranger.sign(fence("orders", 1, "x"));
    Arrays.fill(foreign, foreign.length - 64, foreign.length, (byte) 7);
    assertEquals("unknown_key", kindOf(foreign));
    // A pinned key's id on a proof signed by another key: bad_signature.
    assertEquals("bad_signature", kindOf(stranger.sign(fence("orders", 1, "x"), idOf("active"))));
  }

  @Test
  void aHolderOfExactly1024BytesVerifies() throws Exception {
    Fence fence = fence("orders", 1, "\u00e9".repeat(512));
    assertEquals(fence, keyset.verify(active.sign(fence)).fence());
  }

  @Test
  void aSignatureWithSPlusTheGroupOrderIsRefused() throws Exception {
    byte[] proof = active.sign(fence("orders", 42, "worker-1"));
    keyset.verify(proof);
    int s = proof.length - 32;
    BigInteger bigger = littleEndian(Arrays.copyOfRange(proof, s, proof.length)).add(L);
    System.arraycopy(toLittleEndian(bigger), 0, proof, s, 32);
    assertEquals("bad_signature", kindOf(proof));
  }

  /**
   * A signature whose R is the identity (a small-order point), made by the key holder with S =
   * k·a: it satisfies the RFC 8032 equation, and the JDK alone accepts it, but the Rust
   * reference's strict verification refuses it, so this verifier must too.
   */
  @Test
  void aSignatureWithASmallOrderPointIsRefused() throws Exception {
    Vectors.Key key = vectors.key("active");
    byte[] statement = TestSigner.statement(fence("orders", 42, "worker-1"), idOf("active"));
    byte[] message = TestSigner.concat(ProofFormat.SIGNING_CONTEXT, statement);
    byte[] r = new byte[32];
    r[0] = 1;
    byte[] expanded = MessageDigest.getInstance("SHA-512").digest(key.seed());
    byte[] clamped = Arrays.copyOf(expanded, 32);
    clamped[0] &= (byte) 248;
    clamped[31] &= 127;
    clamped[31] |= 64;
    MessageDigest h = MessageDigest.getInstance("SHA-512");
    h.update(r);
    h.update(key.publicKey());
    h.update(message);
    BigInteger k = littleEndian(h.digest()).mod(L);
    BigInteger s = k.multiply(littleEndian(clamped)).mod(L);
    byte[] proof = TestSigner.concat(statement, TestSigner.concat(r, toLittleEndian(s)));
    assertEquals("bad_signature", kindOf(proof));
  }

  @Test
  void tokensAboveLongMaxValueStayUnsigned() throws Exception {
    Verified v = keyset.verify(active.sign(fence("big", -1L, "x")));
    assertEquals("18446744073709551615", v.fence().tokenText());
    assertEquals("1767225600123", v.fence().grantedAtMsText());
  }

  private static byte[] idOf(String name) {
    return HexFormat.of().parseHex(vectors.key(name).keyId());
  }

  private static BigInteger littleEndian(byte[] bytes) {
    byte[] big = new byte[bytes.length];
    for (int i = 0; i < bytes.length; i++) {
      big[i] = bytes[bytes.length - 1 - i];
    }
    return new BigInteger(1, big);
  }

  private static byte[] toLittleEndian(BigInteger value) {
    byte[] big = value.toByteArray();
    byte[] out = new byte[32];
    for (int i = 0; i < 32 && i < big.length; i++) {
      out[i] = big[big.length - 1 - i];
    }
    return out;
  }
}
