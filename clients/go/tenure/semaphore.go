package tenure

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// Semaphore is a counting semaphore on the server: up to Limit holders of
// one name at once, each with its own slot, lease key and fencing token
// (tokens increase across all holders of the name, in grant order). The
// limit is enforced by the server's conditional writes, never by clients.
//
// A holding is a *Session like a lease's: it renews itself, has a safe
// deadline, and its Done()/Context() say the moment the slot is lost (its
// own slot revoked, expired or taken over; other holders coming and going
// never end it). Stop before the safe deadline, and pass the fencing token
// downstream with every write.
//
// The first holder's limit defines the semaphore while it has holders: an
// Acquire with another limit fails with an *Error of reason LIMIT_MISMATCH
// whose Metadata["limit"] is the limit in force (see LimitInForce).
type Semaphore struct {
	c     *Client
	name  string
	limit uint32
}

// Semaphore returns the semaphore name with limit holders (1 to the server's
// --max-semaphore-limit). It makes no call: Acquire does.
func (c *Client) Semaphore(name string, limit uint32) *Semaphore {
	return &Semaphore{c: c, name: name, limit: limit}
}

// Name is the semaphore's name.
func (m *Semaphore) Name() string { return m.name }

// Limit is the number of holders this Semaphore asks for.
func (m *Semaphore) Limit() uint32 { return m.limit }

// Acquire takes a slot of the semaphore for holder with the requested ttl,
// as Client.Acquire takes a lease: WithWait waits for a free slot (in
// arrival order), the other options apply as for a lease (WithLockDelay is
// refused by the server). The Session's Slot() is the slot taken. Release
// it when done (defer s.Release(ctx)).
func (m *Semaphore) Acquire(ctx context.Context, holder string, ttl time.Duration, opts ...AcquireOption) (*Session, error) {
	if m.limit == 0 {
		return nil, fmt.Errorf("tenure: semaphore %q: limit must be at least 1", m.name)
	}
	cfg := acquireConfig{renewFraction: DefaultRenewFraction}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.limit = m.limit
	return m.c.acquire(ctx, m.name, holder, ttl, cfg)
}

// LimitInForce returns the limit named by a LIMIT_MISMATCH error (the limit
// of the semaphore's live holders) and true, or 0 and false for any other
// error.
func LimitInForce(err error) (uint32, bool) {
	var te *Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_LIMIT_MISMATCH {
		return 0, false
	}
	n, err := strconv.ParseUint(te.Metadata["limit"], 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(n), true
}
