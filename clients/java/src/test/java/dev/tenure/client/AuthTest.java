package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Credentials against a Tenure with TLS, optional mTLS and bearer tokens on: a token over TLS
 * (fixed and from a supplier), a client certificate, a token over plaintext for local
 * development, and UNAUTHENTICATED / PERMISSION_DENIED as typed reasons with the server's message.
 * Certificates are made with openssl.
 */
@Tag("integration")
class AuthTest {
  private static final String ADMIN_TOKEN = "admin-token-0123456789abcdef";
  private static final String WORKER_TOKEN = "worker-token-0123456789abcdef";
  private static Path dir;
  private static TenureServer tls;
  private static TenureServer plain;

  private static void openssl(String... args) throws Exception {
    List<String> command = new java.util.ArrayList<>(List.of("openssl"));
    command.addAll(List.of(args));
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes());
    if (p.waitFor() != 0) {
      throw new IllegalStateException("openssl " + String.join(" ", args) + ":\n" + out);
    }
  }

  private static String path(String file) {
    return dir.resolve(file).toString();
  }

  @BeforeAll
  static void start() throws Exception {
    dir = Files.createTempDirectory("tenure-java-auth-");
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-days", "2", "-subj", "/CN=tenure test CA", "-keyout", path("ca.key"), "-out",
        path("ca.pem"), "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
        "keyUsage=critical,keyCertSign");
    String[][] certs = {
      {"server", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"},
      {"client", "mtls-client", "extendedKeyUsage=clientAuth"},
    };
    for (String[] c : certs) {
      Files.writeString(dir.resolve(c[0] + ".ext"), "basicConstraints=CA:FALSE\n" + c[2] + "\n");
      openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj",
          "/CN=" + c[1], "-keyout", path(c[0] + ".key"), "-out", path(c[0] + ".csr"));
      openssl("x509", "-req", "-in", path(c[0] + ".csr"), "-CA", path("ca.pem"), "-CAkey",
          path("ca.key"), "-CAcreateserial", "-days", "2", "-extfile", path(c[0] + ".ext"),
          "-out", path(c[0] + ".pem"));
    }
    Files.writeString(dir.resolve("tokens"), "admin " + ADMIN_TOKEN + "\nworker " + WORKER_TOKEN + "\n");
    Files.writeString(
        dir.resolve("tenure.toml"),
        """
        [[grant]]
        identity = "admin"
        prefixes = [""]
        actions = ["*"]

        [[grant]]
        identity = "mtls-client"
        prefixes = [""]
        actions = ["*"]

        [[grant]]
        identity = "worker"
        prefixes = ["auth."]
        actions = ["acquire", "renew", "release"]
        """);
    List<String> auth = List.of("--config", path("tenure.toml"), "--auth-tokens", path("tokens"));
    List<String> tlsArgs = new java.util.ArrayList<>(auth);
    tlsArgs.addAll(List.of("--tls-cert", path("server.pem"), "--tls-key", path("server.key"),
        "--tls-client-ca", path("ca.pem"), "--tls-client-cert-optional"));
    ConnectOptions probe = ConnectOptions.builder().tls(Path.of(path("ca.pem"))).build();
    tls = TenureServer.start(tlsArgs, probe::channel);
    plain = TenureServer.start(auth, ConnectOptions.builder().build()::channel);
  }

  @AfterAll
  static void stop() throws Exception {
    if (tls != null) {
      tls.close();
    }
    if (plain != null) {
      plain.close();
    }
  }

  @Test
  void tokenOverTls() {
    AtomicInteger asked = new AtomicInteger();
    ConnectOptions options =
        ConnectOptions.builder()
            .tls(Path.of(path("ca.pem")))
            .token(() -> { asked.incrementAndGet(); return ADMIN_TOKEN; })
            .build();
    try (LeaseClient client = LeaseClient.connect(tls.target(), options)) {
      Session session = client.acquire("auth.tls", "admin", Duration.ofSeconds(5));
      assertEquals(1, client.listLeases("auth.tls", 0, "").getLeasesCount());
      assertTrue(session.release());
      assertTrue(asked.get() >= 3, "the supplier is asked before every call");
    }
  }

  @Test
  void clientCertificate() {
    ConnectOptions options =
        ConnectOptions.builder()
            .tls(Path.of(path("ca.pem")))
            .clientCertificate(Path.of(path("client.pem")), Path.of(path("client.key")))
            .build();
    try (LeaseClient client = LeaseClient.connect(tls.target(), options)) {
      assertTrue(client.acquire("auth.mtls", "cert", Duration.ofSeconds(5)).release());
    }
  }

  @Test
  void tokenOverPlaintext() {
    ConnectOptions options = ConnectOptions.builder().token(ADMIN_TOKEN).build();
    try (LeaseClient client = LeaseClient.connect(plain.target(), options)) {
      assertTrue(client.acquire("auth.plain", "admin", Duration.ofSeconds(5)).release());
    }
  }

  @Test
  void missingTokenIsUnauthenticated() {
    ConnectOptions options = ConnectOptions.builder().tls(Path.of(path("ca.pem"))).build();
    try (LeaseClient client = LeaseClient.connect(tls.target(), options)) {
      TenureException e =
          assertThrows(
              TenureException.class, () -> client.acquire("auth.none", "x", Duration.ofSeconds(5)));
      assertEquals(ErrorReason.UNAUTHENTICATED, e.getReason());
      assertFalse(e.isRetryable());
      assertTrue(
          e.getMessage().startsWith("tenure at " + tls.target() + ": Acquire: UNAUTHENTICATED: "),
          e.getMessage());
    }
  }

  @Test
  void missingGrantIsPermissionDenied() {
    ConnectOptions options = ConnectOptions.builder().token(WORKER_TOKEN).build();
    try (LeaseClient client = LeaseClient.connect(plain.target(), options)) {
      TenureException e =
          assertThrows(TenureException.class, () -> client.revokeLease("auth.x", "test"));
      assertEquals(ErrorReason.PERMISSION_DENIED, e.getReason());
      assertFalse(e.isRetryable());
      assertTrue(e.getMessage().contains("RevokeLease: PERMISSION_DENIED: "), e.getMessage());
      assertTrue(client.acquire("auth.worker", "worker", Duration.ofSeconds(5)).release());
    }
  }
}
