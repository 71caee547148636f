package tenure_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// downgradeFake holds "jobs.rw" exclusively in slot 1 (token 10) and the
// plain lease "jobs.marker" (token 11). Its Downgrade first has the loss
// watch deliver the downgrade's own write (RELEASED of token 10, ACQUIRED
// of token 20, both at revision 20) and then a REVOKED of the marker, and
// answers only once the test says so: the client sees the write on the
// watch before the reply, the race Downgrade must survive.
type downgradeFake struct {
	tenurev1.UnimplementedLeaseServiceServer
	t *testing.T

	started chan struct{} // closed when Downgrade is called
	answer  chan struct{} // closed by the test: Downgrade replies
	reply   error         // Downgrade's error, if any

	mu       sync.Mutex
	revision uint64 // of jobs.rw
	token    uint64
}

func (f *downgradeFake) Acquire(_ context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	l := &tenurev1.Lease{Name: req.GetName(), Holder: req.GetHolder(), Ttl: durationpb.New(30 * time.Second)}
	switch req.GetName() {
	case "jobs.rw":
		if req.GetMode() != tenure.LockExclusive {
			f.t.Errorf("Acquire of jobs.rw with mode %v, want EXCLUSIVE", req.GetMode())
		}
		l.FencingToken, l.Revision, l.Slot, l.Mode = 10, 10, 1, tenure.LockExclusive
	default:
		l.FencingToken, l.Revision = 11, 11
	}
	return &tenurev1.AcquireResponse{Lease: l, LeaseKey: req.GetLeaseKey()}, nil
}

func (f *downgradeFake) WatchLease(req *tenurev1.WatchLeaseRequest, stream tenurev1.LeaseService_WatchLeaseServer) error {
	send := func(evs ...*tenurev1.LeaseEvent) error {
		for _, e := range evs {
			if err := stream.Send(&tenurev1.WatchLeaseResponse{Event: e}); err != nil {
				return err
			}
		}
		return nil
	}
	rw := &tenurev1.LeaseEvent{Type: tenure.EventCurrent, Name: "jobs.rw", Slot: 1, FencingToken: 10, Revision: 10}
	marker := &tenurev1.LeaseEvent{Type: tenure.EventCurrent, Name: "jobs.marker", FencingToken: 11, Revision: 11}
	done := &tenurev1.LeaseEvent{Type: tenure.EventSnapshotComplete, Revision: 11}
	if req.GetName() != "jobs.>" {
		if err := send(rw, done); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	}
	if err := send(rw, marker, done); err != nil {
		return err
	}
	select {
	case <-f.started:
	case <-stream.Context().Done():
		return nil
	}
	if err := send(
		&tenurev1.LeaseEvent{Type: tenure.EventReleased, Name: "jobs.rw", Slot: 1, FencingToken: 10, Revision: 20},
		&tenurev1.LeaseEvent{Type: tenure.EventAcquired, Name: "jobs.rw", Slot: 1, FencingToken: 20, Revision: 20},
		&tenurev1.LeaseEvent{Type: tenure.EventRevoked, Name: "jobs.marker", FencingToken: 11, Revision: 21},
	); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (f *downgradeFake) Downgrade(_ context.Context, req *tenurev1.DowngradeRequest) (*tenurev1.DowngradeResponse, error) {
	if req.GetExpectedRevision() != 10 || req.GetSlot() != 1 {
		f.t.Errorf("Downgrade with revision %d, slot %d; want 10, 1", req.GetExpectedRevision(), req.GetSlot())
	}
	close(f.started)
	<-f.answer
	if f.reply != nil {
		return nil, f.reply
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revision, f.token = 20, 20
	return &tenurev1.DowngradeResponse{Lease: &tenurev1.Lease{Name: "jobs.rw", Holder: "me", FencingToken: 20, Revision: 20,
		Slot: 1, Mode: tenure.LockShared, Ttl: durationpb.New(30 * time.Second)}}, nil
}

// Renew (the helper falls back to it: KeepAlive is unimplemented) accepts
// only the holding's current revision, as the server does.
func (f *downgradeFake) Renew(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetName() != "jobs.rw" {
		return &tenurev1.RenewResponse{Lease: &tenurev1.Lease{Name: req.GetName(), FencingToken: 11, Revision: 11,
			Ttl: durationpb.New(30 * time.Second)}}, nil
	}
	if req.GetExpectedRevision() != f.revision || req.GetSlot() != 1 {
		return nil, tenureStatus(f.t, codes.FailedPrecondition, "LEASE_NOT_HELD", "revision moved on")
	}
	f.revision++
	return &tenurev1.RenewResponse{Lease: &tenurev1.Lease{Name: "jobs.rw", Holder: "me", FencingToken: f.token,
		Revision: f.revision, Slot: 1, Mode: tenure.LockShared, Ttl: durationpb.New(30 * time.Second)}}, nil
}

func (f *downgradeFake) Release(context.Context, *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
	return &tenurev1.ReleaseResponse{}, nil
}

// downgradeRace acquires jobs.rw and the marker from a downgradeFake,
// calls Downgrade, and returns once the loss watch has delivered the
// downgrade's write and the marker's revoke (the marker session is lost)
// while the Downgrade is still unanswered; answer lets it reply.
func downgradeRace(t *testing.T, f *downgradeFake) (s *tenure.Session, result <-chan error, answer func()) {
	t.Helper()
	ctx := testCtx(t)
	f.t, f.started, f.answer, f.revision, f.token = t, make(chan struct{}), make(chan struct{}), 10, 10
	c := serveFake(t, f)
	s, err := c.RWLock("jobs.rw").Lock(ctx, "me", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	marker, err := c.Acquire(ctx, "jobs.marker", "me", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan error, 1)
	go func() { out <- s.Downgrade(ctx) }()
	waitDone(t, marker, 10*time.Second)
	if !s.Held() {
		t.Fatalf("the downgrade's own write on the watch ended the session before the reply: %v", s.Err())
	}
	return s, out, func() { close(f.answer) }
}

// The loss watch shows the downgrade's write (the exclusive token
// RELEASED, the new one ACQUIRED) before the Downgrade's reply comes: the
// session is not lost, takes the reply's token, revision and mode, and
// renews with the new revision.
func TestDowngradeSurvivesItsOwnWriteOnTheWatch(t *testing.T) {
	f := &downgradeFake{}
	s, result, answer := downgradeRace(t, f)
	answer()
	if err := <-result; err != nil {
		t.Fatalf("Downgrade = %v", err)
	}
	if !s.Held() || s.FencingToken() != 20 || s.Revision() != 20 || s.Mode() != tenure.LockShared {
		t.Fatalf("after Downgrade: held %v (%v), token %d, revision %d, mode %v; want held, 20, 20, SHARED",
			s.Held(), s.Err(), s.FencingToken(), s.Revision(), s.Mode())
	}
	if err := s.Renew(testCtx(t)); err != nil {
		t.Fatalf("Renew after Downgrade = %v", err)
	}
	if s.Revision() != 21 || !s.Held() {
		t.Fatalf("after Renew: revision %d, held %v (%v)", s.Revision(), s.Held(), s.Err())
	}
}

// A Downgrade that fails leaves the events seen meanwhile judged against
// the exclusive holding: its token RELEASED ends the session.
func TestDowngradeFailureJudgesTheEventsSeenMeanwhile(t *testing.T) {
	f := &downgradeFake{}
	f.reply = tenureStatus(t, codes.Unavailable, "NATS_UNAVAILABLE", "no answer")
	s, result, answer := downgradeRace(t, f)
	answer()
	if err := <-result; tenure.ReasonOf(err) != tenurev1.ErrorReason_NATS_UNAVAILABLE {
		t.Fatalf("Downgrade = %v, want NATS_UNAVAILABLE", err)
	}
	waitDone(t, s, 10*time.Second)
	if !errors.Is(s.Err(), tenure.ErrLostOnWatch) || s.FencingToken() != 10 || s.Mode() != tenure.LockExclusive {
		t.Fatalf("after a failed Downgrade: err %v, token %d, mode %v; want ErrLostOnWatch, 10, EXCLUSIVE",
			s.Err(), s.FencingToken(), s.Mode())
	}
}
