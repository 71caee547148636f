package tenure_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// scriptedWatch is a fake LeaseService whose WatchLease answers the i-th
// call with script[i]: events to send, then the error to end with. It
// records each call's start_revision.
type scriptedWatch struct {
	tenurev1.UnimplementedLeaseServiceServer
	script []watchReply

	mu     sync.Mutex
	starts []uint64
}

type watchReply struct {
	events []*tenurev1.LeaseEvent
	err    error
}

func (f *scriptedWatch) WatchLease(req *tenurev1.WatchLeaseRequest, stream tenurev1.LeaseService_WatchLeaseServer) error {
	f.mu.Lock()
	i := len(f.starts)
	f.starts = append(f.starts, req.GetStartRevision())
	f.mu.Unlock()
	if i >= len(f.script) {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	for _, ev := range f.script[i].events {
		if err := stream.Send(&tenurev1.WatchLeaseResponse{Event: ev}); err != nil {
			return err
		}
	}
	return f.script[i].err
}

func (f *scriptedWatch) calls() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.starts...)
}

// serveFake serves srv on a loopback port and returns a client of it.
func serveFake(t *testing.T, srv tenurev1.LeaseServiceServer) *tenure.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	tenurev1.RegisterLeaseServiceServer(g, srv)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	c, err := tenure.Dial(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ev(typ tenure.EventType, name string, rev uint64) *tenurev1.LeaseEvent {
	return &tenurev1.LeaseEvent{Type: typ, Name: name, Revision: rev, FencingToken: rev}
}

// tenureStatus is a Tenure error status with its ErrorInfo reason.
func tenureStatus(t *testing.T, code codes.Code, reason, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: tenure.Domain})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// Watch's reconnect state machine against a scripted server: a broken
// stream resumes after the last delivered revision (a replayed duplicate
// and the resume's "caught up" marker are not passed on), a clean end of
// stream resumes too, WATCH_HISTORY_COMPACTED falls back to a fresh
// snapshot whose events say Resync, and PERMISSION_DENIED ends the watch
// with that typed error.
func TestWatchResumeStateMachine(t *testing.T) {
	snap := tenure.EventSnapshotComplete
	f := &scriptedWatch{script: []watchReply{
		{events: []*tenurev1.LeaseEvent{ev(tenure.EventCurrent, "a", 5), ev(snap, "", 0), ev(tenure.EventAcquired, "b", 7)},
			err: status.Error(codes.Unavailable, "restarting")},
		{events: []*tenurev1.LeaseEvent{ev(tenure.EventRenewed, "b", 7), ev(tenure.EventAcquired, "c", 8), ev(snap, "", 0), ev(tenure.EventReleased, "a", 9)}},
		{err: tenureStatus(t, codes.OutOfRange, "WATCH_HISTORY_COMPACTED", "history gone")},
		{events: []*tenurev1.LeaseEvent{ev(tenure.EventCurrent, "x", 10), ev(snap, "", 0), ev(tenure.EventAcquired, "y", 11)},
			err: tenureStatus(t, codes.PermissionDenied, "PERMISSION_DENIED", "no watch grant")},
	}}
	c := serveFake(t, f)
	events, err := c.Watch(testCtx(t), ">")
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Type   string
		Name   string
		Rev    uint64
		Resync bool
	}
	want := []got{
		{"CURRENT", "a", 5, false}, {"SNAPSHOT_COMPLETE", "", 0, false}, {"ACQUIRED", "b", 7, false},
		{"ACQUIRED", "c", 8, false}, {"RELEASED", "a", 9, false},
		{"CURRENT", "x", 10, true}, {"SNAPSHOT_COMPLETE", "", 0, true}, {"ACQUIRED", "y", 11, false},
	}
	for i, w := range want {
		e := nextEvent(t, events, 10*time.Second)
		if g := (got{tenure.EventName(e.Type), e.Name, e.Revision, e.Resync}); g != w {
			t.Fatalf("event %d: got %+v, want %+v", i, g, w)
		}
	}
	select {
	case e := <-events:
		if tenure.ReasonOf(e.Err) != tenurev1.ErrorReason_PERMISSION_DENIED {
			t.Fatalf("got %+v, want the watch to end with PERMISSION_DENIED", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end on PERMISSION_DENIED")
	}
	if _, ok := <-events; ok {
		t.Fatal("channel still open after the permanent error")
	}
	// Resumed after 7 (the last delivered), after 9 (the clean end), then
	// fresh after the compaction.
	if starts := f.calls(); len(starts) != 4 || starts[0] != 0 || starts[1] != 7 || starts[2] != 9 || starts[3] != 0 {
		t.Fatalf("start revisions %v, want [0 7 9 0]", starts)
	}
}

// WithStartRevision asks for the revision; when the server has compacted
// it, Watch starts over with a snapshot marked Resync.
func TestWatchStartRevisionCompacted(t *testing.T) {
	f := &scriptedWatch{script: []watchReply{
		{err: tenureStatus(t, codes.OutOfRange, "WATCH_HISTORY_COMPACTED", "history gone")},
		{events: []*tenurev1.LeaseEvent{ev(tenure.EventCurrent, "a", 3), ev(tenure.EventSnapshotComplete, "", 0)}},
	}}
	c := serveFake(t, f)
	events, err := c.Watch(testCtx(t), ">", tenure.WithStartRevision(2))
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, events, 10*time.Second); e.Type != tenure.EventCurrent || !e.Resync {
		t.Fatalf("got %+v, want CURRENT with Resync", e)
	}
	if starts := f.calls(); len(starts) != 2 || starts[0] != 2 || starts[1] != 0 {
		t.Fatalf("start revisions %v, want [2 0]", starts)
	}
}

// The shared loss watch resumes after a broken stream, and a REVOKED of the
// session's token in the replay ends the session; events replayed at or
// before the last seen revision are ignored.
func TestLossWatchResumesAfterBreak(t *testing.T) {
	f := &lossFake{}
	c := serveFake(t, f)
	ctx := testCtx(t)
	s, err := c.Acquire(ctx, "jobs.a", "me", 30*time.Second, tenure.WithRenewFraction(0.9))
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, s, 10*time.Second)
	if !errors.Is(s.Err(), tenure.ErrLostOnWatch) {
		t.Fatalf("lost with %v, want ErrLostOnWatch", s.Err())
	}
	if starts := f.watch.calls(); len(starts) < 2 || starts[0] != 0 || starts[1] != 12 {
		t.Fatalf("loss watch start revisions %v, want [0 12 ...]", starts)
	}
}

// lossFake grants Acquire (token 10) and scripts the loss watch: the
// snapshot shows the holding, a renewal at 12, the stream breaks, and the
// resume replays a REVOKED of token 10 at 13.
type lossFake struct {
	tenurev1.UnimplementedLeaseServiceServer
	watch scriptedWatch
	once  sync.Once
}

func (f *lossFake) Acquire(context.Context, *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	f.once.Do(func() {
		cur := ev(tenure.EventCurrent, "jobs.a", 10)
		ren := &tenurev1.LeaseEvent{Type: tenure.EventRenewed, Name: "jobs.a", Revision: 12, FencingToken: 10}
		f.watch.script = []watchReply{
			{events: []*tenurev1.LeaseEvent{cur, ev(tenure.EventSnapshotComplete, "", 0), ren}, err: status.Error(codes.Unavailable, "restarting")},
			{events: []*tenurev1.LeaseEvent{ren, {Type: tenure.EventRevoked, Name: "jobs.a", Revision: 13, FencingToken: 10}}},
		}
	})
	return &tenurev1.AcquireResponse{
		Lease:    &tenurev1.Lease{Name: "jobs.a", Holder: "me", FencingToken: 10, Revision: 10, Ttl: durationpb.New(30 * time.Second)},
		LeaseKey: "k",
	}, nil
}

func (f *lossFake) Release(context.Context, *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
	return &tenurev1.ReleaseResponse{}, nil
}

func (f *lossFake) WatchLease(req *tenurev1.WatchLeaseRequest, stream tenurev1.LeaseService_WatchLeaseServer) error {
	return f.watch.WatchLease(req, stream)
}
