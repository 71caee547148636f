package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.EventType;
import dev.tenure.v1.LeaseEvent;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The shared loss watch's filter and event rules, without a server. */
class LossWatchTest {
  @Test
  void coversEveryLiveNameWithTheNarrowestFilter() {
    assertEquals("a.b.c", LossWatch.coveringFilter(List.of("a.b.c")));
    assertEquals("a.b.>", LossWatch.coveringFilter(List.of("a.b.c", "a.b.d")));
    assertEquals("a.>", LossWatch.coveringFilter(List.of("a.b", "a.b.c")));
    assertEquals(">", LossWatch.coveringFilter(List.of("a.b", "x.y")));
    for (List<String> names : List.of(List.of("a.b.c", "a.b.d"), List.of("a.b", "a.b.c"))) {
      for (String name : names) {
        assertTrue(LossWatch.covers(LossWatch.coveringFilter(names), name), name);
      }
    }
    assertFalse(LossWatch.covers("a.b.>", "a.b"));
    assertFalse(LossWatch.covers("a.b.>", "a.bc.d"));
  }

  @Test
  void onlyLaterEndsOrOtherTokensShowLoss() {
    LeaseEvent.Builder e = LeaseEvent.newBuilder().setName("n").setRevision(9).setFencingToken(5);
    assertTrue(LossWatch.showsLoss("n", 5, e.setType(EventType.EVENT_TYPE_REVOKED).build()));
    assertTrue(LossWatch.showsLoss("n", 5, e.setType(EventType.EVENT_TYPE_EXPIRED).build()));
    assertFalse(LossWatch.showsLoss("n", 5, e.setType(EventType.EVENT_TYPE_RENEWED).build()));
    assertFalse(LossWatch.showsLoss("other", 5, e.setType(EventType.EVENT_TYPE_REVOKED).build()));
    assertTrue(
        LossWatch.showsLoss(
            "n", 5, e.setType(EventType.EVENT_TYPE_ACQUIRED).setFencingToken(9).build()));
    // An event from before this holding (e.g. the previous holder's release) is not a loss.
    assertFalse(
        LossWatch.showsLoss("n", 5, e.setType(EventType.EVENT_TYPE_RELEASED).setRevision(4).build()));
  }

  @Test
  void aMissedShowsLossOnlyForTheHoldingsOwnToken() {
    LeaseEvent.Builder e =
        LeaseEvent.newBuilder()
            .setType(EventType.EVENT_TYPE_MISSED)
            .setName("n")
            .setRevision(9)
            .setMissedAfterRevision(6);
    assertTrue(LossWatch.showsLoss("n", 5, e.setFencingToken(5).build()));
    assertFalse(LossWatch.showsLoss("n", 5, e.setFencingToken(4).build()));
    assertFalse(LossWatch.showsLoss("n", 5, e.setFencingToken(0).build()));
    assertTrue(LossWatch.showsLoss("n", 2, 5, e.setFencingToken(5).setSlot(2).build()));
    assertFalse(LossWatch.showsLoss("n", 2, 5, e.setFencingToken(5).setSlot(1).build()));
  }

  @Test
  void aSemaphoreSessionIsEndedOnlyByEventsOfItsOwnSlot() {
    LeaseEvent.Builder e =
        LeaseEvent.newBuilder().setName("s").setRevision(20).setFencingToken(7).setSlot(2);
    // Another holder (slot 1) releasing, expiring or acquiring does not end slot 2.
    assertFalse(
        LossWatch.showsLoss(
            "s", 2, 7, e.setSlot(1).setType(EventType.EVENT_TYPE_RELEASED).build()));
    assertFalse(
        LossWatch.showsLoss(
            "s", 2, 7, e.setSlot(1).setType(EventType.EVENT_TYPE_EXPIRED).build()));
    assertFalse(
        LossWatch.showsLoss(
            "s", 2, 7, e.setSlot(1).setType(EventType.EVENT_TYPE_ACQUIRED).setFencingToken(19).build()));
    // Its own slot revoked, or taken with another token, does.
    assertTrue(
        LossWatch.showsLoss(
            "s", 2, 7, e.setSlot(2).setType(EventType.EVENT_TYPE_REVOKED).setFencingToken(7).build()));
    assertTrue(
        LossWatch.showsLoss(
            "s", 2, 7, e.setSlot(2).setType(EventType.EVENT_TYPE_ACQUIRED).setFencingToken(19).build()));
    assertFalse(
        LossWatch.showsLoss(
            "s", 2, 7, e.setSlot(2).setType(EventType.EVENT_TYPE_CURRENT).setFencingToken(7).build()));
    // A plain lease ignores semaphore events of its name, and a semaphore session plain ones.
    assertFalse(
        LossWatch.showsLoss(
            "s", 0, 7, e.setSlot(2).setType(EventType.EVENT_TYPE_REVOKED).build()));
    assertFalse(
        LossWatch.showsLoss(
            "s", 2, 7, e.setSlot(0).setType(EventType.EVENT_TYPE_REVOKED).build()));
  }
}
