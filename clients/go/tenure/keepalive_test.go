package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// Every session of a client, plain and semaphore alike, renews over one
// KeepAlive stream: explicit renewals sent at once share request messages
// and all succeed, and the background renewals keep every session held
// across several TTLs (seen as RENEWED events) without a second stream.
func TestKeepAliveRenewsEverySessionOverOneStream(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	prefix := leaseName(t, "")
	const n = 20
	sessions := make([]*tenure.Session, 0, n+1)
	for i := range n {
		s, err := c.Acquire(ctx, prefix+string(rune('a'+i)), "holder", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(ctx)
		sessions = append(sessions, s)
	}
	slot, err := c.Semaphore(prefix+"sem", 2).Acquire(ctx, "holder", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release(ctx)
	sessions = append(sessions, slot)

	var wg sync.WaitGroup
	errs := make(chan error, len(sessions))
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			before := s.Revision()
			if err := s.Renew(ctx); err != nil {
				errs <- err
			} else if s.Revision() <= before {
				errs <- errors.New(s.Name() + ": revision did not move")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	streams, requests, entries := tenure.KeepAliveCounts(c)
	if streams != 1 || entries < uint64(len(sessions)) || requests > entries {
		t.Fatalf("streams %d requests %d entries %d", streams, requests, entries)
	}
	t.Logf("explicit renewals: %d entries in %d requests", entries, requests)

	// Three background renewals of every session (a 2 s TTL renews every
	// ~0.67 s), seen on a watch.
	events, err := c.Watch(ctx, prefix+">", tenure.WithEventTypes(tenure.EventRenewed))
	if err != nil {
		t.Fatal(err)
	}
	renewed := map[string]int{}
	for done := 0; done < len(sessions); {
		ev := nextEvent(t, events, 20*time.Second)
		if ev.Type != tenure.EventRenewed {
			continue
		}
		key := fmt.Sprintf("%s/%d", ev.Name, ev.Slot)
		renewed[key]++
		if renewed[key] == 3 {
			done++
		}
	}
	for _, s := range sessions {
		if !s.Held() {
			t.Fatalf("%s lost: %v", s.Name(), s.Err())
		}
	}
	streams, requests, entries = tenure.KeepAliveCounts(c)
	if streams != 1 {
		t.Fatalf("%d streams opened, want 1", streams)
	}
	t.Logf("after background renewals: %d entries in %d requests", entries, requests)
}

// A failed entry is the typed *Error a unary Renew would return
// (LEASE_NOT_HELD, FAILED_PRECONDITION), and does not disturb the stream.
func TestKeepAliveEntryError(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	_, err := tenure.KeepAliveRenew(ctx, c, &tenurev1.KeepAliveEntry{
		Name: leaseName(t, "a"), ExpectedRevision: 1, LeaseKey: "0123456789abcdef", Ttl: durationpb.New(time.Second),
	})
	var te *tenure.Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_LEASE_NOT_HELD || te.Code != codes.FailedPrecondition || te.RPC != "KeepAlive" {
		t.Fatalf("entry error %v, want LEASE_NOT_HELD from KeepAlive", err)
	}
	s, err := c.Acquire(ctx, leaseName(t, "b"), "holder", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	if err := s.Renew(ctx); err != nil {
		t.Fatalf("renewal after a failed entry: %v", err)
	}
	if streams, _, _ := tenure.KeepAliveCounts(c); streams != 1 {
		t.Fatalf("%d streams, want 1", streams)
	}
}

// Against a server without KeepAlive (UNIMPLEMENTED) sessions renew with
// unary Renew calls, and the helper stays on them.
func TestKeepAliveFallsBackToUnaryRenew(t *testing.T) {
	f := &renewFake{}
	c := serveFake(t, f)
	ctx := testCtx(t)
	s, err := c.Acquire(ctx, "jobs.a", "me", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.renews.Load(); got != 2 {
		t.Fatalf("%d unary renewals, want 2", got)
	}
	if _, err := tenure.KeepAliveRenew(ctx, c, &tenurev1.KeepAliveEntry{Name: "jobs.a"}); !errors.Is(err, tenure.ErrUseUnary) {
		t.Fatalf("KeepAlive after UNIMPLEMENTED = %v, want the unary fallback", err)
	}
	if !s.Held() {
		t.Fatalf("lost: %v", s.Err())
	}
}

// renewFake grants Acquire and unary Renew and has no KeepAlive.
type renewFake struct {
	tenurev1.UnimplementedLeaseServiceServer
	renews atomic.Int64
}

func (f *renewFake) Acquire(context.Context, *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	return &tenurev1.AcquireResponse{Lease: f.lease(10), LeaseKey: "k"}, nil
}

func (f *renewFake) Renew(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
	f.renews.Add(1)
	return &tenurev1.RenewResponse{Lease: f.lease(req.GetExpectedRevision() + 1)}, nil
}

func (f *renewFake) Release(context.Context, *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
	return &tenurev1.ReleaseResponse{}, nil
}

func (f *renewFake) lease(rev uint64) *tenurev1.Lease {
	return &tenurev1.Lease{Name: "jobs.a", Holder: "me", FencingToken: 10, Revision: rev, Ttl: durationpb.New(30 * time.Second)}
}
