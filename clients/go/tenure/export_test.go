package tenure

// PauseRenewals stops s's background renewals (its safe-deadline watchdog
// keeps running), to simulate a holder whose renewals have stalled.
func PauseRenewals(s *Session) { s.paused.Store(true) }

// LossWatchSynced returns a channel closed once the client's shared watch
// has delivered its snapshot for the current set of sessions.
func LossWatchSynced(c *Client) <-chan struct{} { return c.loss.syncedChan() }

// PauseGroupRenewals stops g's background renewals (its safe-deadline
// watchdog keeps running).
func PauseGroupRenewals(g *GroupSession) { g.paused.Store(true) }
