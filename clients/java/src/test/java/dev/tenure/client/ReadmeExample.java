package dev.tenure.client;

import java.time.Duration;

/** The README's usage example, verbatim between the markers; ReadmeExampleTest runs it. */
final class ReadmeExample {
  private ReadmeExample() {}

  /** Runs the example against {@code target}; returns how many writes the store accepted. */
  static int run(String target) {
    // example:begin
    FencingGuard store = new FencingGuard(); // stands in for your database
    int writes = 0;
    try (LeaseClient client = LeaseClient.connect(target);
        Session session = client.acquire("jobs.report", "worker-1", Duration.ofSeconds(10))) {
      session.addLossListener(loss -> System.err.println("lease lost: " + loss));
      while (session.isHeld() && writes < 3) {
        // Send the fencing token with every write: the store rejects stale holders.
        if (store.accept("report", session.getFencingToken())) {
          writes++;
        }
      }
    } // leaving the block releases the lease
    // example:end
    return writes;
  }
}
