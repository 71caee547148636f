package fence

import (
	"context"
	"sync"
)

// TokenStore keeps the highest fencing token admitted per lease name: the
// token rule of the middleware. MemoryStore keeps it in memory; implement
// TokenStore to keep it in your database, next to the data it guards.
type TokenStore interface {
	// Advance applies the token rule for lease name atomically: when token
	// is not lower than the highest token recorded for name (none: 0), it
	// records token as the highest and returns (token, true); otherwise it
	// changes nothing and returns (the highest, false). err is for a store
	// that could not answer (the middleware then refuses the request with
	// 500 and does not call the handler); ctx is the request's context.
	Advance(ctx context.Context, name string, token uint64) (highest uint64, ok bool, err error)
}

// MemoryStore is a TokenStore in memory: lost on restart, so use it for a
// store that is itself in memory, or in tests. The zero value is ready and
// safe for concurrent use.
type MemoryStore struct {
	mu      sync.Mutex
	highest map[string]uint64
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

// Advance applies the token rule in memory; it never fails.
func (s *MemoryStore) Advance(_ context.Context, name string, token uint64) (uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.highest[name]; token < h {
		return h, false, nil
	}
	if s.highest == nil {
		s.highest = make(map[string]uint64)
	}
	s.highest[name] = token
	return token, true, nil
}

// Highest returns the highest token admitted for name (0 if none).
func (s *MemoryStore) Highest(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest[name]
}
