package tenure

import (
	"context"
	"time"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// EventType is the kind of a watch Event (the proto's tenure.v1.EventType).
type EventType = tenurev1.EventType

// The event types, in the order a watch delivers them: CURRENT entries (the
// snapshot), SNAPSHOT_COMPLETE once, then live changes.
const (
	EventCurrent          = tenurev1.EventType_EVENT_TYPE_CURRENT
	EventSnapshotComplete = tenurev1.EventType_EVENT_TYPE_SNAPSHOT_COMPLETE
	EventAcquired         = tenurev1.EventType_EVENT_TYPE_ACQUIRED
	EventRenewed          = tenurev1.EventType_EVENT_TYPE_RENEWED
	EventReleased         = tenurev1.EventType_EVENT_TYPE_RELEASED
	EventExpired          = tenurev1.EventType_EVENT_TYPE_EXPIRED
	EventRevoked          = tenurev1.EventType_EVENT_TYPE_REVOKED
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
	// Time is when the change was written (server clock); zero if unknown.
	Time time.Time
	// Err is set only on the last value sent before the channel closes, when
	// the stream ended for a reason other than the caller's context: an
	// *Error from the server (e.g. SHUTTING_DOWN), or io.EOF when the
	// server ended the stream cleanly.
	Err error
}

// WatchOption configures Watch.
type WatchOption func(*tenurev1.WatchLeaseRequest)

// WithEventTypes keeps only events of these types (SNAPSHOT_COMPLETE is
// always sent).
func WithEventTypes(types ...EventType) WatchOption {
	return func(r *tenurev1.WatchLeaseRequest) {
		r.EventTypes = append(r.EventTypes, types...)
	}
}

// Watch streams the events of one lease name, or of a subtree ("jobs.>"
// watches every name below "jobs."; ">" watches all).
//
// It waits for the stream's first event, so a bad request (e.g. an invalid
// name) is returned as an error here. The channel then delivers that event
// and every later one, and is closed when ctx is done or the stream ends; in
// the latter case the last value has Err set. Stop watching by cancelling
// ctx. The channel is not drained for you: a slow reader slows the stream.
func (c *Client) Watch(ctx context.Context, name string, opts ...WatchOption) (<-chan Event, error) {
	req := &tenurev1.WatchLeaseRequest{Name: name}
	for _, o := range opts {
		o(req)
	}
	wctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.WatchLease(wctx, req)
	if err != nil {
		cancel()
		return nil, callError(c.target, "WatchLease", err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, callError(c.target, "WatchLease", err)
	}
	events := make(chan Event, 16)
	go func() {
		defer close(events)
		defer cancel()
		msg := first
		for {
			select {
			case events <- eventOf(msg.GetEvent()):
			case <-ctx.Done():
				return
			}
			msg, err = stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				select {
				case events <- Event{Err: callError(c.target, "WatchLease", err)}:
				case <-ctx.Done():
				}
				return
			}
		}
	}()
	return events, nil
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
	}
	if e.GetTime() != nil {
		ev.Time = e.GetTime().AsTime()
	}
	return ev
}
