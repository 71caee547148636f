package dev.tenure.fence;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.Enumeration;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.function.Function;

/**
 * A servlet filter that fences HTTP writes: it admits a request only with a genuine Tenure fence
 * proof for the lease name guarding the resource it writes, whose token is not lower than the
 * highest admitted for that name ({@code docs/fencing.md}, "HTTP middleware", the same in every
 * language).
 *
 * <p>The holder sends {@value #FENCE_HEADER} (the proof's text form) and optionally {@value
 * #TOKEN_HEADER} (its decimal token; the Java client's {@code Session.fenceHeaders()} has both).
 * The filter checks, in order, and refuses at the first failure:
 *
 * <ol>
 *   <li>a proof is present ({@link Reason#FENCE_MISSING});
 *   <li>it verifies against the keyset ({@link Reason#FENCE_MALFORMED}, {@link
 *       Reason#FENCE_UNSUPPORTED_VERSION}, {@link Reason#FENCE_UNKNOWN_KEY}, {@link
 *       Reason#FENCE_BAD_SIGNATURE});
 *   <li>it is for the request's lease name ({@link Reason#FENCE_WRONG_NAME});
 *   <li>a {@value #TOKEN_HEADER} header, if sent, equals the proof's token ({@link
 *       Reason#FENCE_TOKEN_MISMATCH});
 *   <li>the token is not lower than the highest the {@link TokenStore} has seen for the name,
 *       which then becomes this token ({@link Reason#FENCE_STALE}).
 * </ol>
 *
 * <p>A refusal is {@code 409 Conflict} with {@code Content-Type: application/json} and the body
 * {@code {"reason": "FENCE_STALE", "message": "..."}}; {@code FENCE_STALE} adds {@code "token"}
 * and {@code "highest"} as decimal strings. The rest of the chain is not called. An admitted
 * request goes on with the {@link Verified} proof as the request attribute {@value #ATTRIBUTE}.
 *
 * <pre>{@code
 * Keyset keys = Keyset.parse(Files.readString(Path.of("/etc/store/tenure-fence-keys")));
 * FilterRegistration.Dynamic fence = servletContext.addFilter("tenure-fence",
 *     new FenceFilter(keys, request -> "orders." + request.getPathInfo().substring(1)));
 * fence.addMappingForUrlPatterns(null, false, "/orders/*");
 * }</pre>
 *
 * <p>The check is at admission: a request admitted with token 7 that is still running when one
 * with token 9 is admitted can finish after it. If the handler's own write must be ordered too,
 * make that write conditional in its store with the verified token. Thread-safe.
 */
public final class FenceFilter implements Filter {
  /** The request header carrying the proof's text form (base64url without padding). */
  public static final String FENCE_HEADER = "Tenure-Fence";

  /** The optional request header carrying the fencing token as an unsigned decimal. */
  public static final String TOKEN_HEADER = "Tenure-Fencing-Token";

  /** The request attribute an admitted request carries its {@link Verified} proof in. */
  public static final String ATTRIBUTE = "tenure.fence";

  /** The longest decimal token: 2^64 - 1 has 20 digits. */
  private static final int MAX_TOKEN_DIGITS = 20;

  /** Why a request was refused: the {@code reason} of the 409 body. */
  public enum Reason {
    /** No {@value FenceFilter#FENCE_HEADER} header. */
    FENCE_MISSING,
    /** The proof is not a proof (bad base64url, lengths, fields; empty), or was sent twice. */
    FENCE_MALFORMED,
    /** The proof is of a format version this filter does not read. */
    FENCE_UNSUPPORTED_VERSION,
    /** The proof is signed by a key the keyset does not pin. */
    FENCE_UNKNOWN_KEY,
    /** The proof's signature does not verify: altered or forged. */
    FENCE_BAD_SIGNATURE,
    /** The proof is genuine but for another lease name than the request's resource. */
    FENCE_WRONG_NAME,
    /** The {@value FenceFilter#TOKEN_HEADER} header is not one decimal, the proof's token. */
    FENCE_TOKEN_MISMATCH,
    /** The token is lower than the highest admitted for the name: a newer holder has written. */
    FENCE_STALE;

    /** The reason for a verifier's {@link FenceException#kind()}. */
    static Reason of(FenceException e) {
      return valueOf("FENCE_" + e.kind().toUpperCase(Locale.ROOT));
    }
  }

  private final Keyset keyset;
  private final Function<HttpServletRequest, String> resource;
  private final TokenStore tokens;

  /**
   * A filter over {@code tokens}.
   *
   * @param keyset the pinned Tenure keys
   * @param resource the lease name that guards what a request writes (never null for a request
   *     this filter is mapped to)
   * @param tokens the highest admitted token per lease name
   */
  public FenceFilter(
      Keyset keyset, Function<HttpServletRequest, String> resource, TokenStore tokens) {
    this.keyset = Objects.requireNonNull(keyset, "keyset");
    this.resource = Objects.requireNonNull(resource, "resource");
    this.tokens = Objects.requireNonNull(tokens, "tokens");
  }

  /**
   * A filter keeping the highest tokens in memory ({@link MemoryTokenStore}): for a service of
   * one process whose fencing may start over at a restart.
   *
   * @param keyset the pinned Tenure keys
   * @param resource the lease name that guards what a request writes
   */
  public FenceFilter(Keyset keyset, Function<HttpServletRequest, String> resource) {
    this(keyset, resource, new MemoryTokenStore());
  }

  /**
   * Admits the request with its verified proof as attribute {@value #ATTRIBUTE}, or answers 409.
   *
   * @throws ServletException for a request that is not HTTP, or when the resource function names
   *     no lease (a configuration error: the request is not admitted); an exception of the token
   *     store propagates too (the container answers 500: a failing store admits nothing)
   */
  @Override
  public void doFilter(ServletRequest req, ServletResponse res, FilterChain chain)
      throws IOException, ServletException {
    if (!(req instanceof HttpServletRequest request)
        || !(res instanceof HttpServletResponse response)) {
      throw new ServletException("FenceFilter fences HTTP requests only");
    }
    Refusal refusal = admit(request);
    if (refusal != null) {
      refuse(response, refusal);
      return;
    }
    chain.doFilter(request, response);
  }

  /**
   * The checks of the class doc, in order: sets the request's {@value #ATTRIBUTE} and returns
   * null when they pass, else returns the first failure.
   */
  private Refusal admit(HttpServletRequest request) throws ServletException {
    List<String> proofs = headers(request, FENCE_HEADER);
    if (proofs.isEmpty()) {
      return new Refusal(
          Reason.FENCE_MISSING,
          "no "
              + FENCE_HEADER
              + " header: send the fence proof of your lease's grant (its fence_proof) with every"
              + " write");
    }
    if (proofs.size() > 1) {
      return new Refusal(
          Reason.FENCE_MALFORMED,
          "malformed fence proof: more than one " + FENCE_HEADER + " header");
    }
    Verified verified;
    try {
      verified = keyset.verifyText(proofs.get(0));
    } catch (FenceException e) {
      return new Refusal(Reason.of(e), e.getMessage());
    }
    Fence fence = verified.fence();
    String name = resource.apply(request);
    if (name == null) {
      throw new ServletException(
          "FenceFilter: the resource function named no lease for " + request.getRequestURI());
    }
    if (!verified.isFor(name)) {
      return new Refusal(
          Reason.FENCE_WRONG_NAME,
          "the fence proof is for lease \""
              + fence.name()
              + "\", but this resource is guarded by lease \""
              + name
              + "\"");
    }
    List<String> sent = headers(request, TOKEN_HEADER);
    if (!sent.isEmpty()) {
      String mismatch = tokenMismatch(sent, fence);
      if (mismatch != null) {
        return new Refusal(Reason.FENCE_TOKEN_MISMATCH, mismatch);
      }
    }
    TokenStore.Advance advance = tokens.advance(name, fence.token());
    if (!advance.ok()) {
      return new Refusal(
          Reason.FENCE_STALE,
          "fencing token "
              + fence.tokenText()
              + " of lease \""
              + name
              + "\" is lower than "
              + advance.highestText()
              + ", the highest admitted: a newer holder has the lease, so this holder must stop"
              + " writing",
          fence.tokenText(),
          advance.highestText());
    }
    request.setAttribute(ATTRIBUTE, verified);
    return null;
  }

  /** Every value of header {@code name}, one per header line; none if the container hides them. */
  private static List<String> headers(HttpServletRequest request, String name) {
    Enumeration<String> values = request.getHeaders(name);
    return values == null ? List.of() : Collections.list(values);
  }

  /** Why the {@value #TOKEN_HEADER} values are not the proof's token, or null when they are. */
  private static String tokenMismatch(List<String> sent, Fence fence) {
    Long token = sent.size() == 1 ? parseToken(sent.get(0)) : null;
    if (token == null) {
      return "the "
          + TOKEN_HEADER
          + " header is not one decimal token (the fence proof states "
          + fence.tokenText()
          + "): send that token or leave the header out";
    }
    if (token != fence.token()) {
      return "the "
          + TOKEN_HEADER
          + " header says "
          + Long.toUnsignedString(token)
          + " but the fence proof states "
          + fence.tokenText()
          + ": send the token of the grant whose proof you send";
    }
    return null;
  }

  /** An unsigned decimal of 1 to 20 ASCII digits that fits 64 bits, or null. */
  private static Long parseToken(String text) {
    if (text.isEmpty() || text.length() > MAX_TOKEN_DIGITS) {
      return null;
    }
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c < '0' || c > '9') {
        return null;
      }
    }
    try {
      return Long.parseUnsignedLong(text);
    } catch (NumberFormatException e) {
      // 20 digits above 2^64 - 1.
      return null;
    }
  }

  /** Answers 409 with the refusal's JSON body. */
  private static void refuse(HttpServletResponse response, Refusal refusal) throws IOException {
    byte[] body = refusal.json().getBytes(StandardCharsets.UTF_8);
    response.setStatus(HttpServletResponse.SC_CONFLICT);
    // Written as bytes, so the container adds no charset parameter: the type is exactly this.
    response.setContentType("application/json");
    response.setContentLength(body.length);
    response.getOutputStream().write(body);
  }
}
