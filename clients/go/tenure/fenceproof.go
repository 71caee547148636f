package tenure

// Fence proofs, the holder's side: every grant of a Tenure that signs
// (`tenure serve --fence-signing-key`) carries an Ed25519-signed statement
// of the holding that a downstream store verifies offline before it
// compares fencing tokens, so a forged, huge or foreign token can never
// poison it (docs/fencing.md). A holder sends it with every write; over
// HTTP as two headers, which SetFenceHeaders sets.

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
)

// The HTTP headers a holder sends its fence with (docs/fencing.md).
const (
	// FenceHeader carries the fence proof's text form: base64url without
	// padding.
	FenceHeader = "Tenure-Fence"
	// FencingTokenHeader carries the fencing token in decimal.
	FencingTokenHeader = "Tenure-Fencing-Token"
)

// FenceProof is the holding's fence proof as granted (a copy): the signed
// statement of its bucket, name, slot, fencing token, holder, grant time
// and TTL. Renewals do not change it; a Downgrade replaces it with its
// reply's (empty when that carries none). Empty when the server signs no
// proofs (started without --fence-signing-key).
func (s *Session) FenceProof() []byte { return append([]byte(nil), s.fenceProof()...) }

// FenceProofText is FenceProof in its text form, the value of the
// Tenure-Fence header: base64url without padding ("" without a proof).
func (s *Session) FenceProofText() string {
	return base64.RawURLEncoding.EncodeToString(s.fenceProof())
}

// SetFenceHeaders sets the headers a fenced HTTP store reads on r:
// Tenure-Fence (the proof's text form) and Tenure-Fencing-Token (the
// token, decimal), replacing any already there. Without a proof (a server
// that signs none) it sets the token only and removes Tenure-Fence; a store
// that verifies proofs then refuses the write (FENCE_MISSING).
func (s *Session) SetFenceHeaders(r *http.Request) {
	s.mu.Lock()
	proof, token := s.proof, s.token
	s.mu.Unlock()
	setFenceHeaders(r, proof, token)
}

// fenceProof is the proof of the current grant (Downgrade replaces it).
func (s *Session) fenceProof() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proof
}

// FenceProofs are the members' fence proofs as granted (copies), in Names
// order; each empty when the server signs no proofs.
func (g *GroupSession) FenceProofs() [][]byte {
	out := make([][]byte, len(g.proofs))
	for i, p := range g.proofs {
		out[i] = append([]byte(nil), p...)
	}
	return out
}

// FenceProof is the fence proof of the member name (a copy): empty when
// name is not a member or the server signs no proofs.
func (g *GroupSession) FenceProof(name string) []byte {
	if i := g.member(name); i >= 0 {
		return append([]byte(nil), g.proofs[i]...)
	}
	return nil
}

// SetFenceHeaders sets the fence headers of the member name on r, for a
// write to what that member guards; see Session.SetFenceHeaders. It fails,
// setting nothing, when name is not a member.
func (g *GroupSession) SetFenceHeaders(r *http.Request, name string) error {
	i := g.member(name)
	if i < 0 {
		return fmt.Errorf("tenure: %q is not a member of the group %q", name, g.names)
	}
	setFenceHeaders(r, g.proofs[i], g.tokens[i])
	return nil
}

// member is the index of the member name, or -1.
func (g *GroupSession) member(name string) int {
	for i, n := range g.names {
		if n == name {
			return i
		}
	}
	return -1
}

// setFenceHeaders sets the two headers of a proof and its token.
func setFenceHeaders(r *http.Request, proof []byte, token uint64) {
	if r.Header == nil {
		r.Header = make(http.Header)
	}
	if len(proof) > 0 {
		r.Header.Set(FenceHeader, base64.RawURLEncoding.EncodeToString(proof))
	} else {
		r.Header.Del(FenceHeader)
	}
	r.Header.Set(FencingTokenHeader, strconv.FormatUint(token, 10))
}
