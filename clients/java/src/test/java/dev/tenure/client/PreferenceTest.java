package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

/** The election preference's checks, without a server (ElectionTest has the hand-over). */
class PreferenceTest {
  @Test
  void theAcquireOptionTakesZeroOrAPositivePreferenceForAPlainLease() {
    assertEquals(0, AcquireOptions.builder("n", "h").build().getPreference());
    assertEquals(7, AcquireOptions.builder("n", "h").preference(7).build().getPreference());
    assertThrows(
        IllegalArgumentException.class, () -> AcquireOptions.builder("n", "h").preference(-1));
    assertThrows(
        IllegalArgumentException.class,
        () -> AcquireOptions.builder("n", "h").preference(1).limit(2).build());
    assertThrows(
        IllegalArgumentException.class,
        () -> AcquireOptions.groupBuilder(List.of("a", "b"), "h").preference(1).build());
  }

  @Test
  void aCandidateOutranksOnlyAStrictlySmallerPreference() {
    assertTrue(new Election.Candidate("x", 2).outranks(1));
    assertTrue(new Election.Candidate("x", 1).outranks(0));
    assertFalse(new Election.Candidate("x", 2).outranks(2));
    assertFalse(new Election.Candidate("x", 1).outranks(2));
    assertFalse(Election.Candidate.NONE.outranks(0));
    // uint32 preferences above 2^31 - 1 arrive as negative ints: compared unsigned.
    assertTrue(new Election.Candidate("x", -1).outranks(Integer.MAX_VALUE));
  }
}
