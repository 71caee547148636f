package tenure

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	lifecycle[GroupRelease] // guards revisions and leases with its mu

	names    []string
	holder   string
	tokens   []uint64 // by member, in names order
	proofs   [][]byte // fence proofs by member, in names order; empty when the server signs none
	acquired []uint64 // revision of each member's acquiring write
	leaseKey string

	revisions []uint64 // latest revision of each member; guarded by mu
	leases    []*tenurev1.Lease
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
// names). WithLockDelay applies to every member; WithPreference is refused
// (an election candidate's option). On failure it returns an
// *Error: LEASE_HELD names a held member in Metadata["name"]; a server
// without groups answers UNIMPLEMENTED, one on nats-server older than 2.12
// FAILED_PRECONDITION.
func (c *Client) AcquireGroup(ctx context.Context, names []string, holder string, ttl time.Duration, opts ...AcquireOption) (*GroupSession, error) {
	cfg := acquireConfig{renewFraction: DefaultRenewFraction}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(ttl); err != nil {
		return nil, err
	}
	if cfg.preference != 0 {
		return nil, errors.New("tenure: AcquireGroup: WithPreference is for an election candidate's Acquire, not a group")
	}
	req := &tenurev1.AcquireGroupRequest{
		Names:     names,
		Holder:    holder,
		Ttl:       positive(ttl),
		LeaseKey:  cfg.leaseKey,
		Wait:      positive(cfg.wait),
		Metadata:  cfg.metadata,
		LockDelay: positive(cfg.lockDelay),
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
		holder:    holder,
		leaseKey:  resp.GetLeaseKey(),
		leases:    leases,
		revisions: make([]uint64, len(leases)),
	}
	granted := leases[0].GetTtl().AsDuration()
	for i, l := range leases {
		g.names = append(g.names, l.GetName())
		g.tokens = append(g.tokens, l.GetFencingToken())
		g.proofs = append(g.proofs, l.GetFenceProof())
		g.acquired = append(g.acquired, l.GetRevision())
		g.revisions[i] = l.GetRevision()
		granted = min(granted, l.GetTtl().AsDuration())
	}
	g.init(ctx, g, c, cfg, granted, sent)
	if err := g.start(ctx); err != nil {
		return nil, err
	}
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
	if i := g.member(name); i >= 0 {
		return g.tokens[i]
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
func (g *GroupSession) TTL() time.Duration { return g.grantedTTL() }

// SafeDeadline is the group's safe deadline: the send time of the last
// successful AcquireGroup or RenewGroup, plus the TTL, minus the margin.
func (g *GroupSession) SafeDeadline() time.Time { return g.safeDeadline() }

// Held reports whether every member is still held: the group was neither
// lost nor released and its safe deadline has not passed.
func (g *GroupSession) Held() bool { return g.held() }

// Done returns a channel closed when the group is lost or released.
func (g *GroupSession) Done() <-chan struct{} { return g.ctx.Done() }

// Context returns a context cancelled when the group is lost or released;
// context.Cause gives the same error as Err.
func (g *GroupSession) Context() context.Context { return g.ctx }

// Err returns nil while the group is held, and otherwise why it is not (as
// Session.Err).
func (g *GroupSession) Err() error { return g.err() }

// Renew renews every member now, in addition to the background renewals; a
// permanent failure (LEASE_NOT_HELD: a member was lost) ends the group.
func (g *GroupSession) Renew(ctx context.Context) error { return g.renew(ctx) }

// Release stops the renewals, marks the group lost with ErrReleased (Done
// closes first), and releases every member still held in one ReleaseGroup.
// Members already lost are reported in NotHeld, which is not an error; err
// is only for a failed call, after which Release may be called again. Safe
// to call more than once (later calls release nothing).
func (g *GroupSession) Release(ctx context.Context) (GroupRelease, error) { return g.release(ctx) }

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

// sendRelease sends ReleaseGroup; LEASE_NOT_HELD or LEASE_NOT_FOUND for
// the whole call means nothing was held.
func (g *GroupSession) sendRelease(ctx context.Context) (GroupRelease, error) {
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

// sendRenewal sends one RenewGroup and, on success, moves every member's
// revision and the group's safe deadline forward.
func (g *GroupSession) sendRenewal(ctx context.Context) error {
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
	return g.renewed(sent, ttl, func() {
		for i, l := range leases {
			if l.GetRevision() > g.revisions[i] {
				g.revisions[i] = l.GetRevision()
				g.leases[i] = l
			}
		}
	})
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
