package tenure

import "sync"

// Fence is an in-memory fencing check for a downstream resource: it accepts
// a write only if its fencing token is at least the highest token seen for
// that resource, so a holder whose lease has passed on (and who therefore
// carries a smaller token) cannot overwrite the work of the next holder.
//
// A Fence lives in the process that owns the resource (the store), not in
// the lease holders. Its memory is lost on restart; a real store should keep
// the highest token next to the data and check it in the same transaction,
// for example in SQL:
//
//	-- the resource row carries the token of its last write
//	UPDATE resources
//	   SET value = $1, fencing_token = $2
//	 WHERE id = $3 AND fencing_token <= $2;
//	-- 0 rows updated: a newer holder has written; reject (stale token)
//
//	-- first write, or rows created on demand:
//	INSERT INTO resources (id, value, fencing_token) VALUES ($3, $1, $2)
//	ON CONFLICT (id) DO UPDATE
//	   SET value = EXCLUDED.value, fencing_token = EXCLUDED.fencing_token
//	 WHERE resources.fencing_token <= EXCLUDED.fencing_token;
//
// The zero Fence is ready to use and safe for concurrent use.
type Fence struct {
	mu      sync.Mutex
	highest map[string]uint64
}

// NewFence returns an empty Fence.
func NewFence() *Fence { return &Fence{} }

// Accept reports whether a write to resource carrying token may go ahead:
// true when token is at least the highest token accepted for resource so
// far, which token then becomes. Token 0 is never a Tenure fencing token
// and is always refused.
func (f *Fence) Accept(resource string, token uint64) bool {
	if token == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.highest[resource] {
		return false
	}
	if f.highest == nil {
		f.highest = make(map[string]uint64)
	}
	f.highest[resource] = token
	return true
}

// Highest returns the highest token accepted for resource (0 if none).
func (f *Fence) Highest(resource string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest[resource]
}
