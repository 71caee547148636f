package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.tenure.v1.ErrorReason;
import io.grpc.Status;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Every value of the generated {@link ErrorReason} is classified (retryable or permanent) as the
 * "Error reasons" table of {@code clients/README.md} says, read here at test time; the table names
 * no reason the enum lacks.
 */
class ErrorReasonTableTest {
  /** {@code clients/README.md}; Surefire runs with the client folder as working directory. */
  private static final Path README = Path.of("..", "README.md");

  private static final String HEADER = "| reason | gRPC code | retryable | what to do |";

  /** One row of the table. */
  private record Row(String code, boolean retryable) {}

  private static Map<String, Row> table() throws IOException {
    List<String> lines =
        Files.readAllLines(README, StandardCharsets.UTF_8).stream()
            .map(String::strip)
            .collect(Collectors.toList());
    int start = lines.indexOf(HEADER);
    assertTrue(start >= 0, README + " has no error reason table");
    Map<String, Row> rows = new LinkedHashMap<>();
    for (String line : lines.subList(start + 1, lines.size())) {
      if (!line.startsWith("|")) {
        break;
      }
      String[] cells = line.substring(1, line.length() - 1).split("\\|", -1);
      for (int i = 0; i < cells.length; i++) {
        cells[i] = cells[i].strip();
      }
      if (cells[0].startsWith("---")) {
        continue;
      }
      assertEquals(4, cells.length, README + ": table row " + line);
      String name = cells[0].replace("`", "");
      assertFalse(rows.containsKey(name), README + ": " + name + " is in the table twice");
      assertTrue(
          cells[2].equals("yes") || cells[2].equals("no"),
          README + ": " + name + ": retryable is " + cells[2]);
      try {
        Status.Code.valueOf(cells[1]);
      } catch (IllegalArgumentException e) {
        fail(README + ": " + name + ": " + cells[1] + " is no gRPC code");
      }
      rows.put(name, new Row(cells[1], cells[2].equals("yes")));
    }
    return rows;
  }

  /** Every value of the generated enum but the zero one (never sent) and protobuf's UNRECOGNIZED. */
  private static Stream<ErrorReason> generated() {
    return Arrays.stream(ErrorReason.values())
        .filter(r -> r != ErrorReason.ERROR_REASON_UNSPECIFIED && r != ErrorReason.UNRECOGNIZED);
  }

  @TestFactory
  Stream<DynamicTest> everyGeneratedReasonIsClassifiedAsTheTableSays() throws IOException {
    Map<String, Row> table = table();
    return generated()
        .map(
            reason ->
                DynamicTest.dynamicTest(
                    reason.name(),
                    () -> {
                      Row row = table.get(reason.name());
                      assertNotNull(row, reason + " is missing from the table in " + README);
                      assertEquals(reason, TenureException.parseReason(reason.name()));
                      assertEquals(
                          row.retryable(),
                          TenureException.isRetryable(reason),
                          reason + ": the table says retryable=" + row.retryable());
                    }));
  }

  @Test
  void theTableNamesNoReasonTheEnumLacks() throws IOException {
    Map<String, Row> table = table();
    Set<String> names = generated().map(Enum::name).collect(Collectors.toSet());
    Set<String> extra = new TreeSet<>(table.keySet());
    extra.removeAll(names);
    assertEquals(Set.of(), extra, "reasons in the table but not in the generated ErrorReason");
    assertTrue(generated().count() >= 22);
    Set<ErrorReason> yes = EnumSet.noneOf(ErrorReason.class);
    table.forEach(
        (name, row) -> {
          if (row.retryable()) {
            yes.add(ErrorReason.valueOf(name));
          }
        });
    assertEquals(yes, TenureException.RETRYABLE_REASONS);
    assertFalse(TenureException.isRetryable(ErrorReason.ERROR_REASON_UNSPECIFIED));
  }
}
