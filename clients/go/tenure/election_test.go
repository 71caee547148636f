package tenure_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/clients/go/tenure"
)

// termLog records what the election callbacks of one participant saw.
type termLog struct {
	mu      sync.Mutex
	started chan uint64 // the token of each term, when it starts
	stopped chan string // the identity, when its term ends
	leaders chan tenure.Leader
}

func newTermLog() *termLog {
	return &termLog{
		started: make(chan uint64, 16),
		stopped: make(chan string, 16),
		leaders: make(chan tenure.Leader, 64),
	}
}

// leading is the participants currently inside OnStartedLeading.
type leading struct {
	mu  sync.Mutex
	now map[string]bool
	max int
}

func (l *leading) enter(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now[id] = true
	if len(l.now) > l.max {
		l.max = len(l.now)
	}
}

func (l *leading) leave(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.now, id)
}

// run starts RunElection for identity; cancel the returned context to make
// it resign and return.
func run(t *testing.T, c *tenure.Client, name, identity string, log *termLog, in *leading) (context.CancelFunc, <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.RunElection(ctx, tenure.ElectionConfig{
			Name:     name,
			Identity: identity,
			Value:    identity + ":5432",
			TTL:      10 * time.Second,
			OnStartedLeading: func(ctx context.Context, term *tenure.Session) {
				in.enter(identity)
				log.started <- term.FencingToken()
				<-ctx.Done()
				in.leave(identity)
			},
			OnStoppedLeading: func() { log.stopped <- identity },
			OnNewLeader:      func(l tenure.Leader) { log.leaders <- l },
		})
	}()
	t.Cleanup(cancel)
	return cancel, done
}

func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s within 20 s", what)
	}
	panic("unreachable")
}

// Two participants: one leads, the other waits; when the leader gives up
// (its context ends) it resigns, its callbacks end in order, and the other
// leads with a larger token at once (not after the TTL). Observers see each
// new leader.
func TestRunElectionHandsOver(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "e")
	in := &leading{now: map[string]bool{}}
	logA, logB := newTermLog(), newTermLog()
	a := newClient(t, shared.addr)
	b := newClient(t, shared.addr)

	cancelA, doneA := run(t, a, name, "node-a", logA, in)
	tokenA := recvWithin(t, logA.started, "term for node-a")
	// node-a leads; its observer reports it.
	for l := recvWithin(t, logA.leaders, "leader seen by node-a"); l.Identity != "node-a"; l = recvWithin(t, logA.leaders, "leader seen by node-a") {
	}
	cancelB, doneB := run(t, b, name, "node-b", logB, in)
	defer cancelB()
	// node-b sees node-a as leader (its Observe starts with the current state).
	if l := recvWithin(t, logB.leaders, "leader seen by node-b"); l.Identity != "node-a" || l.Value != "node-a:5432" || l.FencingToken != tokenA {
		t.Fatalf("node-b saw leader %v, want node-a with token %d", l, tokenA)
	}
	leader, err := b.Leader(ctx, name)
	if err != nil || leader.Identity != "node-a" {
		t.Fatalf("Leader = %v, %v; want node-a", leader, err)
	}

	cancelA()
	if got := recvWithin(t, logA.stopped, "OnStoppedLeading of node-a"); got != "node-a" {
		t.Fatalf("stopped %q", got)
	}
	if err := recvWithin(t, doneA, "RunElection of node-a to return"); err != context.Canceled {
		t.Fatalf("RunElection returned %v, want context.Canceled", err)
	}
	tokenB := recvWithin(t, logB.started, "term for node-b")
	if tokenB <= tokenA {
		t.Fatalf("node-b's token %d is not above node-a's %d", tokenB, tokenA)
	}
	for l := recvWithin(t, logB.leaders, "node-b as leader"); l.Identity != "node-b"; l = recvWithin(t, logB.leaders, "node-b as leader") {
	}
	cancelB()
	recvWithin(t, logB.stopped, "OnStoppedLeading of node-b")
	recvWithin(t, doneB, "RunElection of node-b to return")
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.max != 1 {
		t.Fatalf("%d participants led at once", in.max)
	}
	if l, err := a.Leader(ctx, name); err != nil || l.Identity != "" {
		t.Fatalf("after both resigned: Leader = %v, %v; want no leader", l, err)
	}
}

// A revoked leader's term context ends and OnStoppedLeading runs; it then
// campaigns again and leads a new term with a larger token.
func TestRunElectionRevokedLeaderStopsAndCampaignsAgain(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "e")
	in := &leading{now: map[string]bool{}}
	log := newTermLog()
	c := newClient(t, shared.addr)
	admin := newClient(t, shared.addr)
	cancel, done := run(t, c, name, "node-a", log, in)
	first := recvWithin(t, log.started, "first term")
	if _, err := admin.RevokeLease(ctx, name, "test", first); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, log.stopped, "OnStoppedLeading after revoke")
	second := recvWithin(t, log.started, "second term")
	if second <= first {
		t.Fatalf("second term token %d is not above %d", second, first)
	}
	cancel()
	recvWithin(t, log.stopped, "OnStoppedLeading after cancel")
	recvWithin(t, done, "RunElection to return")
}

// Proclaim changes the published value without a new term; a deposed
// leader cannot proclaim.
func TestProclaim(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "e")
	c := newClient(t, shared.addr)
	admin := newClient(t, shared.addr)
	term, err := c.Elect(ctx, name, "node-a", "10.0.0.1:5432", 10*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := term.Proclaim(ctx, "10.0.0.1:6432"); err != nil {
		t.Fatal(err)
	}
	l, err := c.Leader(ctx, name)
	if err != nil || l.Value != "10.0.0.1:6432" || l.FencingToken != term.FencingToken() {
		t.Fatalf("Leader = %v, %v; want the new value with token %d", l, err, term.FencingToken())
	}
	// The session renews from the proclaimed revision.
	if err := term.Renew(ctx); err != nil {
		t.Fatalf("renew after proclaim: %v", err)
	}
	if _, err := admin.RevokeLease(ctx, name, "test", 0); err != nil {
		t.Fatal(err)
	}
	waitDone(t, term, 20*time.Second)
	if err := term.Proclaim(ctx, "x"); err == nil {
		t.Fatal("a deposed leader proclaimed")
	}
}
