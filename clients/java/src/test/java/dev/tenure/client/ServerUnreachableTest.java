package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** A session whose server goes away gives the lease up by its safe deadline. */
@Tag("integration")
class ServerUnreachableTest {
  @Test
  void lossIsSignalledByTheSafeDeadlineWhenTheServerIsGone() throws Exception {
    try (TenureServer server = TenureServer.start();
        LeaseClient client = LeaseClient.connect(server.target())) {
      Session session = client.acquire("unreachable.one", "orphan", Duration.ofSeconds(2));
      CompletableFuture<Long> lossAt = new CompletableFuture<>();
      CompletableFuture<Session.Loss> loss = new CompletableFuture<>();
      session.addLossListener(
          l -> {
            lossAt.complete(System.nanoTime());
            loss.complete(l);
          });
      assertTrue(session.isHeld());

      server.stop();

      Session.Loss lost = Await.get(loss);
      assertEquals(Session.LossReason.DEADLINE_PASSED, lost.getReason());
      assertTrue(
          lost.getCause().orElseThrow().isRetryable(),
          "renewals failed transiently until the deadline: " + lost);
      assertFalse(session.isHeld());
      // Loss comes from the deadline, not from a give-up before it: renewals kept trying.
      assertTrue(lossAt.get() - session.getSafeDeadlineNanos() >= 0);
      session.close(); // best effort against a stopped server: must not throw
    }
  }
}
