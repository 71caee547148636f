package dev.tenure.fence;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.OptionalLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * {@link FenceFilter} in a real servlet container (embedded Tomcat on 127.0.0.1) over real HTTP:
 * a genuine proof is admitted with its fence attached, every refusal reason comes back as 409 with
 * its JSON body and never reaches the handler, and forged tokens cannot poison the store. The
 * lease name of a request is its path ({@code /orders} guards lease {@code orders}); each test
 * uses its own names.
 */
class FenceFilterTest {
  private static final long TWO_TO_62 = 1L << 62;

  private static final ObjectMapper JSON = new ObjectMapper();

  private static Vectors vectors;
  private static TestSigner active;
  private static TestSigner older;
  private static TestSigner stranger;
  private static MemoryTokenStore store;
  private static FilteredServer server;
  private static HttpClient http;

  @BeforeAll
  static void start() throws Exception {
    vectors = Vectors.load();
    active = new TestSigner(vectors.key("active"));
    older = new TestSigner(vectors.key("older"));
    stranger = new TestSigner(vectors.key("stranger"));
    store = new MemoryTokenStore();
    FenceFilter filter =
        new FenceFilter(
            Keyset.parse(vectors.keyset()),
            request ->
                request.getPathInfo().equals("/unguarded")
                    ? null
                    : request.getPathInfo().substring(1),
            store);
    server = FilteredServer.start(filter);
    http = HttpClient.newHttpClient();
  }

  @AfterAll
  static void stop() throws Exception {
    if (server != null) {
      server.close();
    }
  }

  private static Fence fence(String name, long token) {
    return new Fence("tenure", name, 0, token, 1_767_225_600_123L, 10, "worker-1");
  }

  /** A POST to the resource guarded by {@code lease}, with header name/value pairs. */
  private static HttpResponse<String> post(String lease, String... headers) throws Exception {
    HttpRequest.Builder request =
        HttpRequest.newBuilder(URI.create(server.url("/" + lease)))
            .POST(HttpRequest.BodyPublishers.ofString("payload"));
    for (int i = 0; i < headers.length; i += 2) {
      request.header(headers[i], headers[i + 1]);
    }
    return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
  }

  /** A write with a proof and its token, as a holder sends it. */
  private static HttpResponse<String> write(String lease, String proof, long token)
      throws Exception {
    return post(
        lease,
        FenceFilter.FENCE_HEADER,
        proof,
        FenceFilter.TOKEN_HEADER,
        Long.toUnsignedString(token));
  }

  private static void assertAdmitted(HttpResponse<String> response, Fence fence) {
    assertEquals(200, response.statusCode(), response.body());
    assertEquals("written " + fence.tokenText(), response.body());
    List<Verified> admitted = server.admitted();
    assertEquals(fence, admitted.get(admitted.size() - 1).fence());
  }

  /** Asserts a 409 with exactly {@code reason}, and that the handler was not called. */
  private static JsonNode assertRefused(
      FenceFilter.Reason reason, int admittedBefore, HttpResponse<String> response)
      throws Exception {
    assertEquals(409, response.statusCode(), response.body());
    assertEquals(
        List.of("application/json"), response.headers().allValues("Content-Type"));
    JsonNode body = JSON.readTree(response.body());
    assertEquals(reason.name(), body.get("reason").textValue(), response.body());
    assertFalse(body.get("message").textValue().isBlank(), response.body());
    assertEquals(admittedBefore, server.admitted().size(), "the handler was called");
    return body;
  }

  @Test
  void aGenuineProofIsAdmittedWithItsFenceAttached() throws Exception {
    Fence fence = fence("admit.orders", 5);
    assertAdmitted(write("admit.orders", active.signText(fence), 5), fence);
    Verified verified = server.admitted().get(server.admitted().size() - 1);
    assertEquals(vectors.key("active").keyId(), verified.keyId());
    // The token header is optional; the older key of a rotation still verifies.
    Fence next = fence("admit.orders", 6);
    assertAdmitted(post("admit.orders", FenceFilter.FENCE_HEADER, older.signText(next)), next);
    assertEquals(OptionalLong.of(6), store.highest("admit.orders"));
  }

  @Test
  void aMissingProofIsRefused() throws Exception {
    int before = server.admitted().size();
    JsonNode body = assertRefused(FenceFilter.Reason.FENCE_MISSING, before, post("missing.a"));
    assertEquals(2, body.size(), "only reason and message: " + body);
    assertRefused(
        FenceFilter.Reason.FENCE_MISSING, before, post("missing.a", FenceFilter.TOKEN_HEADER, "9"));
    // An empty header is a proof that is not one.
    assertRefused(
        FenceFilter.Reason.FENCE_MALFORMED,
        before,
        post("missing.a", FenceFilter.FENCE_HEADER, ""));
  }

  @Test
  void eachVerificationFailureHasItsReasonAndTheVerifiersMessage() throws Exception {
    int before = server.admitted().size();
    // The vectors' proofs are all for lease "orders": their failures come before the name check.
    String[][] cases = {
      {"FENCE_MALFORMED", "not a proof!"},
      {"FENCE_MALFORMED", vectors.invalid("malformed", "padding").proofText()},
      {"FENCE_UNSUPPORTED_VERSION", vectors.invalid("unsupported_version", "").proofText()},
      {"FENCE_UNKNOWN_KEY", vectors.invalid("unknown_key", "").proofText()},
      {"FENCE_BAD_SIGNATURE", vectors.invalid("bad_signature", "signature").proofText()},
    };
    for (String[] c : cases) {
      JsonNode body =
          assertRefused(
              FenceFilter.Reason.valueOf(c[0]),
              before,
              post("verify.orders", FenceFilter.FENCE_HEADER, c[1]));
      String expected = "";
      try {
        Keyset.parse(vectors.keyset()).verifyText(c[1]);
      } catch (FenceException e) {
        expected = e.getMessage();
      }
      assertEquals(expected, body.get("message").textValue());
    }
    assertEquals(OptionalLong.empty(), store.highest("verify.orders"));
  }

  @Test
  void aProofForAnotherLeaseIsRefusedBeforeItsTokenIsLookedAt() throws Exception {
    int before = server.admitted().size();
    JsonNode body =
        assertRefused(
            FenceFilter.Reason.FENCE_WRONG_NAME,
            before,
            write("name.mine", active.signText(fence("name.theirs", 3)), 99));
    assertEquals(
        "the fence proof is for lease \"name.theirs\", but this resource is guarded by lease"
            + " \"name.mine\"",
        body.get("message").textValue());
    assertEquals(OptionalLong.empty(), store.highest("name.mine"));
  }

  @Test
  void aTokenHeaderThatIsNotTheProofsTokenIsRefused() throws Exception {
    int before = server.admitted().size();
    String proof = active.signText(fence("mismatch.a", 12));
    for (String sent : List.of("13", "+12", "1 2", "0x0c", "", "99999999999999999999", "-1")) {
      assertRefused(
          FenceFilter.Reason.FENCE_TOKEN_MISMATCH,
          before,
          post("mismatch.a", FenceFilter.FENCE_HEADER, proof, FenceFilter.TOKEN_HEADER, sent));
    }
    assertEquals(
        "the Tenure-Fencing-Token header says 13 but the fence proof states 12: send the token of"
            + " the grant whose proof you send",
        assertRefused(
                FenceFilter.Reason.FENCE_TOKEN_MISMATCH,
                before,
                write("mismatch.a", proof, 13))
            .get("message")
            .textValue());
    assertRefused(
        FenceFilter.Reason.FENCE_TOKEN_MISMATCH,
        before,
        post(
            "mismatch.a",
            FenceFilter.FENCE_HEADER,
            proof,
            FenceFilter.TOKEN_HEADER,
            "12",
            FenceFilter.TOKEN_HEADER,
            "12"));
    assertRefused(
        FenceFilter.Reason.FENCE_MALFORMED,
        before,
        post("mismatch.a", FenceFilter.FENCE_HEADER, proof, FenceFilter.FENCE_HEADER, proof));
    assertEquals(OptionalLong.empty(), store.highest("mismatch.a"));
  }

  @Test
  void aLowerTokenIsStaleAndTheBodySaysBothTokens() throws Exception {
    Fence newer = fence("stale.a", 9);
    assertAdmitted(write("stale.a", active.signText(newer), 9), newer);
    int before = server.admitted().size();
    JsonNode body =
        assertRefused(
            FenceFilter.Reason.FENCE_STALE,
            before,
            write("stale.a", active.signText(fence("stale.a", 7)), 7));
    assertEquals(4, body.size(), body.toString());
    assertEquals("7", body.get("token").textValue());
    assertEquals("9", body.get("highest").textValue());
    assertEquals(
        "fencing token 7 of lease \"stale.a\" is lower than 9, the highest admitted: a newer holder"
            + " has the lease, so this holder must stop writing",
        body.get("message").textValue());
    // The holder of 9 writes again with the same token.
    assertAdmitted(write("stale.a", active.signText(newer), 9), newer);
  }

  @Test
  void tokensCompareUnsignedOverHttp() throws Exception {
    Fence max = fence("unsigned.a", -1L);
    assertAdmitted(write("unsigned.a", active.signText(max), -1L), max);
    int before = server.admitted().size();
    JsonNode body =
        assertRefused(
            FenceFilter.Reason.FENCE_STALE,
            before,
            write(
                "unsigned.a",
                active.signText(fence("unsigned.a", Long.MIN_VALUE)),
                Long.MIN_VALUE));
    assertEquals("9223372036854775808", body.get("token").textValue());
    assertEquals("18446744073709551615", body.get("highest").textValue());
  }

  @Test
  void aResourceFunctionNamingNoLeaseFailsTheRequest() throws Exception {
    int before = server.admitted().size();
    String proof = active.signText(fence("unguarded", 1));
    assertEquals(500, post("unguarded", FenceFilter.FENCE_HEADER, proof).statusCode());
    assertEquals(before, server.admitted().size());
  }

  /**
   * The attack fence proofs exist for: a huge token (2^62) sent by a buggy client or an attacker
   * would, under the bare "token >= highest" rule, become the highest and lock every genuine
   * holder out. With the filter, none of the forms it can take is admitted, the store never
   * records it, and the genuine holder goes on writing; its successor too.
   */
  @Test
  void forgedTokensNeverPoisonTheStore() throws Exception {
    Vectors.Valid genuine = vectors.valid().get(0);
    assertEquals("orders", genuine.fence().name());
    assertEquals(42, genuine.fence().token());
    assertAdmitted(write("orders", genuine.proofText(), 42), genuine.fence());
    int before = server.admitted().size();

    // 2^62 with no proof at all.
    assertRefused(
        FenceFilter.Reason.FENCE_MISSING,
        before,
        post("orders", FenceFilter.TOKEN_HEADER, Long.toString(TWO_TO_62)));
    // 2^62 in the token header beside the genuine, lower proof.
    assertRefused(
        FenceFilter.Reason.FENCE_TOKEN_MISMATCH,
        before,
        write("orders", genuine.proofText(), TWO_TO_62));
    // The genuine proof with its token changed to 2^62: the signature no longer verifies.
    String altered = vectors.invalid("bad_signature", "2^62").proofText();
    assertRefused(
        FenceFilter.Reason.FENCE_BAD_SIGNATURE, before, write("orders", altered, TWO_TO_62));
    // A genuine proof of 2^62, but for another lease name.
    assertRefused(
        FenceFilter.Reason.FENCE_WRONG_NAME,
        before,
        write("orders", active.signText(fence("payments", TWO_TO_62)), TWO_TO_62));
    // A proof of 2^62 for this name, signed by a key nobody pinned.
    assertRefused(
        FenceFilter.Reason.FENCE_UNKNOWN_KEY,
        before,
        write("orders", stranger.signText(fence("orders", TWO_TO_62)), TWO_TO_62));

    assertEquals(OptionalLong.of(42), store.highest("orders"), "the store was poisoned");
    // The genuine holder's next write is admitted, and so is its successor's (token 43), after
    // which the old holder is stale.
    assertAdmitted(write("orders", genuine.proofText(), 42), genuine.fence());
    Fence successor = fence("orders", 43);
    assertAdmitted(write("orders", active.signText(successor), 43), successor);
    assertTrue(server.admitted().size() == before + 2);
    JsonNode stale =
        assertRefused(
            FenceFilter.Reason.FENCE_STALE, before + 2, write("orders", genuine.proofText(), 42));
    assertEquals("43", stale.get("highest").textValue());
  }
}
