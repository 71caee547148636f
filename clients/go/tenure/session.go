package tenure

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// DefaultRenewFraction is the fraction of the granted TTL after which a
// Session renews, counted from the send time of the last successful
// Acquire or Renew.
const DefaultRenewFraction = 1.0 / 3

// DefaultSafetyMargin returns the margin subtracted from the granted TTL to
// form the safe deadline when WithSafetyMargin is not given: a tenth of the
// TTL, at most one second (1 s TTL: 100 ms; 10 s and more: 1 s).
func DefaultSafetyMargin(ttl time.Duration) time.Duration {
	return min(ttl/10, time.Second)
}

// AcquireOption configures Acquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	wait          time.Duration
	leaseKey      string
	metadata      map[string]string
	renewFraction float64
	margin        time.Duration
	marginSet     bool
	lockDelay     time.Duration
	limit         uint32   // semaphore limit (Semaphore.Acquire); 0 for a plain lease
	preference    uint32   // election candidate's preference; 0 for none
	mode          LockMode // read-write lock mode (RWLock.Lock, RLock); unspecified for a plain lease
}

// WithWait makes Acquire wait up to d for a held lease to become free,
// instead of failing at once with LEASE_HELD. The server also stops
// waiting shortly before ctx's deadline.
func WithWait(d time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.wait = d }
}

// WithLeaseKey sets the ownership secret (16 to 256 printable ASCII
// characters). By default the helper mints a random one. Acquire retried
// with the same holder and key returns the same holding, renewed.
func WithLeaseKey(key string) AcquireOption {
	return func(c *acquireConfig) { c.leaseKey = key }
}

// WithMetadata stores a small key/value map with the lease, shown to
// watchers (at most 16 entries, 1024 bytes in total).
func WithMetadata(md map[string]string) AcquireOption {
	return func(c *acquireConfig) { c.metadata = md }
}

// WithLockDelay asks for a lock delay: after this holding expires or is
// revoked (never after a release), nobody may acquire the name for d
// (rounded up to whole seconds, at most the server's --max-lock-delay). It
// protects downstream systems that cannot check fencing tokens from a paused
// holder's late writes. Not combinable with a semaphore (the server refuses).
func WithLockDelay(d time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.lockDelay = d }
}

// WithRenewFraction sets when the background renewal runs, as a fraction of
// the granted TTL after the last successful request was sent (default
// DefaultRenewFraction, 1/3). It must be above 0 and below 1.
func WithRenewFraction(f float64) AcquireOption {
	return func(c *acquireConfig) { c.renewFraction = f }
}

// WithSafetyMargin sets the margin subtracted from the granted TTL to form
// the safe deadline (default DefaultSafetyMargin(ttl)). It must be at least
// 0 and below the granted TTL.
func WithSafetyMargin(d time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.margin, c.marginSet = d, true }
}

// WithPreference sets an election candidate's preference (0, the default,
// asks for nothing): while this Acquire waits (WithWait), the server keeps
// p in its place in the queue, and the election's Observe stream names the
// waiting candidate with the highest preference (the earliest of equals) as
// the preferred one, to whom a leader of lower preference hands over (an
// Elector does so: ElectionConfig.Preference, which sets this option for
// its campaigns). It does nothing for an Acquire that does not wait. Not
// combinable with a semaphore (the server refuses it with INVALID_ARGUMENT)
// nor with AcquireGroup (refused locally).
func WithPreference(p uint32) AcquireOption {
	return func(c *acquireConfig) { c.preference = p }
}

// Session is one holding of a lease, renewed in the background until
// Release, or until it is lost.
//
// It is lost, and Done() closes, as soon as a renewal is refused with
// LEASE_NOT_HELD (or another permanent error), and no later than the
// safe deadline when renewals cannot get through. Err and
// context.Cause(Context()) then tell why. Once lost, a Session never
// becomes held again: Acquire anew.
//
// All methods are safe for concurrent use.
type Session struct {
	lifecycle[bool] // guards the fields from revision on with its mu

	name     string
	holder   string
	slot     uint32 // semaphore or read-write lock slot (1..); 0 for a plain lease
	leaseKey string

	// Guarded by mu. A Downgrade changes all but lease's renewals, under
	// rpcMu too, so a renewal (which holds rpcMu) sees them steady.
	revision uint64
	lease    *tenurev1.Lease
	token    uint64
	acquired uint64   // revision of the acquiring (or downgrading) reply: older watch events are ignored
	proof    []byte   // the fence proof of the grant; empty when the server signs none
	mode     LockMode // read-write lock mode; unspecified for a plain lease or a semaphore slot

	downgrading bool                   // a Downgrade is in flight: the watch's events of the name wait in heldEvents
	heldEvents  []*tenurev1.LeaseEvent // judged once the Downgrade's reply has come
}

// Acquire takes the lease name for holder with the requested ttl (0: the
// server's default; the server rounds it up to whole seconds) and starts
// renewing it in the background. On failure it returns an *Error, e.g. with
// LEASE_HELD when another holder has the lease.
//
// ctx bounds this call only (including WithWait); the Session's own
// Context() keeps ctx's values but not its cancellation. Always Release the
// Session (defer s.Release(ctx)).
func (c *Client) Acquire(ctx context.Context, name, holder string, ttl time.Duration, opts ...AcquireOption) (*Session, error) {
	cfg := acquireConfig{renewFraction: DefaultRenewFraction}
	for _, o := range opts {
		o(&cfg)
	}
	return c.acquire(ctx, name, holder, ttl, cfg)
}

// acquire is Acquire with its options applied (Semaphore.Acquire sets limit).
func (c *Client) acquire(ctx context.Context, name, holder string, ttl time.Duration, cfg acquireConfig) (*Session, error) {
	if err := cfg.check(ttl); err != nil {
		return nil, err
	}
	req := &tenurev1.AcquireRequest{
		Name:       name,
		Holder:     holder,
		Ttl:        positive(ttl),
		LeaseKey:   cfg.leaseKey,
		Wait:       positive(cfg.wait),
		Metadata:   cfg.metadata,
		LockDelay:  positive(cfg.lockDelay),
		Limit:      cfg.limit,
		Preference: cfg.preference,
		Mode:       cfg.mode,
	}
	sent := time.Now()
	resp, err := c.rpc.Acquire(ctx, req)
	if err != nil {
		return nil, callError(c.target, "Acquire", err)
	}
	l := resp.GetLease()
	s := &Session{
		name:     l.GetName(),
		holder:   l.GetHolder(),
		token:    l.GetFencingToken(),
		slot:     l.GetSlot(),
		leaseKey: resp.GetLeaseKey(),
		revision: l.GetRevision(),
		acquired: l.GetRevision(),
		proof:    l.GetFenceProof(),
		mode:     l.GetMode(),
		lease:    l,
	}
	s.init(ctx, s, c, cfg, l.GetTtl().AsDuration(), sent)
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// check validates the options for a requested ttl, and mints a lease key
// when none was given.
func (cfg *acquireConfig) check(ttl time.Duration) error {
	if !(cfg.renewFraction > 0 && cfg.renewFraction < 1) {
		return fmt.Errorf("tenure: renew fraction %v is not between 0 and 1", cfg.renewFraction)
	}
	if cfg.marginSet && (cfg.margin < 0 || (ttl > 0 && cfg.margin >= ttl)) {
		return fmt.Errorf("tenure: safety margin %v is not between 0 and the TTL %v", cfg.margin, ttl)
	}
	if cfg.leaseKey == "" {
		cfg.leaseKey = mintKey()
	}
	return nil
}

// positive is d as a protobuf duration, or nil (not set) when it is not
// above zero.
func positive(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}

// Name is the lease name.
func (s *Session) Name() string { return s.name }

// Holder is the holder the lease was acquired for.
func (s *Session) Holder() string { return s.holder }

// FencingToken is the holding's fencing token: constant across renewals and
// strictly greater for every later holder. Send it with every write to a
// downstream store (see Fence). Downgrade replaces it with a greater one.
func (s *Session) FencingToken() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

// Slot is the semaphore slot of the holding (1 to the limit; see
// Semaphore) or a read-write lock holding's slot (see RWLock), 0 for a
// plain lease.
func (s *Session) Slot() uint32 { return s.slot }

// LeaseKey is the ownership secret presented with Renew and Release.
func (s *Session) LeaseKey() string { return s.leaseKey }

// Revision is the revision from the last successful Acquire or Renew.
func (s *Session) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revision
}

// TTL is the TTL the server granted (whole seconds).
func (s *Session) TTL() time.Duration { return s.grantedTTL() }

// SafeDeadline is the time (with a monotonic clock reading) until which the
// holding is safe: the send time of the last successful Acquire or Renew,
// plus the granted TTL, minus the safety margin. It only moves forward.
func (s *Session) SafeDeadline() time.Time { return s.safeDeadline() }

// Lease is the holding as last returned by Acquire or Renew.
func (s *Session) Lease() *tenurev1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

// Held reports whether the session still holds the lease: it has not been
// lost or released and its safe deadline has not passed. It checks the
// clock itself, so it turns false at the safe deadline even before the
// background loop notices.
func (s *Session) Held() bool { return s.held() }

// Done returns a channel that is closed when the lease is lost or released.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Context returns a context that is cancelled when the lease is lost or
// released; context.Cause gives the same error as Err. Run the work that
// needs the lease under it.
func (s *Session) Context() context.Context { return s.ctx }

// Err returns nil while the lease is held, and otherwise why it is not:
// ErrReleased after Release; ErrTransferred (which wraps ErrReleased) after
// Transfer; an *Error with LEASE_NOT_HELD (or another
// permanent error) when the server refused a renewal; an error wrapping
// ErrDeadlinePassed (and the last renewal error) when the safe deadline
// passed without a successful renewal.
func (s *Session) Err() error { return s.err() }

// Renew renews the holding now, in addition to the background renewals.
// It returns an *Error on failure; a permanent one (e.g. LEASE_NOT_HELD)
// also ends the Session. It fails without a call once the Session is lost.
func (s *Session) Renew(ctx context.Context) error { return s.renew(ctx) }

// Release stops the renewals, marks the Session lost with ErrReleased (so
// Done closes before the lease can pass to anyone else), and releases the
// lease on the server so the next holder can take it at once.
//
// released is true when this call ended the holding, false when there was
// nothing to end: the lease was already lost (revoked, expired, taken over)
// or released. That is not an error; err is only for failures of the call
// itself (server unreachable, credentials, a bad argument), after which
// Release may be called again. Safe to call more than once.
func (s *Session) Release(ctx context.Context) (released bool, err error) {
	return s.release(ctx)
}

// Transfer hands the holding to a waiting Acquire of another holder, with
// no moment in which the lease is free (LeaseService.Transfer): to the
// earliest waiting Acquire of holder to, or, with to == "", to the head of
// the queue. It returns the recipient's holding, whose fencing token is
// greater than this Session's. On success the Session ends exactly as
// after a successful Release: the renewals stop, Held is false, Done
// closes and Err is ErrTransferred (which wraps ErrReleased), and a later
// Release reports false. The giver's lease key stops working at the very
// write that starts the recipient's holding, so stop acting as holder
// before calling it (the recipient's writes carry a greater token).
//
// When nobody (or not to) waits, it fails with NO_WAITER and the Session is
// unchanged and still held: release it, or transfer once the recipient
// waits. It fails with LEASE_NOT_HELD (and the Session is lost) when the
// holding has ended. Plain leases only: not a semaphore slot, a group, or
// a holding with a lock delay.
func (s *Session) Transfer(ctx context.Context, to string) (*tenurev1.Lease, error) {
	if s.slot != 0 {
		return nil, fmt.Errorf("tenure: Transfer: %q slot %d is a semaphore slot; only a plain lease can be handed over", s.name, s.slot)
	}
	var recipient *tenurev1.Lease
	err := s.handOver(ctx, func(ctx context.Context) error {
		resp, err := s.client.rpc.Transfer(ctx, &tenurev1.TransferRequest{
			Name:             s.name,
			ExpectedRevision: s.Revision(),
			LeaseKey:         s.leaseKey,
			ToHolder:         to,
		})
		if err != nil {
			return callError(s.client.target, "Transfer", err)
		}
		recipient = resp.GetLease()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return recipient, nil
}

// sendRelease sends Release with the current revision; LEASE_NOT_HELD and
// LEASE_NOT_FOUND mean there was nothing to release.
func (s *Session) sendRelease(ctx context.Context) (bool, error) {
	_, err := s.client.rpc.Release(ctx, &tenurev1.ReleaseRequest{
		Name:             s.name,
		ExpectedRevision: s.Revision(),
		LeaseKey:         s.leaseKey,
		Slot:             s.slot,
	})
	switch ReasonOf(FromError(err)) {
	case tenurev1.ErrorReason_LEASE_NOT_HELD, tenurev1.ErrorReason_LEASE_NOT_FOUND:
		return false, nil
	}
	if err != nil {
		return false, callError(s.client.target, "Release", err)
	}
	return true, nil
}

// sendRenewal renews once with the current revision, over the client's
// KeepAlive stream (a unary Renew where the server has none) and, on
// success, moves the revision and the safe deadline forward.
func (s *Session) sendRenewal(ctx context.Context) error {
	sent := time.Now()
	l, err := s.client.ka.renew(ctx, &tenurev1.KeepAliveEntry{
		Name:             s.name,
		ExpectedRevision: s.Revision(),
		LeaseKey:         s.leaseKey,
		Slot:             s.slot,
	})
	if errors.Is(err, errUseUnary) {
		sent = time.Now()
		var resp *tenurev1.RenewResponse
		resp, err = s.client.rpc.Renew(ctx, &tenurev1.RenewRequest{
			Name:             s.name,
			ExpectedRevision: s.Revision(),
			LeaseKey:         s.leaseKey,
			Slot:             s.slot,
		})
		if err != nil {
			return callError(s.client.target, "Renew", err)
		}
		l = resp.GetLease()
	}
	if err != nil {
		return err
	}
	// The caller holds rpcMu, so no Downgrade changes the token meanwhile.
	if token := s.FencingToken(); l.GetFencingToken() != token {
		return fmt.Errorf("%w: renewal returned %d, want %d", errTokenChanged, l.GetFencingToken(), token)
	}
	return s.renewed(sent, l.GetTtl().AsDuration(), func() {
		if l.GetRevision() > s.revision {
			s.revision = l.GetRevision()
			s.lease = l
		}
	})
}

// errTokenChanged marks a renewal whose reply carries another fencing token:
// the holding is not the one this session acquired.
var errTokenChanged = errors.New("tenure: fencing token changed")

// mintKey returns a random lease key (43 URL-safe base64 characters).
func mintKey() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("tenure: no randomness for a lease key: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
