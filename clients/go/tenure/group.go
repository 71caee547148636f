package tenure

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// GroupSession holds several plain leases taken together by AcquireGroup,
// all or none: every member has its own fencing token, and the group is
// renewed, lost and released as a whole.
//
// One RenewGroup renews every member on the schedule of a Session; all
// members share one TTL and one send time, so the group has one safe
// deadline. The group is lost (Done() closes) the moment any member is lost:
// the client's shared watch shows one member revoked, expired or taken
// over, or RenewGroup fails with LEASE_NOT_HELD; and no later than the safe
// deadline when renewals cannot get through. Stop acting on every member
// then. Release ends what is still held.
//
// All methods are safe for concurrent use.
type GroupSession struct {
	client   *Client
	names    []string
	holder   string
	tokens   []uint64 // by member, in names order
	acquired []uint64 // revision of each member's acquiring write
	leaseKey string
	fraction float64
	margin   time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex // guards the fields below
	revisions []uint64   // latest revision of each member
	leases    []*tenurev1.Lease
	ttl       time.Duration
	lastSent  time.Time
	deadline  time.Time
	lost      error

	rpcMu     sync.Mutex // serialises RenewGroup and ReleaseGroup
	releaseMu sync.Mutex // serialises Release
	released  bool

	loopDone chan struct{}
	paused   atomic.Bool // test hook: skip background renewals
}

// GroupRelease reports a group's release: the members this call released
// and those already lost (not an error).
type GroupRelease struct {
	// Released are the member names that were held and are now released.
	Released []string
	// NotHeld are the member names that were already lost (expired,
	// revoked or taken over).
	NotHeld []string
}

// AcquireGroup takes the plain leases names (2 to the server's
// --max-group-size, default 16) for holder, all or none, with one ttl and
// one lease key, and renews them together in the background. With WithWait
// it waits until every name is free at once (it never holds some while
// waiting for others, so groups cannot deadlock whatever the order of the
// names). WithLockDelay applies to every member. On failure it returns an
// *Error: LEASE_HELD names a held member in Metadata["name"]; a server
// without groups answers UNIMPLEMENTED, one on nats-server older than 2.12
// FAILED_PRECONDITION.
func (c *Client) AcquireGroup(ctx context.Context, names []string, holder string, ttl time.Duration, opts ...AcquireOption) (*GroupSession, error) {
	cfg := acquireConfig{renewFraction: DefaultRenewFraction}
	for _, o := range opts {
		o(&cfg)
	}
	if !(cfg.renewFraction > 0 && cfg.renewFraction < 1) {
		return nil, fmt.Errorf("tenure: renew fraction %v is not between 0 and 1", cfg.renewFraction)
	}
	if cfg.marginSet && (cfg.margin < 0 || (ttl > 0 && cfg.margin >= ttl)) {
		return nil, fmt.Errorf("tenure: safety margin %v is not between 0 and the TTL %v", cfg.margin, ttl)
	}
	if cfg.leaseKey == "" {
		cfg.leaseKey = mintKey()
	}
	req := &tenurev1.AcquireGroupRequest{
		Names:    names,
		Holder:   holder,
		LeaseKey: cfg.leaseKey,
		Metadata: cfg.metadata,
	}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	if cfg.wait > 0 {
		req.Wait = durationpb.New(cfg.wait)
	}
	if cfg.lockDelay > 0 {
		req.LockDelay = durationpb.New(cfg.lockDelay)
	}
	sent := time.Now()
	resp, err := c.rpc.AcquireGroup(ctx, req)
	if err != nil {
		return nil, callError(c.target, "AcquireGroup", err)
	}
	leases := resp.GetLeases()
	if len(leases) == 0 {
		return nil, fmt.Errorf("tenure at %s: AcquireGroup: the reply has no leases", c.target)
	}
	g := &GroupSession{
		client:    c,
		holder:    holder,
		leaseKey:  resp.GetLeaseKey(),
		fraction:  cfg.renewFraction,
		leases:    leases,
		revisions: make([]uint64, len(leases)),
		loopDone:  make(chan struct{}),
	}
	granted := leases[0].GetTtl().AsDuration()
	for i, l := range leases {
		g.names = append(g.names, l.GetName())
		g.tokens = append(g.tokens, l.GetFencingToken())
		g.acquired = append(g.acquired, l.GetRevision())
		g.revisions[i] = l.GetRevision()
		granted = min(granted, l.GetTtl().AsDuration())
	}
	g.margin = cfg.margin
	if !cfg.marginSet {
		g.margin = DefaultSafetyMargin(granted)
	}
	g.ttl, g.lastSent, g.deadline = granted, sent, sent.Add(granted-g.margin)
	g.ctx, g.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	fail := func(err error) (*GroupSession, error) {
		g.lose(err)
		close(g.loopDone)
		_, _ = g.releaseNow(ctx)
		return nil, err
	}
	if g.margin >= granted {
		return fail(fmt.Errorf("tenure: safety margin %v is not below the granted TTL %v", g.margin, granted))
	}
	// A long wait can leave no time as counted from the send time.
	if !time.Now().Before(g.SafeDeadline()) {
		if err := g.renewOnce(ctx); err != nil {
			return fail(err)
		}
	}
	c.loss.add(g)
	go runRenewals(g.ctx, g, &g.paused, g.loopDone)
	return g, nil
}

// Names are the members' names, in request order.
func (g *GroupSession) Names() []string { return append([]string(nil), g.names...) }

// Holder is the holder the group was acquired for.
func (g *GroupSession) Holder() string { return g.holder }

// FencingTokens are the members' fencing tokens, in Names order: each
// constant across renewals and strictly greater for every later holder of
// its name. Send a member's token with every write concerning it.
func (g *GroupSession) FencingTokens() []uint64 { return append([]uint64(nil), g.tokens...) }

// FencingToken is the fencing token of the member name (0 if name is not a
// member).
func (g *GroupSession) FencingToken(name string) uint64 {
	for i, n := range g.names {
		if n == name {
			return g.tokens[i]
		}
	}
	return 0
}

// LeaseKey is the group's ownership secret (one for every member).
func (g *GroupSession) LeaseKey() string { return g.leaseKey }

// Leases are the members' holdings as last returned, in Names order.
func (g *GroupSession) Leases() []*tenurev1.Lease {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*tenurev1.Lease(nil), g.leases...)
}

// TTL is the TTL the server granted (whole seconds).
func (g *GroupSession) TTL() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ttl
}

// SafeDeadline is the group's safe deadline: the send time of the last
// successful AcquireGroup or RenewGroup, plus the TTL, minus the margin.
func (g *GroupSession) SafeDeadline() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deadline
}

// Held reports whether every member is still held: the group was neither
// lost nor released and its safe deadline has not passed.
func (g *GroupSession) Held() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lost == nil && time.Now().Before(g.deadline)
}

// Done returns a channel closed when the group is lost or released.
func (g *GroupSession) Done() <-chan struct{} { return g.ctx.Done() }

// Context returns a context cancelled when the group is lost or released;
// context.Cause gives the same error as Err.
func (g *GroupSession) Context() context.Context { return g.ctx }

// Err returns nil while the group is held, and otherwise why it is not (as
// Session.Err).
func (g *GroupSession) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lost == nil && !time.Now().Before(g.deadline) {
		return ErrDeadlinePassed
	}
	return g.lost
}

// Renew renews every member now, in addition to the background renewals; a
// permanent failure (LEASE_NOT_HELD: a member was lost) ends the group.
func (g *GroupSession) Renew(ctx context.Context) error {
	if err := g.Err(); err != nil {
		return err
	}
	err := g.renewOnce(ctx)
	if err != nil && isFatal(err) {
		g.lose(err)
	}
	return err
}

// Release stops the renewals, marks the group lost with ErrReleased (Done
// closes first), and releases every member still held in one ReleaseGroup.
// Members already lost are reported in NotHeld, which is not an error; err
// is only for a failed call, after which Release may be called again. Safe
// to call more than once (later calls release nothing).
func (g *GroupSession) Release(ctx context.Context) (GroupRelease, error) {
	g.releaseMu.Lock()
	defer g.releaseMu.Unlock()
	if g.released {
		return GroupRelease{}, nil
	}
	g.lose(ErrReleased)
	<-g.loopDone
	out, err := g.releaseNow(ctx)
	if err == nil {
		g.released = true
	}
	return out, err
}

// members are the group's members with their latest revisions.
func (g *GroupSession) members() []*tenurev1.GroupMember {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*tenurev1.GroupMember, len(g.names))
	for i, n := range g.names {
		out[i] = &tenurev1.GroupMember{Name: n, ExpectedRevision: g.revisions[i]}
	}
	return out
}

// releaseNow sends ReleaseGroup; LEASE_NOT_HELD or LEASE_NOT_FOUND for the
// whole call means nothing was held.
func (g *GroupSession) releaseNow(ctx context.Context) (GroupRelease, error) {
	g.rpcMu.Lock()
	defer g.rpcMu.Unlock()
	resp, err := g.client.rpc.ReleaseGroup(ctx, &tenurev1.ReleaseGroupRequest{Members: g.members(), LeaseKey: g.leaseKey})
	switch ReasonOf(FromError(err)) {
	case tenurev1.ErrorReason_LEASE_NOT_HELD, tenurev1.ErrorReason_LEASE_NOT_FOUND:
		return GroupRelease{NotHeld: g.Names()}, nil
	}
	if err != nil {
		return GroupRelease{}, callError(g.client.target, "ReleaseGroup", err)
	}
	return GroupRelease{Released: resp.GetReleased(), NotHeld: resp.GetNotHeld()}, nil
}

// renewOnce sends one RenewGroup and, on success, moves every member's
// revision and the group's safe deadline forward.
func (g *GroupSession) renewOnce(ctx context.Context) error {
	g.rpcMu.Lock()
	defer g.rpcMu.Unlock()
	sent := time.Now()
	resp, err := g.client.rpc.RenewGroup(ctx, &tenurev1.RenewGroupRequest{Members: g.members(), LeaseKey: g.leaseKey})
	if err != nil {
		return callError(g.client.target, "RenewGroup", err)
	}
	leases := resp.GetLeases()
	if len(leases) != len(g.names) {
		return fmt.Errorf("tenure at %s: RenewGroup: %d leases for %d members", g.client.target, len(leases), len(g.names))
	}
	ttl := leases[0].GetTtl().AsDuration()
	for i, l := range leases {
		if l.GetName() != g.names[i] || l.GetFencingToken() != g.tokens[i] {
			return fmt.Errorf("%w: renewal of %q returned token %d, want %d", errTokenChanged, l.GetName(), l.GetFencingToken(), g.tokens[i])
		}
		ttl = min(ttl, l.GetTtl().AsDuration())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lost != nil {
		return g.lost
	}
	for i, l := range leases {
		if l.GetRevision() > g.revisions[i] {
			g.revisions[i] = l.GetRevision()
			g.leases[i] = l
		}
	}
	g.ttl = ttl
	if d := sent.Add(ttl - g.margin); d.After(g.deadline) {
		g.deadline, g.lastSent = d, sent
	}
	return nil
}

// lose ends the group with cause err, once.
func (g *GroupSession) lose(err error) {
	g.mu.Lock()
	if g.lost == nil {
		g.lost = err
	}
	g.mu.Unlock()
	g.cancel(err)
	g.client.loss.remove(g)
}

// schedule returns the safe deadline and the time of the next renewal.
func (g *GroupSession) schedule() (deadline, renewAt time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deadline, g.lastSent.Add(time.Duration(float64(g.ttl) * g.fraction))
}

// retryDelay is how long the loop waits after a failed renewal.
func (g *GroupSession) retryDelay() time.Duration {
	d := time.Duration(float64(g.TTL()) * g.fraction / 3)
	return max(min(d, time.Second), 20*time.Millisecond)
}

// watchNames are the members' names.
func (g *GroupSession) watchNames() []string { return g.names }

// holds reports whether ev is one of the members' holdings.
func (g *GroupSession) holds(ev *tenurev1.LeaseEvent) bool {
	for i, n := range g.names {
		if ev.GetName() == n && ev.GetSlot() == 0 && ev.GetFencingToken() == g.tokens[i] {
			return true
		}
	}
	return false
}

// observe ends the group when ev shows any member's holding gone.
func (g *GroupSession) observe(ev *tenurev1.LeaseEvent) {
	for i, n := range g.names {
		if ev.GetName() == n && lostBy(ev, g.acquired[i], 0, g.tokens[i]) {
			g.lose(fmt.Errorf("group member lost: %w", lossError(ev)))
			return
		}
	}
}
