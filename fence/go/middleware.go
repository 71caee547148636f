package fence

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"strconv"
)

// The HTTP headers a holder sends its fence with.
const (
	// HeaderFence carries the proof's text form (base64url, no padding).
	HeaderFence = "Tenure-Fence"
	// HeaderFencingToken optionally carries the fencing token in decimal;
	// when sent, it must be the proof's token.
	HeaderFencingToken = "Tenure-Fencing-Token"
)

// The reasons of the middleware's refusals (the "reason" of the 409 body),
// the same in every language's middleware (docs/fencing.md).
const (
	// ReasonMissing: no Tenure-Fence header (an empty one is malformed, as
	// in every language's middleware).
	ReasonMissing = "FENCE_MISSING"
	// ReasonMalformed: the header is not a proof (KindMalformed), or is
	// sent more than once.
	ReasonMalformed = "FENCE_MALFORMED"
	// ReasonUnsupportedVersion: a proof format this verifier does not read.
	ReasonUnsupportedVersion = "FENCE_UNSUPPORTED_VERSION"
	// ReasonUnknownKey: signed by a key that is not pinned.
	ReasonUnknownKey = "FENCE_UNKNOWN_KEY"
	// ReasonBadSignature: altered or forged.
	ReasonBadSignature = "FENCE_BAD_SIGNATURE"
	// ReasonWrongName: a genuine proof for another lease name.
	ReasonWrongName = "FENCE_WRONG_NAME"
	// ReasonTokenMismatch: the Tenure-Fencing-Token header is not the
	// proof's token (or not a decimal token, or sent more than once).
	ReasonTokenMismatch = "FENCE_TOKEN_MISMATCH"
	// ReasonStale: the token is lower than the highest seen for the name.
	ReasonStale = "FENCE_STALE"
)

// Options configure Middleware.
type Options struct {
	// Keyset holds the pinned Tenure public keys. Required.
	Keyset *Keyset
	// Resource returns the lease name that guards what the request writes
	// (e.g. from its path). A proof for any other name is refused.
	// Required.
	Resource func(*http.Request) string
	// Store keeps the highest token per lease name. Nil: a new MemoryStore
	// of this middleware's own.
	Store TokenStore
	// ErrorLog receives the errors of Store. Nil: the log package's
	// standard logger.
	ErrorLog *log.Logger
}

// Middleware admits a request only with a fence proof that Tenure signed for
// the request's lease name and whose token is not lower than the highest
// the store has seen for that name, which then becomes this token. It
// checks, in order, stopping at the first failure:
//
//   - a Tenure-Fence header is present (FENCE_MISSING; an empty one is
//     FENCE_MALFORMED);
//   - its proof verifies (FENCE_MALFORMED, FENCE_UNSUPPORTED_VERSION,
//     FENCE_UNKNOWN_KEY, FENCE_BAD_SIGNATURE);
//   - the proof is for opts.Resource(r) (FENCE_WRONG_NAME);
//   - a Tenure-Fencing-Token header, if sent, is the proof's token
//     (FENCE_TOKEN_MISMATCH);
//   - the token rule of opts.Store (FENCE_STALE).
//
// A refusal is 409 Conflict with a JSON body {"reason", "message"} (and
// "token" and "highest", decimal strings, for FENCE_STALE); the handler is
// not called. An admitted request reaches the handler with the Verified
// fence in its context (FromContext).
//
// The check is at admission: a request admitted with token 7 that is still
// running when one with token 9 is admitted can finish after it. Make the
// handler's own write conditional in its store when it must be ordered too.
//
// Middleware panics when opts has no Keyset or no Resource.
func Middleware(opts Options) func(http.Handler) http.Handler {
	if opts.Keyset == nil || opts.Resource == nil {
		panic("fence.Middleware: Options.Keyset and Options.Resource are required")
	}
	if opts.Store == nil {
		opts.Store = NewMemoryStore()
	}
	logf := log.Printf
	if opts.ErrorLog != nil {
		logf = opts.ErrorLog.Printf
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, ref, err := admit(r, opts)
			if err != nil {
				logf("fence: token store: %v", err)
				http.Error(w, "the fence token store failed; see the server log", http.StatusInternalServerError)
				return
			}
			if ref != nil {
				writeRefusal(w, ref)
				return
			}
			next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), v)))
		})
	}
}

// refusal is why a request was not admitted: the 409 body.
type refusal struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Token   string `json:"token,omitempty"`
	Highest string `json:"highest,omitempty"`
}

// verifyReasons maps a verifier's error kind to its refusal reason.
var verifyReasons = map[string]string{
	KindMalformed:          ReasonMalformed,
	KindUnsupportedVersion: ReasonUnsupportedVersion,
	KindUnknownKey:         ReasonUnknownKey,
	KindBadSignature:       ReasonBadSignature,
}

// admit applies the checks of Middleware to r: the verified fence, or the
// refusal, or the error of a store that could not answer.
func admit(r *http.Request, opts Options) (*Verified, *refusal, error) {
	proofs := r.Header.Values(HeaderFence)
	if len(proofs) == 0 {
		return nil, &refusal{
			Reason:  ReasonMissing,
			Message: "no Tenure-Fence header: send the holder's fence proof with the write",
		}, nil
	}
	if len(proofs) > 1 {
		return nil, &refusal{Reason: ReasonMalformed, Message: "more than one Tenure-Fence header"}, nil
	}
	v, err := opts.Keyset.VerifyText(proofs[0])
	if err != nil {
		reason, ok := verifyReasons[KindOf(err)]
		if !ok {
			reason = ReasonMalformed
		}
		return nil, &refusal{Reason: reason, Message: err.Error()}, nil
	}
	name := opts.Resource(r)
	if v.Fence.Name != name {
		return nil, &refusal{
			Reason:  ReasonWrongName,
			Message: fmt.Sprintf("the fence proof is for lease %q, not %q", v.Fence.Name, name),
		}, nil
	}
	if tokens := r.Header.Values(HeaderFencingToken); len(tokens) > 0 {
		if len(tokens) > 1 {
			return nil, &refusal{Reason: ReasonTokenMismatch, Message: "more than one Tenure-Fencing-Token header"}, nil
		}
		if t, ok := parseToken(tokens[0]); !ok || t != v.Fence.Token {
			return nil, &refusal{
				Reason: ReasonTokenMismatch,
				Message: fmt.Sprintf("the Tenure-Fencing-Token header %q is not the fence proof's token %d",
					clip(tokens[0], 40), v.Fence.Token),
			}, nil
		}
	}
	highest, ok, err := opts.Store.Advance(r.Context(), name, v.Fence.Token)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, &refusal{
			Reason: ReasonStale,
			Message: fmt.Sprintf("fencing token %d is lower than %d, the highest seen for lease %q: a newer holder has written",
				v.Fence.Token, highest, name),
			Token:   strconv.FormatUint(v.Fence.Token, 10),
			Highest: strconv.FormatUint(highest, 10),
		}, nil
	}
	return v, nil, nil
}

// parseToken reads a decimal token: ASCII digits only (no sign, no space),
// within uint64.
func parseToken(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	t, err := strconv.ParseUint(s, 10, 64)
	return t, err == nil
}

// clip is at most n bytes of s, for quoting client input in a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// writeRefusal answers 409 Conflict with the refusal's JSON body.
func writeRefusal(w http.ResponseWriter, ref *refusal) {
	body, err := json.Marshal(ref)
	if err != nil { // a struct of strings always marshals
		body = []byte(`{"reason":"` + ref.Reason + `","message":""}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusConflict)
	_, _ = w.Write(append(body, '\n'))
}
