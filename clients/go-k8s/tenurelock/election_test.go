package tenurelock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/clients/go-k8s/internal/tenuretest"
)

// TestElectionInProcess runs two, then three candidates in this process,
// each with its own Tenure client and client-go's real
// leaderelection.RunOrDie (ReleaseOnCancel), and moves leadership by
// cancelling the leader's context three times: the next candidate takes
// over after the release, not after the TTL, with a greater fencing token,
// and no two leaders' terms overlap.
func TestElectionInProcess(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d-candidates", n), func(t *testing.T) {
			srv := tenuretest.Start(t)
			name := electionName(t)
			led := newLedger(t, true)
			cands := map[string]*candidate{}
			for i := range n {
				id := fmt.Sprintf("cand-%d", i+1)
				cands[id] = newCandidate(t, srv.Client(t), name, id, led)
				cands[id].run()
			}
			cur := led.next(10 * time.Second)
			for range 3 {
				// Let the leader's elector renew its term, then cancel it.
				awaitRenewals(t, srv.Client(t), name, cur.token, 2)
				old := cands[cur.id]
				cancelled := time.Now()
				old.stop() // returns after the release
				next := led.next(leaseDuration)
				took := time.Since(cancelled)
				if next.id == cur.id || next.token <= cur.token {
					t.Fatalf("after %s (token %d) gave up, %s leads with token %d", cur.id, cur.token, next.id, next.token)
				}
				t.Logf("%s (token %d) released; %s leads (token %d) %v later", cur.id, cur.token, next.id, next.token, took.Round(time.Millisecond))
				old.run() // back as a candidate
				cur = next
			}
			for _, c := range cands {
				c.stop()
			}
			led.check()
		})
	}
}

// TestStopWithoutRelease: a leader whose elector stops without
// ReleaseOnCancel leaves its term to expire in Tenure; the other candidate
// takes over once Tenure expired it (about the TTL after the last renewal),
// with a greater token.
func TestStopWithoutRelease(t *testing.T) {
	srv := tenuretest.Start(t)
	name := electionName(t)
	led := newLedger(t, true)
	a := newCandidate(t, srv.Client(t), name, "a", led)
	a.release = false
	a.run()
	first := led.next(10 * time.Second)
	if first.id != "a" {
		t.Fatalf("%s leads; want a", first.id)
	}
	b := newCandidate(t, srv.Client(t), name, "b", led)
	b.run()
	awaitRenewals(t, srv.Client(t), name, first.token, 2)
	stopped := time.Now()
	a.stop()
	next := led.next(3 * leaseDuration)
	took := time.Since(stopped)
	t.Logf("b leads (token %d) %v after a stopped without releasing", next.token, took.Round(time.Millisecond))
	if next.id != "b" || next.token <= first.token {
		t.Fatalf("%s leads with token %d after a's %d", next.id, next.token, first.token)
	}
	if took < leaseDuration-2*retryPeriod {
		t.Errorf("b took over %v after a stopped: before a's term could have expired", took)
	}
	b.stop()
	led.check()
}

// TestRevokedLeaderStepsDown: an operator revokes the leader's term. Its
// term's context ends at once (the lock's watch), its elector steps down
// (its lock refuses a new term meanwhile), and the other candidate leads
// with a greater token without overlapping it.
func TestRevokedLeaderStepsDown(t *testing.T) {
	srv := tenuretest.Start(t)
	name := electionName(t)
	led := newLedger(t, true)
	a := newCandidate(t, srv.Client(t), name, "a", led)
	a.run()
	first := led.next(10 * time.Second)
	b := newCandidate(t, srv.Client(t), name, "b", led)
	b.run()
	awaitRenewals(t, srv.Client(t), name, first.token, 2)
	term := a.lock.Term()
	revoked := time.Now()
	if _, err := srv.Client(t).RevokeLease(testCtx(t), name, "test", first.token); err != nil {
		t.Fatal(err)
	}
	within(t, term.Done(), time.Second, "the revoked term's context ends")
	t.Logf("term ended %v after the revoke: %v", time.Since(revoked).Round(time.Millisecond), term.Err())
	next := led.next(3 * leaseDuration)
	if next.id != "b" || next.token <= first.token {
		t.Fatalf("%s leads with token %d after a's %d was revoked", next.id, next.token, first.token)
	}
	// a's elector finds out through its renewals and gives up after its
	// renew deadline: RunOrDie returns (it does not campaign again).
	within(t, a.returned(), renewDeadline+2*retryPeriod+2*time.Second, "a's RunOrDie returns")
	b.stop()
	led.check()
}
