package tenure

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// ErrLostOnWatch is wrapped by a Session's loss error when the client's
// shared watch showed its holding end (REVOKED, EXPIRED, RELEASED by
// someone else, or another holder's token) before a renewal would have.
var ErrLostOnWatch = errors.New("tenure: the watch saw the holding end")

// lossWatch is the one WatchLease stream per Client that follows the names
// of all its live sessions, so a revoke or takeover is noticed at once
// rather than at the next renewal. It watches the narrowest name or subtree
// covering every live session ("jobs.a", "jobs.>", ">"), reopens wider when
// a new session's name is not covered, reconnects with backoff resuming
// after the last revision it saw (so a loss during a Tenure restart is still
// seen), and closes when no session is left. When the server refuses the watch (no "watch"
// grant, or it is unauthenticated) it gives up for good: sessions then learn
// of a loss at their next renewal, as without it.
type lossWatch struct {
	c *Client

	mu       sync.Mutex
	sessions map[*Session]struct{} // live sessions
	cover    string                // the watched name or pattern; "" when none
	cancel   context.CancelFunc    // stops the watch goroutine; nil when none
	refused  error                 // why the server refused the watch, once it did
	closed   bool                  // Client.Close was called
	synced   chan struct{}         // closed at the current stream's SNAPSHOT_COMPLETE
}

func newLossWatch(c *Client) *lossWatch {
	return &lossWatch{c: c, sessions: map[*Session]struct{}{}, synced: make(chan struct{})}
}

// add follows s, widening the watch if its name is not covered.
func (w *lossWatch) add(s *Session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.refused != nil {
		return
	}
	w.sessions[s] = struct{}{}
	if w.cancel != nil && covers(w.cover, s.name) {
		return
	}
	if w.cancel != nil {
		w.cancel()
	}
	names := make([]string, 0, len(w.sessions))
	for s := range w.sessions {
		names = append(names, s.name)
	}
	w.cover = coverOf(names)
	w.synced = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.run(ctx, w.cover)
}

// remove stops following s; the watch closes with the last session.
func (w *lossWatch) remove(s *Session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.sessions, s)
	if len(w.sessions) == 0 && w.cancel != nil {
		w.cancel()
		w.cancel, w.cover = nil, ""
	}
}

// close stops the watch for good (Client.Close).
func (w *lossWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
}

// Refused returns why the server refused the shared watch, or nil.
func (w *lossWatch) refusedErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused
}

// named returns the live sessions of a name (a copy: observe may remove).
func (w *lossWatch) named(name string) []*Session {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*Session
	for s := range w.sessions {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// coveredBy returns the live sessions whose names cover includes.
func (w *lossWatch) coveredBy(cover string) []*Session {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*Session
	for s := range w.sessions {
		if covers(cover, s.name) {
			out = append(out, s)
		}
	}
	return out
}

// run keeps one watch of cover open until ctx ends. After a failure it
// reconnects with backoff and resumes after the last revision it saw, so a
// revoke, expiry or takeover that happened while it was disconnected (e.g.
// across a Tenure restart) still arrives as an event. When the server cannot
// resume (WATCH_HISTORY_COMPACTED, or INVALID_ARGUMENT for a revision the
// bucket never had) it starts over with a fresh snapshot: every session
// alive when such a stream opens must show up in it with its own token
// (else it ended while nobody watched).
func (w *lossWatch) run(ctx context.Context, cover string) {
	var bo backoff
	var point resumePoint
	for ctx.Err() == nil {
		start := point.start()
		var before []*Session
		if start == 0 {
			point = resumePoint{}
			before = w.coveredBy(cover)
		}
		err := w.follow(ctx, cover, start, &point, before, bo.reset)
		if ctx.Err() != nil {
			return
		}
		var te *Error
		if start > 0 && errors.As(err, &te) &&
			(te.Reason == tenurev1.ErrorReason_WATCH_HISTORY_COMPACTED || te.Code == codes.InvalidArgument) {
			point = resumePoint{} // cannot resume from there: a fresh snapshot next
			continue
		}
		if refusal(err) {
			w.mu.Lock()
			w.refused = err
			w.mu.Unlock()
			return
		}
		if !bo.wait(ctx) {
			return
		}
	}
}

// follow reads one stream, from start (0: a fresh snapshot), until it fails;
// point follows the revisions it saw.
func (w *lossWatch) follow(ctx context.Context, cover string, start uint64, point *resumePoint, before []*Session, healthy func()) error {
	stream, err := w.c.rpc.WatchLease(ctx, &tenurev1.WatchLeaseRequest{Name: cover, StartRevision: start})
	if err != nil {
		return callError(w.c.target, "WatchLease", err)
	}
	seen := map[*Session]bool{}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return callError(w.c.target, "WatchLease", err)
		}
		healthy()
		ev := msg.GetEvent()
		old := start > 0 && ev.GetRevision() <= point.rev // a resume's replay of what was seen
		point.see(ev)
		if ev.GetType() == tenurev1.EventType_EVENT_TYPE_SNAPSHOT_COMPLETE {
			w.markSynced(cover)
			for _, s := range before {
				if !seen[s] {
					s.lose(fmt.Errorf("%w: %s no longer held with fencing token %d (watch snapshot)", ErrLostOnWatch, slotName(s.name, s.slot), s.token))
				}
			}
			before = nil
			continue
		}
		if old {
			continue
		}
		for _, s := range w.named(ev.GetName()) {
			if ev.GetType() == tenurev1.EventType_EVENT_TYPE_CURRENT && ev.GetFencingToken() == s.token && ev.GetSlot() == s.slot {
				seen[s] = true
			}
			s.observe(ev)
		}
	}
}

// markSynced notes that the watch of cover has delivered its snapshot.
func (w *lossWatch) markSynced(cover string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cover != cover {
		return
	}
	select {
	case <-w.synced:
	default:
		close(w.synced)
	}
}

// syncedChan returns the channel closed once the current watch is live.
func (w *lossWatch) syncedChan() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// refusal reports whether a watch error means the server will not let this
// client watch: retrying cannot help, so the sessions fall back to renewals.
func refusal(err error) bool {
	var te *Error
	if !errors.As(err, &te) {
		return false
	}
	switch te.Code {
	case codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.InvalidArgument:
		return true
	}
	return false
}

// observe ends the session when ev shows its holding gone: its own token
// REVOKED, EXPIRED or RELEASED, or another token holding the name. Events
// older than the session's acquisition are ignored, and so are events of
// another slot: a semaphore's holders come and go without touching each
// other (a plain lease is slot 0, apart from the semaphore's slots).
func (s *Session) observe(ev *tenurev1.LeaseEvent) {
	if ev.GetRevision() < s.acquired || ev.GetSlot() != s.slot {
		return
	}
	switch ev.GetType() {
	case tenurev1.EventType_EVENT_TYPE_REVOKED, tenurev1.EventType_EVENT_TYPE_EXPIRED, tenurev1.EventType_EVENT_TYPE_RELEASED:
		if ev.GetFencingToken() != s.token && ev.GetFencingToken() != 0 {
			return
		}
	case tenurev1.EventType_EVENT_TYPE_ACQUIRED, tenurev1.EventType_EVENT_TYPE_CURRENT, tenurev1.EventType_EVENT_TYPE_RENEWED:
		if ev.GetFencingToken() == s.token {
			return
		}
	default:
		return
	}
	s.lose(fmt.Errorf("%w: %s of %s (fencing token %d) at revision %d", ErrLostOnWatch,
		EventName(ev.GetType()), slotName(ev.GetName(), ev.GetSlot()), ev.GetFencingToken(), ev.GetRevision()))
}

// slotName is name, or "name" slot N for a semaphore holding, for messages.
func slotName(name string, slot uint32) string {
	if slot == 0 {
		return strconv.Quote(name)
	}
	return fmt.Sprintf("%q slot %d", name, slot)
}

// EventName is an event type's short name: "REVOKED" for
// EVENT_TYPE_REVOKED.
func EventName(t EventType) string {
	return strings.TrimPrefix(t.String(), "EVENT_TYPE_")
}

// covers reports whether watching cover (a name, "p.>" or ">") includes name.
func covers(cover, name string) bool {
	switch {
	case cover == ">":
		return true
	case strings.HasSuffix(cover, ".>"):
		return strings.HasPrefix(name, cover[:len(cover)-1])
	default:
		return cover == name
	}
}

// coverOf returns the narrowest watch covering every name: the name itself
// when they are all one, else the subtree of their longest common token
// prefix that is shorter than each name, else ">".
func coverOf(names []string) string {
	if len(names) == 0 {
		return ">"
	}
	same := true
	for _, n := range names[1:] {
		same = same && n == names[0]
	}
	if same {
		return names[0]
	}
	common := strings.Split(names[0], ".")
	for _, n := range names {
		parts := strings.Split(n, ".")
		k := 0
		for k < len(common) && k < len(parts) && common[k] == parts[k] {
			k++
		}
		common = common[:min(k, len(parts)-1)]
	}
	if len(common) == 0 {
		return ">"
	}
	return strings.Join(common, ".") + ".>"
}
