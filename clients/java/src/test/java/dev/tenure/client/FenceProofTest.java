package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.fence.Fence;
import dev.tenure.fence.FenceException;
import dev.tenure.fence.Keyset;
import dev.tenure.fence.Verified;
import dev.tenure.v1.FenceKey;
import dev.tenure.v1.GetFenceKeysRequest;
import dev.tenure.v1.GetFenceKeysResponse;
import io.grpc.ManagedChannelBuilder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Fence proofs end to end: a real Tenure started with {@code --fence-signing-key} (a key made by
 * {@code openssl genpkey -algorithm ed25519}) signs every grant; the proofs the Java client hands
 * to holders verify, with the Java fence verifier ({@code dev.tenure.fence}, ../../fence/java),
 * against the keyset of the server's GetFenceKeys, and state exactly the holding.
 */
@Tag("integration")
class FenceProofTest {
  private static final Duration TTL = Duration.ofSeconds(10);

  private static Path keyDir;
  private static TenureServer server;
  private static LeaseClient client;
  private static GetFenceKeysResponse keys;
  private static Keyset keyset;

  @BeforeAll
  static void start() throws Exception {
    keyDir = Files.createTempDirectory("tenure-java-fence-");
    Path key = keyDir.resolve("fence.pem");
    run("openssl", "genpkey", "-algorithm", "ed25519", "-out", key.toString());
    server =
        TenureServer.start(
            List.of("--fence-signing-key", key.toString()),
            t -> ManagedChannelBuilder.forTarget(t).usePlaintext().build());
    client = LeaseClient.connect(server.target());
    keys = client.blockingStub().getFenceKeys(GetFenceKeysRequest.getDefaultInstance());
    keyset = Keyset.parse(keys.getKeyset());
  }

  @AfterAll
  static void stop() throws Exception {
    for (AutoCloseable c : new AutoCloseable[] {client, server}) {
      if (c != null) {
        c.close();
      }
    }
    if (keyDir != null) {
      TenureServer.deleteTree(keyDir);
    }
  }

  private static int counter;

  private static synchronized String name() {
    return "java.fence.p" + ProcessHandle.current().pid() + "-" + (++counter);
  }

  /** Runs a command to completion; fails with its output when it exits non-zero. */
  private static String run(String... command) throws Exception {
    Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
    byte[] output = process.getInputStream().readAllBytes();
    if (!process.waitFor(30, TimeUnit.SECONDS) || process.exitValue() != 0) {
      throw new IllegalStateException(
          String.join(" ", command) + " failed:\n" + new String(output, StandardCharsets.UTF_8));
    }
    return new String(output, StandardCharsets.UTF_8);
  }

  /** Verifies a session's proof, bytes and headers, and checks it states the session's holding. */
  private static Verified assertProofOf(Session session) throws FenceException {
    Verified verified = keyset.verify(session.fenceProof());
    Fence fence = verified.fence();
    assertEquals(session.getName(), fence.name());
    assertEquals(session.getFencingToken(), fence.token());
    assertEquals(session.getHolder(), fence.holder());
    assertEquals(session.getSlot(), fence.slot());
    assertEquals(session.getGrantedTtl().getSeconds(), fence.ttlSeconds());
    assertEquals("tenure", fence.bucket());
    assertTrue(fence.grantedAtMs() > 1_700_000_000_000L, "a Unix time in ms: " + fence);
    assertEquals(keys.getKeys(0).getKeyId(), verified.keyId());

    Map<String, String> headers = session.fenceHeaders();
    assertEquals(List.of("Tenure-Fence", "Tenure-Fencing-Token"), List.copyOf(headers.keySet()));
    assertEquals(verified, keyset.verifyText(headers.get("Tenure-Fence")));
    assertEquals(fence.tokenText(), headers.get("Tenure-Fencing-Token"));
    return verified;
  }

  @Test
  void getFenceKeysServesTheKeyFromTheKeyFile() throws Exception {
    assertEquals(1, keys.getKeysCount(), keys.toString());
    FenceKey active = keys.getKeys(0);
    assertTrue(active.getActive());
    assertEquals(Keyset.keyId(active.getPublicKey().toByteArray()), active.getKeyId());
    assertEquals(List.of(active.getKeyId()), keyset.keyIds());
    // The public key of the PEM file the server was given (the last 32 bytes of its DER form).
    Path der = keyDir.resolve("public.der");
    run(
        "openssl", "pkey", "-in", keyDir.resolve("fence.pem").toString(), "-pubout", "-outform",
        "DER", "-out", der.toString());
    byte[] publicDer = Files.readAllBytes(der);
    assertArrayEquals(
        Arrays.copyOfRange(publicDer, publicDer.length - 32, publicDer.length),
        active.getPublicKey().toByteArray());
  }

  @Test
  void aLeaseProofVerifiesAndStatesTheHolding() throws Exception {
    String name = name();
    byte[] first;
    long firstToken;
    try (Session session = client.acquire(name, "worker-1", TTL)) {
      assertProofOf(session);
      first = session.fenceProof();
      firstToken = session.getFencingToken();
      // A copy: changing it changes nothing.
      first[first.length - 1] ^= 1;
      assertFalse(Arrays.equals(first, session.fenceProof()));
      first = session.fenceProof();
    }
    // The next holder of the name: a greater token, its own proof; the old proof still verifies
    // (a store refuses it by its lower token, not by its signature).
    try (Session next = client.acquire(name, "worker-2", TTL)) {
      Verified verified = assertProofOf(next);
      assertTrue(Long.compareUnsigned(verified.fence().token(), firstToken) > 0);
      assertFalse(Arrays.equals(first, next.fenceProof()), "a new grant has a new proof");
      assertEquals(firstToken, keyset.verify(first).fence().token());
    }
  }

  @Test
  void aTamperedProofIsRefused() throws Exception {
    try (Session session = client.acquire(name(), "worker-1", TTL)) {
      byte[] proof = session.fenceProof();
      // A bit of the token's lowest byte (offset 9 + 7) flipped: a forged token.
      proof[16] ^= 0x40;
      FenceException e = assertThrows(FenceException.class, () -> keyset.verify(proof));
      assertEquals(FenceException.BAD_SIGNATURE, e.kind());
    }
  }

  @Test
  void aSemaphoreSlotsProofStatesItsSlot() throws Exception {
    Semaphore semaphore = new Semaphore(client, name(), 2);
    try (Session a = semaphore.acquire("trainer-1", TTL, Duration.ZERO);
        Session b = semaphore.acquire("trainer-2", TTL, Duration.ZERO)) {
      assertNotEquals(a.getSlot(), b.getSlot());
      assertEquals(a.getSlot(), assertProofOf(a).fence().slot());
      assertEquals(b.getSlot(), assertProofOf(b).fence().slot());
    }
  }

  @Test
  void everyGroupMemberHasItsOwnProof() throws Exception {
    List<String> names = List.of(name(), name());
    try (GroupSession group = client.acquireGroup(names, "batch-1", TTL, Duration.ZERO)) {
      for (String member : names) {
        Verified verified = keyset.verify(group.fenceProof(member));
        assertEquals(member, verified.fence().name());
        assertEquals(group.getFencingToken(member), verified.fence().token());
        assertEquals("batch-1", verified.fence().holder());
        Map<String, String> headers = group.fenceHeaders(member);
        assertEquals(verified, keyset.verifyText(headers.get(FenceHeaders.FENCE)));
        assertEquals(verified.fence().tokenText(), headers.get(FenceHeaders.TOKEN));
      }
      assertThrows(IllegalArgumentException.class, () -> group.fenceProof("not.a.member"));
      assertThrows(IllegalArgumentException.class, () -> group.fenceHeaders("not.a.member"));
    }
  }

  @Test
  void anElectionTermHasTheTermsProof() throws Exception {
    Election election = new Election(client, name());
    try (Session term = election.campaign("node-a", "10.0.0.1:5432", TTL, Duration.ZERO)) {
      assertEquals("node-a", assertProofOf(term).fence().holder());
    }
  }
}
