package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.protobuf.ByteString;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The headers a holder sends to a fenced store. */
class FenceHeadersTest {
  @Test
  void proofAsBase64urlWithoutPaddingThenTheUnsignedToken() {
    // 4 bytes: standard base64 would be "+/8A/w==" (with "+", "/" and padding).
    ByteString proof = ByteString.copyFrom(new byte[] {(byte) 0xfb, (byte) 0xff, 0, (byte) 0xff});
    Map<String, String> headers = FenceHeaders.of(proof, -1L);
    assertEquals(List.of("Tenure-Fence", "Tenure-Fencing-Token"), List.copyOf(headers.keySet()));
    assertEquals("-_8A_w", headers.get(FenceHeaders.FENCE));
    assertEquals("18446744073709551615", headers.get(FenceHeaders.TOKEN));
    assertThrows(UnsupportedOperationException.class, () -> headers.put("x", "y"));
  }

  @Test
  void withoutAProofOnlyTheToken() {
    assertEquals(Map.of(FenceHeaders.TOKEN, "42"), FenceHeaders.of(ByteString.EMPTY, 42));
  }
}
