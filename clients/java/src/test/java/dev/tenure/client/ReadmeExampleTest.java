package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tenure.v1.ErrorReason;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** The README's example is ReadmeExample.java verbatim, and it runs. */
@Tag("integration")
class ReadmeExampleTest {
  private static String exampleBlock() throws Exception {
    List<String> lines =
        Files.readAllLines(Path.of("src/test/java/dev/tenure/client/ReadmeExample.java"));
    int begin = lines.indexOf("    // example:begin");
    int end = lines.indexOf("    // example:end");
    assertTrue(begin >= 0 && end > begin, "example markers in ReadmeExample.java");
    return lines.subList(begin + 1, end).stream()
        .map(line -> line.length() >= 4 ? line.substring(4) : line.strip())
        .collect(Collectors.joining("\n"));
  }

  @Test
  void readmeQuotesTheExampleVerbatim() throws Exception {
    String readme = Files.readString(Path.of("README.md"));
    String block = exampleBlock();
    assertTrue(
        readme.contains("```java\n" + block + "\n```"),
        "README.md must contain the example from ReadmeExample.java verbatim:\n" + block);
    assertTrue(Arrays.stream(block.split("\n")).count() <= 14, "the example stays short");
  }

  @Test
  void exampleRunsAndReleases() throws Exception {
    try (TenureServer server = TenureServer.start()) {
      assertEquals(3, ReadmeExample.run(server.target()));
      try (LeaseClient client = LeaseClient.connect(server.target())) {
        TenureException gone =
            assertThrows(TenureException.class, () -> client.getLease("jobs.report"));
        assertEquals(ErrorReason.LEASE_NOT_FOUND, gone.getReason());
      }
    }
  }
}
