package tenure

// PauseRenewals stops s's background renewals (its safe-deadline watchdog
// keeps running), to simulate a holder whose renewals have stalled.
func PauseRenewals(s *Session) { s.paused.Store(true) }
