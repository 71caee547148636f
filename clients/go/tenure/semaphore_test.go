package tenure_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// Six clients, alternating between two Tenure replicas on one bucket, race
// for a semaphore of 2 with a wait: a shared count of live holders
// (incremented after Acquire, decremented before Release) never exceeds 2,
// every holding has a slot in 1..2 and its own fencing token.
func TestSemaphoreRaceNeverOverGrants(t *testing.T) {
	ctx := testCtx(t)
	natsURL := startNats(t)
	replicas := []*server{startReplica(t, "", natsURL), startReplica(t, "", natsURL)}
	name := leaseName(t, "sem")
	const clients, limit = 6, 2

	var live, peak atomic.Int32
	var mu sync.Mutex
	tokens := map[uint64]string{}
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		c := newClient(t, replicas[i%2].addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := "worker-" + string(rune('a'+i))
			s, err := c.Semaphore(name, limit).Acquire(ctx, holder, 5*time.Second, tenure.WithWait(45*time.Second))
			if err != nil {
				errs <- err
				return
			}
			n := live.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			mu.Lock()
			if other, dup := tokens[s.FencingToken()]; dup {
				errs <- errors.New(holder + " got the token of " + other)
			}
			tokens[s.FencingToken()] = holder
			mu.Unlock()
			if s.Slot() < 1 || s.Slot() > limit {
				errs <- errors.New(holder + ": slot out of range")
			}
			time.Sleep(100 * time.Millisecond) // the holder's work
			if !s.Held() {
				errs <- errors.New(holder + " lost its slot while working: " + s.Err().Error())
			}
			live.Add(-1)
			if released, err := s.Release(ctx); err != nil || !released {
				errs <- errors.Join(errors.New(holder+": release"), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p := peak.Load(); p > limit || p < 1 {
		t.Fatalf("peak live holders %d, limit %d", p, limit)
	}
	if len(tokens) != clients {
		t.Fatalf("%d distinct tokens for %d holdings", len(tokens), clients)
	}
	t.Logf("peak live holders: %d of %d", peak.Load(), limit)
}

// An Acquire with another limit than the one in force fails with the typed
// LIMIT_MISMATCH error, which names the limit in force.
func TestSemaphoreLimitMismatch(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	name := leaseName(t, "sem")
	s, err := c.Semaphore(name, 2).Acquire(ctx, "first", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	_, err = c.Semaphore(name, 3).Acquire(ctx, "second", 5*time.Second)
	var te *tenure.Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_LIMIT_MISMATCH || te.Code != codes.FailedPrecondition {
		t.Fatalf("Acquire with limit 3 = %v, want LIMIT_MISMATCH", err)
	}
	if n, ok := tenure.LimitInForce(err); !ok || n != 2 {
		t.Fatalf("LimitInForce = %d, %v; want 2, true", n, ok)
	}
	if _, ok := tenure.LimitInForce(errors.New("other")); ok {
		t.Fatal("LimitInForce of an unrelated error")
	}
	if _, err := c.Semaphore(name, 0).Acquire(ctx, "zero", 5*time.Second); err == nil {
		t.Fatal("limit 0 accepted")
	}
}

// Other holders of the same semaphore acquiring and releasing never end a
// session (the loss watch filters events by slot); the end of its own slot
// does, and leaves the same client's other slot held. The client also holds
// a plain lease under a sibling name, so one watch stream carries both names
// in order: once the revoke of that lease has ended its session, the
// watch has processed every earlier event of the other slots.
func TestSemaphoreLossOnlyForOwnSlot(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	others := newClient(t, shared.addr)
	admin := newClient(t, shared.addr)
	name := leaseName(t, "sem")
	sem := c.Semaphore(name, 3)
	s, err := sem.Acquire(ctx, "mine", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	mate, err := sem.Acquire(ctx, "mate", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	defer mate.Release(ctx)
	if s.Slot() == mate.Slot() || s.Slot() == 0 || mate.Slot() == 0 {
		t.Fatalf("slots %d and %d", s.Slot(), mate.Slot())
	}
	marker, err := c.Acquire(ctx, leaseName(t, "marker"), "mine", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tenure.LossWatchSynced(c):
	case <-time.After(10 * time.Second):
		t.Fatal("the shared watch did not open")
	}

	// Another client takes the third slot and gives it back, twice.
	for range 2 {
		o, err := others.Semaphore(name, 3).Acquire(ctx, "other", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if released, err := o.Release(ctx); err != nil || !released {
			t.Fatalf("other's Release = %v, %v", released, err)
		}
	}
	if _, err := admin.RevokeLease(ctx, marker.Name(), "barrier", marker.FencingToken()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, marker, 20*time.Second)
	if !errors.Is(marker.Err(), tenure.ErrLostOnWatch) {
		t.Fatalf("marker loss cause %v, want ErrLostOnWatch", marker.Err())
	}
	if !s.Held() || !mate.Held() {
		t.Fatalf("other holders' events ended a session: %v / %v", s.Err(), mate.Err())
	}

	_, err = admin.RevokeSlot(ctx, name, s.Slot(), "test revoke", s.FencingToken())
	switch {
	case err == nil:
		waitDone(t, s, 20*time.Second)
		if !errors.Is(s.Err(), tenure.ErrLostOnWatch) || !strings.Contains(s.Err().Error(), "REVOKED") {
			t.Fatalf("loss cause %v, want ErrLostOnWatch on REVOKED of its slot", s.Err())
		}
		if released, err := s.Release(ctx); err != nil || released {
			t.Fatalf("Release after loss = %v, %v; want false, nil", released, err)
		}
	case tenure.ReasonOf(err) == tenurev1.ErrorReason_LEASE_NOT_FOUND:
		// A server without slots in RevokeLease: the slot ends by expiry
		// instead, once its holder stops renewing.
		t.Logf("RevokeLease ignores the slot here (%v): ending the slot by expiry", err)
		short, err := sem.Acquire(ctx, "short", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tenure.PauseRenewals(short)
		waitDone(t, short, 20*time.Second)
	default:
		t.Fatal(err)
	}
	if !mate.Held() {
		t.Fatalf("the same client's other slot was lost too: %v", mate.Err())
	}
	if released, err := mate.Release(ctx); err != nil || !released {
		t.Fatalf("mate's Release = %v, %v; want true, nil", released, err)
	}
}
