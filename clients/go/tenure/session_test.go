package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// Acquire, an explicit Renew, Release: the session's fields follow the
// server's replies and Release ends the session and frees the lease.
func TestAcquireRenewRelease(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	name := leaseName(t, "a")

	s, err := c.Acquire(ctx, name, "holder-1", 2*time.Second, tenure.WithMetadata(map[string]string{"job": "report"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	if s.Name() != name || s.Holder() != "holder-1" || s.TTL() != 2*time.Second {
		t.Fatalf("session %q %q %v, want %q holder-1 2s", s.Name(), s.Holder(), s.TTL(), name)
	}
	if s.FencingToken() == 0 || s.Revision() != s.FencingToken() {
		t.Fatalf("token %d revision %d: the acquiring write's revision is the token", s.FencingToken(), s.Revision())
	}
	if len(s.LeaseKey()) < 16 || !s.Held() || s.Err() != nil {
		t.Fatalf("key %q held %v err %v", s.LeaseKey(), s.Held(), s.Err())
	}

	got, err := c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetHolder() != "holder-1" || got.GetFencingToken() != s.FencingToken() || got.GetMetadata()["job"] != "report" {
		t.Fatalf("GetLease = %v", got)
	}

	rev, deadline := s.Revision(), s.SafeDeadline()
	if err := s.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Revision() <= rev || !s.SafeDeadline().After(deadline) {
		t.Fatalf("after Renew: revision %d (was %d), deadline moved %v", s.Revision(), rev, s.SafeDeadline().Sub(deadline))
	}
	if s.Lease().GetFencingToken() != s.FencingToken() {
		t.Fatalf("renewal changed the token: %d -> %d", s.FencingToken(), s.Lease().GetFencingToken())
	}

	if released, err := s.Release(ctx); err != nil || !released {
		t.Fatalf("Release = %v, %v; want true, nil", released, err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(s.Err(), tenure.ErrReleased) || !errors.Is(context.Cause(s.Context()), tenure.ErrReleased) || s.Held() {
		t.Fatalf("after Release: err %v cause %v held %v", s.Err(), context.Cause(s.Context()), s.Held())
	}
	if released, err := s.Release(ctx); err != nil || released {
		t.Fatalf("second Release = %v, %v; want false, nil", released, err)
	}
	if err := s.Renew(ctx); !errors.Is(err, tenure.ErrReleased) {
		t.Fatalf("Renew after Release = %v, want ErrReleased", err)
	}
	_, err = c.Get(ctx, name)
	if tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_NOT_FOUND || status.Code(err) != codes.NotFound {
		t.Fatalf("GetLease after release = %v, want LEASE_NOT_FOUND", err)
	}
}

// Two sessions racing for one name: exactly one wins, the other is told
// LEASE_HELD with the winner's holder and token.
func TestRaceOneWins(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "a")
	clients := []*tenure.Client{newClient(t, shared.addr), newClient(t, shared.addr)}

	var wg sync.WaitGroup
	start := make(chan struct{})
	sessions := make([]*tenure.Session, 2)
	errs := make([]error, 2)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			sessions[i], errs[i] = clients[i].Acquire(ctx, name, "racer-"+strconv.Itoa(i), 2*time.Second)
		}()
	}
	close(start)
	wg.Wait()

	winner, loser := 0, 1
	if errs[0] != nil {
		winner, loser = 1, 0
	}
	if errs[winner] != nil {
		t.Fatalf("nobody won: %v / %v", errs[0], errs[1])
	}
	defer sessions[winner].Release(ctx)
	if errs[loser] == nil {
		sessions[loser].Release(ctx)
		t.Fatal("both racers acquired the lease")
	}
	var te *tenure.Error
	if !errors.As(errs[loser], &te) || te.Reason != tenurev1.ErrorReason_LEASE_HELD || te.Code != codes.FailedPrecondition {
		t.Fatalf("loser got %v, want LEASE_HELD", errs[loser])
	}
	w := sessions[winner]
	if te.Metadata["holder"] != w.Holder() || te.Metadata["fencing_token"] != strconv.FormatUint(w.FencingToken(), 10) {
		t.Fatalf("LEASE_HELD metadata %v, want holder %q token %d", te.Metadata, w.Holder(), w.FencingToken())
	}
}

// The fencing token stays the same across background renewals and is
// greater for the next holder.
func TestFencingTokenStableAndIncreasing(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	name := leaseName(t, "a")
	events, err := c.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events, 5*time.Second); ev.Type != tenure.EventSnapshotComplete {
		t.Fatalf("first event %v, want SNAPSHOT_COMPLETE", ev.Type)
	}

	a, err := c.Acquire(ctx, name, "first", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	acquiredRev := a.Revision()
	// Await two background renewals.
	for renewals := 0; renewals < 2; {
		ev := nextEvent(t, events, 5*time.Second)
		switch ev.Type {
		case tenure.EventAcquired:
		case tenure.EventRenewed:
			renewals++
			if ev.FencingToken != a.FencingToken() {
				t.Fatalf("renewal %d carries token %d, want %d", renewals, ev.FencingToken, a.FencingToken())
			}
		default:
			t.Fatalf("unexpected %v", ev.Type)
		}
	}
	if a.Revision() <= acquiredRev || a.Lease().GetFencingToken() != a.FencingToken() {
		t.Fatalf("after renewals: revision %d (acquired at %d), lease token %d", a.Revision(), acquiredRev, a.Lease().GetFencingToken())
	}
	if _, err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	b, err := c.Acquire(ctx, name, "second", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if b.FencingToken() <= a.Revision() {
		t.Fatalf("next holder's token %d not above the previous holding's last revision %d", b.FencingToken(), a.Revision())
	}
}

// A holder whose renewals stall signals loss by its safe deadline, which
// falls before the server expires the lease and another holder takes it.
func TestLossWhenTakenOverAfterExpiry(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	name := leaseName(t, "a")
	events, err := c.Watch(ctx, name, tenure.WithEventTypes(tenure.EventRenewed, tenure.EventExpired))
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events, 5*time.Second); ev.Type != tenure.EventSnapshotComplete {
		t.Fatalf("first event %v, want SNAPSHOT_COMPLETE", ev.Type)
	}

	stalled, err := c.Acquire(ctx, name, "stalled", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Stall after one background renewal, so the deadline under test is
	// the one that renewal set.
	if ev := nextEvent(t, events, 5*time.Second); ev.Type != tenure.EventRenewed {
		t.Fatalf("got %v, want RENEWED", ev.Type)
	}
	tenure.PauseRenewals(stalled)
	for {
		ev := nextEvent(t, events, 10*time.Second)
		if ev.Type == tenure.EventRenewed { // one already in flight
			continue
		}
		if ev.Type != tenure.EventExpired || ev.FencingToken != stalled.FencingToken() {
			t.Fatalf("got %v token %d, want EXPIRED of token %d", ev.Type, ev.FencingToken, stalled.FencingToken())
		}
		break
	}

	sent := time.Now()
	next, err := c.Acquire(ctx, name, "next", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)

	waitDone(t, stalled, 5*time.Second)
	if !errors.Is(stalled.Err(), tenure.ErrDeadlinePassed) || stalled.Held() {
		t.Fatalf("stalled holder: err %v held %v, want ErrDeadlinePassed", stalled.Err(), stalled.Held())
	}
	if !stalled.SafeDeadline().Before(sent) {
		t.Fatalf("stalled holder's safe deadline %v is not before the takeover began", stalled.SafeDeadline().Sub(sent))
	}
	if next.FencingToken() <= stalled.FencingToken() {
		t.Fatalf("takeover token %d not above %d", next.FencingToken(), stalled.FencingToken())
	}
	// The stalled holder can no longer release what is now someone else's:
	// Release says "was not held", which is no error.
	if released, err := stalled.Release(ctx); err != nil || released {
		t.Fatalf("stale Release = %v, %v; want false, nil", released, err)
	}
	if _, err := c.Get(ctx, name); err != nil {
		t.Fatalf("the stale Release must not free the new holding: %v", err)
	}
}

// A holding released behind the session's back ends the session at once,
// long before its next renewal: the client's shared watch sees the RELEASED
// of its token. (The renewal path, LEASE_NOT_HELD, is tested where the watch
// is refused: TestLossFallsBackToRenewals.)
func TestLossOnLeaseNotHeld(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	name := leaseName(t, "a")
	s, err := c.Acquire(ctx, name, "holder", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	// Someone else holding the same key (a duplicate process) releases it,
	// and a new holder takes the name.
	if _, err := c.Stub().Release(ctx, &tenurev1.ReleaseRequest{Name: name, ExpectedRevision: s.Revision(), LeaseKey: s.LeaseKey()}); err != nil {
		t.Fatal(err)
	}
	other, err := c.Acquire(ctx, name, "other", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)

	waitDone(t, s, 20*time.Second) // the first renewal would run at 27 s
	if !errors.Is(s.Err(), tenure.ErrLostOnWatch) {
		t.Fatalf("loss cause %v, want ErrLostOnWatch", s.Err())
	}
	if context.Cause(s.Context()) != s.Err() || s.Held() {
		t.Fatalf("cause %v, held %v", context.Cause(s.Context()), s.Held())
	}
}

// With the server gone, the session signals loss at its safe deadline, and
// the deadline never moves after the server stopped.
func TestLossByDeadlineWhenServerUnreachable(t *testing.T) {
	ctx := testCtx(t)
	srv, err := startServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	c := newClient(t, srv.addr)
	s, err := c.Acquire(ctx, leaseName(t, "a"), "holder", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)

	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}
	deadline := s.SafeDeadline()
	waitDone(t, s, time.Until(deadline)+5*time.Second)
	if !errors.Is(s.Err(), tenure.ErrDeadlinePassed) || s.Held() {
		t.Fatalf("err %v held %v, want ErrDeadlinePassed", s.Err(), s.Held())
	}
	if !s.SafeDeadline().Equal(deadline) {
		t.Fatalf("safe deadline moved by %v without a server", s.SafeDeadline().Sub(deadline))
	}
	var te *tenure.Error
	if !errors.As(s.Err(), &te) || te.Code != codes.Unavailable && te.Code != codes.DeadlineExceeded {
		t.Fatalf("loss error %v should carry the last renewal failure", s.Err())
	}
}

// Acquire with a wait blocks until the holding expires, then returns a
// session whose safe deadline lies ahead even though the wait outlasted the
// TTL (the helper renews at once in that case).
func TestAcquireWaits(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	name := leaseName(t, "a")
	first, err := c.Acquire(ctx, name, "first", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tenure.PauseRenewals(first)

	_, err = c.Acquire(ctx, name, "impatient", time.Second)
	if tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_HELD {
		t.Fatalf("Acquire without wait = %v, want LEASE_HELD", err)
	}
	second, err := c.Acquire(ctx, name, "patient", time.Second, tenure.WithWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if !second.Held() || second.FencingToken() <= first.FencingToken() {
		t.Fatalf("waited session held %v token %d (first %d)", second.Held(), second.FencingToken(), first.FencingToken())
	}
}

// Acquire retried with the same holder and key returns the same holding.
func TestAcquireRetrySameKey(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	name := leaseName(t, "a")
	key := "retry-key-0123456789abcdef"
	s1, err := c.Acquire(ctx, name, "holder", 2*time.Second, tenure.WithLeaseKey(key))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Acquire(ctx, name, "holder", 2*time.Second, tenure.WithLeaseKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if s2.FencingToken() != s1.FencingToken() || s2.Revision() <= s1.Revision() || s2.LeaseKey() != key {
		t.Fatalf("retry: token %d rev %d, first token %d rev %d", s2.FencingToken(), s2.Revision(), s1.FencingToken(), s1.Revision())
	}
	if released, err := s1.Release(ctx); err != nil || !released {
		t.Fatalf("first Release = %v, %v", released, err)
	}
	if released, err := s2.Release(ctx); err != nil || released {
		t.Fatalf("releasing the same holding twice = %v, %v; want false, nil", released, err)
	}
}

// Errors carry the server's reason as a typed value.
func TestErrorReasons(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)

	_, err := c.Acquire(ctx, "bad name!", "holder", time.Second)
	var te *tenure.Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_INVALID_NAME || te.Code != codes.InvalidArgument || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("invalid name: %v", err)
	}
	if _, err := c.Acquire(ctx, leaseName(t, "a"), "", time.Second); tenure.ReasonOf(err) != tenurev1.ErrorReason_INVALID_HOLDER {
		t.Fatalf("empty holder: %v", err)
	}
	if _, err := c.Acquire(ctx, leaseName(t, "a"), "h", time.Second, tenure.WithLeaseKey("short")); tenure.ReasonOf(err) != tenurev1.ErrorReason_INVALID_LEASE_KEY {
		t.Fatalf("short key: %v", err)
	}
	if _, err := c.Watch(ctx, "bad name!"); tenure.ReasonOf(err) != tenurev1.ErrorReason_INVALID_NAME {
		t.Fatalf("watch invalid name: %v", err)
	}
	_, err = c.Stub().Renew(ctx, &tenurev1.RenewRequest{Name: leaseName(t, "a"), ExpectedRevision: 1, LeaseKey: "0123456789abcdef", Ttl: durationpb.New(time.Second)})
	if r := tenure.ReasonOf(tenure.FromError(err)); r != tenurev1.ErrorReason_LEASE_NOT_HELD {
		t.Fatalf("renew of an unheld lease: %v", err)
	}
	if _, err := c.Acquire(ctx, leaseName(t, "a"), "h", time.Second, tenure.WithRenewFraction(1)); err == nil {
		t.Fatal("renew fraction 1 accepted")
	}
}

// The in-memory fence accepts tokens at least as high as the highest seen.
func TestFence(t *testing.T) {
	var f tenure.Fence
	if !f.Accept("db", 5) || !f.Accept("db", 5) || !f.Accept("db", 7) {
		t.Fatal("rising tokens refused")
	}
	if f.Accept("db", 6) || f.Accept("db", 0) {
		t.Fatal("stale token accepted")
	}
	if !f.Accept("other", 1) || f.Highest("db") != 7 || f.Highest("other") != 1 {
		t.Fatalf("per-resource tokens wrong: db %d other %d", f.Highest("db"), f.Highest("other"))
	}
}

// A RevokeLease ends the holder's session through the client's shared watch,
// long before its next renewal (at 27 s here); the revoke-to-loss time is
// logged, not asserted. Two sessions of one client under different names
// share one watch, and the revoke of one leaves the other held.
func TestLossOnRevoke(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	admin := newClient(t, shared.addr)
	name := leaseName(t, "a")
	s, err := c.Acquire(ctx, name, "holder", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	other, err := c.Acquire(ctx, leaseName(t, "b"), "holder", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	// The watch is live (else the loss would come from its snapshot, not
	// from the REVOKED event this test measures).
	select {
	case <-tenure.LossWatchSynced(c):
	case <-time.After(10 * time.Second):
		t.Fatal("the shared watch did not open")
	}
	leases, err := admin.ListLeases(ctx, leaseName(t, ""))
	if err != nil || len(leases) != 2 {
		t.Fatalf("ListLeases = %d leases, %v; want 2", len(leases), err)
	}

	start := time.Now()
	if _, err := admin.RevokeLease(ctx, name, "test revoke", s.FencingToken()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s, 20*time.Second)
	t.Logf("revoke-to-loss: %v (from sending the RevokeLease)", time.Since(start))
	if !errors.Is(s.Err(), tenure.ErrLostOnWatch) || !strings.Contains(s.Err().Error(), "REVOKED") {
		t.Fatalf("loss cause %v, want ErrLostOnWatch on REVOKED", s.Err())
	}
	if !other.Held() {
		t.Fatalf("the other session was lost too: %v", other.Err())
	}
	if released, err := s.Release(ctx); err != nil || released {
		t.Fatalf("Release after loss = %v, %v; want false, nil", released, err)
	}
	if _, err := admin.RevokeLease(ctx, name, "again", 0); tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_NOT_FOUND {
		t.Fatalf("revoking a free name = %v, want LEASE_NOT_FOUND", err)
	}
}

// Error messages name the server, the RPC and the cause; enums print as
// their names and tokens as decimal numbers.
func TestErrorMessages(t *testing.T) {
	ctx := testCtx(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := newClient(t, addr)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.Acquire(cctx, "x", "h", time.Second)
	if msg := err.Error(); !strings.HasPrefix(msg, "tenure at "+addr+": Acquire: UNAVAILABLE: ") || !strings.Contains(msg, "connection refused") {
		t.Fatalf("message %q, want the target, the RPC and connection refused", msg)
	}
	live := newClient(t, shared.addr)
	name := leaseName(t, "a")
	s, err := live.Acquire(ctx, name, "first", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	_, err = live.Acquire(ctx, name, "second", 5*time.Second)
	want := "tenure at " + shared.addr + ": Acquire: LEASE_HELD (FAILED_PRECONDITION): "
	if msg := err.Error(); !strings.HasPrefix(msg, want) || tenure.ReasonOf(err).String() != "LEASE_HELD" {
		t.Fatalf("message %q, want prefix %q", msg, want)
	}
	if got := tenure.EventName(tenure.EventRevoked); got != "REVOKED" {
		t.Fatalf("EventName = %q", got)
	}
	if got := fmt.Sprint(s.FencingToken()); got != strconv.FormatUint(s.FencingToken(), 10) {
		t.Fatalf("token prints as %q", got)
	}
}
