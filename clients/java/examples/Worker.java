import dev.tenure.client.ConnectOptions;
import dev.tenure.client.LeaseClient;
import dev.tenure.client.Session;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;

/**
 * Example worker: takes the lease NAME (waiting for it), then writes to a fenced store with its
 * fencing token until the lease is lost, and releases it on exit and on SIGTERM.
 *
 * <pre>java -cp CLASSPATH examples/Worker.java ADDRESS NAME HOLDER STORE_DIR [WRITES]</pre>
 *
 * <p>The fenced store is a directory: a write takes an exclusive flock on STORE_DIR/lock, reads
 * STORE_DIR/fence (decimal, missing = 0), refuses the write when the token is below it, else sets
 * fence = token and appends "token holder seq" to STORE_DIR/log. Java's FileLock is not flock, so
 * the write runs under flock(1). Env: TENURE_TOKEN (bearer token).
 */
public class Worker {
  private static final String FENCED_WRITE =
      "fence=$(cat \"$1/fence\" 2>/dev/null || echo 0)\n"
          + "[ \"$2\" -ge \"${fence:-0}\" ] || exit 3\n"
          + "echo \"$2\" > \"$1/fence\"\n"
          + "echo \"$2 $3 $4\" >> \"$1/log\"\n";

  /** Writes one line with {@code token}; false when a newer holder has written (fenced off). */
  static boolean fencedWrite(String dir, long token, String holder, int seq) throws Exception {
    Process p =
        new ProcessBuilder("flock", dir + "/lock", "sh", "-c", FENCED_WRITE, "write", dir,
                Long.toUnsignedString(token), holder, Integer.toString(seq))
            .inheritIO()
            .start();
    int code = p.waitFor();
    if (code == 3) {
      return false;
    }
    if (code != 0) {
      throw new IllegalStateException("fenced write failed with exit code " + code);
    }
    return true;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 4) {
      System.err.println("usage: Worker ADDRESS NAME HOLDER STORE_DIR [WRITES]");
      System.exit(2);
    }
    String address = args[0], name = args[1], holder = args[2], dir = args[3];
    long maxWrites = args.length > 4 ? Long.parseLong(args[4]) : Long.MAX_VALUE;
    ConnectOptions.Builder options = ConnectOptions.builder();
    String token = System.getenv("TENURE_TOKEN");
    if (token != null) {
      options.token(token);
    }
    LeaseClient client = LeaseClient.connect(address, options.build());
    Session session = client.acquire(name, holder, Duration.ofSeconds(2), Duration.ofSeconds(60));
    System.out.println("acquired " + name + " with token " + Long.toUnsignedString(session.getFencingToken()));
    CountDownLatch done = new CountDownLatch(1);
    // SIGTERM runs the shutdown hooks: stop writing, then release (once) and close.
    Thread main = Thread.currentThread();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      main.interrupt();
      try {
        done.await();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }));
    try {
      for (int seq = 1; seq <= maxWrites; seq++) {
        if (!session.isHeld()) {
          System.out.println("lost " + name + ": " + session.getLoss().map(Object::toString).orElse("?"));
          break;
        }
        if (!fencedWrite(dir, session.getFencingToken(), holder, seq)) {
          System.out.println("fenced off: a newer holder has written");
          break;
        }
        System.out.println("wrote " + seq + " with token " + Long.toUnsignedString(session.getFencingToken()));
        Thread.sleep(100);
      }
    } catch (InterruptedException e) {
      System.out.println("stopping on SIGTERM");
    } finally {
      boolean released = session.release();
      System.out.println(released ? "released " + name : name + " was not held any more");
      client.close();
      done.countDown();
    }
  }
}
