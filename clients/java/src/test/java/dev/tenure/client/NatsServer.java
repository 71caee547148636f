package dev.tenure.client;

import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/** A nats-server with JetStream that several Tenure processes share (restart tests). */
final class NatsServer implements AutoCloseable {
  private final Process process;
  private final Path dir;
  private final int port;

  private NatsServer(Process process, Path dir, int port) {
    this.process = process;
    this.dir = dir;
    this.port = port;
  }

  /** Starts it on a free port and waits (at most 30 s) until it accepts connections. */
  static NatsServer start() throws Exception {
    Path nats = TenureServer.binary(TenureServer.root(), "NATS_SERVER", ".tools/bin/nats-server");
    Path dir = Files.createTempDirectory("tenure-java-nats-");
    int port = TenureServer.freePort();
    Process process =
        new ProcessBuilder(
                nats.toString(), "-a", "127.0.0.1", "-p", String.valueOf(port), "-js", "-sd",
                dir.toString())
            .redirectErrorStream(true)
            .redirectOutput(dir.resolve("nats.log").toFile())
            .start();
    NatsServer server = new NatsServer(process, dir, port);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (true) {
      try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), port)) {
        return server;
      } catch (IOException notYet) {
        if (!process.isAlive() || System.nanoTime() - deadline > 0) {
          server.close();
          throw new IllegalStateException("nats-server did not listen within 30 s", notYet);
        }
        Thread.sleep(50);
      }
    }
  }

  /** The client URL. */
  String url() {
    return "nats://127.0.0.1:" + port;
  }

  /** Stops it and deletes its store. */
  @Override
  public void close() throws InterruptedException {
    process.destroy();
    if (!process.waitFor(10, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor(5, TimeUnit.SECONDS);
    }
    TenureServer.deleteTree(dir);
  }
}
