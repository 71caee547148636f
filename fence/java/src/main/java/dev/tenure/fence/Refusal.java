package dev.tenure.fence;

/**
 * A {@link FenceFilter} refusal: the reason and one-line message of the {@code 409 Conflict} JSON
 * body, plus the token and the highest token for {@code FENCE_STALE}.
 *
 * @param reason why the request was refused
 * @param message what happened and what to do, for a person
 * @param token the refused token, unsigned decimal ({@code FENCE_STALE} only, else null)
 * @param highest the highest token seen for the name, unsigned decimal ({@code FENCE_STALE} only,
 *     else null)
 */
record Refusal(FenceFilter.Reason reason, String message, String token, String highest) {

  /** A refusal without tokens (every reason but {@code FENCE_STALE}). */
  Refusal(FenceFilter.Reason reason, String message) {
    this(reason, message, null, null);
  }

  /**
   * The body: {@code {"reason": "...", "message": "..."}}, and {@code "token"} and {@code
   * "highest"} as decimal strings when set. Always valid JSON, whatever the message holds.
   */
  String json() {
    StringBuilder out = new StringBuilder(64 + message.length());
    out.append("{\"reason\": ").append(quote(reason.name()));
    out.append(", \"message\": ").append(quote(message));
    if (token != null) {
      out.append(", \"token\": ").append(quote(token));
    }
    if (highest != null) {
      out.append(", \"highest\": ").append(quote(highest));
    }
    return out.append('}').toString();
  }

  /**
   * {@code text} as a JSON string. Quotes, backslashes and every character outside printable
   * ASCII are escaped (the latter as six-character Unicode escapes), so the body is ASCII and
   * valid even for a lone surrogate.
   */
  static String quote(String text) {
    StringBuilder out = new StringBuilder(text.length() + 2).append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c >= 0x20 && c < 0x7f) {
            out.append(c);
          } else {
            out.append(String.format("\\u%04x", (int) c));
          }
        }
      }
    }
    return out.append('"').toString();
  }
}
