package tenure

// Leader election in the shape of client-go's leaderelection: RunElection
// campaigns for a name, calls OnStartedLeading with a context that ends at
// the term's safe deadline (or when leadership is lost or given up), calls
// OnStoppedLeading when the term ends, and tells every participant who
// leads through OnNewLeader (from ElectionService.Observe). An election is
// the lease of the same name, so a term is a Session: its fencing token is
// the term's token, to pass to every downstream write. A participant
// campaigns with a preference (ElectionConfig.Preference), and a leader
// hands over to a waiting candidate of greater preference.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// ElectionValueKey is the lease metadata key that holds a leader's value.
const ElectionValueKey = "value"

// Leader is who leads an election, as Observe reports it.
type Leader struct {
	// Identity is the leader's holder name; empty when nobody leads.
	Identity string
	// Value is what the leader published (e.g. its address).
	Value string
	// FencingToken is the term's token; 0 when nobody leads.
	FencingToken uint64
	// Missed is true for an Observe change of type CHANGE_TYPE_MISSED: the
	// stream did not see every change of the election (its server's watcher
	// fell behind), so who leads is unknown until the next change. The
	// leader in EndedIdentity and EndedFencingToken (when known, token != 0)
	// no longer leads; other terms may have come and gone. Identity, Value
	// and FencingToken are empty.
	Missed bool
	// EndedIdentity and EndedFencingToken name, when Missed, the leader
	// whose term is known to have ended (empty and 0 when unknown).
	EndedIdentity     string
	EndedFencingToken uint64
}

// ElectionConfig configures RunElection.
type ElectionConfig struct {
	// Name is the election (a lease name).
	Name string
	// Identity is this participant's holder name.
	Identity string
	// Value is published while leading (e.g. this replica's address).
	Value string
	// TTL is the requested term TTL (0: the server's default).
	TTL time.Duration
	// CampaignWait is how long one Campaign call waits for the election to
	// have no leader before it is retried (0: 30 s; the server caps it).
	CampaignWait time.Duration
	// Preference is this participant's preference as a candidate (0, the
	// default: none; see WithPreference). While it leads, a waiting
	// candidate of a greater preference takes over: the Observe stream
	// names the waiting candidate with the highest preference (the
	// earliest of equals), and this leader hands the term over to it as
	// Elector.ResignTo does (OnStartedLeading's context is cancelled with
	// cause ErrTransferred, OnStoppedLeading runs, then the Resign with the
	// successor is sent), so the successor never starts before this leader
	// stopped, leads from the very write that ends this term, and has a
	// greater fencing token; no moment without a leader. When the preferred
	// candidate is already named as this participant wins a term, it hands
	// over at once, before OnStartedLeading (neither callback runs for that
	// term). If the hand-over fails (NO_WAITER: the candidate left) it
	// leads the same term as after a failed ResignTo, and tries again only
	// when an Observe message names a preferred candidate anew. Candidates
	// of equal preference never displace each other.
	//
	// Rolling updates: campaign with the deployment's generation (or
	// version) as the preference. The first candidate of the new version
	// to wait takes over from an old-version leader once, with no
	// leaderless moment; the other new-version candidates wait behind it
	// and do not displace it.
	Preference uint32
	// OnStartedLeading runs in its own goroutine when this participant
	// becomes leader. ctx is cancelled at the term's safe deadline, when
	// leadership is lost, when RunElection's context ends, or when
	// Elector.ResignTo hands the leadership over: the leader
	// must stop acting as leader when ctx is done, and must pass
	// term.FencingToken() with every write it makes downstream.
	OnStartedLeading func(ctx context.Context, term *Session)
	// OnStoppedLeading is called once per term, after OnStartedLeading's
	// context is done (whatever the reason) and OnStartedLeading returned
	// (once per OnStartedLeading call: a failed Elector.ResignTo leads the
	// same term again).
	OnStoppedLeading func()
	// OnNewLeader is called with each new leader (or "nobody", with an
	// empty Identity) seen through Observe, including this participant, and
	// with a Leader whose Missed is set when the Observe stream missed
	// changes (who leads is then unknown until the next call). Not for a
	// CHANGE_TYPE_PREFERRED change (a new preferred candidate; the leader
	// is unchanged). Optional.
	OnNewLeader func(Leader)
	// AcquireOptions are passed to the Acquire of each term (e.g.
	// WithSafetyMargin). WithWait, WithMetadata and WithPreference (from
	// Preference) are set by RunElection.
	AcquireOptions []AcquireOption
}

// Elect campaigns once: it waits up to wait for the election name to have
// no leader, then makes holder its leader publishing value, and returns the
// term as a Session (renewed in the background; Release resigns).
func (c *Client) Elect(ctx context.Context, name, holder, value string, ttl, wait time.Duration, opts ...AcquireOption) (*Session, error) {
	opts = append(append([]AcquireOption{}, opts...),
		WithWait(wait), WithMetadata(map[string]string{ElectionValueKey: value}))
	return c.Acquire(ctx, name, holder, ttl, opts...)
}

// Proclaim replaces the value published by the term's leader without giving
// up leadership (a renewal that also writes the value). It fails with
// LEASE_NOT_HELD when the term has ended.
func (s *Session) Proclaim(ctx context.Context, value string) error {
	s.rpcMu.Lock()
	defer s.rpcMu.Unlock()
	if err := s.Err(); err != nil {
		return err
	}
	sent := time.Now()
	resp, err := s.client.elect.Proclaim(ctx, &tenurev1.ProclaimRequest{
		Name:             s.name,
		ExpectedRevision: s.Revision(),
		LeaseKey:         s.leaseKey,
		Value:            value,
	})
	if err != nil {
		err = callError(s.client.target, "Proclaim", err)
		if isFatal(err) {
			s.lose(err)
		}
		return err
	}
	l := resp.GetLeadership()
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.GetRevision() > s.revision {
		s.revision = l.GetRevision()
		if s.lease != nil {
			lease := proto.Clone(s.lease).(*tenurev1.Lease)
			if lease.Metadata == nil {
				lease.Metadata = map[string]string{}
			}
			lease.Metadata[ElectionValueKey] = value
			lease.Revision = l.GetRevision()
			s.lease = lease
		}
	}
	if t := l.GetTtl().AsDuration(); t > 0 {
		s.ttl = t
		if d := sent.Add(t - s.margin); d.After(s.deadline) {
			s.deadline = d
			s.lastSent = sent
		}
	}
	return nil
}

// Leader returns who leads the election name now (an empty Identity when
// nobody does).
func (c *Client) Leader(ctx context.Context, name string) (Leader, error) {
	resp, err := c.elect.Leader(ctx, &tenurev1.LeaderRequest{Name: name})
	if err != nil {
		err = callError(c.target, "Leader", err)
		if ReasonOf(err) == tenurev1.ErrorReason_LEASE_NOT_FOUND {
			return Leader{}, nil
		}
		return Leader{}, err
	}
	return leaderOf(resp.GetLeadership()), nil
}

func leaderOf(l *tenurev1.Leadership) Leader {
	if l == nil {
		return Leader{}
	}
	return Leader{Identity: l.GetHolder(), Value: l.GetValue(), FencingToken: l.GetFencingToken()}
}

// RunElection takes part in the election until ctx ends: it campaigns, leads
// while it holds the term (calling the callbacks), and campaigns again after
// a term ends. When ctx ends it resigns a term it holds (so another
// participant takes over at once instead of after the TTL) and returns
// ctx's error. It returns early only on a permanent error (bad arguments,
// credentials or grants). It follows the election's Observe stream all
// along (for OnNewLeader, and for the preferred candidate a leader of
// lower Preference hands over to). It is NewElector(cfg).Run(ctx); use an
// Elector to hand the leadership over (Elector.ResignTo).
func (c *Client) RunElection(ctx context.Context, cfg ElectionConfig) error {
	return c.NewElector(cfg).Run(ctx)
}

// ErrNotLeading is returned by Elector.ResignTo when the elector does not
// lead (it campaigns, or is not running).
var ErrNotLeading = errors.New("tenure: the elector does not lead")

// Elector takes part in an election as RunElection does, and lets its
// leader hand the leadership to a waiting candidate (ResignTo); it also
// hands over by itself to a waiting candidate of greater preference
// (ElectionConfig.Preference). Create it with Client.NewElector; its
// methods are safe for concurrent use.
type Elector struct {
	c   *Client
	cfg ElectionConfig

	mu      sync.Mutex
	leading *leadingTerm // the term being led; nil when not leading
}

// leadingTerm is one period of leading, which ResignTo reaches.
type leadingTerm struct {
	handovers chan *handover // received by the leading loop only
	done      chan struct{}  // closed when the period ends
}

// handover is one ResignTo request and its answer, or (ctx and reply nil)
// a hand-over to the preferred candidate.
type handover struct {
	ctx       context.Context
	successor string
	reply     chan handoverResult // buffered: the loop never blocks on it
}

// handOverTimeout bounds the Resign of a hand-over to the preferred
// candidate.
const handOverTimeout = 10 * time.Second

// preferred is the latest preferred candidate the Observe stream named.
type preferred struct {
	mu         sync.Mutex
	holder     string // "" when none waits
	preference uint32
	seq        uint64        // how many Observe messages named a candidate
	changed    chan struct{} // closed (and replaced) at each message
}

func newPreferred() *preferred {
	return &preferred{changed: make(chan struct{})}
}

// set takes the preferred candidate of one Observe message (nil: none).
func (p *preferred) set(c *tenurev1.Candidate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.GetHolder() != "" {
		p.holder, p.preference = c.GetHolder(), c.GetPreference()
		p.seq++
	} else {
		p.holder, p.preference = "", 0
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// changes is closed at the next message.
func (p *preferred) changes() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// due returns the candidate a leader (identity, preference own) hands over
// to now: the preferred one, when its preference is greater and this naming
// of it was not tried yet (*tried, which it then updates).
func (p *preferred) due(identity string, own uint32, tried *uint64) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holder == "" || p.holder == identity || p.preference <= own || p.seq == *tried {
		return "", false
	}
	*tried = p.seq
	return p.holder, true
}

type handoverResult struct {
	leader Leader
	err    error
}

// NewElector returns an Elector for cfg; Run makes it take part.
func (c *Client) NewElector(cfg ElectionConfig) *Elector {
	return &Elector{c: c, cfg: cfg}
}

// Run takes part in the election until ctx ends (see RunElection).
func (e *Elector) Run(ctx context.Context) error {
	c, cfg := e.c, e.cfg
	if cfg.Name == "" || cfg.Identity == "" {
		return errors.New("tenure: RunElection needs a Name and an Identity")
	}
	if cfg.OnStartedLeading == nil || cfg.OnStoppedLeading == nil {
		return errors.New("tenure: RunElection needs OnStartedLeading and OnStoppedLeading")
	}
	wait := cfg.CampaignWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	// Observe, for OnNewLeader and the preferred candidate, until Run
	// returns (also on a permanent error, with ctx still live).
	named := newPreferred()
	observeCtx, stopObserving := context.WithCancel(ctx)
	observed := make(chan struct{})
	defer func() {
		stopObserving()
		<-observed
	}()
	go func() {
		defer close(observed)
		c.observe(observeCtx, cfg.Name, cfg.OnNewLeader, named.set)
	}()
	opts := append(append([]AcquireOption{}, cfg.AcquireOptions...), WithPreference(cfg.Preference))
	var tried uint64  // the naming of the preferred candidate last handed over to
	var pause backoff // the watch's capped, jittered backoff
	for ctx.Err() == nil {
		term, err := c.Elect(ctx, cfg.Name, cfg.Identity, cfg.Value, cfg.TTL, wait, opts...)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			switch ReasonOf(err) {
			case tenurev1.ErrorReason_LEASE_HELD:
				// The wait ran out with another leader: campaign again.
				continue
			}
			if !IsRetryable(err) {
				return err
			}
			if !pause.wait(ctx) {
				break
			}
			continue
		}
		pause.reset()
		for e.lead(ctx, term, named, &tried) {
			// A hand-over failed with the term still held: lead it again.
		}
	}
	return ctx.Err()
}

// ResignTo hands the leadership to a waiting candidate, with no moment
// without a leader (ElectionService.Resign with a successor): to the
// candidate whose identity is successor, or, with successor == "", to the
// earliest waiting one. The successor leads with a greater fencing token.
//
// Before the hand-over is sent, this leader stops: OnStartedLeading's
// context is cancelled (with cause ErrTransferred), ResignTo waits for
// OnStartedLeading to return, and OnStoppedLeading runs; so the successor
// cannot start leading before this leader stopped, and OnStoppedLeading
// has run when ResignTo returns. On success it returns the successor, the
// term's Session ends with ErrTransferred, and the elector campaigns again
// (stop Run's context to leave the election instead).
//
// When the successor does not wait (NO_WAITER) or the call fails while the
// term is still held, the elector leads the same term again:
// OnStartedLeading is called anew with it (and OnStoppedLeading when that
// period ends). ErrNotLeading when the elector does not lead.
func (e *Elector) ResignTo(ctx context.Context, successor string) (Leader, error) {
	e.mu.Lock()
	lt := e.leading
	e.mu.Unlock()
	if lt == nil {
		return Leader{}, ErrNotLeading
	}
	h := &handover{ctx: ctx, successor: successor, reply: make(chan handoverResult, 1)}
	select {
	case lt.handovers <- h:
	case <-lt.done:
		return Leader{}, ErrNotLeading
	case <-ctx.Done():
		return Leader{}, ctx.Err()
	}
	r := <-h.reply // the loop always answers a request it took
	return r.leader, r.err
}

// lead runs one period of leading term: OnStartedLeading with a context
// ending at the term's end, then OnStoppedLeading, resigning when ctx
// ended first, or handing the term over on ResignTo or to a preferred
// candidate of greater preference (named; when one is already named as the
// period starts, at once and without the callbacks). It reports whether
// the term should be led again (a hand-over failed with the term held).
func (e *Elector) lead(ctx context.Context, term *Session, named *preferred, tried *uint64) (again bool) {
	cfg := e.cfg
	if successor, ok := named.due(cfg.Identity, cfg.Preference, tried); ok {
		hctx, hcancel := context.WithTimeout(ctx, handOverTimeout)
		_, err := e.resignTo(hctx, term, successor)
		hcancel()
		return e.handedOver(ctx, term, err)
	}
	termCtx, cancel := context.WithCancelCause(term.Context())
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	lt := &leadingTerm{handovers: make(chan *handover), done: make(chan struct{})}
	e.mu.Lock()
	e.leading = lt
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.leading = nil
		e.mu.Unlock()
		close(lt.done)
	}()
	started := make(chan struct{})
	go func() {
		defer close(started)
		cfg.OnStartedLeading(termCtx, term)
	}()
	var h *handover
	for h == nil && termCtx.Err() == nil {
		changed := named.changes() // before due: no message is missed
		if successor, ok := named.due(cfg.Identity, cfg.Preference, tried); ok {
			h = &handover{successor: successor}
			break
		}
		select {
		case <-termCtx.Done():
		case h = <-lt.handovers:
		case <-changed:
		}
	}
	if h != nil {
		cancel(ErrTransferred)
	}
	<-started
	if h != nil {
		cfg.OnStoppedLeading()
		hctx := h.ctx
		if hctx == nil { // to the preferred candidate
			var hcancel context.CancelFunc
			hctx, hcancel = context.WithTimeout(ctx, handOverTimeout)
			defer hcancel()
		}
		l, err := e.resignTo(hctx, term, h.successor)
		if h.reply != nil {
			h.reply <- handoverResult{leader: l, err: err}
		}
		return e.handedOver(ctx, term, err)
	}
	if ctx.Err() != nil || term.Held() {
		// Giving up (or the callback returned early): resign so the next
		// leader need not wait for the TTL. A term already lost is not ours
		// to release; Release reports that as false.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = term.Release(rctx)
		rcancel()
	}
	cfg.OnStoppedLeading()
	return false
}

// handedOver is what lead reports after a hand-over of term that ended
// with err: on success the term is over; when it failed with the term
// still held (NO_WAITER) it is led again, unless ctx ended (then it is
// resigned).
func (e *Elector) handedOver(ctx context.Context, term *Session, err error) (again bool) {
	if err == nil {
		return false
	}
	if term.Held() && ctx.Err() == nil {
		return true
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_, _ = term.Release(rctx)
	rcancel()
	return false
}

// resignTo sends Resign with a successor (or to the next candidate) for
// term, ending it as handed over on success.
func (e *Elector) resignTo(ctx context.Context, term *Session, successor string) (Leader, error) {
	var next Leader
	err := term.handOver(ctx, func(ctx context.Context) error {
		resp, err := e.c.elect.Resign(ctx, &tenurev1.ResignRequest{
			Name:             term.name,
			ExpectedRevision: term.Revision(),
			LeaseKey:         term.leaseKey,
			Successor:        successor,
			ToNextCandidate:  successor == "",
		})
		if err != nil {
			return callError(e.c.target, "Resign", err)
		}
		next = leaderOf(resp.GetSuccessor())
		return nil
	})
	return next, err
}

// observe calls onNewLeader for every change of leader of name until ctx
// ends (not for a PREFERRED change, whose leader is unchanged), and
// onPreferred with the preferred candidate of every message (nil when none
// waits), reopening the Observe stream (which starts with the current
// state) after an error. Either may be nil.
func (c *Client) observe(ctx context.Context, name string, onNewLeader func(Leader), onPreferred func(*tenurev1.Candidate)) {
	var last Leader
	first := true
	var pause backoff
	for ctx.Err() == nil {
		stream, err := c.elect.Observe(ctx, &tenurev1.ObserveRequest{Name: name})
		if err == nil {
			for {
				msg, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				pause.reset()
				if onPreferred != nil {
					onPreferred(msg.GetPreferred())
				}
				now := leaderOf(msg.GetLeader())
				if msg.GetType() == tenurev1.ChangeType_CHANGE_TYPE_MISSED {
					now = Leader{Missed: true, EndedIdentity: msg.GetEndedHolder(), EndedFencingToken: msg.GetEndedFencingToken()}
				}
				if first || now != last {
					first = false
					last = now
					if onNewLeader != nil {
						onNewLeader(now)
					}
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		if e := callError(c.target, "Observe", err); !IsRetryable(e) && isFatal(e) {
			return
		}
		if !pause.wait(ctx) {
			return
		}
	}
}

// String shows a Leader for logs.
func (l Leader) String() string {
	if l.Missed {
		if l.EndedFencingToken != 0 {
			return fmt.Sprintf("leader unknown (missed changes; %s, token %d, no longer leads)", l.EndedIdentity, l.EndedFencingToken)
		}
		return "leader unknown (missed changes)"
	}
	if l.Identity == "" {
		return "no leader"
	}
	return fmt.Sprintf("%s (%q, token %d)", l.Identity, l.Value, l.FencingToken)
}
