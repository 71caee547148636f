package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// waitForWaiters polls GetLease until at least n Acquires (or campaigns)
// wait for name: nothing signals that a waiter is queued.
func waitForWaiters(t *testing.T, ctx context.Context, c *tenure.Client, name string, n uint32) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if info.GetWaiting() >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting for %q after 20 s, want %d", info.GetWaiting(), name, n)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

type acquired struct {
	s   *tenure.Session
	err error
}

// waitingAcquire starts an Acquire with a wait on c and returns where its
// result arrives.
func waitingAcquire(t *testing.T, ctx context.Context, c *tenure.Client, name, holder string) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		s, err := c.Acquire(ctx, name, holder, 10*time.Second, tenure.WithWait(30*time.Second))
		got <- acquired{s, err}
	}()
	return got
}

// Transfer hands the holding to a waiting Acquire of another client: the
// waiter's Acquire returns it with a greater token, the giver's session
// ends as released (not lost) and its Release reports false; NO_WAITER
// (nobody waits, or not the named holder) leaves the session held.
func TestSessionTransfer(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "a")
	giverClient := newClient(t, shared.addr)
	waiterClient := newClient(t, shared.addr)

	s, err := giverClient.Acquire(ctx, name, "giver", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Nobody waits: NO_WAITER, and the session is unchanged.
	_, err = s.Transfer(ctx, "")
	if tenure.ReasonOf(err) != tenurev1.ErrorReason_NO_WAITER || tenure.IsRetryable(err) {
		t.Fatalf("Transfer with nobody waiting = %v, want NO_WAITER (permanent)", err)
	}
	if !s.Held() || s.Err() != nil {
		t.Fatalf("after NO_WAITER: held %v, err %v; want held", s.Held(), s.Err())
	}

	got := waitingAcquire(t, ctx, waiterClient, name, "waiter")
	waitForWaiters(t, ctx, giverClient, name, 1)
	// A waiter, but not the one named: NO_WAITER again, still held, and
	// the holding still renews with its key.
	_, err = s.Transfer(ctx, "someone-else")
	if tenure.ReasonOf(err) != tenurev1.ErrorReason_NO_WAITER {
		t.Fatalf("Transfer to a holder that does not wait = %v, want NO_WAITER", err)
	}
	if !s.Held() {
		t.Fatalf("not held after NO_WAITER: %v", s.Err())
	}
	if err := s.Renew(ctx); err != nil {
		t.Fatalf("Renew after NO_WAITER: %v", err)
	}

	lease, err := s.Transfer(ctx, "waiter")
	if err != nil {
		t.Fatal(err)
	}
	if lease.GetHolder() != "waiter" || lease.GetFencingToken() <= s.FencingToken() {
		t.Fatalf("recipient's lease %v, want holder waiter with a token above %d", lease, s.FencingToken())
	}
	var w acquired
	select {
	case w = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter's Acquire did not return")
	}
	if w.err != nil {
		t.Fatalf("the waiter's Acquire = %v", w.err)
	}
	defer w.s.Release(context.Background())
	if w.s.FencingToken() != lease.GetFencingToken() || w.s.FencingToken() <= s.FencingToken() || !w.s.Held() {
		t.Fatalf("waiter's session token %d (held %v), Transfer said %d, giver had %d",
			w.s.FencingToken(), w.s.Held(), lease.GetFencingToken(), s.FencingToken())
	}

	// The giver's session ended as a release: not held, Done closed, Err
	// ErrTransferred (an ErrReleased, not a watch loss).
	if s.Held() {
		t.Fatal("the giver still holds after Transfer")
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Transfer")
	}
	if err := s.Err(); !errors.Is(err, tenure.ErrTransferred) || !errors.Is(err, tenure.ErrReleased) || errors.Is(err, tenure.ErrLostOnWatch) {
		t.Fatalf("giver's Err = %v, want ErrTransferred", err)
	}
	if released, err := s.Release(ctx); released || err != nil {
		t.Fatalf("Release after Transfer = %v, %v; want false, nil", released, err)
	}
	if _, err := s.Transfer(ctx, ""); !errors.Is(err, tenure.ErrTransferred) {
		t.Fatalf("a second Transfer = %v, want ErrTransferred", err)
	}

	// The recipient holds and renews; a waiter on the giver's client gets
	// it next, from the head of the queue.
	if err := w.s.Renew(ctx); err != nil {
		t.Fatalf("the recipient's Renew: %v", err)
	}
	next := waitingAcquire(t, ctx, giverClient, name, "third")
	waitForWaiters(t, ctx, giverClient, name, 1)
	lease3, err := w.s.Transfer(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	third := <-next
	if third.err != nil {
		t.Fatal(third.err)
	}
	defer third.s.Release(context.Background())
	if lease3.GetHolder() != "third" || third.s.FencingToken() != lease3.GetFencingToken() || lease3.GetFencingToken() <= w.s.FencingToken() {
		t.Fatalf("head-of-queue transfer gave %v (session token %d), previous token %d", lease3, third.s.FencingToken(), w.s.FencingToken())
	}
	if info, err := giverClient.Inspect(ctx, name); err != nil || info.GetLease().GetHolder() != "third" {
		t.Fatalf("GetLease after the transfers = %v, %v; want holder third", info, err)
	}
}

// orderedLog is a log shared by several participants' callbacks.
type orderedLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *orderedLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *orderedLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// electorFor starts an Elector for identity that logs its callbacks to log
// and sends each term's token to started.
func electorFor(t *testing.T, c *tenure.Client, name, identity string, log *orderedLog, started chan<- uint64, causes chan<- error) *tenure.Elector {
	ctx, cancel := context.WithCancel(context.Background())
	e := c.NewElector(tenure.ElectionConfig{
		Name:     name,
		Identity: identity,
		Value:    identity + ":5432",
		TTL:      10 * time.Second,
		OnStartedLeading: func(ctx context.Context, term *tenure.Session) {
			log.add("%s started %d", identity, term.FencingToken())
			started <- term.FencingToken()
			<-ctx.Done()
			log.add("%s work ended", identity)
			if causes != nil {
				causes <- context.Cause(ctx)
			}
		},
		OnStoppedLeading: func() { log.add("%s stopped", identity) },
	})
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return e
}

// ResignTo hands the leadership to a waiting candidate: the leader's work
// ends and OnStoppedLeading runs before the call returns and before the
// successor starts (one shared log), the successor's token is greater;
// a successor that does not wait gets NO_WAITER and the leader leads the
// same term again; "" hands it to the next candidate.
func TestElectorResignTo(t *testing.T) {
	ctx := testCtx(t)
	name := leaseName(t, "e")
	log := &orderedLog{}
	a := newClient(t, shared.addr)
	b := newClient(t, shared.addr)
	startedA, startedB := make(chan uint64, 4), make(chan uint64, 4)
	causesA := make(chan error, 4)

	ea := electorFor(t, a, name, "node-a", log, startedA, causesA)
	tokenA := recvWithin(t, startedA, "node-a's term")
	eb := electorFor(t, b, name, "node-b", log, startedB, nil)
	waitForWaiters(t, ctx, a, name, 1)
	if _, err := eb.ResignTo(ctx, "node-a"); !errors.Is(err, tenure.ErrNotLeading) {
		t.Fatalf("ResignTo of a candidate that does not lead = %v, want ErrNotLeading", err)
	}

	next, err := ea.ResignTo(ctx, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if next.Identity != "node-b" || next.Value != "node-b:5432" || next.FencingToken <= tokenA {
		t.Fatalf("ResignTo returned %v, want node-b with a token above %d", next, tokenA)
	}
	// node-a had stopped when ResignTo returned.
	want := []string{fmt.Sprintf("node-a started %d", tokenA), "node-a work ended", "node-a stopped"}
	if lines := log.snapshot(); len(lines) < 3 || fmt.Sprint(lines[:3]) != fmt.Sprint(want) {
		t.Fatalf("log when ResignTo returned: %q, want it to start with %q", lines, want)
	}
	if cause := recvWithin(t, causesA, "node-a's cause"); !errors.Is(cause, tenure.ErrTransferred) {
		t.Fatalf("node-a's leading context ended with %v, want ErrTransferred", cause)
	}
	tokenB := recvWithin(t, startedB, "node-b's term")
	if tokenB != next.FencingToken {
		t.Fatalf("node-b leads with token %d, ResignTo said %d", tokenB, next.FencingToken)
	}
	want = append(want, fmt.Sprintf("node-b started %d", tokenB))
	if lines := log.snapshot(); fmt.Sprint(lines[:4]) != fmt.Sprint(want) {
		t.Fatalf("log %q, want it to start with %q", lines, want)
	}

	// node-a campaigns again; node-b names a candidate that does not wait:
	// NO_WAITER, and node-b leads the same term again.
	waitForWaiters(t, ctx, b, name, 1)
	if _, err := eb.ResignTo(ctx, "node-c"); tenure.ReasonOf(err) != tenurev1.ErrorReason_NO_WAITER {
		t.Fatalf("ResignTo a candidate that does not wait = %v, want NO_WAITER", err)
	}
	if again := recvWithin(t, startedB, "node-b leading again"); again != tokenB {
		t.Fatalf("node-b leads again with token %d, want its term %d", again, tokenB)
	}
	if l, err := b.Leader(ctx, name); err != nil || l.Identity != "node-b" || l.FencingToken != tokenB {
		t.Fatalf("Leader after NO_WAITER = %v, %v; want node-b, token %d", l, err, tokenB)
	}

	// To the next candidate: node-a, with a greater token.
	next, err = eb.ResignTo(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	tokenA2 := recvWithin(t, startedA, "node-a's second term")
	if next.Identity != "node-a" || tokenA2 != next.FencingToken || tokenA2 <= tokenB {
		t.Fatalf("ResignTo(next) = %v, node-a leads with %d; want node-a above %d", next, tokenA2, tokenB)
	}
	lines := log.snapshot()
	want = []string{
		fmt.Sprintf("node-b started %d", tokenB), "node-b work ended", "node-b stopped",
		fmt.Sprintf("node-b started %d", tokenB), "node-b work ended", "node-b stopped",
		fmt.Sprintf("node-a started %d", tokenA2),
	}
	if fmt.Sprint(lines[3:]) != fmt.Sprint(want) {
		t.Fatalf("log %q, want it to end with %q", lines, want)
	}
}

// preferTTL is the terms' TTL in TestElectorHandsOverToPreferred: far
// above the test's waits (recvWithin: 20 s), so a takeover at the TTL
// (rather than a hand-over) would fail the test.
const preferTTL = 60 * time.Second

// preferringElector starts an Elector for identity campaigning with
// preference, logging its callbacks to log; it sends each term's token to
// started, its leading context's cause to causes and each leader its
// OnNewLeader gets to leaders.
func preferringElector(t *testing.T, c *tenure.Client, name, identity string, preference uint32, log *orderedLog, started chan<- uint64, causes chan<- error, leaders chan<- tenure.Leader) {
	ctx, cancel := context.WithCancel(context.Background())
	e := c.NewElector(tenure.ElectionConfig{
		Name:       name,
		Identity:   identity,
		Value:      identity + ":5432",
		TTL:        preferTTL,
		Preference: preference,
		OnStartedLeading: func(ctx context.Context, term *tenure.Session) {
			log.add("%s started %d", identity, term.FencingToken())
			started <- term.FencingToken()
			<-ctx.Done()
			log.add("%s work ended", identity)
			causes <- context.Cause(ctx)
		},
		OnStoppedLeading: func() { log.add("%s stopped", identity) },
		OnNewLeader:      func(l tenure.Leader) { leaders <- l },
	})
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// An elector of preference 1 leads; one of preference 2 joins and takes
// over by itself through the resign-to path: no waiting for the TTL (60 s,
// above every wait of the test), the leader's work ended and its
// OnStoppedLeading ran before the successor's OnStartedLeading (one shared
// log), with a greater token. The PREFERRED change that named node-b did
// not reach node-a's OnNewLeader (its leader was unchanged).
func TestElectorHandsOverToPreferred(t *testing.T) {
	name := leaseName(t, "e")
	log := &orderedLog{}
	a := newClient(t, shared.addr)
	b := newClient(t, shared.addr)
	startedA, startedB := make(chan uint64, 4), make(chan uint64, 4)
	causesA, causesB := make(chan error, 4), make(chan error, 4)
	leadersA, leadersB := make(chan tenure.Leader, 64), make(chan tenure.Leader, 64)

	preferringElector(t, a, name, "node-a", 1, log, startedA, causesA, leadersA)
	tokenA := recvWithin(t, startedA, "node-a's term")
	preferringElector(t, b, name, "node-b", 2, log, startedB, causesB, leadersB)
	tokenB := recvWithin(t, startedB, "node-b's term (a hand-over, not the TTL)")
	if tokenB <= tokenA {
		t.Fatalf("node-b leads with token %d, not above node-a's %d", tokenB, tokenA)
	}
	want := []string{
		fmt.Sprintf("node-a started %d", tokenA), "node-a work ended", "node-a stopped",
		fmt.Sprintf("node-b started %d", tokenB),
	}
	if lines := log.snapshot(); len(lines) < 4 || fmt.Sprint(lines[:4]) != fmt.Sprint(want) {
		t.Fatalf("log %q, want it to start with %q", lines, want)
	}
	if cause := recvWithin(t, causesA, "node-a's cause"); !errors.Is(cause, tenure.ErrTransferred) {
		t.Fatalf("node-a's leading context ended with %v, want ErrTransferred", cause)
	}
	// node-a's OnNewLeader got node-a once (not again for the PREFERRED
	// change naming node-b), before node-b; "" (nobody) may come before
	// node-a (Observe opened first) and between them (Observe shows the
	// hand-over as RESIGNED, then ELECTED).
	var seen []string
	for l := recvWithin(t, leadersA, "node-b seen by node-a"); ; l = recvWithin(t, leadersA, "node-b seen by node-a") {
		seen = append(seen, l.Identity)
		if l.Identity == "node-b" {
			break
		}
	}
	if got := strings.Join(seen, ","); got != "node-a,node-b" && got != ",node-a,node-b" && got != "node-a,,node-b" && got != ",node-a,,node-b" {
		t.Fatalf("node-a's OnNewLeader saw %q, want node-a once, then node-b", seen)
	}
	if l, err := a.Leader(testCtx(t), name); err != nil || l.Identity != "node-b" || l.FencingToken != tokenB {
		t.Fatalf("Leader = %v, %v; want node-b with token %d", l, err, tokenB)
	}
}
