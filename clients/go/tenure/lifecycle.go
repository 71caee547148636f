package tenure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// holding is what differs between a Session (one lease) and a
// GroupSession (its members): what is held and followed on the client's
// loss watch, and how a renewal and a release are sent. R is what a release
// reports.
type holding[R any] interface {
	follower
	// sendRenewal sends one renewal with the current revisions and, on
	// success, records it with lifecycle.renewed. The caller holds rpcMu.
	sendRenewal(ctx context.Context) error
	// sendRelease sends the release with the current revisions;
	// LEASE_NOT_HELD and LEASE_NOT_FOUND mean nothing was held, not an
	// error. The caller holds rpcMu.
	sendRelease(ctx context.Context) (R, error)
}

// lifecycle is the life of a holding, written once for a Session and a
// GroupSession (which embed it): the safe deadline and the renew schedule,
// the renewal loop, loss (once, closing Done), the manual renewal and the
// release.
type lifecycle[R any] struct {
	self     holding[R] // the Session or GroupSession this is the life of
	client   *Client
	fraction float64
	margin   time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex // guards the fields below, and the holding's revisions
	ttl      time.Duration
	lastSent time.Time // send time of the last successful acquire or renewal
	deadline time.Time // safe deadline (monotonic)
	lost     error     // why the holding ended; nil while held
	handing  bool      // a hand-over (Transfer, a Resign to a successor) is in flight
	heldBack error     // a watch's loss seen while handing over, applied if it fails

	rpcMu     sync.Mutex // serialises renewals and releases
	releaseMu sync.Mutex // serialises Release
	released  bool

	loopDone chan struct{} // closed when the renewal loop has returned

	paused atomic.Bool // test hook: skip background renewals
}

// init sets up the life of self, granted ttl by an acquire sent at sent;
// ctx's values are kept, not its cancellation.
func (l *lifecycle[R]) init(ctx context.Context, self holding[R], c *Client, cfg acquireConfig, granted time.Duration, sent time.Time) {
	l.self, l.client, l.fraction = self, c, cfg.renewFraction
	l.margin = cfg.margin
	if !cfg.marginSet {
		l.margin = DefaultSafetyMargin(granted)
	}
	l.ttl, l.lastSent, l.deadline = granted, sent, sent.Add(granted-l.margin)
	l.loopDone = make(chan struct{})
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
}

// start checks the margin against the granted TTL, renews once when a long
// wait left no time as counted from the send time, then has the client's
// loss watch follow the holding and starts the renewal loop. On failure
// the holding is lost and released, and start returns why.
func (l *lifecycle[R]) start(ctx context.Context) error {
	if l.margin >= l.ttl {
		return l.fail(ctx, fmt.Errorf("tenure: safety margin %v is not below the granted TTL %v", l.margin, l.ttl))
	}
	// A long wait can leave no time on the holding as counted from the send
	// time: establish a fresh deadline before handing the session out.
	if !time.Now().Before(l.safeDeadline()) {
		if err := l.renewOnce(ctx); err != nil {
			return l.fail(ctx, err)
		}
	}
	l.client.loss.add(l.self)
	go l.run()
	return nil
}

// fail ends a holding that could not be started, releasing it.
func (l *lifecycle[R]) fail(ctx context.Context, err error) error {
	l.lose(err)
	close(l.loopDone)
	_, _ = l.releaseNow(ctx)
	return err
}

// grantedTTL is the TTL of the last successful acquire or renewal.
func (l *lifecycle[R]) grantedTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// safeDeadline is the safe deadline; it only moves forward.
func (l *lifecycle[R]) safeDeadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// held reports whether the holding was neither lost nor released and its
// safe deadline has not passed.
func (l *lifecycle[R]) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost == nil && time.Now().Before(l.deadline)
}

// err is nil while held, and otherwise why not.
func (l *lifecycle[R]) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil && !time.Now().Before(l.deadline) {
		return ErrDeadlinePassed
	}
	return l.lost
}

// renew renews now, besides the background renewals; a permanent failure
// ends the holding. It fails without a call once the holding is lost.
func (l *lifecycle[R]) renew(ctx context.Context) error {
	if err := l.err(); err != nil {
		return err
	}
	err := l.renewOnce(ctx)
	if err != nil && isFatal(err) {
		l.lose(err)
	}
	return err
}

// renewOnce sends one renewal, one call at a time.
func (l *lifecycle[R]) renewOnce(ctx context.Context) error {
	l.rpcMu.Lock()
	defer l.rpcMu.Unlock()
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost != nil { // released or handed over while this renewal waited
		return lost
	}
	return l.self.sendRenewal(ctx)
}

// renewed takes a successful renewal sent at sent that granted ttl: store
// records the renewed revisions (under mu), and the safe deadline moves
// forward. It returns the loss instead when the holding was lost meanwhile.
func (l *lifecycle[R]) renewed(sent time.Time, ttl time.Duration, store func()) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	store()
	l.ttl = ttl
	if d := sent.Add(ttl - l.margin); d.After(l.deadline) {
		l.deadline, l.lastSent = d, sent
	}
	return nil
}

// release marks the holding lost with ErrReleased (Done closes first),
// waits for the renewal loop to end and releases on the server. Safe to
// call more than once: after a successful call, later ones report nothing
// (the zero R).
func (l *lifecycle[R]) release(ctx context.Context) (R, error) {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	if l.released {
		var none R
		return none, nil
	}
	l.lose(ErrReleased) // first: the holder stops before anyone else can take over
	<-l.loopDone
	out, err := l.releaseNow(ctx)
	if err == nil {
		l.released = true
	}
	return out, err
}

// releaseNow sends the release, one call at a time.
func (l *lifecycle[R]) releaseNow(ctx context.Context) (R, error) {
	l.rpcMu.Lock()
	defer l.rpcMu.Unlock()
	return l.self.sendRelease(ctx)
}

// lose ends the holding with cause err, once; later calls change nothing.
// While a hand-over is in flight, a loss seen by the watch (the hand-over's
// own RELEASED, most likely) is held back: the hand-over's reply decides.
func (l *lifecycle[R]) lose(err error) {
	l.mu.Lock()
	if l.handing && l.lost == nil && errors.Is(err, ErrLostOnWatch) {
		if l.heldBack == nil {
			l.heldBack = err
		}
		l.mu.Unlock()
		return
	}
	if l.lost == nil {
		l.lost = err
	}
	l.mu.Unlock()
	l.cancel(err)
	l.client.loss.remove(l.self)
}

// handOver hands the holding to a waiter with send (which returns the
// call's error), one call at a time with renewals and releases. On success
// the holding ends locally exactly as after a release, with cause
// ErrTransferred: Done closes, the renewals stop, and Release reports
// false. On failure the holding is unchanged (NO_WAITER: nobody to hand it
// to), unless the server says it is no longer held (LEASE_NOT_HELD,
// LEASE_NOT_FOUND) or the watch saw it end meanwhile: then it is lost.
func (l *lifecycle[R]) handOver(ctx context.Context, send func(ctx context.Context) error) error {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	if err := l.err(); err != nil {
		return err
	}
	l.rpcMu.Lock()
	l.mu.Lock()
	l.handing = true
	l.mu.Unlock()
	err := send(ctx)
	l.mu.Lock()
	l.handing = false
	back := l.heldBack
	l.heldBack = nil
	l.mu.Unlock()
	if err == nil {
		l.lose(ErrTransferred)
		l.rpcMu.Unlock()
		<-l.loopDone
		l.released = true
		return nil
	}
	l.rpcMu.Unlock()
	switch {
	case back != nil:
		l.lose(back)
	case ReasonOf(err) == tenurev1.ErrorReason_LEASE_NOT_HELD, ReasonOf(err) == tenurev1.ErrorReason_LEASE_NOT_FOUND:
		l.lose(err)
	}
	return err
}

// schedule returns the safe deadline and the time of the next renewal.
func (l *lifecycle[R]) schedule() (deadline, renewAt time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, l.lastSent.Add(time.Duration(float64(l.ttl) * l.fraction))
}

// retryDelay is how long the loop waits after a failed renewal.
func (l *lifecycle[R]) retryDelay() time.Duration {
	d := time.Duration(float64(l.grantedTTL()) * l.fraction / 3)
	return max(min(d, time.Second), 20*time.Millisecond)
}

// run is the renewal loop: renew at the renew fraction of the TTL, retry
// transient failures, end the holding on a permanent failure or when the
// safe deadline passes. It returns when the holding's loss context ends,
// and closes loopDone.
func (l *lifecycle[R]) run() {
	defer close(l.loopDone)
	deadline, renewAt := l.schedule()
	deadlineTimer := time.NewTimer(time.Until(deadline))
	defer deadlineTimer.Stop()
	renewTimer := time.NewTimer(untilAligned(renewAt))
	defer renewTimer.Stop()

	results := make(chan error, 1)
	inflight := func() {}
	defer func() { inflight() }()
	var lastErr error
	for {
		select {
		case <-l.ctx.Done(): // released, or lost through Renew or the watch
			return
		case <-deadlineTimer.C:
			deadline, _ := l.schedule()
			if d := time.Until(deadline); d > 0 {
				deadlineTimer.Reset(d)
				continue
			}
			if lastErr != nil {
				l.lose(fmt.Errorf("%w (last renewal error: %w)", ErrDeadlinePassed, lastErr))
			} else {
				l.lose(ErrDeadlinePassed)
			}
			return
		case <-renewTimer.C:
			if l.paused.Load() {
				renewTimer.Reset(l.retryDelay())
				continue
			}
			// A renewal that ends after the safe deadline is of no use.
			deadline, _ := l.schedule()
			rctx, cancel := context.WithDeadline(context.WithoutCancel(l.ctx), deadline)
			inflight = cancel
			go func() { results <- l.renewOnce(rctx) }()
		case err := <-results:
			inflight()
			inflight = func() {}
			if err == nil {
				lastErr = nil
				deadline, renewAt := l.schedule()
				deadlineTimer.Reset(time.Until(deadline))
				renewTimer.Reset(untilAligned(renewAt))
				continue
			}
			if isFatal(err) {
				l.lose(err)
				return
			}
			lastErr = err
			renewTimer.Reset(l.retryDelay())
		}
	}
}

// renewGrid aligns renewal times: a renewal due more than renewGridMin from
// now runs at the last multiple of renewGrid before it (never later), so
// the renewals of sessions acquired close together come due at the same
// moment and share one KeepAlive request.
const (
	renewGrid    = 50 * time.Millisecond
	renewGridMin = 4 * renewGrid
)

// untilAligned is how long until renewAt, moved earlier onto renewGrid.
func untilAligned(renewAt time.Time) time.Duration {
	d := time.Until(renewAt)
	if d <= renewGridMin {
		return d
	}
	return time.Until(renewAt.Truncate(renewGrid))
}
