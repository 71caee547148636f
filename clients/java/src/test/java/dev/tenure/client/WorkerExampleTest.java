package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The example worker (examples/Worker.java, run in source-file mode): two instances against one
 * server and one fenced store; the first is SIGKILLed once it has written, and the log must show
 * one holder per token, tokens that never go down, and the second taking over with a larger
 * token. SIGTERM makes a worker release its lease.
 */
@Tag("integration")
class WorkerExampleTest {
  private static TenureServer server;
  private static LeaseClient client;

  @BeforeAll
  static void start() throws Exception {
    server = TenureServer.start();
    client = LeaseClient.connect(server.target());
  }

  @AfterAll
  static void stop() {
    client.close();
    server.close();
  }

  private static Process worker(String name, String holder, Path store, String... extra)
      throws Exception {
    Path java = Paths.get(System.getProperty("java.home"), "bin", "java");
    List<String> command =
        new java.util.ArrayList<>(
            List.of(java.toString(), "-cp", System.getProperty("java.class.path"),
                "examples/Worker.java", server.target(), name, holder, store.toString()));
    command.addAll(List.of(extra));
    return new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
  }

  /** Reads the worker's stdout until a line starts with {@code prefix}. */
  private static void awaitLine(Process p, String prefix) throws Exception {
    BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream()));
    for (String line; (line = out.readLine()) != null; ) {
      if (line.startsWith(prefix)) {
        return;
      }
    }
    throw new AssertionError("the worker exited before printing " + prefix);
  }

  @Test
  void secondInstanceTakesOverWithALargerToken() throws Exception {
    Path store = Files.createTempDirectory("tenure-java-worker-");
    Process first = worker("worker.one", "first", store);
    awaitLine(first, "wrote 1 ");
    Process second = worker("worker.one", "second", store, "5");
    first.destroyForcibly(); // SIGKILL
    first.waitFor();
    assertTrue(second.waitFor(60, TimeUnit.SECONDS), "the second worker finished");
    assertEquals(0, second.exitValue());

    List<String> lines = Files.readAllLines(store.resolve("log"));
    Map<Long, String> holders = new HashMap<>();
    long previous = 0;
    long firstToken = 0;
    long secondToken = 0;
    int secondWrites = 0;
    for (String line : lines) {
      String[] f = line.split(" ");
      long token = Long.parseLong(f[0]);
      assertTrue(token >= previous, "token went down at: " + line);
      previous = token;
      assertEquals(holders.computeIfAbsent(token, t -> f[1]), f[1], "two holders for " + token);
      if (f[1].equals("first")) {
        firstToken = token;
      } else {
        secondToken = token;
        secondWrites++;
      }
    }
    assertEquals(5, secondWrites);
    assertTrue(secondToken > firstToken, "the second worker took over with a larger token");
    TenureException gone =
        assertThrows(TenureException.class, () -> client.getLease("worker.one"));
    assertEquals(ErrorReason.LEASE_NOT_FOUND, gone.getReason(), "released on exit");
  }

  @Test
  void releasesOnSigterm() throws Exception {
    Path store = Files.createTempDirectory("tenure-java-worker-");
    Process w = worker("worker.term", "term", store);
    awaitLine(w, "wrote 1 ");
    w.destroy(); // SIGTERM
    assertTrue(w.waitFor(30, TimeUnit.SECONDS));
    TenureException gone =
        assertThrows(TenureException.class, () -> client.getLease("worker.term"));
    assertEquals(ErrorReason.LEASE_NOT_FOUND, gone.getReason(), "SIGTERM released the lease");
  }
}
