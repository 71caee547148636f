package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// startNats starts a nats-server with JetStream on a free port, stopped at
// the end of the test, and returns its URL: Tenure processes started with
// --nats-url share its bucket and can be killed without it.
func startNats(t *testing.T) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(toolPath("NATS_SERVER", ".tools/bin/nats-server"),
		"-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return "nats://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server not listening on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // readiness probe interval
	}
}

// startReplica starts a Tenure on addr ("" for a free port) over natsURL,
// stopped at the end of the test.
func startReplica(t *testing.T, addr, natsURL string, extra ...string) *server {
	t.Helper()
	if addr == "" {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		addr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	s, err := startServerAt(addr, insecure.NewCredentials(), append([]string{"--nats-url", natsURL}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.stop() })
	return s
}

// kill SIGKILLs the Tenure process (its nats-server is separate) and waits
// for it to exit.
func (s *server) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	_ = os.RemoveAll(s.dataDir)
}

// rawAcquire takes name with a long TTL through the raw stub (no session, so
// no renewals add events) and returns its token.
func rawAcquire(ctx context.Context, t *testing.T, c *tenure.Client, name string) (*tenurev1.Lease, string) {
	t.Helper()
	resp, err := c.Stub().Acquire(ctx, &tenurev1.AcquireRequest{Name: name, Holder: "raw", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetLease(), resp.GetLeaseKey()
}

// expectEvent reads the next event and checks its type and name.
func expectEvent(t *testing.T, events <-chan tenure.Event, typ tenure.EventType, name string) tenure.Event {
	t.Helper()
	e := nextEvent(t, events, 30*time.Second)
	if e.Type != typ || e.Name != name {
		t.Fatalf("got %s %q (revision %d), want %s %q", tenure.EventName(e.Type), e.Name, e.Revision,
			tenure.EventName(typ), name)
	}
	return e
}

// A watch open across a Tenure restart (SIGKILL, then a new Tenure on the
// same port over the same NATS) sees every change exactly once and in
// order: one made before, two made on another replica while its Tenure was
// down, and one after; the next event after those is the final release, so
// nothing was delivered twice.
func TestWatchResumesAcrossTenureRestart(t *testing.T) {
	ctx := testCtx(t)
	natsURL := startNats(t)
	first := startReplica(t, "", natsURL)
	other := startReplica(t, "", natsURL)
	c := newClient(t, first.addr)
	oc := newClient(t, other.addr)
	prefix := leaseName(t, "jobs")

	events, err := c.Watch(ctx, prefix+".>")
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, tenure.EventSnapshotComplete, "")
	a, aKey := rawAcquire(ctx, t, c, prefix+".a")
	expectEvent(t, events, tenure.EventAcquired, prefix+".a")

	first.kill(t)
	// While the watched Tenure is down, another replica changes the leases.
	b, _ := rawAcquire(ctx, t, oc, prefix+".b")
	if _, err := oc.Stub().Release(ctx, &tenurev1.ReleaseRequest{Name: prefix + ".a", ExpectedRevision: a.GetRevision(), LeaseKey: aKey}); err != nil {
		t.Fatal(err)
	}
	startReplica(t, first.addr, natsURL)

	if e := expectEvent(t, events, tenure.EventAcquired, prefix+".b"); e.FencingToken != b.GetFencingToken() || e.Resync {
		t.Fatalf("got %+v, want ACQUIRED of token %d, not a resync", e, b.GetFencingToken())
	}
	expectEvent(t, events, tenure.EventReleased, prefix+".a")
	cLease, cKey := rawAcquire(ctx, t, c, prefix+".c")
	expectEvent(t, events, tenure.EventAcquired, prefix+".c")
	if _, err := c.Stub().Release(ctx, &tenurev1.ReleaseRequest{Name: prefix + ".c", ExpectedRevision: cLease.GetRevision(), LeaseKey: cKey}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, tenure.EventReleased, prefix+".c")
}

// A session whose lease is revoked on another replica while its own Tenure
// is down is signalled lost by the shared watch once it reconnects (not at
// its next renewal, which is far off), and a session of the same client
// whose lease did not end stays held across the restart.
func TestSessionRevokedWhileTenureDownIsLost(t *testing.T) {
	ctx := testCtx(t)
	natsURL := startNats(t)
	first := startReplica(t, "", natsURL)
	other := startReplica(t, "", natsURL)
	c := newClient(t, first.addr)
	oc := newClient(t, other.addr)
	prefix := leaseName(t, "jobs")

	// Renewals only after 27 s: within the test, only the watch can tell.
	revoked, err := c.Acquire(ctx, prefix+".revoked", "me", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := c.Acquire(ctx, prefix+".kept", "me", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release(ctx)
	select {
	case <-tenure.LossWatchSynced(c):
	case <-time.After(10 * time.Second):
		t.Fatal("the shared watch never delivered its snapshot")
	}

	first.kill(t)
	if _, err := oc.RevokeLease(ctx, prefix+".revoked", "test: revoked while its Tenure is down", 0); err != nil {
		t.Fatal(err)
	}
	startReplica(t, first.addr, natsURL)

	waitDone(t, revoked, 30*time.Second)
	if !errors.Is(revoked.Err(), tenure.ErrLostOnWatch) {
		t.Fatalf("lost with %v, want the watch to have seen the revoke", revoked.Err())
	}
	if err := kept.Err(); err != nil {
		t.Fatalf("the unrevoked session was lost: %v", err)
	}
	if err := kept.Renew(ctx); err != nil {
		t.Fatalf("the unrevoked session no longer renews: %v", err)
	}
}

// When the changes made while its Tenure was down can no longer be proven
// complete (markers last only --marker-ttl), the resume is refused with
// WATCH_HISTORY_COMPACTED and the watch starts over with a fresh snapshot
// whose events say Resync: the lease released meanwhile is simply absent,
// the one acquired meanwhile is CURRENT, and live events follow.
func TestWatchFallsBackToSnapshotWhenHistoryCompacted(t *testing.T) {
	ctx := testCtx(t)
	natsURL := startNats(t)
	short := []string{"--marker-ttl", "3s", "--max-lock-delay", "1s"}
	first := startReplica(t, "", natsURL, short...)
	other := startReplica(t, "", natsURL, short...)
	c := newClient(t, first.addr)
	oc := newClient(t, other.addr)
	prefix := leaseName(t, "jobs")

	events, err := c.Watch(ctx, prefix+".>")
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, tenure.EventSnapshotComplete, "")
	a, aKey := rawAcquire(ctx, t, c, prefix+".a")
	expectEvent(t, events, tenure.EventAcquired, prefix+".a")

	first.kill(t)
	if _, err := oc.Stub().Release(ctx, &tenurev1.ReleaseRequest{Name: prefix + ".a", ExpectedRevision: a.GetRevision(), LeaseKey: aKey}); err != nil {
		t.Fatal(err)
	}
	b, _ := rawAcquire(ctx, t, oc, prefix+".b")
	// Await the history after a's revision no longer being resumable.
	deadline := time.Now().Add(30 * time.Second)
	for {
		wctx, cancel := context.WithCancel(ctx)
		stream, err := oc.Stub().WatchLease(wctx, &tenurev1.WatchLeaseRequest{Name: prefix + ".>", StartRevision: a.GetRevision()})
		if err == nil {
			_, err = stream.Recv()
		}
		cancel()
		if tenure.ReasonOf(tenure.FromError(err)) == tenurev1.ErrorReason_WATCH_HISTORY_COMPACTED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a resume from %d is still served after 30 s (last: %v)", a.GetRevision(), err)
		}
		time.Sleep(200 * time.Millisecond) // markers age by the clock: poll
	}
	startReplica(t, first.addr, natsURL, short...)

	if e := expectEvent(t, events, tenure.EventCurrent, prefix+".b"); !e.Resync || e.FencingToken != b.GetFencingToken() {
		t.Fatalf("got %+v, want CURRENT of token %d with Resync", e, b.GetFencingToken())
	}
	if e := expectEvent(t, events, tenure.EventSnapshotComplete, ""); !e.Resync {
		t.Fatalf("got %+v, want the resync snapshot's SNAPSHOT_COMPLETE with Resync", e)
	}
	rawAcquire(ctx, t, c, prefix+".c")
	if e := expectEvent(t, events, tenure.EventAcquired, prefix+".c"); e.Resync {
		t.Fatalf("got %+v, live events are not Resync", e)
	}
}
