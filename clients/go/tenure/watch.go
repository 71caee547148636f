package tenure

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// EventType is the kind of a watch Event (the proto's tenure.v1.EventType).
type EventType = tenurev1.EventType

// The event types, in the order a watch delivers them: CURRENT entries (the
// snapshot), SNAPSHOT_COMPLETE once, then live changes. EventMissed is a
// live change too: the stream did not see every change of Name (its
// server's watcher fell behind the bucket, which keeps one message per
// name), so the changes after MissedAfterRevision and before Revision are
// gone; the holding in Holder and FencingToken (when known, token != 0)
// has ended, and other holdings may have come and gone in between. The
// events after it are Name's changes from Revision on (read the name, Get,
// for its state now). It is sent whatever WithEventTypes asks for.
const (
	EventCurrent          = tenurev1.EventType_EVENT_TYPE_CURRENT
	EventSnapshotComplete = tenurev1.EventType_EVENT_TYPE_SNAPSHOT_COMPLETE
	EventAcquired         = tenurev1.EventType_EVENT_TYPE_ACQUIRED
	EventRenewed          = tenurev1.EventType_EVENT_TYPE_RENEWED
	EventReleased         = tenurev1.EventType_EVENT_TYPE_RELEASED
	EventExpired          = tenurev1.EventType_EVENT_TYPE_EXPIRED
	EventRevoked          = tenurev1.EventType_EVENT_TYPE_REVOKED
	EventMissed           = tenurev1.EventType_EVENT_TYPE_MISSED
)

// Event is one lease event from Watch.
type Event struct {
	// Type is what happened.
	Type EventType
	// Name is the lease concerned (empty for SNAPSHOT_COMPLETE).
	Name string
	// Revision is the bucket revision of the change.
	Revision uint64
	// Holder is the holder concerned, where known.
	Holder string
	// FencingToken is the token of the holding concerned, where known.
	FencingToken uint64
	// Lease is the full holding for CURRENT, ACQUIRED and RENEWED.
	Lease *tenurev1.Lease
	// Slot is the semaphore slot concerned (1 to the limit); 0 for a plain
	// lease. A semaphore's holders are told apart by it.
	Slot uint32
	// Time is when the change was written (server clock); zero if unknown.
	Time time.Time
	// MissedAfterRevision is, for EventMissed, the last revision of Name the
	// stream saw (0: none): Name's changes after it and before Revision were
	// not all seen. 0 for every other type.
	MissedAfterRevision uint64
	// Resync is true on the CURRENT events and the SNAPSHOT_COMPLETE of a
	// snapshot sent again after a reconnect that could not resume (the
	// server no longer had the history, reason WATCH_HISTORY_COMPACTED; the
	// stream broke before its first snapshot was complete; or the watch had
	// seen no revision yet, an empty snapshot and no change): changes made
	// while disconnected may be missing from the events, so replace what
	// you built from earlier events with this snapshot.
	Resync bool
	// Err is set only on the last value sent before the channel closes, when
	// the watch ended for a reason other than the caller's context: a
	// permanent *Error from the server (PERMISSION_DENIED, UNAUTHENTICATED,
	// INVALID_ARGUMENT, ...). Transient failures (server restart,
	// UNAVAILABLE, SHUTTING_DOWN, the stream ending) never end the watch:
	// it reconnects and resumes.
	Err error
}

// WatchOption configures Watch.
type WatchOption func(*tenurev1.WatchLeaseRequest)

// WithEventTypes keeps only events of these types (SNAPSHOT_COMPLETE and
// MISSED are always sent).
func WithEventTypes(types ...EventType) WatchOption {
	return func(r *tenurev1.WatchLeaseRequest) {
		r.EventTypes = append(r.EventTypes, types...)
	}
}

// WithStartRevision resumes from revision rev (the Revision of the last
// event you processed): no snapshot, every change after rev, then live
// changes. 0 (the default) starts with a snapshot. When the server no
// longer has the history after rev (WATCH_HISTORY_COMPACTED), Watch falls
// back to a fresh snapshot whose events have Resync set.
func WithStartRevision(rev uint64) WatchOption {
	return func(r *tenurev1.WatchLeaseRequest) { r.StartRevision = rev }
}

// Backoff between watch reconnects: capped exponential with jitter,
// starting again from the bottom after a stream delivered an event.
const (
	watchBackoffMin = 50 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// backoff is a capped exponential delay with jitter.
type backoff struct{ next time.Duration }

// wait sleeps the next delay (a random time in [d/2, d]) and doubles d up to
// the cap; false when ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	if b.next == 0 {
		b.next = watchBackoffMin
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(b.next*2, watchBackoffMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// reset starts the delays from the bottom again.
func (b *backoff) reset() { b.next = 0 }

// resumePoint is where a watch stands: the highest revision it delivered,
// and whether that revision is a valid resume point (a snapshot was
// complete, or the stream itself was a resume).
type resumePoint struct {
	rev  uint64
	live bool
}

// start is the start_revision of the next stream: rev once live, else 0
// (a fresh snapshot).
func (p *resumePoint) start() uint64 {
	if p.live && p.rev > 0 {
		return p.rev
	}
	return 0
}

// see moves the point past ev.
func (p *resumePoint) see(ev *tenurev1.LeaseEvent) {
	p.rev = max(p.rev, ev.GetRevision())
	if ev.GetType() == tenurev1.EventType_EVENT_TYPE_SNAPSHOT_COMPLETE {
		p.live = true
	}
}

// watchStep is what to do after a watch stream failed.
type watchStep int

const (
	stepRetry watchStep = iota // reconnect after the backoff, resuming
	stepFresh                  // reconnect at once with a fresh snapshot
	stepStop                   // a permanent error: end the watch
)

// afterWatchError classifies a failed stream: WATCH_HISTORY_COMPACTED
// restarts fresh; the stream ending or any retryable error (UNAVAILABLE,
// SHUTTING_DOWN, NATS_UNAVAILABLE, WATCH_LAGGED, transport errors) resumes
// after a backoff; anything else (PERMISSION_DENIED, UNAUTHENTICATED,
// INVALID_ARGUMENT, ...) is permanent.
func afterWatchError(err error) watchStep {
	if ReasonOf(err) == tenurev1.ErrorReason_WATCH_HISTORY_COMPACTED {
		return stepFresh
	}
	var te *Error
	if !errors.As(err, &te) || te.Retryable() {
		return stepRetry
	}
	return stepStop
}

// Watch streams the events of one lease name, or of a subtree ("jobs.>"
// watches every name below "jobs."; ">" watches all).
//
// It waits for the stream's first event, so a bad request (e.g. an invalid
// name) or an unreachable server is returned as an error here. The channel
// then delivers that event and every later one, in revision order, until
// ctx is done (stop watching by cancelling ctx; the channel then closes).
//
// The watch survives server restarts and transient failures: it reconnects
// with capped exponential backoff and jitter, resuming after the last
// revision it delivered (start_revision), so no change is delivered twice
// or skipped; the server's "caught up" SNAPSHOT_COMPLETE of a resumed stream
// is not passed on. If the server cannot resume (WATCH_HISTORY_COMPACTED)
// the watch starts over with a fresh snapshot whose events have Resync set.
// A permanent error ends the watch: the last value has Err set and the
// channel closes. The channel is not drained for you: a slow reader slows
// the stream.
func (c *Client) Watch(ctx context.Context, name string, opts ...WatchOption) (<-chan Event, error) {
	req := &tenurev1.WatchLeaseRequest{Name: name}
	for _, o := range opts {
		o(req)
	}
	point := resumePoint{rev: req.GetStartRevision(), live: req.GetStartRevision() > 0}
	wctx, cancel := context.WithCancel(ctx)
	stream, first, err := c.openWatch(wctx, req)
	resync := false
	if ReasonOf(err) == tenurev1.ErrorReason_WATCH_HISTORY_COMPACTED {
		// Asked to resume where the server has no history: start over.
		point, resync = resumePoint{}, true
		req.StartRevision = 0
		stream, first, err = c.openWatch(wctx, req)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	events := make(chan Event, 16)
	go func() {
		defer close(events)
		defer cancel()
		c.followWatch(wctx, req, point, resync, stream, first, events)
	}()
	return events, nil
}

// openWatch opens a stream and reads its first event.
func (c *Client) openWatch(ctx context.Context, req *tenurev1.WatchLeaseRequest) (tenurev1.LeaseService_WatchLeaseClient, *tenurev1.WatchLeaseResponse, error) {
	stream, err := c.rpc.WatchLease(ctx, req)
	if err != nil {
		return nil, nil, callError(c.target, "WatchLease", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, nil, callError(c.target, "WatchLease", err)
	}
	return stream, first, nil
}

// followWatch delivers the events of stream (first is already read), then
// reconnects and resumes until ctx ends or a permanent error.
func (c *Client) followWatch(ctx context.Context, req *tenurev1.WatchLeaseRequest, point resumePoint, resync bool,
	stream tenurev1.LeaseService_WatchLeaseClient, first *tenurev1.WatchLeaseResponse, events chan<- Event,
) {
	// resync: the current stream's snapshot replaces an earlier view.
	var bo backoff
	msg := first
	for {
		resumed := req.GetStartRevision() > 0
		err := func() error {
			for {
				ev := msg.GetEvent()
				deliver := true
				if resumed {
					// Replay and live changes after the resume point; the
					// "caught up" marker and anything not newer are not news.
					deliver = ev.GetType() != tenurev1.EventType_EVENT_TYPE_SNAPSHOT_COMPLETE && ev.GetRevision() > point.rev
				}
				point.see(ev)
				if deliver {
					out := eventOf(ev)
					out.Resync = resync
					select {
					case events <- out:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				if ev.GetType() == tenurev1.EventType_EVENT_TYPE_SNAPSHOT_COMPLETE {
					resync = false
				}
				bo.reset()
				var err error
				if msg, err = stream.Recv(); err != nil {
					return callError(c.target, "WatchLease", err)
				}
			}
		}()
		for {
			if ctx.Err() != nil {
				return
			}
			switch afterWatchError(err) {
			case stepStop:
				select {
				case events <- Event{Err: err}:
				case <-ctx.Done():
				}
				return
			case stepFresh:
				point = resumePoint{}
			case stepRetry:
				if !bo.wait(ctx) {
					return
				}
			}
			if point.start() == 0 {
				// A fresh snapshot, whether the history is gone, the first
				// snapshot never completed, or no revision was seen yet
				// (an empty snapshot): it replaces the view.
				resync, point = true, resumePoint{}
			}
			req.StartRevision = point.start()
			if stream, msg, err = c.openWatch(ctx, req); err == nil {
				break
			}
		}
	}
}

// eventOf converts a proto event.
func eventOf(e *tenurev1.LeaseEvent) Event {
	ev := Event{
		Type:         e.GetType(),
		Name:         e.GetName(),
		Revision:     e.GetRevision(),
		Holder:       e.GetHolder(),
		FencingToken: e.GetFencingToken(),
		Lease:        e.GetLease(),
		Slot:         e.GetSlot(),

		MissedAfterRevision: e.GetMissedAfterRevision(),
	}
	if e.GetTime() != nil {
		ev.Time = e.GetTime().AsTime()
	}
	return ev
}
