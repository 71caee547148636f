package tenure_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// A lock delay keeps the name refused after a revoke (LEASE_HELD with
// state LOCK_DELAY; a waiting Acquire gets it afterwards), never after a
// release.
func TestLockDelay(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	admin := newClient(t, shared.addr)
	name := leaseName(t, "a")

	s, err := c.Acquire(ctx, name, "careful", 30*time.Second, tenure.WithLockDelay(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Lease().GetLockDelay().AsDuration(); got != 2*time.Second {
		t.Fatalf("lease lock delay %v, want 2s", got)
	}
	if released, err := s.Release(ctx); err != nil || !released {
		t.Fatalf("Release = %v, %v", released, err)
	}
	// Free at once after a release.
	again, err := c.Acquire(ctx, name, "next", time.Second)
	if err != nil {
		t.Fatalf("Acquire right after a release (no delay) = %v", err)
	}
	again.Release(ctx)

	name = leaseName(t, "b")
	s, err = c.Acquire(ctx, name, "careful", 30*time.Second, tenure.WithLockDelay(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RevokeLease(ctx, name, "test revoke", s.FencingToken()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s, 20*time.Second)
	_, err = c.Acquire(ctx, name, "eager", time.Second)
	var te *tenure.Error
	if tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_HELD || !asError(err, &te) || te.Metadata["state"] != "LOCK_DELAY" {
		t.Fatalf("Acquire during the lock delay = %v, want LEASE_HELD in state LOCK_DELAY", err)
	}
	next, err := c.Acquire(ctx, name, "patient", time.Second, tenure.WithWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.FencingToken() <= s.FencingToken() {
		t.Fatalf("token %d after %d", next.FencingToken(), s.FencingToken())
	}
}

// Inspect reports the queue of waiting Acquires; the waiter gets the lease
// when it is released.
func TestInspectShowsWaiters(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	name := leaseName(t, "a")
	s, err := c.Acquire(ctx, name, "holder", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := newClient(t, shared.addr).Acquire(ctx, name, "waiter", 5*time.Second, tenure.WithWait(30*time.Second))
		if err == nil {
			defer w.Release(ctx)
		}
		got <- err
	}()
	// Nothing signals that the waiter is queued: poll the count.
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if info.GetWaiting() == 1 && info.GetLease().GetHolder() == "holder" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect never showed the waiter: %v", info)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	if _, err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not get the lease")
	}
}

// asError is errors.As for *tenure.Error.
func asError(err error, te **tenure.Error) bool { return errors.As(err, te) }
