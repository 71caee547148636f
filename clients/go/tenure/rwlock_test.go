package tenure_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// acquireAsync runs acquire in the background; its outcome arrives on the
// returned channel (type acquired of transfer_test.go).
func acquireAsync(acquire func() (*tenure.Session, error)) <-chan acquired {
	out := make(chan acquired, 1)
	go func() {
		s, err := acquire()
		out <- acquired{s, err}
	}()
	return out
}

// receive waits (bounded) for a background Acquire's outcome and fails the
// test on an error.
func receive(t *testing.T, ch <-chan acquired, what string) *tenure.Session {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.s
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not granted within 30s", what)
	}
	panic("unreachable")
}

// notGranted fails the test if the background Acquire has returned.
func notGranted(t *testing.T, ch <-chan acquired, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned too early: session %v, err %v", what, r.s, r.err)
	default:
	}
}

// waitQueued polls Inspect until n Acquires wait for name (queueing has no
// event), failing at once if one of the background Acquires in pending
// returns meanwhile (it should be queued, not granted).
func waitQueued(t *testing.T, c *tenure.Client, name string, n uint32, pending map[string]<-chan acquired) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for what, ch := range pending {
			notGranted(t, ch, what)
		}
		info, err := c.Inspect(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if info.GetWaiting() >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect never showed %d waiting: %v", n, info)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// eventLog records the order in which things happened, across goroutines.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// Two shared holders hold the lock at once, each with its own slot and
// token; meanwhile an exclusive Acquire without a wait is refused
// LEASE_HELD (permanent). Once both have released, it is granted.
func TestRWLockSharedHoldersExcludeAWriter(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "rw")
	r1, err := newClient(t, shared.addr).RWLock(name).RLock(ctx, "reader-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	r2, err := newClient(t, shared.addr).RWLock(name).RLock(ctx, "reader-2", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Release(ctx)
	for _, r := range []*tenure.Session{r1, r2} {
		if r.Mode() != tenure.LockShared || r.Lease().GetMode() != tenure.LockShared || r.Slot() == 0 || !r.Held() {
			t.Fatalf("%s: mode %v (lease %v), slot %d, held %v; want SHARED, a slot, held",
				r.Holder(), r.Mode(), r.Lease().GetMode(), r.Slot(), r.Held())
		}
	}
	if r1.Slot() == r2.Slot() || r2.FencingToken() <= r1.FencingToken() {
		t.Fatalf("readers' slots %d, %d and tokens %d, %d: want distinct slots and increasing tokens",
			r1.Slot(), r2.Slot(), r1.FencingToken(), r2.FencingToken())
	}

	wc := newClient(t, shared.addr)
	_, err = wc.RWLock(name).Lock(ctx, "writer", 10*time.Second)
	var te *tenure.Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_LEASE_HELD || te.Code != codes.FailedPrecondition || te.Retryable() {
		t.Fatalf("exclusive Lock without a wait while shared = %v; want LEASE_HELD (FAILED_PRECONDITION, permanent)", err)
	}
	if !r1.Held() || !r2.Held() {
		t.Fatalf("a refused writer ended a reader: %v / %v", r1.Err(), r2.Err())
	}

	for _, r := range []*tenure.Session{r1, r2} {
		if released, err := r.Release(ctx); err != nil || !released {
			t.Fatalf("%s Release = %v, %v; want true, nil", r.Holder(), released, err)
		}
	}
	w, err := wc.RWLock(name).Lock(ctx, "writer", 10*time.Second)
	if err != nil {
		t.Fatalf("Lock once the readers left = %v", err)
	}
	defer w.Release(ctx)
	if w.Mode() != tenure.LockExclusive || w.FencingToken() <= r2.FencingToken() {
		t.Fatalf("writer: mode %v, token %d (readers' %d, %d)", w.Mode(), w.FencingToken(), r1.FencingToken(), r2.FencingToken())
	}
	if released, err := w.Release(ctx); err != nil || !released {
		t.Fatalf("writer Release = %v, %v", released, err)
	}
}

// A writer queued behind two readers gets the lock once both have left,
// with a token above both of theirs; a reader arriving after the queued
// writer waits behind it (though compatible with the readers holding) and
// gets in only after the writer released. The order is asserted by the
// log of what happened, not by timing.
func TestRWLockQueuedWriterGoesBeforeALaterReader(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "rw")
	c := newClient(t, shared.addr)
	r1, err := c.RWLock(name).RLock(ctx, "reader-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	r2, err := newClient(t, shared.addr).RWLock(name).RLock(ctx, "reader-2", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Release(ctx)

	var log eventLog
	wc, lc := newClient(t, shared.addr), newClient(t, shared.addr)
	writer := acquireAsync(func() (*tenure.Session, error) {
		s, err := wc.RWLock(name).Lock(ctx, "writer", 10*time.Second, tenure.WithWait(45*time.Second))
		log.add("writer granted")
		return s, err
	})
	waitQueued(t, c, name, 1, map[string]<-chan acquired{"the queued writer": writer})

	// Without a wait, a reader is refused while the writer is queued,
	// although it is compatible with the readers holding.
	_, err = lc.RWLock(name).RLock(ctx, "eager-reader", 10*time.Second)
	var te *tenure.Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_LEASE_HELD {
		t.Fatalf("RLock without a wait behind a queued writer = %v; want LEASE_HELD", err)
	}
	if te.Metadata["state"] != "QUEUED" {
		t.Errorf("LEASE_HELD behind a queued writer has metadata %v; want state QUEUED", te.Metadata)
	}

	late := acquireAsync(func() (*tenure.Session, error) {
		s, err := lc.RWLock(name).RLock(ctx, "late-reader", 10*time.Second, tenure.WithWait(45*time.Second))
		log.add("late reader granted")
		return s, err
	})
	pending := map[string]<-chan acquired{"the queued writer": writer, "the late reader": late}
	waitQueued(t, c, name, 2, pending)

	log.add("readers releasing")
	for _, r := range []*tenure.Session{r1, r2} {
		if released, err := r.Release(ctx); err != nil || !released {
			t.Fatalf("%s Release = %v, %v; want true, nil", r.Holder(), released, err)
		}
	}
	w := receive(t, writer, "the queued writer")
	defer w.Release(ctx)
	if w.Mode() != tenure.LockExclusive || !w.Held() {
		t.Fatalf("writer: mode %v, held %v", w.Mode(), w.Held())
	}
	if w.FencingToken() <= r1.FencingToken() || w.FencingToken() <= r2.FencingToken() {
		t.Fatalf("writer token %d not above the readers' %d and %d", w.FencingToken(), r1.FencingToken(), r2.FencingToken())
	}
	notGranted(t, late, "the late reader (while the writer holds)")

	log.add("writer releasing")
	if released, err := w.Release(ctx); err != nil || !released {
		t.Fatalf("writer Release = %v, %v; want true, nil", released, err)
	}
	r3 := receive(t, late, "the late reader")
	defer r3.Release(ctx)
	if r3.Mode() != tenure.LockShared || r3.FencingToken() <= w.FencingToken() {
		t.Fatalf("late reader: mode %v, token %d (writer's %d)", r3.Mode(), r3.FencingToken(), w.FencingToken())
	}

	want := []string{"readers releasing", "writer granted", "writer releasing", "late reader granted"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
	if released, err := r3.Release(ctx); err != nil || !released {
		t.Fatalf("late reader Release = %v, %v", released, err)
	}
}

// A writer downgrades: same slot and lease key, a greater token, mode
// SHARED; a reader waiting for the lock gets in while the downgraded
// session still holds it, and the session keeps renewing as a shared
// holder (explicitly and in the background, with the new revision), and
// its loss watch does not take the downgrade's write for a loss. A second
// Downgrade is refused MODE_MISMATCH and leaves the session held.
func TestRWLockDowngrade(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "rw")
	c := newClient(t, shared.addr)
	admin := newClient(t, shared.addr)
	w, err := c.RWLock(name).Lock(ctx, "writer", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	// A lease of the same client, under a sibling name: the shared loss
	// watch carries both names on one stream, in order.
	marker, err := c.Acquire(ctx, leaseName(t, "marker"), "writer", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tenure.LossWatchSynced(c):
	case <-time.After(10 * time.Second):
		t.Fatal("the shared watch did not open")
	}
	token0, rev0, slot, key := w.FencingToken(), w.Revision(), w.Slot(), w.LeaseKey()
	if w.Mode() != tenure.LockExclusive || slot == 0 {
		t.Fatalf("writer: mode %v, slot %d", w.Mode(), slot)
	}

	rc := newClient(t, shared.addr)
	reader := acquireAsync(func() (*tenure.Session, error) {
		return rc.RWLock(name).RLock(ctx, "reader", 10*time.Second, tenure.WithWait(45*time.Second))
	})
	waitQueued(t, c, name, 1, map[string]<-chan acquired{"the reader (while exclusive)": reader})

	if err := w.Downgrade(ctx); err != nil {
		t.Fatalf("Downgrade = %v", err)
	}
	if w.Mode() != tenure.LockShared || w.Lease().GetMode() != tenure.LockShared {
		t.Fatalf("after Downgrade: mode %v (lease %v), want SHARED", w.Mode(), w.Lease().GetMode())
	}
	if w.FencingToken() <= token0 || w.Revision() <= rev0 || w.Slot() != slot || w.LeaseKey() != key {
		t.Fatalf("after Downgrade: token %d (was %d), revision %d (was %d), slot %d (was %d), key changed %v",
			w.FencingToken(), token0, w.Revision(), rev0, w.Slot(), slot, w.LeaseKey() != key)
	}
	token1 := w.FencingToken()

	r := receive(t, reader, "the waiting reader after the downgrade")
	defer r.Release(ctx)
	if r.Mode() != tenure.LockShared || r.FencingToken() <= token1 {
		t.Fatalf("reader: mode %v, token %d (downgraded token %d)", r.Mode(), r.FencingToken(), token1)
	}
	if !w.Held() {
		t.Fatalf("the downgraded session is not held once the reader joined: %v", w.Err())
	}

	rev1 := w.Revision()
	if err := w.Renew(ctx); err != nil {
		t.Fatalf("Renew after Downgrade = %v", err)
	}
	if w.Revision() <= rev1 || w.FencingToken() != token1 || w.Lease().GetFencingToken() != token1 {
		t.Fatalf("Renew after Downgrade: revision %d (was %d), token %d / %d (want %d)",
			w.Revision(), rev1, w.FencingToken(), w.Lease().GetFencingToken(), token1)
	}
	// The background renewals go on too (every 2/3 s for a 2 s TTL).
	rev2, deadline := w.Revision(), time.Now().Add(15*time.Second)
	for w.Revision() <= rev2 {
		if !w.Held() {
			t.Fatalf("the downgraded session was lost: %v", w.Err())
		}
		if time.Now().After(deadline) {
			t.Fatal("no background renewal after the downgrade within 15s")
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}

	// Barrier: once the marker's revoke has ended it, the loss watch has
	// processed every earlier event, the downgrade's write among them.
	if _, err := admin.RevokeLease(ctx, marker.Name(), "barrier", marker.FencingToken()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, marker, 20*time.Second)
	if !w.Held() || !r.Held() {
		t.Fatalf("after the downgrade's events: writer held %v (%v), reader held %v (%v)", w.Held(), w.Err(), r.Held(), r.Err())
	}

	// A shared holding cannot be downgraded: MODE_MISMATCH, session unchanged.
	err = w.Downgrade(ctx)
	var te *tenure.Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_MODE_MISMATCH || te.Code != codes.FailedPrecondition || te.Retryable() {
		t.Fatalf("Downgrade of a shared holding = %v; want MODE_MISMATCH (FAILED_PRECONDITION, permanent)", err)
	}
	if !w.Held() || w.FencingToken() != token1 || w.Mode() != tenure.LockShared {
		t.Fatalf("after a refused Downgrade: held %v (%v), token %d (want %d), mode %v", w.Held(), w.Err(), w.FencingToken(), token1, w.Mode())
	}
	if err := w.Renew(ctx); err != nil {
		t.Fatalf("Renew after a refused Downgrade = %v", err)
	}

	for _, s := range []*tenure.Session{w, r} {
		if released, err := s.Release(ctx); err != nil || !released {
			t.Fatalf("%s Release = %v, %v; want true, nil", s.Holder(), released, err)
		}
	}
}

// The read-write lock's reasons: TOO_MANY_SHARED_HOLDERS is retryable
// (like TOO_MANY_WAITERS), MODE_MISMATCH permanent.
func TestRWLockReasonsClassified(t *testing.T) {
	if !tenure.Retryable(tenurev1.ErrorReason_TOO_MANY_SHARED_HOLDERS) || !tenure.IsRetryable(tenure.FromError(statusError(t, codes.ResourceExhausted, "TOO_MANY_SHARED_HOLDERS"))) {
		t.Error("TOO_MANY_SHARED_HOLDERS is not retryable")
	}
	if !slices.Contains(tenure.RetryableReasons(), tenurev1.ErrorReason_TOO_MANY_SHARED_HOLDERS) {
		t.Error("RetryableReasons() lacks TOO_MANY_SHARED_HOLDERS")
	}
	err := tenure.FromError(statusError(t, codes.FailedPrecondition, "MODE_MISMATCH"))
	if tenure.ReasonOf(err) != tenurev1.ErrorReason_MODE_MISMATCH || tenure.IsRetryable(err) || tenure.Retryable(tenurev1.ErrorReason_MODE_MISMATCH) {
		t.Errorf("MODE_MISMATCH: reason %v, retryable %v; want permanent", tenure.ReasonOf(err), tenure.IsRetryable(err))
	}
}

// A name in use as a read-write lock is refused to a semaphore
// (MODE_MISMATCH, permanent), and the holder is not disturbed.
func TestRWLockNameRefusedToASemaphore(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "rw")
	c := newClient(t, shared.addr)
	r, err := c.RWLock(name).RLock(ctx, "reader", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	_, err = newClient(t, shared.addr).Semaphore(name, 2).Acquire(ctx, "permit", 10*time.Second)
	var te *tenure.Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_MODE_MISMATCH || te.Code != codes.FailedPrecondition || te.Retryable() {
		t.Fatalf("semaphore Acquire on a read-write lock's name = %v; want MODE_MISMATCH", err)
	}
	if !r.Held() {
		t.Fatalf("the refused semaphore Acquire ended the reader: %v", r.Err())
	}
	if released, err := r.Release(ctx); err != nil || !released {
		t.Fatalf("Release = %v, %v", released, err)
	}
}
