package dev.tenure.fence;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

/** The 409 body is valid JSON with the exact fields, whatever the message holds. */
class RefusalTest {
  private final ObjectMapper json = new ObjectMapper();

  @Test
  void aStaleRefusalHasTokenAndHighestAsDecimalStrings() throws Exception {
    String body =
        new Refusal(FenceFilter.Reason.FENCE_STALE, "stale", "7", "18446744073709551615").json();
    JsonNode node = json.readTree(body);
    assertEquals(4, node.size(), body);
    assertEquals("FENCE_STALE", node.get("reason").textValue());
    assertEquals("stale", node.get("message").textValue());
    assertTrue(node.get("token").isTextual());
    assertEquals("7", node.get("token").textValue());
    assertEquals("18446744073709551615", node.get("highest").textValue());
  }

  @Test
  void otherRefusalsHaveOnlyReasonAndMessage() throws Exception {
    JsonNode node = json.readTree(new Refusal(FenceFilter.Reason.FENCE_MISSING, "none").json());
    assertEquals(2, node.size());
    assertFalse(node.has("token"));
  }

  @Test
  void messagesAreEscaped() throws Exception {
    String message =
        "quote \" backslash \\ newline \n tab \t nul \u0000 \u00e9 \u2713 \ud83d\ude00 lone \ud800"
            + " del \u007f";
    String body = new Refusal(FenceFilter.Reason.FENCE_WRONG_NAME, message).json();
    assertTrue(body.chars().allMatch(c -> c >= 0x20 && c < 0x7f), body);
    assertEquals(message, json.readTree(body).get("message").textValue());
  }
}
