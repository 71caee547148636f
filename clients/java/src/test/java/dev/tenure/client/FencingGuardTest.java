package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.OptionalLong;
import org.junit.jupiter.api.Test;

/** The in-memory fencing check. */
class FencingGuardTest {
  @Test
  void acceptsEqualOrGreaterTokensPerResource() {
    FencingGuard guard = new FencingGuard();
    assertEquals(OptionalLong.empty(), guard.highest("a"));
    assertTrue(guard.accept("a", 5));
    assertTrue(guard.accept("a", 5), "the same holder writes again");
    assertTrue(guard.accept("a", 9));
    assertFalse(guard.accept("a", 5), "a stale holder is rejected");
    assertEquals(OptionalLong.of(9), guard.highest("a"));
    assertTrue(guard.accept("b", 1), "resources are independent");
  }
}
