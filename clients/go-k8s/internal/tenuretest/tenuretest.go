// Package tenuretest starts a real Tenure for tests: `tenure serve` with its
// own nats-server on a free loopback port and a fresh data folder, as
// clients/go's harness does. The binaries are the repository's
// target/debug/tenure and .tools/bin/nats-server (TENURE_BIN and
// NATS_SERVER override them; relative paths are from the repository root).
package tenuretest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tenure-dev/tenure/clients/go/tenure"
)

// Server is a running `tenure serve`.
type Server struct {
	Addr    string
	cmd     *exec.Cmd
	dir     string
	logPath string
	exited  chan struct{}
}

// repoRoot is the repository root: this file is in
// clients/go-k8s/internal/tenuretest.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
}

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

// Start starts Tenure with these extra `serve` flags and stops it when the
// test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	var s *Server
	var err error
	// A free port can be taken before Tenure binds it: try another.
	for attempt := 1; attempt <= 3; attempt++ {
		if s, err = start(extra); err == nil || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func start(extra []string) (*Server, error) {
	bin := toolPath("TENURE_BIN", "target/debug/tenure")
	nats := toolPath("NATS_SERVER", ".tools/bin/nats-server")
	for _, p := range []string{bin, nats} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%v (run scripts/tools.sh and cargo build at the repo root)", err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "tenure-go-k8s-test-")
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "tenure.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	s := &Server{Addr: addr, dir: dir, logPath: logFile.Name(), exited: make(chan struct{})}
	args := append([]string{"serve", "--listen", addr, "--data-dir", dir, "--log-format", "json", "--nats-server", nats}, extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// Own process group (a forced stop also ends its nats-server); SIGTERM
	// when the test process dies first.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(30 * time.Second); err != nil {
		err = fmt.Errorf("%w; log:\n%s", err, s.LogTail())
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls the gRPC health check until SERVING.
func (s *Server) waitReady(timeout time.Duration) error {
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
			return fmt.Errorf("tenure at %s not SERVING after %v (last: %v, %v)", s.Addr, timeout, resp.GetStatus(), err)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("tenure exited before it was ready: %v", s.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond): // readiness probe interval
		}
	}
}

// Stop sends SIGTERM, waits for the exit (killing the process group after
// 15 s) and removes the data folder.
func (s *Server) Stop() error {
	defer os.RemoveAll(s.dir)
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

// LogTail is the end of the server's log.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// Client dials the server; it is closed when the test ends.
func (s *Server) Client(t testing.TB) *tenure.Client {
	t.Helper()
	c, err := tenure.Dial(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
