package dev.tenure.client;

import com.google.protobuf.ByteString;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The HTTP headers a holder sends with each write to a fenced store ({@code docs/fencing.md}):
 * the grant's fence proof and its fencing token. {@link Session#fenceHeaders()} and {@link
 * GroupSession#fenceHeaders(String)} make them; a store verifies the proof (for Java, {@code
 * dev.tenure.fence.FenceFilter}) before it trusts the token, so a forged, huge or foreign token
 * can never become its highest.
 */
public final class FenceHeaders {
  /** The header carrying the fence proof's text form: base64url without padding. */
  public static final String FENCE = "Tenure-Fence";

  /** The header carrying the fencing token as an unsigned decimal. */
  public static final String TOKEN = "Tenure-Fencing-Token";

  private FenceHeaders() {}

  /**
   * Both headers, in this order; only {@link #TOKEN} when {@code proof} is empty (a Tenure started
   * without {@code --fence-signing-key} signs no proofs: a store that verifies proofs then refuses
   * the write with {@code FENCE_MISSING}).
   */
  static Map<String, String> of(ByteString proof, long token) {
    Map<String, String> headers = new LinkedHashMap<>();
    if (!proof.isEmpty()) {
      String text = Base64.getUrlEncoder().withoutPadding().encodeToString(proof.toByteArray());
      headers.put(FENCE, text);
    }
    headers.put(TOKEN, Long.toUnsignedString(token));
    return Collections.unmodifiableMap(headers);
  }
}
