package tenure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// ErrLostOnWatch is wrapped by a Session's loss error when the client's
// shared watch showed its holding end (REVOKED, EXPIRED, RELEASED by
// someone else, another holder's token, or MISSED naming its token: then
// ErrMissedOnWatch too) before a renewal would have.
var ErrLostOnWatch = errors.New("tenure: the watch saw the holding end")

// ErrMissedOnWatch is wrapped, with ErrLostOnWatch, by a Session's loss
// error when the client's shared watch said it missed changes of the
// session's name (an EventMissed naming the session's fencing token, and
// slot for a semaphore): the holding ended among changes the watch never
// saw, so how it ended (revoked, expired, taken over) is unknown. A MISSED
// naming another token, or none, does not end the session.
var ErrMissedOnWatch = errors.New("tenure: the watch missed changes of the name and the holding ended among them")

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
	sessions map[follower]struct{} // live sessions and group sessions
	cover    string                // the watched name or pattern; "" when none
	cancel   context.CancelFunc    // stops the watch goroutine; nil when none
	refused  error                 // why the server refused the watch, once it did
	closed   bool                  // Client.Close was called
	synced   chan struct{}         // closed at the current stream's SNAPSHOT_COMPLETE
}

// follower is what the loss watch follows: a Session (one name) or a
// GroupSession (every member's name).
type follower interface {
	// watchNames are the names of its holdings.
	watchNames() []string
	// holds reports whether a CURRENT snapshot event is one of its holdings
	// (name, slot and fencing token).
	holds(ev *tenurev1.LeaseEvent) bool
	// observe ends it when ev shows one of its holdings gone.
	observe(ev *tenurev1.LeaseEvent)
	// lose ends it with err.
	lose(err error)
}

func newLossWatch(c *Client) *lossWatch {
	return &lossWatch{c: c, sessions: map[follower]struct{}{}, synced: make(chan struct{})}
}

// add follows s, widening the watch if one of its names is not covered.
func (w *lossWatch) add(s follower) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.refused != nil {
		return
	}
	w.sessions[s] = struct{}{}
	covered := w.cancel != nil
	for _, n := range s.watchNames() {
		covered = covered && covers(w.cover, n)
	}
	if covered {
		return
	}
	if w.cancel != nil {
		w.cancel()
	}
	var names []string
	for s := range w.sessions {
		names = append(names, s.watchNames()...)
	}
	w.cover = coverOf(names)
	w.synced = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.run(ctx, w.cover)
}

// remove stops following s; the watch closes with the last session.
func (w *lossWatch) remove(s follower) {
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

// named returns the live sessions holding name (a copy: observe may
// remove).
func (w *lossWatch) named(name string) []follower {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []follower
	for s := range w.sessions {
		if slices.Contains(s.watchNames(), name) {
			out = append(out, s)
		}
	}
	return out
}

// coveredBy returns the live sessions all of whose names cover includes.
func (w *lossWatch) coveredBy(cover string) []follower {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []follower
	for s := range w.sessions {
		all := true
		for _, n := range s.watchNames() {
			all = all && covers(cover, n)
		}
		if all {
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
		var before []follower
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
func (w *lossWatch) follow(ctx context.Context, cover string, start uint64, point *resumePoint, before []follower, healthy func()) error {
	stream, err := w.c.rpc.WatchLease(ctx, &tenurev1.WatchLeaseRequest{Name: cover, StartRevision: start})
	if err != nil {
		return callError(w.c.target, "WatchLease", err)
	}
	seen := map[follower]map[string]bool{} // names seen held in the snapshot
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
				for _, n := range s.watchNames() {
					if !seen[s][n] {
						s.lose(fmt.Errorf("%w: %q no longer held with its fencing token (watch snapshot)", ErrLostOnWatch, n))
						break
					}
				}
			}
			before = nil
			continue
		}
		if old {
			continue
		}
		for _, s := range w.named(ev.GetName()) {
			if ev.GetType() == tenurev1.EventType_EVENT_TYPE_CURRENT && s.holds(ev) {
				if seen[s] == nil {
					seen[s] = map[string]bool{}
				}
				seen[s][ev.GetName()] = true
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

// watchNames is the session's name.
func (s *Session) watchNames() []string { return []string{s.name} }

// holds reports whether ev is this session's holding (while a Downgrade is
// in flight, also with a greater token: the downgraded holding).
func (s *Session) holds(ev *tenurev1.LeaseEvent) bool {
	if ev.GetName() != s.name || ev.GetSlot() != s.slot {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return ev.GetFencingToken() == s.token || (s.downgrading && ev.GetFencingToken() > s.token)
}

// observe ends the session when ev shows its holding gone (see lostBy).
// While a Downgrade is in flight, whose write shows the holding with a new
// token, the name's events wait for its reply (Downgrade judges them).
func (s *Session) observe(ev *tenurev1.LeaseEvent) {
	if ev.GetName() != s.name {
		return
	}
	s.mu.Lock()
	if s.downgrading {
		s.heldEvents = append(s.heldEvents, ev)
		s.mu.Unlock()
		return
	}
	acquired, token := s.acquired, s.token
	s.mu.Unlock()
	if lostBy(ev, acquired, s.slot, token) {
		s.lose(lossError(ev))
	}
}

// lostBy reports whether ev shows the holding (slot, token), acquired at
// revision acquired, gone: its token REVOKED, EXPIRED or RELEASED, another
// token holding the name, or a MISSED naming its token (a MISSED of another
// token, or of none, says nothing of this holding). Events older than the acquisition are
// ignored, and so are events of another slot: a semaphore's holders come
// and go without touching each other (a plain lease is slot 0, apart from
// the semaphore's slots).
func lostBy(ev *tenurev1.LeaseEvent, acquired uint64, slot uint32, token uint64) bool {
	if ev.GetRevision() < acquired || ev.GetSlot() != slot {
		return false
	}
	switch ev.GetType() {
	case tenurev1.EventType_EVENT_TYPE_REVOKED, tenurev1.EventType_EVENT_TYPE_EXPIRED, tenurev1.EventType_EVENT_TYPE_RELEASED:
		return ev.GetFencingToken() == token || ev.GetFencingToken() == 0
	case tenurev1.EventType_EVENT_TYPE_ACQUIRED, tenurev1.EventType_EVENT_TYPE_CURRENT, tenurev1.EventType_EVENT_TYPE_RENEWED:
		return ev.GetFencingToken() != token
	case tenurev1.EventType_EVENT_TYPE_MISSED:
		return token != 0 && ev.GetFencingToken() == token
	default:
		return false
	}
}

// lossError is the loss cause for ev.
func lossError(ev *tenurev1.LeaseEvent) error {
	if ev.GetType() == tenurev1.EventType_EVENT_TYPE_MISSED {
		return fmt.Errorf("%w: %w: MISSED of %s (fencing token %d): changes after revision %d and before %d were not seen",
			ErrLostOnWatch, ErrMissedOnWatch, slotName(ev.GetName(), ev.GetSlot()), ev.GetFencingToken(),
			ev.GetMissedAfterRevision(), ev.GetRevision())
	}
	return fmt.Errorf("%w: %s of %s (fencing token %d) at revision %d", ErrLostOnWatch,
		EventName(ev.GetType()), slotName(ev.GetName(), ev.GetSlot()), ev.GetFencingToken(), ev.GetRevision())
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
