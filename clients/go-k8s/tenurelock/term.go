package tenurelock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// Term is one leadership of this candidate as Tenure granted it: one
// holding of the lease, with one fencing token, from the Acquire that
// started it to its release, its loss, or its safe deadline.
//
// Its Context ends when the term ends, whatever the elector believes:
//
//   - at the safe deadline (the send time of the last successful Acquire or
//     renewal, plus the granted TTL, minus a safety margin) when no renewal
//     got through: Err wraps tenure.ErrDeadlinePassed;
//   - when Tenure refuses a renewal (LEASE_NOT_HELD: the lease was revoked,
//     expired or taken over): Err is that *tenure.Error;
//   - when the lock's watch, or a Get, shows the holding gone or a later
//     holding of the name: Err wraps tenure.ErrLostOnWatch;
//   - on release (ReleaseOnCancel), before the Release call is sent: Err is
//     tenure.ErrReleased;
//   - when the elector stops leading without releasing: ErrStoppedLeading.
//
// A leader must stop acting as leader when the Context ends (or the
// elector's own context does: see Guard) and must pass FencingToken (or
// the fence proof, SetFenceHeaders) with every write it makes downstream.
type Term struct {
	lock     *Lock
	name     string
	holder   string
	token    uint64
	proof    []byte
	leaseKey string
	acquired uint64 // revision of the acquiring write
	margin   time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	revision uint64
	ttl      time.Duration
	lastSent time.Time
	deadline time.Time
	lease    *tenurev1.Lease
	ended    error
	timer    *time.Timer
}

// newTerm is the term granted by lease (an Acquire sent at sent).
func newTerm(l *Lock, lease *tenurev1.Lease, key string, sent time.Time) *Term {
	ttl := lease.GetTtl().AsDuration()
	margin := tenure.DefaultSafetyMargin(ttl)
	if l.marginSet && l.margin < ttl {
		margin = l.margin
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &Term{
		lock:     l,
		name:     lease.GetName(),
		holder:   lease.GetHolder(),
		token:    lease.GetFencingToken(),
		proof:    lease.GetFenceProof(),
		leaseKey: key,
		acquired: lease.GetRevision(),
		margin:   margin,
		ctx:      ctx,
		cancel:   cancel,
		revision: lease.GetRevision(),
		ttl:      ttl,
		lastSent: sent,
		deadline: sent.Add(ttl - margin),
		lease:    lease,
	}
	t.mu.Lock()
	t.timer = time.AfterFunc(time.Until(t.deadline), t.checkDeadline)
	t.mu.Unlock()
	return t
}

// Name is the election's lease name.
func (t *Term) Name() string { return t.name }

// Holder is the leader's identity (its Tenure holder name).
func (t *Term) Holder() string { return t.holder }

// FencingToken is the term's fencing token: strictly greater than every
// earlier term's of the election, the same across renewals. Pass it with
// every downstream write.
func (t *Term) FencingToken() uint64 { return t.token }

// FenceProof is the term's fence proof (a copy): the Ed25519-signed
// statement of the grant that a fenced store verifies offline before it
// compares tokens (docs/fencing.md). Empty when the server signs no proofs
// (no --fence-signing-key).
func (t *Term) FenceProof() []byte { return append([]byte(nil), t.proof...) }

// FenceProofText is FenceProof in its text form, the value of the
// Tenure-Fence header: base64url without padding ("" without a proof).
func (t *Term) FenceProofText() string { return base64.RawURLEncoding.EncodeToString(t.proof) }

// SetFenceHeaders sets the Tenure-Fence (the proof's text form) and
// Tenure-Fencing-Token (the token, decimal) headers on r, as
// tenure.Session.SetFenceHeaders does; without a proof it sets the token
// only.
func (t *Term) SetFenceHeaders(r *http.Request) {
	if r.Header == nil {
		r.Header = make(http.Header)
	}
	if len(t.proof) > 0 {
		r.Header.Set(tenure.FenceHeader, t.FenceProofText())
	} else {
		r.Header.Del(tenure.FenceHeader)
	}
	r.Header.Set(tenure.FencingTokenHeader, strconv.FormatUint(t.token, 10))
}

// Revision is the revision of the term's last successful write.
func (t *Term) Revision() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.revision
}

// TTL is the TTL Tenure granted (whole seconds).
func (t *Term) TTL() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ttl
}

// SafeDeadline is when the term ends unless a renewal gets through: the
// send time of the last successful Acquire or renewal plus the granted TTL
// minus the safety margin (monotonic). Tenure expires the lease no earlier.
func (t *Term) SafeDeadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}

// Lease is the holding as last returned by Acquire or Renew.
func (t *Term) Lease() *tenurev1.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lease
}

// Context is cancelled when the term ends; context.Cause gives Err.
func (t *Term) Context() context.Context { return t.ctx }

// Done is closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Err is nil while the term lasts, and afterwards why it ended. It checks
// the clock itself: from the safe deadline on it is not nil even before
// the term's timer has fired.
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended == nil && !time.Now().Before(t.deadline) {
		return tenure.ErrDeadlinePassed
	}
	return t.ended
}

// Held reports whether the term lasts (Err is nil).
func (t *Term) Held() bool { return t.Err() == nil }

// Guard returns a context that ends when parent ends or the term ends,
// whichever comes first (its cause says which). In OnStartedLeading, run
// the leader's work under term.Guard(ctx): it then stops when the elector
// steps down and when Tenure says the term is over, even if the elector's
// clock says otherwise. Call cancel when done.
func (t *Term) Guard(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(t.ctx, func() { cancel(context.Cause(t.ctx)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// String shows the term for logs.
func (t *Term) String() string {
	return fmt.Sprintf("term of %q on %q, fencing token %d", t.holder, t.name, t.token)
}

// lastSentTime is the send time of the last successful Acquire or renewal.
func (t *Term) lastSentTime() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastSent
}

// end ends the term with cause err, once.
func (t *Term) end(err error) {
	t.mu.Lock()
	if t.ended == nil {
		if !time.Now().Before(t.deadline) {
			err = tenure.ErrDeadlinePassed // it was over already
		}
		t.ended = err
		t.timer.Stop()
	}
	err = t.ended
	t.mu.Unlock()
	t.cancel(err)
}

// checkDeadline ends the term at its safe deadline, or waits for the
// deadline a renewal moved.
func (t *Term) checkDeadline() {
	t.mu.Lock()
	if t.ended != nil {
		t.mu.Unlock()
		return
	}
	if d := time.Until(t.deadline); d > 0 {
		t.timer.Reset(d)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.end(tenure.ErrDeadlinePassed)
}

// renewed records a renewal sent at sent; it fails when the term ended
// meanwhile.
func (t *Term) renewed(sent time.Time, lease *tenurev1.Lease) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended != nil {
		return kubeError(apierrors.NewConflict(GroupResource, t.name, t.ended), t.ended)
	}
	if !time.Now().Before(t.deadline) {
		// The deadline passed while the renewal was on its way: the leader
		// has been told to stop (or is about to be); do not revive it.
		return kubeError(apierrors.NewConflict(GroupResource, t.name, tenure.ErrDeadlinePassed), tenure.ErrDeadlinePassed)
	}
	if lease.GetRevision() > t.revision {
		t.revision = lease.GetRevision()
		t.lease = lease
	}
	if ttl := lease.GetTtl().AsDuration(); ttl > t.margin {
		t.ttl = ttl
		if d := sent.Add(ttl - t.margin); d.After(t.deadline) {
			t.deadline, t.lastSent = d, sent
		}
	}
	return nil
}

// watch ends the term as soon as Tenure shows it gone: its token revoked,
// expired or released, or another token holding the name. It follows the
// name from the acquiring revision on and stops when the term ends.
func (t *Term) watch() {
	events, err := t.lock.client.Watch(t.ctx, t.name, tenure.WithStartRevision(t.acquired))
	if err != nil {
		return // renewals find out (LEASE_NOT_HELD)
	}
	seen := false // the term is in the current resync snapshot
	for ev := range events {
		if ev.Err != nil {
			return
		}
		switch {
		case ev.Type == tenure.EventSnapshotComplete:
			if ev.Resync && !seen {
				t.end(fmt.Errorf("%w: %q no longer held with fencing token %d (watch snapshot)", tenure.ErrLostOnWatch, t.name, t.token))
				return
			}
			seen = false
			continue
		case ev.Name != t.name || ev.Slot != 0:
			continue
		case ev.Type == tenure.EventCurrent && ev.FencingToken == t.token:
			seen = true
		}
		if lostBy(ev, t.acquired, t.token) {
			t.end(fmt.Errorf("%w: %s of %q (fencing token %d) at revision %d", tenure.ErrLostOnWatch,
				tenure.EventName(ev.Type), t.name, ev.FencingToken, ev.Revision))
			return
		}
	}
}

// lostBy reports whether ev shows the holding with token, acquired at
// revision acquired, gone: its token revoked, expired, released or named
// by a MISSED event, or another token holding the name.
func lostBy(ev tenure.Event, acquired, token uint64) bool {
	if ev.Revision < acquired {
		return false
	}
	switch ev.Type {
	case tenure.EventRevoked, tenure.EventExpired, tenure.EventReleased:
		return ev.FencingToken == token || ev.FencingToken == 0
	case tenurev1.EventType_EVENT_TYPE_MISSED:
		// The watch missed changes of the name; the holding it names has
		// ended. One it does not name (token 0: unknown) may still be held:
		// the next renewal finds out.
		return ev.FencingToken == token
	case tenure.EventAcquired, tenure.EventCurrent, tenure.EventRenewed:
		return ev.FencingToken != token
	}
	return false
}

// mintKey returns a random lease key (43 URL-safe base64 characters).
func mintKey() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("tenurelock: no randomness for a lease key: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
