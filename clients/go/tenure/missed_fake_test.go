package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// missedFake grants the first Acquire of "jobs.m" (token 10 at revision
// 10; slot 2 for a semaphore) and answers the loss watch with the
// snapshot of that holding, SNAPSHOT_COMPLETE, then the scripted live
// events. Later Acquires wait until the caller gives up (a held election).
type missedFake struct {
	tenurev1.UnimplementedLeaseServiceServer
	live []*tenurev1.LeaseEvent

	watch scriptedWatch
	mu    sync.Mutex
	calls int
}

func (f *missedFake) Acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	f.mu.Lock()
	f.calls++
	first := f.calls == 1
	f.mu.Unlock()
	if !first {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	slot := uint32(0)
	if req.GetLimit() > 0 {
		slot = 2
	}
	cur := &tenurev1.LeaseEvent{Type: tenure.EventCurrent, Name: req.GetName(), Revision: 10, FencingToken: 10, Slot: slot}
	f.watch.script = []watchReply{{events: append([]*tenurev1.LeaseEvent{cur, ev(tenure.EventSnapshotComplete, "", 0)}, f.live...)}}
	return &tenurev1.AcquireResponse{
		Lease: &tenurev1.Lease{Name: req.GetName(), Holder: req.GetHolder(), FencingToken: 10, Revision: 10, Slot: slot,
			Ttl: durationpb.New(30 * time.Second), Metadata: req.GetMetadata()},
		LeaseKey: "k",
	}, nil
}

func (f *missedFake) Release(context.Context, *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
	return &tenurev1.ReleaseResponse{}, nil
}

func (f *missedFake) WatchLease(req *tenurev1.WatchLeaseRequest, stream tenurev1.LeaseService_WatchLeaseServer) error {
	return f.watch.WatchLease(req, stream)
}

// missed is a MISSED event of name for token (0: unknown) in slot, seen
// at revision rev after the stream last saw the name at revision 10.
func missed(name string, slot uint32, token, rev uint64) *tenurev1.LeaseEvent {
	return &tenurev1.LeaseEvent{Type: tenure.EventMissed, Name: name, Slot: slot, FencingToken: token,
		Revision: rev, MissedAfterRevision: 10}
}

// A MISSED naming the session's own token (and slot) ends the session with
// ErrMissedOnWatch (also an ErrLostOnWatch); a MISSED naming another token,
// no token, or another slot does not: the REVOKED of the session's token
// after it is what ends the session then (a loss is final, so the first
// cause is the one kept).
func TestLossWatchMissed(t *testing.T) {
	revoked := &tenurev1.LeaseEvent{Type: tenure.EventRevoked, Name: "jobs.m", Revision: 20, FencingToken: 10}
	revokedSlot := &tenurev1.LeaseEvent{Type: tenure.EventRevoked, Name: "jobs.m", Revision: 20, FencingToken: 10, Slot: 2}
	for _, tc := range []struct {
		name      string
		semaphore bool
		live      []*tenurev1.LeaseEvent
		missed    bool // the loss is the MISSED (else the REVOKED)
	}{
		{"own token", false, []*tenurev1.LeaseEvent{missed("jobs.m", 0, 10, 14), revoked}, true},
		{"another token", false, []*tenurev1.LeaseEvent{missed("jobs.m", 0, 9, 14), revoked}, false},
		{"no token", false, []*tenurev1.LeaseEvent{missed("jobs.m", 0, 0, 14), revoked}, false},
		{"another name", false, []*tenurev1.LeaseEvent{missed("jobs.other", 0, 10, 14), revoked}, false},
		{"semaphore own slot", true, []*tenurev1.LeaseEvent{missed("jobs.m", 2, 10, 14), revokedSlot}, true},
		{"semaphore another slot", true, []*tenurev1.LeaseEvent{missed("jobs.m", 1, 10, 14), revokedSlot}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serveFake(t, &missedFake{live: tc.live})
			ctx := testCtx(t)
			var s *tenure.Session
			var err error
			if tc.semaphore {
				s, err = c.Semaphore("jobs.m", 3).Acquire(ctx, "me", 30*time.Second, tenure.WithRenewFraction(0.9))
			} else {
				s, err = c.Acquire(ctx, "jobs.m", "me", 30*time.Second, tenure.WithRenewFraction(0.9))
			}
			if err != nil {
				t.Fatal(err)
			}
			waitDone(t, s, 10*time.Second)
			if !errors.Is(s.Err(), tenure.ErrLostOnWatch) {
				t.Fatalf("lost with %v, want ErrLostOnWatch", s.Err())
			}
			if got := errors.Is(s.Err(), tenure.ErrMissedOnWatch); got != tc.missed {
				t.Fatalf("lost with %v: ErrMissedOnWatch is %v, want %v", s.Err(), got, tc.missed)
			}
			if !tc.missed && !strings.Contains(s.Err().Error(), "REVOKED") {
				t.Fatalf("lost with %v, want the REVOKED after the MISSED", s.Err())
			}
		})
	}
}

// Watch passes MISSED on with its MissedAfterRevision, as a live change.
func TestWatchDeliversMissed(t *testing.T) {
	f := &scriptedWatch{script: []watchReply{{events: []*tenurev1.LeaseEvent{
		ev(tenure.EventCurrent, "a", 5), ev(tenure.EventSnapshotComplete, "", 5),
		{Type: tenure.EventMissed, Name: "a", Holder: "h", FencingToken: 5, Revision: 9, MissedAfterRevision: 5},
		ev(tenure.EventAcquired, "a", 9),
	}}}}
	c := serveFake(t, f)
	events, err := c.Watch(testCtx(t), "a", tenure.WithEventTypes(tenure.EventAcquired))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		nextEvent(t, events, 10*time.Second)
	}
	e := nextEvent(t, events, 10*time.Second)
	if e.Type != tenure.EventMissed || tenure.EventName(e.Type) != "MISSED" || e.Name != "a" || e.Holder != "h" ||
		e.FencingToken != 5 || e.Revision != 9 || e.MissedAfterRevision != 5 {
		t.Fatalf("got %+v, want MISSED of a (h, token 5) at 9 after 5", e)
	}
	if e := nextEvent(t, events, 10*time.Second); e.Type != tenure.EventAcquired || e.MissedAfterRevision != 0 {
		t.Fatalf("got %+v, want ACQUIRED with MissedAfterRevision 0", e)
	}
}

// Every event type of the proto has an exported constant, and EventName
// prints it without its prefix: a type added to the proto without one
// fails here.
func TestEventTypesAreExported(t *testing.T) {
	exported := map[tenure.EventType]string{
		tenure.EventCurrent:          "CURRENT",
		tenure.EventSnapshotComplete: "SNAPSHOT_COMPLETE",
		tenure.EventAcquired:         "ACQUIRED",
		tenure.EventRenewed:          "RENEWED",
		tenure.EventReleased:         "RELEASED",
		tenure.EventExpired:          "EXPIRED",
		tenure.EventRevoked:          "REVOKED",
		tenure.EventMissed:           "MISSED",
	}
	for number, name := range tenurev1.EventType_name {
		typ := tenure.EventType(number)
		if typ == tenurev1.EventType_EVENT_TYPE_UNSPECIFIED {
			continue
		}
		short, ok := exported[typ]
		if !ok {
			t.Errorf("proto event type %s has no tenure.Event* constant", name)
			continue
		}
		if got := tenure.EventName(typ); got != short {
			t.Errorf("EventName(%s) = %q, want %q", name, got, short)
		}
	}
	if len(exported) != len(tenurev1.EventType_name)-1 {
		t.Errorf("%d constants for %d proto event types", len(exported), len(tenurev1.EventType_name)-1)
	}
}

// observeFake sends the scripted Observe changes, then waits for the
// caller to go.
type observeFake struct {
	tenurev1.UnimplementedElectionServiceServer
	changes []*tenurev1.ObserveResponse
}

func (f *observeFake) Observe(_ *tenurev1.ObserveRequest, stream tenurev1.ElectionService_ObserveServer) error {
	for _, c := range f.changes {
		if err := stream.Send(c); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// A leader whose term the loss watch says MISSED (its token) stops leading:
// OnStartedLeading's context ends and OnStoppedLeading runs. OnNewLeader
// gets the Observe stream's MISSED change as a Leader with Missed set,
// naming the term that ended.
func TestRunElectionStopsOnMissed(t *testing.T) {
	lease := &missedFake{live: []*tenurev1.LeaseEvent{missed("jobs.m", 0, 10, 14)}}
	leadership := &tenurev1.Leadership{Name: "jobs.m", Holder: "node-a", Value: "v", FencingToken: 10, Revision: 10}
	election := &observeFake{changes: []*tenurev1.ObserveResponse{
		{Type: tenurev1.ChangeType_CHANGE_TYPE_CURRENT, Leader: leadership, Revision: 10},
		{Type: tenurev1.ChangeType_CHANGE_TYPE_MISSED, EndedHolder: "node-a", EndedFencingToken: 10, Revision: 14},
	}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	tenurev1.RegisterLeaseServiceServer(g, lease)
	tenurev1.RegisterElectionServiceServer(g, election)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	c, err := tenure.Dial(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	log := newTermLog()
	causes := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- c.RunElection(ctx, tenure.ElectionConfig{
			Name: "jobs.m", Identity: "node-a", Value: "v", TTL: 30 * time.Second,
			AcquireOptions: []tenure.AcquireOption{tenure.WithRenewFraction(0.9)},
			OnStartedLeading: func(ctx context.Context, term *tenure.Session) {
				log.started <- term.FencingToken()
				<-ctx.Done()
				causes <- term.Err()
			},
			OnStoppedLeading: func() { log.stopped <- "node-a" },
			OnNewLeader:      func(l tenure.Leader) { log.leaders <- l },
		})
	}()
	if token := recvWithin(t, log.started, "the term"); token != 10 {
		t.Fatalf("term token %d, want 10", token)
	}
	recvWithin(t, log.stopped, "OnStoppedLeading after the MISSED")
	if err := recvWithin(t, causes, "the term's cause"); !errors.Is(err, tenure.ErrMissedOnWatch) {
		t.Fatalf("term ended with %v, want ErrMissedOnWatch", err)
	}
	want := []tenure.Leader{
		{Identity: "node-a", Value: "v", FencingToken: 10},
		{Missed: true, EndedIdentity: "node-a", EndedFencingToken: 10},
	}
	for i, w := range want {
		if got := recvWithin(t, log.leaders, "OnNewLeader"); got != w {
			t.Fatalf("OnNewLeader %d: got %+v, want %+v", i, got, w)
		}
	}
	if s := want[1].String(); !strings.Contains(s, "unknown") {
		t.Fatalf("a missed Leader prints %q", s)
	}
	cancel()
	recvWithin(t, done, "RunElection to return")
}

// groupMissedFake grants a group of "g.a" (token 10) and "g.b" (token 11)
// and answers the loss watch with their snapshot, then the scripted live
// events.
type groupMissedFake struct {
	tenurev1.UnimplementedLeaseServiceServer
	live  []*tenurev1.LeaseEvent
	watch scriptedWatch
}

func (f *groupMissedFake) AcquireGroup(context.Context, *tenurev1.AcquireGroupRequest) (*tenurev1.AcquireGroupResponse, error) {
	snap := []*tenurev1.LeaseEvent{
		{Type: tenure.EventCurrent, Name: "g.a", Revision: 10, FencingToken: 10},
		{Type: tenure.EventCurrent, Name: "g.b", Revision: 11, FencingToken: 11},
		ev(tenure.EventSnapshotComplete, "", 11),
	}
	f.watch.script = []watchReply{{events: append(snap, f.live...)}}
	ttl := durationpb.New(30 * time.Second)
	return &tenurev1.AcquireGroupResponse{LeaseKey: "k", Leases: []*tenurev1.Lease{
		{Name: "g.a", Holder: "me", FencingToken: 10, Revision: 10, Ttl: ttl},
		{Name: "g.b", Holder: "me", FencingToken: 11, Revision: 11, Ttl: ttl},
	}}, nil
}

func (f *groupMissedFake) WatchLease(req *tenurev1.WatchLeaseRequest, stream tenurev1.LeaseService_WatchLeaseServer) error {
	return f.watch.WatchLease(req, stream)
}

// A group is lost as a whole when a MISSED names a member's token; a MISSED
// of a member's name with another token is not a loss (the REVOKED after it
// is).
func TestGroupLossWatchMissed(t *testing.T) {
	revoked := &tenurev1.LeaseEvent{Type: tenure.EventRevoked, Name: "g.a", Revision: 20, FencingToken: 10}
	for _, tc := range []struct {
		name   string
		live   []*tenurev1.LeaseEvent
		missed bool
	}{
		{"member token", []*tenurev1.LeaseEvent{missed("g.b", 0, 11, 14), revoked}, true},
		{"another token", []*tenurev1.LeaseEvent{missed("g.b", 0, 10, 14), revoked}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serveFake(t, &groupMissedFake{live: tc.live})
			g, err := c.AcquireGroup(testCtx(t), []string{"g.a", "g.b"}, "me", 30*time.Second, tenure.WithRenewFraction(0.9))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-g.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("group not lost")
			}
			if !errors.Is(g.Err(), tenure.ErrLostOnWatch) || errors.Is(g.Err(), tenure.ErrMissedOnWatch) != tc.missed {
				t.Fatalf("lost with %v; want ErrLostOnWatch, ErrMissedOnWatch %v", g.Err(), tc.missed)
			}
		})
	}
}

// preferFake is an ElectionService whose Observe stream sends what the
// test puts in msgs, and whose Resign always answers NO_WAITER (the
// candidate left), recording each successor asked for.
type preferFake struct {
	tenurev1.UnimplementedElectionServiceServer
	msgs     chan *tenurev1.ObserveResponse
	noWaiter error

	mu      sync.Mutex
	resigns []string
}

func (f *preferFake) Observe(_ *tenurev1.ObserveRequest, stream tenurev1.ElectionService_ObserveServer) error {
	for {
		select {
		case m := <-f.msgs:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func (f *preferFake) Resign(_ context.Context, req *tenurev1.ResignRequest) (*tenurev1.ResignResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resigns = append(f.resigns, req.GetSuccessor())
	return nil, f.noWaiter
}

func (f *preferFake) resigned() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.resigns...)
}

// A leader hands over to a preferred candidate of greater preference
// (after stopping: its context's cause is ErrTransferred, and
// OnStoppedLeading ran); when that fails with NO_WAITER it leads the same
// term again and does not try again until an Observe message names a
// candidate anew (one Resign per naming); a candidate of equal preference
// is not handed over to, and a PREFERRED change does not reach
// OnNewLeader.
func TestElectorRetriesThePreferredOnlyWhenNamedAgain(t *testing.T) {
	election := &preferFake{
		msgs:     make(chan *tenurev1.ObserveResponse, 8),
		noWaiter: tenureStatus(t, codes.FailedPrecondition, "NO_WAITER", "no such waiter"),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	tenurev1.RegisterLeaseServiceServer(g, &missedFake{})
	tenurev1.RegisterElectionServiceServer(g, election)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	c, err := tenure.Dial(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	var log orderedLog
	started := make(chan uint64, 8)
	causes := make(chan error, 8)
	leaders := make(chan tenure.Leader, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.RunElection(ctx, tenure.ElectionConfig{
			Name: "jobs.m", Identity: "node-a", Value: "v", TTL: 30 * time.Second, Preference: 1,
			AcquireOptions: []tenure.AcquireOption{tenure.WithRenewFraction(0.9)},
			OnStartedLeading: func(ctx context.Context, term *tenure.Session) {
				log.add("started %d", term.FencingToken())
				started <- term.FencingToken()
				<-ctx.Done()
				log.add("work ended")
				causes <- context.Cause(ctx)
			},
			OnStoppedLeading: func() { log.add("stopped") },
			OnNewLeader:      func(l tenure.Leader) { leaders <- l },
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	leader := &tenurev1.Leadership{Name: "jobs.m", Holder: "node-a", Value: "v", FencingToken: 10, Revision: 10}
	ghost := &tenurev1.Candidate{Holder: "ghost", Preference: 5}
	msg := func(typ tenurev1.ChangeType, l *tenurev1.Leadership, preferred *tenurev1.Candidate) *tenurev1.ObserveResponse {
		return &tenurev1.ObserveResponse{Type: typ, Leader: l, Revision: l.GetRevision(), Preferred: preferred}
	}

	recvWithin(t, started, "the term")
	// Named: the leader stops and resigns to it; NO_WAITER: it leads again.
	election.msgs <- msg(tenurev1.ChangeType_CHANGE_TYPE_CURRENT, leader, ghost)
	if cause := recvWithin(t, causes, "the first hand-over's cause"); !errors.Is(cause, tenure.ErrTransferred) {
		t.Fatalf("leading ended with %v, want ErrTransferred", cause)
	}
	recvWithin(t, started, "the term led again")
	if got := election.resigned(); fmt.Sprint(got) != "[ghost]" {
		t.Fatalf("Resigns %q when the term is led again, want one to ghost", got)
	}
	// Named again (the same candidate): one more try, then led again.
	election.msgs <- msg(tenurev1.ChangeType_CHANGE_TYPE_PREFERRED, leader, ghost)
	recvWithin(t, causes, "the second hand-over's cause")
	recvWithin(t, started, "the term led a third time")
	if got := election.resigned(); fmt.Sprint(got) != "[ghost ghost]" {
		t.Fatalf("Resigns %q, want two to ghost", got)
	}
	// A candidate of equal preference: no hand-over. Then a new value,
	// the next OnNewLeader after the first one (no call for the PREFERRED
	// changes, whose leader was unchanged).
	election.msgs <- msg(tenurev1.ChangeType_CHANGE_TYPE_PREFERRED, leader, &tenurev1.Candidate{Holder: "peer", Preference: 1})
	proclaimed := &tenurev1.Leadership{Name: "jobs.m", Holder: "node-a", Value: "v2", FencingToken: 10, Revision: 11}
	election.msgs <- msg(tenurev1.ChangeType_CHANGE_TYPE_PROCLAIMED, proclaimed, nil)
	want := []tenure.Leader{
		{Identity: "node-a", Value: "v", FencingToken: 10},
		{Identity: "node-a", Value: "v2", FencingToken: 10},
	}
	for i, w := range want {
		if got := recvWithin(t, leaders, "OnNewLeader"); got != w {
			t.Fatalf("OnNewLeader %d: got %+v, want %+v", i, got, w)
		}
	}
	if got := election.resigned(); fmt.Sprint(got) != "[ghost ghost]" {
		t.Fatalf("Resigns %q, want two to ghost (none to an equal preference)", got)
	}
	lines := log.snapshot()
	wantLines := []string{"started 10", "work ended", "stopped", "started 10", "work ended", "stopped", "started 10"}
	if fmt.Sprint(lines) != fmt.Sprint(wantLines) {
		t.Fatalf("log %q, want %q", lines, wantLines)
	}
}
