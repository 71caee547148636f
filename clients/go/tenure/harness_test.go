package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tenure-dev/tenure/clients/go/tenure"
)

// shared is the Tenure server most tests use; TestMain starts and stops it.
var shared *server

func TestMain(m *testing.M) {
	s, err := startServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting tenure:", err)
		os.Exit(1)
	}
	shared = s
	code := m.Run()
	if err := s.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping tenure:", err)
	}
	os.Exit(code)
}

// server is a real `tenure serve` process with its own nats-server.
type server struct {
	addr    string
	cmd     *exec.Cmd
	dataDir string
	logPath string
	exited  chan struct{} // closed when the process has exited
	creds   credentials.TransportCredentials
}

// repoRoot is the repository root: this package lives in clients/go/tenure.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", "..", ".."))
}

// toolPath returns $env, or def, resolved against the repository root.
func toolPath(env, def string) string {
	p := os.Getenv(env)
	if p == "" {
		p = def
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(repoRoot(), p)
	}
	return p
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startServer starts Tenure on a free loopback port with a fresh data dir
// and waits until its health check reports SERVING.
func startServer() (*server, error) {
	return startServerWith(insecure.NewCredentials())
}

// startServerWith starts Tenure with extra `serve` flags; health checks dial
// with creds (TLS when the flags turn it on).
func startServerWith(creds credentials.TransportCredentials, extra ...string) (*server, error) {
	nats := toolPath("NATS_SERVER", ".tools/bin/nats-server")
	// A free port can be taken before Tenure binds it (by the nats-server it
	// starts, which picks its own free port): then start again on another.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := startServerAt(fmt.Sprintf("127.0.0.1:%d", port), creds, append([]string{"--nats-server", nats}, extra...)...)
		if err == nil || attempt >= 3 || !strings.Contains(err.Error(), "Address already in use") {
			return s, err
		}
	}
}

// startServerAt starts Tenure listening on addr with these `serve` flags
// (besides --listen, --data-dir and --log-format) and waits until it is
// SERVING.
func startServerAt(addr string, creds credentials.TransportCredentials, extra ...string) (*server, error) {
	bin := toolPath("TENURE_BIN", "target/debug/tenure")
	nats := toolPath("NATS_SERVER", ".tools/bin/nats-server")
	for _, p := range []string{bin, nats} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%v (run scripts/tools.sh and cargo build at the repo root)", err)
		}
	}
	dir, err := os.MkdirTemp("", "tenure-go-test-")
	if err != nil {
		return nil, err
	}
	// The log lives in the data dir, removed with it by stop.
	logFile, err := os.Create(filepath.Join(dir, "tenure.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	s := &server{
		addr:    addr,
		dataDir: dir,
		logPath: logFile.Name(),
		exited:  make(chan struct{}),
	}
	s.creds = creds
	args := []string{"serve", "--listen", s.addr, "--data-dir", dir, "--log-format", "json"}
	s.cmd = exec.Command(bin, append(args, extra...)...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// Own process group, so a forced stop also ends the nats-server it
	// started; SIGTERM if this test process dies first (e.g. on a timeout).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(30 * time.Second); err != nil {
		err = fmt.Errorf("%w; log:\n%s", err, s.logTail())
		_ = s.stop()
		return nil, err
	}
	return s, nil
}

// waitReady retries the gRPC health check until SERVING, the process exits,
// or the timeout passes.
func (s *server) waitReady(timeout time.Duration) error {
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(s.creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "tenure.v1.LeaseService"})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tenure at %s not SERVING after %v (last: %v, %v)", s.addr, timeout, resp.GetStatus(), err)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("tenure exited before it was ready: %v", s.cmd.ProcessState)
		case <-time.After(100 * time.Millisecond): // readiness probe interval
		}
	}
}

// stop sends SIGTERM (Tenure then stops its nats-server), waits for the
// exit, and kills the process group if it takes too long.
func (s *server) stop() error {
	defer os.RemoveAll(s.dataDir)
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return nil
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		return errors.New("tenure did not stop on SIGTERM; killed it")
	}
}

// logTail returns the last lines of the server's log.
func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// newClient dials addr and closes the client at the end of the test.
func newClient(t *testing.T, addr string) *tenure.Client {
	t.Helper()
	c, err := tenure.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// leaseName is a lease name unique to the test.
func leaseName(t *testing.T, suffix string) string {
	return "go." + strings.ReplaceAll(t.Name(), "/", ".") + "." + suffix
}

// testCtx is a context bounded for one test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// nextEvent returns the next event, failing on a stream error, a closed
// channel or the timeout.
func nextEvent(t *testing.T, events <-chan tenure.Event, timeout time.Duration) tenure.Event {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("watch channel closed")
		}
		if ev.Err != nil {
			t.Fatalf("watch ended: %v", ev.Err)
		}
		return ev
	case <-time.After(timeout):
		t.Fatalf("no watch event within %v", timeout)
	}
	panic("unreachable")
}

// waitDone waits for a session's loss signal.
func waitDone(t *testing.T, s *tenure.Session, timeout time.Duration) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(timeout):
		t.Fatalf("session not lost within %v (err %v)", timeout, s.Err())
	}
}
