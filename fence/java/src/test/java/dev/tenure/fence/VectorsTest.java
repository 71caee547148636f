package dev.tenure.fence;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.DynamicTest.dynamicTest;

import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Every case of the shared vectors {@code fence/vectors/v1.json}: the valid proofs verify (text
 * and bytes) and state exactly their {@code fence}; every invalid text is refused with exactly its
 * {@code error} kind. A missing file fails the class.
 */
class VectorsTest {
  private static Vectors vectors;
  private static Keyset keyset;

  @BeforeAll
  static void load() throws Exception {
    vectors = Vectors.load();
    keyset = Keyset.parse(vectors.keyset());
  }

  @Test
  void theFileHasEveryKindOfCase() {
    assertFalse(vectors.valid().isEmpty(), "no valid vectors");
    Set<String> kinds =
        vectors.invalid().stream().map(Vectors.Invalid::error).collect(Collectors.toSet());
    assertEquals(
        Set.of("malformed", "unsupported_version", "unknown_key", "bad_signature"), kinds);
    assertTrue(
        vectors.valid().stream().anyMatch(v -> v.fence().token() == -1L),
        "a valid vector states the token 2^64 - 1");
  }

  @Test
  void theKeysetPinsExactlyThePinnedKeys() {
    List<String> pinned =
        vectors.keys().stream().filter(Vectors.Key::pinned).map(Vectors.Key::keyId).toList();
    assertEquals(pinned, keyset.keyIds());
    for (Vectors.Key key : vectors.keys()) {
      assertEquals(key.keyId(), Keyset.keyId(key.publicKey()), key.name());
    }
  }

  @TestFactory
  Stream<DynamicTest> validProofsVerifyAndStateTheirFence() {
    return vectors.valid().stream()
        .map(
            v ->
                dynamicTest(
                    v.about(),
                    () -> {
                      Verified fromText = keyset.verifyText(v.proofText());
                      assertEquals(new Verified(v.fence(), v.keyId()), fromText);
                      assertEquals(fromText, keyset.verify(v.proofBytes()));
                      assertEquals(v.proofText(), Base64Url.encode(v.proofBytes()));
                      assertTrue(fromText.isFor(v.fence().name()));
                    }));
  }

  @TestFactory
  Stream<DynamicTest> theTestSignerReproducesEveryValidProof() {
    return vectors.valid().stream()
        .map(
            v ->
                dynamicTest(
                    v.about(),
                    () -> {
                      Vectors.Key key =
                          vectors.keys().stream()
                              .filter(k -> k.keyId().equals(v.keyId()))
                              .findFirst()
                              .orElseThrow();
                      assertArrayEquals(v.proofBytes(), new TestSigner(key).sign(v.fence()));
                    }));
  }

  @TestFactory
  Stream<DynamicTest> invalidTextsAreRefusedWithTheirKind() {
    return vectors.invalid().stream()
        .map(
            i ->
                dynamicTest(
                    i.error() + ": " + i.about(),
                    () -> {
                      FenceException e =
                          assertThrows(
                              FenceException.class, () -> keyset.verifyText(i.proofText()));
                      assertEquals(i.error(), e.kind(), e.getMessage());
                    }));
  }
}
