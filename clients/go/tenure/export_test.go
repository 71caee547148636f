package tenure

import (
	"context"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// PauseRenewals stops s's background renewals (its safe-deadline watchdog
// keeps running), to simulate a holder whose renewals have stalled.
func PauseRenewals(s *Session) { s.paused.Store(true) }

// LossWatchSynced returns a channel closed once the client's shared watch
// has delivered its snapshot for the current set of sessions.
func LossWatchSynced(c *Client) <-chan struct{} { return c.loss.syncedChan() }

// PauseGroupRenewals stops g's background renewals (its safe-deadline
// watchdog keeps running).
func PauseGroupRenewals(g *GroupSession) { g.paused.Store(true) }

// KeepAliveCounts returns how many streams the client's KeepAlive helper
// opened, and how many request messages and entries it sent over them.
func KeepAliveCounts(c *Client) (streams, requests, entries uint64) {
	return c.ka.streams.Load(), c.ka.requests.Load(), c.ka.entries.Load()
}

// KeepAliveRenew renews one entry through the client's KeepAlive helper.
func KeepAliveRenew(ctx context.Context, c *Client, e *tenurev1.KeepAliveEntry) (*tenurev1.Lease, error) {
	return c.ka.renew(ctx, e)
}

// ErrUseUnary is what KeepAliveRenew returns when the helper renews with
// unary calls.
var ErrUseUnary = errUseUnary
