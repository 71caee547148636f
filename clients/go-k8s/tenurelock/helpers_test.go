package tenurelock_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"

	"github.com/tenure-dev/tenure/clients/go-k8s/tenurelock"
	"github.com/tenure-dev/tenure/clients/go/tenure"
)

// The elector's timings in these tests: 2 s terms (Tenure's TTL), renewed
// every 200 ms, given up 1 s after the last successful renewal.
const (
	leaseDuration = 2 * time.Second
	renewDeadline = time.Second
	retryPeriod   = 200 * time.Millisecond
)

// electionName is a lease name unique to the test.
func electionName(t *testing.T) string {
	return "k8s." + strings.NewReplacer("/", ".", "_", "-").Replace(t.Name())
}

// interval is one term as its leader saw it: from OnStartedLeading to the
// end of the context it leads under (term.Guard of the elector's context).
type interval struct {
	id    string
	token uint64
	start time.Time
	end   time.Time // zero while leading
	cause string
}

// ledger records the terms of every candidate of one election and checks
// that exactly one leads at a time.
type ledger struct {
	t       testing.TB
	mu      sync.Mutex
	terms   []*interval // in start order
	leading map[string]*interval
	started chan *interval
	// live checks at each start that nobody else leads (the leaders run in
	// this process); check compares the recorded times in any case.
	live bool
}

func newLedger(t testing.TB, live bool) *ledger {
	return &ledger{t: t, leading: map[string]*interval{}, started: make(chan *interval, 64), live: live}
}

// begin records that id started leading with token at a time.
func (l *ledger) begin(id string, token uint64, at time.Time) *interval {
	l.mu.Lock()
	defer l.mu.Unlock()
	for other, iv := range l.leading {
		if l.live {
			l.t.Errorf("%s started leading (token %d) while %s leads (token %d)", id, token, other, iv.token)
		}
	}
	iv := &interval{id: id, token: token, start: at}
	l.terms = append(l.terms, iv)
	l.leading[id] = iv
	l.started <- iv
	return iv
}

// finish records that the term iv ended.
func (l *ledger) finish(iv *interval, at time.Time, cause string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !iv.end.IsZero() {
		return
	}
	iv.end, iv.cause = at, cause
	if l.leading[iv.id] == iv {
		delete(l.leading, iv.id)
	}
}

// next waits for the next term to start.
func (l *ledger) next(timeout time.Duration) *interval {
	l.t.Helper()
	select {
	case iv := <-l.started:
		return iv
	case <-time.After(timeout):
		l.t.Fatalf("no candidate started leading within %v", timeout)
		return nil
	}
}

// check asserts the terms' tokens strictly increase in start order and
// that every term ended before the next one started.
func (l *ledger) check() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	terms := append([]*interval(nil), l.terms...)
	sort.SliceStable(terms, func(i, j int) bool { return terms[i].start.Before(terms[j].start) })
	for i, iv := range terms {
		end := "leading"
		if !iv.end.IsZero() {
			end = fmt.Sprintf("led %v, ended by: %s", iv.end.Sub(iv.start).Round(time.Millisecond), iv.cause)
		}
		l.t.Logf("term %d: %s token %d, %v", i+1, iv.id, iv.token, end)
		if i == 0 {
			continue
		}
		prev := terms[i-1]
		if iv.token <= prev.token {
			l.t.Errorf("term %d (%s) has token %d, not above the previous term's %d", i+1, iv.id, iv.token, prev.token)
		}
		if prev.end.IsZero() || prev.end.After(iv.start) {
			l.t.Errorf("term %d (%s, token %d) started %v before term %d (%s, token %d) ended",
				i+1, iv.id, iv.token, prev.end.Sub(iv.start), i, prev.id, prev.token)
		}
	}
}

// candidate takes part in an election with client-go's real
// leaderelection.RunOrDie over a tenurelock.Lock.
type candidate struct {
	t       testing.TB
	id      string
	lock    *tenurelock.Lock
	led     *ledger
	release bool // ReleaseOnCancel

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{} // closed when RunOrDie returned
}

func newCandidate(t testing.TB, client *tenure.Client, name, id string, led *ledger) *candidate {
	lock, err := tenurelock.New(client, name, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.CheckTiming(leaseDuration, renewDeadline, retryPeriod); err != nil {
		t.Fatal(err)
	}
	c := &candidate{t: t, id: id, lock: lock, led: led, release: true}
	t.Cleanup(c.stop)
	return c
}

// run starts RunOrDie in the background.
func (c *candidate) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.mu.Lock()
	c.cancel, c.done = cancel, done
	c.mu.Unlock()
	go func() {
		defer close(done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            c.lock,
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: c.release,
			Name:            c.id,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					term := c.lock.Term()
					if term == nil {
						c.t.Errorf("%s: OnStartedLeading without a term", c.id)
						return
					}
					lead, cancel := term.Guard(ctx)
					defer cancel()
					iv := c.led.begin(c.id, term.FencingToken(), time.Now())
					<-lead.Done()
					c.led.finish(iv, time.Now(), context.Cause(lead).Error())
				},
				OnStoppedLeading: func() {},
			},
		})
	}()
}

// stop cancels RunOrDie and waits for it to return (after the release,
// with ReleaseOnCancel).
func (c *candidate) stop() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.t.Errorf("%s: RunOrDie did not return within 10 s of its context's end", c.id)
	}
}

// returned is closed when the last RunOrDie returned.
func (c *candidate) returned() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func within(t testing.TB, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

// awaitRenewals waits until the term with token of name has been renewed n
// times from now on, as a Tenure watch shows.
func awaitRenewals(t testing.TB, c *tenure.Client, name string, token uint64, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := c.Watch(ctx, name, tenure.WithEventTypes(tenure.EventRenewed))
	if err != nil {
		t.Fatal(err)
	}
	for seen := 0; seen < n; {
		select {
		case ev, ok := <-events:
			if !ok || ev.Err != nil {
				t.Fatalf("watching %q for renewals of token %d: closed (%v)", name, token, ev.Err)
			}
			if ev.Type == tenure.EventRenewed && ev.FencingToken == token {
				seen++
			}
		case <-ctx.Done():
			t.Fatalf("token %d of %q: not renewed %d times within 10 s", token, name, n)
		}
	}
}
