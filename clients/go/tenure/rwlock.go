package tenure

import (
	"context"
	"time"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// LockMode is how a read-write lock's holding holds the name (the proto's
// tenure.v1.LockMode): LockExclusive, LockShared, or
// LOCK_MODE_UNSPECIFIED for a plain lease or a semaphore slot.
type LockMode = tenurev1.LockMode

// The modes of a read-write lock's holding.
const (
	// LockExclusive is the read-write lock's only holder (RWLock.Lock).
	LockExclusive = tenurev1.LockMode_LOCK_MODE_EXCLUSIVE
	// LockShared is one of the lock's shared holders (RWLock.RLock).
	LockShared = tenurev1.LockMode_LOCK_MODE_SHARED
)

// RWLock is a read-write lock on the server, named like sync.RWMutex's
// methods: any number of shared holders (RLock, up to the server's
// --max-shared-holders) while nobody holds it exclusively, or one exclusive
// holder (Lock) and nobody else. Every holder gets its own slot, lease key
// and fencing token; tokens increase across all holders of the name, shared
// and exclusive, in grant order, so a store that fences by token refuses a
// writer's writes once a later holder has written.
//
// A holding is a *Session like a lease's: it renews itself, has a safe
// deadline, and its Done()/Context() say the moment it is lost (its own
// slot revoked, expired or taken over; other holders coming and going never
// end it). Session.Mode() is its mode; Session.Downgrade turns an exclusive
// holding shared without a gap.
//
// With WithWait, Acquires of both modes wait in one queue, in arrival order
// across replicas: a shared Acquire arriving after a queued exclusive one
// waits behind it, so writers are never starved by a stream of readers.
// Without a wait, an Acquire is refused LEASE_HELD (Metadata["state"]
// "QUEUED" when it is only the queue that stands in the way) while the lock
// is held incompatibly or anyone is queued, and a shared Acquire that finds
// --max-shared-holders shared holders is refused TOO_MANY_SHARED_HOLDERS
// (retryable). A name is used one way only: a read-write lock's name in use
// as a semaphore (or the other way round) is refused MODE_MISMATCH; a plain
// lease of the same name is a different holding. WithLockDelay and
// WithPreference are refused (INVALID_ARGUMENT). Needs the server's NATS to
// support atomic batches (nats-server 2.12 or newer).
type RWLock struct {
	c    *Client
	name string
}

// RWLock returns the read-write lock name. It makes no call: Lock and RLock
// do.
func (c *Client) RWLock(name string) *RWLock {
	return &RWLock{c: c, name: name}
}

// Name is the lock's name.
func (l *RWLock) Name() string { return l.name }

// Lock takes the lock exclusively for holder with the requested ttl, as
// Client.Acquire takes a lease: WithWait waits (in arrival order) until
// every other holder has left. The Session's Mode() is LockExclusive and
// its Slot() the holding's slot. Release it when done (defer
// s.Release(ctx)), or Downgrade it to a shared holding.
func (l *RWLock) Lock(ctx context.Context, holder string, ttl time.Duration, opts ...AcquireOption) (*Session, error) {
	return l.acquire(ctx, holder, ttl, LockExclusive, opts)
}

// RLock takes a shared holding of the lock for holder with the requested
// ttl: it is granted while nobody holds the lock exclusively and nobody is
// queued ahead of it. WithWait waits in arrival order; without it the call
// fails with LEASE_HELD, or TOO_MANY_SHARED_HOLDERS when the lock has as
// many shared holders as the server allows. The Session's Mode() is
// LockShared. Release it when done (defer s.Release(ctx)).
func (l *RWLock) RLock(ctx context.Context, holder string, ttl time.Duration, opts ...AcquireOption) (*Session, error) {
	return l.acquire(ctx, holder, ttl, LockShared, opts)
}

func (l *RWLock) acquire(ctx context.Context, holder string, ttl time.Duration, mode LockMode, opts []AcquireOption) (*Session, error) {
	cfg := acquireConfig{renewFraction: DefaultRenewFraction}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.mode = mode
	return l.c.acquire(ctx, l.name, holder, ttl, cfg)
}

// Mode is the holding's mode: LockExclusive or LockShared for a read-write
// lock's holding (LockShared after a successful Downgrade),
// LOCK_MODE_UNSPECIFIED for a plain lease or a semaphore slot.
func (s *Session) Mode() LockMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// Downgrade turns an exclusive read-write lock holding (RWLock.Lock) into
// a shared one with no gap (LeaseService.Downgrade): the session holds the
// name throughout, keeps its slot and lease key, and from this call on is
// a shared holder with a new, higher fencing token, so waiting shared
// Acquires may join it. On success the session is updated in place:
// FencingToken(), Revision(), Mode() (LockShared), Lease() and the fence
// proof are the reply's, and the background renewals go on with the new
// revision. The exclusive token is superseded: a store that fences by
// token refuses its writes from now on, so send the new FencingToken()
// with later writes.
//
// It fails with MODE_MISMATCH (FAILED_PRECONDITION, permanent) when the
// holding is not an exclusive read-write lock holding (a shared one, a
// plain lease, a semaphore slot); the session is then unchanged and still
// held. It fails with LEASE_NOT_HELD (and the session is lost) when the
// holding has ended, and without a call once the session is lost. A call
// that fails without an answer (deadline, connection) may have downgraded
// the holding all the same: the session then learns it from its loss watch
// or next renewal, and is lost.
func (s *Session) Downgrade(ctx context.Context) error {
	if err := s.err(); err != nil {
		return err
	}
	// No renewal, release or hand-over beside it: they all send the
	// revision this call replaces.
	s.rpcMu.Lock()
	defer s.rpcMu.Unlock()
	s.mu.Lock()
	if s.lost != nil {
		lost := s.lost
		s.mu.Unlock()
		return lost
	}
	s.downgrading = true
	rev := s.revision
	s.mu.Unlock()

	resp, err := s.client.rpc.Downgrade(ctx, &tenurev1.DowngradeRequest{
		Name:             s.name,
		ExpectedRevision: rev,
		LeaseKey:         s.leaseKey,
		Slot:             s.slot,
	})

	s.mu.Lock()
	s.downgrading = false
	held := s.heldEvents
	s.heldEvents = nil
	if err == nil {
		// Recorded even if the session was lost or released meanwhile: a
		// release waiting for rpcMu must send the holding's new revision.
		l := resp.GetLease()
		s.token = l.GetFencingToken()
		s.revision = l.GetRevision()
		s.acquired = l.GetRevision()
		s.mode = l.GetMode()
		s.proof = l.GetFenceProof()
		s.lease = l
	}
	acquired, token := s.acquired, s.token
	s.mu.Unlock()
	// Events of the name seen while the call was in flight (the downgrade's
	// own write among them), judged against the holding as it is now.
	for _, ev := range held {
		if lostBy(ev, acquired, s.slot, token) {
			s.lose(lossError(ev))
			break
		}
	}
	if err != nil {
		err = callError(s.client.target, "Downgrade", err)
		switch ReasonOf(err) {
		case tenurev1.ErrorReason_LEASE_NOT_HELD, tenurev1.ErrorReason_LEASE_NOT_FOUND:
			s.lose(err)
		}
		return err
	}
	return nil
}
