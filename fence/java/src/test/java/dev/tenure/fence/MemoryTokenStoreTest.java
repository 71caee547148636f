package dev.tenure.fence;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.OptionalLong;
import org.junit.jupiter.api.Test;

/** The in-memory token store: the highest token per name, compared unsigned. */
class MemoryTokenStoreTest {
  @Test
  void admitsEqualAndHigherTokensAndRefusesLowerOnes() {
    MemoryTokenStore store = new MemoryTokenStore();
    assertEquals(OptionalLong.empty(), store.highest("orders"));
    assertEquals(new TokenStore.Advance(true, 7), store.advance("orders", 7));
    assertEquals(new TokenStore.Advance(true, 7), store.advance("orders", 7));
    assertEquals(new TokenStore.Advance(true, 9), store.advance("orders", 9));
    assertEquals(new TokenStore.Advance(false, 9), store.advance("orders", 8));
    assertEquals(OptionalLong.of(9), store.highest("orders"));
    // Names are independent.
    assertEquals(new TokenStore.Advance(true, 1), store.advance("other", 1));
  }

  @Test
  void comparesTokensAsUnsigned() {
    MemoryTokenStore store = new MemoryTokenStore();
    long max = -1L; // 2^64 - 1
    long twoTo63 = Long.MIN_VALUE; // 2^63, negative as a signed long
    assertEquals(new TokenStore.Advance(true, twoTo63), store.advance("big", twoTo63));
    assertEquals(new TokenStore.Advance(false, twoTo63), store.advance("big", Long.MAX_VALUE));
    assertEquals(new TokenStore.Advance(true, max), store.advance("big", max));
    TokenStore.Advance refused = store.advance("big", twoTo63);
    assertEquals(false, refused.ok());
    assertEquals("18446744073709551615", refused.highestText());
  }
}
