package fence

import "context"

// contextKey is the key of the verified fence in a request's context.
type contextKey struct{}

// NewContext returns ctx carrying v, as the middleware passes an admitted
// request's verified fence to its handler.
func NewContext(ctx context.Context, v *Verified) context.Context {
	return context.WithValue(ctx, contextKey{}, v)
}

// FromContext returns the verified fence of a request the middleware
// admitted (r.Context()), and false when there is none.
func FromContext(ctx context.Context) (*Verified, bool) {
	v, ok := ctx.Value(contextKey{}).(*Verified)
	return v, ok && v != nil
}
