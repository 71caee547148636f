package dev.tenure.client;

import dev.tenure.v1.ErrorReason;
import dev.tenure.v1.GetLeaseRequest;
import dev.tenure.v1.LeaseServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A real Tenure server for the tests: {@code tenure serve} on a free 127.0.0.1 port with a fresh
 * data dir, supervising its own nats-server. The binaries come from {@code TENURE_BIN} and {@code
 * NATS_SERVER}, defaulting to {@code target/debug/tenure} and {@code .tools/bin/nats-server} under
 * the repository root (system property {@code tenure.root}, set by the pom).
 */
final class TenureServer implements AutoCloseable {
  private static final long READY_TIMEOUT_NANOS = TimeUnit.SECONDS.toNanos(30);

  /** Starts of Tenure on a fresh free port when the last one was taken before Tenure bound it. */
  private static final int START_ATTEMPTS = 3;

  private final Process process;
  private final Path dataDir;
  private final Path log;
  private final String target;

  private TenureServer(Process process, Path dataDir, Path log, String target) {
    this.process = process;
    this.dataDir = dataDir;
    this.log = log;
    this.target = target;
  }

  /** Starts a server and waits until it answers RPCs. */
  static TenureServer start() throws Exception {
    return start(List.of(), t -> ManagedChannelBuilder.forTarget(t).usePlaintext().build());
  }

  /**
   * Starts a server with {@code extraArgs} (TLS, auth flags) and waits until a GetLease over a
   * channel from {@code probe} gets a Tenure answer (any reason, e.g. UNAUTHENTICATED).
   */
  static TenureServer start(
      List<String> extraArgs, java.util.function.Function<String, ManagedChannel> probe)
      throws Exception {
    return start(extraArgs, probe, 0, null);
  }

  /**
   * Starts a server on {@code port} (0: a free one) over the shared nats-server at {@code natsUrl}
   * (null: its own), for restart tests: a new server on the same port and bucket.
   */
  static TenureServer startShared(int port, String natsUrl, String... extraArgs)
      throws Exception {
    return start(
        List.of(extraArgs),
        t -> ManagedChannelBuilder.forTarget(t).usePlaintext().build(),
        port,
        natsUrl);
  }

  private static TenureServer start(
      List<String> extraArgs,
      java.util.function.Function<String, ManagedChannel> probe,
      int fixedPort,
      String natsUrl)
      throws Exception {
    Path root = root();
    Path tenure = binary(root, "TENURE_BIN", "target/debug/tenure");
    Path nats = binary(root, "NATS_SERVER", ".tools/bin/nats-server");
    // A free port can be taken before Tenure binds it (by the nats-server it starts, which picks
    // its own free port): Tenure then exits with "Address already in use" and is started again on
    // another free port. Any other failure, or a taken fixed port, is thrown at once.
    for (int attempt = 1; ; attempt++) {
      int port = fixedPort != 0 ? fixedPort : freePort();
      Path dataDir = Files.createTempDirectory("tenure-java-");
      Path log = dataDir.resolve("tenure.log");
      List<String> command =
          new java.util.ArrayList<>(
              List.of(tenure.toString(), "serve", "--listen", "127.0.0.1:" + port));
      if (natsUrl != null) {
        command.addAll(List.of("--nats-url", natsUrl));
      } else {
        command.addAll(
            List.of(
                "--data-dir",
                dataDir.resolve("data").toString(),
                "--nats-server",
                nats.toString()));
      }
      command.addAll(List.of("--log-format", "json"));
      command.addAll(extraArgs);
      Process process =
          new ProcessBuilder(command)
              .redirectErrorStream(true)
              .redirectOutput(log.toFile())
              .start();
      TenureServer server = new TenureServer(process, dataDir, log, "127.0.0.1:" + port);
      try {
        server.awaitReady(probe);
        return server;
      } catch (IllegalStateException e) {
        boolean portTaken = server.logText().contains("Address already in use");
        server.close();
        if (!portTaken || fixedPort != 0 || attempt >= START_ATTEMPTS) {
          throw e;
        }
      }
    }
  }

  /** The gRPC target, {@code 127.0.0.1:PORT}. */
  String target() {
    return target;
  }

  /** The port of the gRPC listener. */
  int port() {
    return Integer.parseInt(target.substring(target.lastIndexOf(':') + 1));
  }

  /** SIGKILLs the server (no goodbye to its clients) and waits for it to exit. */
  void kill() throws InterruptedException {
    process.destroyForcibly();
    process.waitFor(10, TimeUnit.SECONDS);
  }

  /** Stops the server with SIGTERM (it stops its nats-server too) and waits for it to exit. */
  void stop() throws InterruptedException {
    if (!process.isAlive()) {
      return;
    }
    List<ProcessHandle> children = process.descendants().toList();
    process.destroy();
    if (!process.waitFor(10, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor(5, TimeUnit.SECONDS);
    }
    for (ProcessHandle child : children) {
      child.destroyForcibly();
    }
  }

  /** Stops the server (see {@link #stop()}) and deletes its data dir. */
  @Override
  public void close() {
    try {
      stop();
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    } finally {
      deleteTree(dataDir);
    }
  }

  private void awaitReady(java.util.function.Function<String, ManagedChannel> probe)
      throws InterruptedException {
    long deadline = System.nanoTime() + READY_TIMEOUT_NANOS;
    ManagedChannel channel = probe.apply(target);
    try {
      LeaseServiceGrpc.LeaseServiceBlockingStub stub = LeaseServiceGrpc.newBlockingStub(channel);
      while (true) {
        if (!process.isAlive()) {
          throw new IllegalStateException("tenure exited with " + process.exitValue() + ":\n" + logText());
        }
        try {
          stub.withDeadlineAfter(1, TimeUnit.SECONDS)
              .getLease(GetLeaseRequest.newBuilder().setName("readiness-probe").build());
          return;
        } catch (StatusRuntimeException e) {
          if (TenureException.from(e).getReason() != ErrorReason.ERROR_REASON_UNSPECIFIED) {
            return;
          }
        }
        if (System.nanoTime() - deadline > 0) {
          throw new IllegalStateException("tenure did not become ready in 30 s:\n" + logText());
        }
        // Nothing to await but the server itself: poll its readiness at a short interval.
        Thread.sleep(100);
      }
    } finally {
      channel.shutdownNow();
    }
  }

  /** The server's log, for failure messages. */
  String logText() {
    try {
      return Files.readString(log, StandardCharsets.UTF_8);
    } catch (IOException e) {
      return "(no log: " + e + ")";
    }
  }

  /** The repository root. */
  static Path root() {
    return Paths.get(System.getProperty("tenure.root", "../..")).toAbsolutePath().normalize();
  }

  static Path binary(Path root, String env, String fallback) {
    String value = System.getenv(env);
    Path path = value == null || value.isEmpty() ? root.resolve(fallback) : root.resolve(value);
    if (!Files.isExecutable(path)) {
      throw new IllegalStateException(
          path
              + " is missing: run scripts/tools.sh and `cargo build` at the repository root, or set "
              + env);
    }
    return path;
  }

  static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    }
  }

  static void deleteTree(Path dir) {
    if (!Files.exists(dir)) {
      return;
    }
    try (Stream<Path> paths = Files.walk(dir)) {
      paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
