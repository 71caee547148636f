package tenure_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// A watch of one name yields ACQUIRED, RENEWED, RELEASED, and EXPIRED for a
// holding left to run out, each with the holder and fencing token.
func TestWatchLifecycle(t *testing.T) {
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

	s, err := c.Acquire(ctx, name, "worker", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, events, 5*time.Second)
	if ev.Type != tenure.EventAcquired || ev.Name != name || ev.Holder != "worker" ||
		ev.FencingToken != s.FencingToken() || ev.Lease.GetRevision() != s.FencingToken() || ev.Time.IsZero() {
		t.Fatalf("got %+v, want ACQUIRED by worker with token %d", ev, s.FencingToken())
	}
	ev = nextEvent(t, events, 5*time.Second) // the first background renewal
	if ev.Type != tenure.EventRenewed || ev.Holder != "worker" || ev.FencingToken != s.FencingToken() || ev.Revision <= s.FencingToken() {
		t.Fatalf("got %+v, want RENEWED with token %d", ev, s.FencingToken())
	}

	if _, err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		ev = nextEvent(t, events, 5*time.Second)
		if ev.Type != tenure.EventRenewed {
			break
		}
	}
	if ev.Type != tenure.EventReleased || ev.Holder != "worker" || ev.FencingToken != s.FencingToken() {
		t.Fatalf("got %+v, want RELEASED of token %d", ev, s.FencingToken())
	}

	// A raw holding that nobody renews runs out.
	resp, err := c.Stub().Acquire(ctx, &tenurev1.AcquireRequest{Name: name, Holder: "abandoned", Ttl: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	token := resp.GetLease().GetFencingToken()
	if ev = nextEvent(t, events, 5*time.Second); ev.Type != tenure.EventAcquired || ev.FencingToken != token {
		t.Fatalf("got %+v, want ACQUIRED with token %d", ev, token)
	}
	if ev = nextEvent(t, events, 10*time.Second); ev.Type != tenure.EventExpired || ev.Holder != "abandoned" || ev.FencingToken != token {
		t.Fatalf("got %+v, want EXPIRED of abandoned/%d", ev, token)
	}
}

// A subtree watch first reports the holdings that exist (CURRENT), then
// SNAPSHOT_COMPLETE, then changes under the prefix; cancelling the context
// closes the channel.
func TestWatchSnapshotAndPrefix(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	prefix := leaseName(t, "jobs")
	held, err := c.Acquire(ctx, prefix+".a", "worker-a", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := c.Watch(wctx, prefix+".>", tenure.WithEventTypes(tenure.EventCurrent, tenure.EventAcquired))
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events, 5*time.Second); ev.Type != tenure.EventCurrent || ev.Name != prefix+".a" || ev.FencingToken != held.FencingToken() {
		t.Fatalf("got %+v, want CURRENT %s.a", ev, prefix)
	}
	if ev := nextEvent(t, events, 5*time.Second); ev.Type != tenure.EventSnapshotComplete {
		t.Fatalf("got %v, want SNAPSHOT_COMPLETE", ev.Type)
	}
	other, err := c.Acquire(ctx, prefix+".b", "worker-b", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	// RENEWED events of .a are filtered out by WithEventTypes.
	if ev := nextEvent(t, events, 5*time.Second); ev.Type != tenure.EventAcquired || ev.Name != prefix+".b" {
		t.Fatalf("got %+v, want ACQUIRED %s.b", ev, prefix)
	}

	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel not closed after cancel")
		}
	}
}
