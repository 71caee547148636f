package dev.tenure.fence;

import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.stream.Stream;
import org.apache.catalina.LifecycleException;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.core.StandardContext;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.FilterDef;
import org.apache.tomcat.util.descriptor.web.FilterMap;

/**
 * A real servlet container for the filter tests: embedded Tomcat on 127.0.0.1 and a free port,
 * with {@code filter} in front of a servlet that records every request it is handed (with its
 * {@value FenceFilter#ATTRIBUTE} attribute) and answers 200 {@code written <token>}.
 */
final class FilteredServer implements AutoCloseable {
  /** Tomcat's loggers at WARNING (held: the JDK keeps loggers weakly): no startup notices. */
  private static final Logger TOMCAT = quiet("org.apache", Level.WARNING);

  /** The recording servlet's log: every verified fence the filter admitted, in order. */
  private final List<Verified> admitted = new CopyOnWriteArrayList<>();

  private final Tomcat tomcat;
  private final Logger contextLog;
  private final Path baseDir;
  private final int port;

  private FilteredServer(Filter filter) throws IOException, LifecycleException {
    baseDir = Files.createTempDirectory("tenure-fence-tomcat-");
    tomcat = new Tomcat();
    tomcat.setBaseDir(baseDir.toString());
    Connector connector = new Connector();
    connector.setPort(0);
    connector.setProperty("address", "127.0.0.1");
    tomcat.getService().addConnector(connector);
    tomcat.setConnector(connector);

    StandardContext context = (StandardContext) tomcat.addContext("", baseDir.toString());
    // Leak detection at stop needs --add-opens and only warns; there is no web app to leak.
    context.setClearReferencesThreadLocals(false);
    context.setClearReferencesRmiTargets(false);
    // The context's log has the exception a test provokes on purpose (a 500): not test output.
    contextLog = quiet(context.getLogName(), Level.OFF);
    Tomcat.addServlet(context, "store", new RecordingServlet()).addMapping("/*");
    FilterDef def = new FilterDef();
    def.setFilterName("tenure-fence");
    def.setFilter(filter);
    context.addFilterDef(def);
    FilterMap map = new FilterMap();
    map.setFilterName("tenure-fence");
    map.addURLPattern("/*");
    context.addFilterMap(map);

    tomcat.start();
    port = connector.getLocalPort();
  }

  private static Logger quiet(String name, Level level) {
    Logger logger = Logger.getLogger(name);
    logger.setLevel(level);
    return logger;
  }

  /** Starts Tomcat with {@code filter} in front of the recording servlet. */
  static FilteredServer start(Filter filter) throws IOException, LifecycleException {
    return new FilteredServer(filter);
  }

  /** The URL of path {@code path} (starting with "/"). */
  String url(String path) {
    return "http://127.0.0.1:" + port + path;
  }

  /** Every fence admitted so far, in order. */
  List<Verified> admitted() {
    return List.copyOf(admitted);
  }

  @Override
  public void close() throws LifecycleException {
    try {
      tomcat.stop();
      tomcat.destroy();
    } finally {
      try (Stream<Path> paths = Files.walk(baseDir)) {
        paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  /** Stands in for a store's write handler: records what the filter attached. */
  private final class RecordingServlet extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void service(HttpServletRequest request, HttpServletResponse response)
        throws IOException {
      Verified verified = (Verified) request.getAttribute(FenceFilter.ATTRIBUTE);
      admitted.add(verified);
      response.setStatus(200);
      response.setContentType("text/plain");
      response
          .getOutputStream()
          .write(("written " + verified.fence().tokenText()).getBytes(StandardCharsets.UTF_8));
    }
  }
}
