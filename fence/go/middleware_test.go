package fence_test

// The middleware behind a real HTTP server, called with a real client.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	fence "github.com/tenure-dev/tenure/fence/go"
)

// store is a server guarding /resources/<lease name> with the middleware,
// and what its handler saw.
type store struct {
	url    string
	client *http.Client
	tokens *fence.MemoryStore

	mu     sync.Mutex
	writes []fence.Verified // what the handler was called with
}

// newStore starts a server with the middleware over a handler that records
// each admitted write; it is closed at the end of the test.
func newStore(t *testing.T, ks *fence.Keyset) *store {
	t.Helper()
	s := &store{tokens: fence.NewMemoryStore()}
	guard := fence.Middleware(fence.Options{
		Keyset:   ks,
		Resource: func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/resources/") },
		Store:    s.tokens,
	})
	srv := httptest.NewServer(guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := fence.FromContext(r.Context())
		if !ok {
			http.Error(w, "no fence in the context", http.StatusInternalServerError)
			return
		}
		s.mu.Lock()
		s.writes = append(s.writes, *v)
		s.mu.Unlock()
		fmt.Fprintf(w, "wrote with token %d", v.Fence.Token)
	})))
	t.Cleanup(srv.Close)
	s.url, s.client = srv.URL, srv.Client()
	return s
}

// answer is a response: its status, content type and body.
type answer struct {
	status      int
	contentType string
	body        []byte
}

// put writes to the resource of lease name with these headers (each value
// of a key sent as its own header line).
func (s *store) put(t *testing.T, name string, headers map[string][]string) answer {
	t.Helper()
	a, err := s.do(name, headers)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// do is put for any goroutine: it returns the error instead of failing.
func (s *store) do(name string, headers map[string][]string) (answer, error) {
	req, err := http.NewRequest(http.MethodPut, s.url+"/resources/"+name, strings.NewReader("data"))
	if err != nil {
		return answer{}, err
	}
	for k, vs := range headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), body}, nil
}

// written are the fences the handler was called with.
func (s *store) written() []fence.Verified {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fence.Verified(nil), s.writes...)
}

// fenced are the headers of a proof text and, when not empty, a token.
func fenced(proof, token string) map[string][]string {
	h := map[string][]string{fence.HeaderFence: {proof}}
	if token != "" {
		h[fence.HeaderFencingToken] = []string{token}
	}
	return h
}

// wantAdmitted fails unless the write was admitted with token.
func wantAdmitted(t *testing.T, a answer, token uint64) {
	t.Helper()
	if want := fmt.Sprintf("wrote with token %d", token); a.status != http.StatusOK || string(a.body) != want {
		t.Fatalf("got %d %q; want 200 %q", a.status, a.body, want)
	}
}

// wantRefused fails unless the write was refused 409 with reason, a
// message, and (for FENCE_STALE) token and highest; it returns the message.
func wantRefused(t *testing.T, a answer, reason string, staleTokens ...string) string {
	t.Helper()
	if a.status != http.StatusConflict || a.contentType != "application/json" {
		t.Fatalf("got %d %s %q; want 409 application/json", a.status, a.contentType, a.body)
	}
	var body map[string]any
	if err := json.Unmarshal(a.body, &body); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	keys := []string{"message", "reason"}
	if reason == fence.ReasonStale {
		keys = []string{"highest", "message", "reason", "token"}
	}
	var got []string
	for k := range body {
		got = append(got, k)
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, keys) {
		t.Fatalf("body keys %v, want %v: %s", got, keys, a.body)
	}
	if body["reason"] != reason {
		t.Fatalf("reason %v, want %s: %s", body["reason"], reason, a.body)
	}
	msg, _ := body["message"].(string)
	if msg == "" {
		t.Fatalf("no message: %s", a.body)
	}
	if reason == fence.ReasonStale {
		if body["token"] != staleTokens[0] || body["highest"] != staleTokens[1] {
			t.Fatalf("token %v highest %v, want %s and %s (strings)", body["token"], body["highest"], staleTokens[0], staleTokens[1])
		}
	}
	return msg
}

func TestMiddlewareAdmitsTheHolderAndRefusesEveryReason(t *testing.T) {
	ks, v := testKeyset(t)
	active, stranger := vectorSigner(t, v, "active"), vectorSigner(t, v, "stranger")
	s := newStore(t, ks)

	holder := active.signText(grant("orders", 5))
	wantAdmitted(t, s.put(t, "orders", fenced(holder, "5")), 5)
	wantAdmitted(t, s.put(t, "orders", fenced(holder, "")), 5) // the token header is optional; an equal token is admitted
	if got := s.written()[0]; got.Fence != grant("orders", 5) || got.KeyID != "34750f98bd59fcfc" {
		t.Fatalf("the handler saw %+v", got)
	}

	version2 := active.sign(grant("orders", 9))
	version2[0] = 2
	altered := active.sign(grant("orders", 5))
	altered[16] = 6 // token 6, signed as 5
	alteredPayments := active.sign(grant("payments", 5))
	alteredPayments[16] = 6
	for _, c := range []struct {
		name, reason string
		headers      map[string][]string
		wantMessage  string
	}{
		{"no proof", fence.ReasonMissing, nil, "no Tenure-Fence header"},
		{"an empty proof", fence.ReasonMalformed, fenced("", ""), "malformed fence proof"},
		{"a token and no proof", fence.ReasonMissing, map[string][]string{fence.HeaderFencingToken: {"5"}}, "no Tenure-Fence header"},
		{"not a proof", fence.ReasonMalformed, fenced("not-a-proof", ""), "malformed fence proof"},
		{"two proofs", fence.ReasonMalformed, map[string][]string{fence.HeaderFence: {holder, holder}}, "more than one Tenure-Fence header"},
		{"version 2", fence.ReasonUnsupportedVersion, fenced(b64(version2), ""), "version 2 is not supported"},
		{"a key not pinned", fence.ReasonUnknownKey, fenced(stranger.signText(grant("orders", 9)), ""), "unknown key b62e867fa2f33afe"},
		{"an altered token", fence.ReasonBadSignature, fenced(b64(altered), ""), "does not verify"},
		{"another lease's proof", fence.ReasonWrongName, fenced(active.signText(grant("payments", 9)), ""), `for lease "payments", not "orders"`},
		{"another token in the header", fence.ReasonTokenMismatch, fenced(holder, "6"), `header "6" is not the fence proof's token 5`},
		{"a signed token header", fence.ReasonTokenMismatch, fenced(holder, "+5"), "is not the fence proof's token"},
		{"a token past 2^64", fence.ReasonTokenMismatch, fenced(holder, "18446744073709551621"), "is not the fence proof's token"},
		{"two token headers", fence.ReasonTokenMismatch, map[string][]string{fence.HeaderFence: {holder}, fence.HeaderFencingToken: {"5", "5"}}, "more than one"},
		// The order of the checks: the first failure is the reason.
		{"altered, for another lease", fence.ReasonBadSignature, fenced(b64(alteredPayments), ""), "does not verify"},
		{"another lease's proof, another token", fence.ReasonWrongName, fenced(active.signText(grant("payments", 9)), "8"), `for lease "payments"`},
		{"a stale proof, another token", fence.ReasonTokenMismatch, fenced(active.signText(grant("orders", 4)), "5"), `header "5" is not the fence proof's token 4`},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg := wantRefused(t, s.put(t, "orders", c.headers), c.reason)
			if !strings.Contains(msg, c.wantMessage) {
				t.Fatalf("message %q does not say %q", msg, c.wantMessage)
			}
		})
	}
	t.Run("a stale token", func(t *testing.T) {
		msg := wantRefused(t, s.put(t, "orders", fenced(active.signText(grant("orders", 4)), "4")), fence.ReasonStale, "4", "5")
		if !strings.Contains(msg, `fencing token 4 is lower than 5, the highest seen for lease "orders"`) {
			t.Fatalf("message %q", msg)
		}
	})
	if n := len(s.written()); n != 2 {
		t.Fatalf("the handler was called %d times; want 2 (refusals never reach it)", n)
	}
	if h := s.tokens.Highest("orders"); h != 5 {
		t.Fatalf("highest for orders %d, want 5", h)
	}
}

func TestForgedTokensCannotPoisonTheStore(t *testing.T) {
	ks, v := testKeyset(t)
	active := vectorSigner(t, v, "active")
	s := newStore(t, ks)
	const forged = uint64(1) << 62
	forgedText := strconv.FormatUint(forged, 10)

	genuine := active.signText(grant("orders", 42))
	wantAdmitted(t, s.put(t, "orders", fenced(genuine, "42")), 42)

	// 1. The huge token alone, with no proof.
	wantRefused(t, s.put(t, "orders", map[string][]string{fence.HeaderFencingToken: {forgedText}}), fence.ReasonMissing)
	// 2. The huge token in the header beside a genuine proof of a lower one.
	wantRefused(t, s.put(t, "orders", fenced(genuine, forgedText)), fence.ReasonTokenMismatch)
	// 3. The genuine proof with its token changed to 2^62: the signature no
	//    longer verifies (built here, and the shared vector of the same
	//    forgery).
	p := active.sign(grant("orders", 42))
	copy(p[9:17], []byte{0x40, 0, 0, 0, 0, 0, 0, 0})
	wantRefused(t, s.put(t, "orders", fenced(b64(p), forgedText)), fence.ReasonBadSignature)
	for _, c := range v.Invalid {
		if strings.Contains(c.About, "2^62") {
			wantRefused(t, s.put(t, "orders", fenced(c.ProofText, "")), fence.ReasonBadSignature)
		}
	}
	// 4. A genuine proof of token 2^62 signed for another lease name.
	wantRefused(t, s.put(t, "orders", fenced(active.signText(grant("payments", forged)), forgedText)), fence.ReasonWrongName)

	if h := s.tokens.Highest("orders"); h != 42 {
		t.Fatalf("the forged attempts moved the highest token of orders to %d", h)
	}
	if h := s.tokens.Highest("payments"); h != 0 {
		t.Fatalf("a refused write recorded %d for payments", h)
	}
	// The genuine holder still writes, the next holder takes over, and the
	// previous one is then stale.
	wantAdmitted(t, s.put(t, "orders", fenced(genuine, "42")), 42)
	wantAdmitted(t, s.put(t, "orders", fenced(active.signText(grant("orders", 43)), "43")), 43)
	wantRefused(t, s.put(t, "orders", fenced(genuine, "42")), fence.ReasonStale, "42", "43")
	if n := len(s.written()); n != 3 {
		t.Fatalf("the handler was called %d times, want 3", n)
	}
}

func TestMiddlewareTokenRuleUnderConcurrentWrites(t *testing.T) {
	ks, v := testKeyset(t)
	active := vectorSigner(t, v, "active")
	s := newStore(t, ks)
	const n = 40
	proofs := make([]string, n+1)
	for tok := 1; tok <= n; tok++ {
		proofs[tok] = active.signText(grant("orders", uint64(tok)))
	}
	var wg sync.WaitGroup
	answers := make([]answer, n+1)
	errs := make([]error, n+1)
	for tok := 1; tok <= n; tok++ {
		wg.Add(1)
		go func(tok int) {
			defer wg.Done()
			answers[tok], errs[tok] = s.do("orders", fenced(proofs[tok], ""))
		}(tok)
	}
	wg.Wait()
	admitted := 0
	for tok := 1; tok <= n; tok++ {
		if errs[tok] != nil {
			t.Fatal(errs[tok])
		}
		switch answers[tok].status {
		case http.StatusOK:
			admitted++
		case http.StatusConflict:
			wantRefused(t, answers[tok], fence.ReasonStale, strconv.Itoa(tok), extractHighest(t, answers[tok]))
		default:
			t.Fatalf("token %d: status %d", tok, answers[tok].status)
		}
	}
	// The largest token is always admitted and ends as the highest; every
	// admitted write reached the handler.
	if answers[n].status != http.StatusOK || s.tokens.Highest("orders") != n || len(s.written()) != admitted {
		t.Fatalf("token %d: status %d; highest %d; %d admitted, %d written", n, answers[n].status, s.tokens.Highest("orders"), admitted, len(s.written()))
	}
}

// extractHighest is the "highest" of a FENCE_STALE body, checked to be
// above its "token".
func extractHighest(t *testing.T, a answer) string {
	t.Helper()
	var body struct{ Token, Highest string }
	if err := json.Unmarshal(a.body, &body); err != nil {
		t.Fatal(err)
	}
	tok, err1 := strconv.ParseUint(body.Token, 10, 64)
	high, err2 := strconv.ParseUint(body.Highest, 10, 64)
	if err1 != nil || err2 != nil || high <= tok {
		t.Fatalf("stale body %s: highest must be a decimal above the token", a.body)
	}
	return body.Highest
}

// failingStore is a TokenStore whose database is down.
type failingStore struct{}

func (failingStore) Advance(context.Context, string, uint64) (uint64, bool, error) {
	return 0, false, errors.New("connection refused")
}

func TestStoreFailureIsNotAnAdmission(t *testing.T) {
	ks, v := testKeyset(t)
	var logged bytes.Buffer
	called := false
	guard := fence.Middleware(fence.Options{
		Keyset:   ks,
		Resource: func(*http.Request) string { return "orders" },
		Store:    failingStore{},
		ErrorLog: log.New(&logged, "", 0),
	})
	srv := httptest.NewServer(guard(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	req.Header.Set(fence.HeaderFence, vectorSigner(t, v, "active").signText(grant("orders", 1)))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || called {
		t.Fatalf("status %d, handler called %v; want 500 and not called", resp.StatusCode, called)
	}
	if !strings.Contains(logged.String(), "fence: token store: connection refused") {
		t.Fatalf("logged %q", logged.String())
	}
}

func TestMiddlewareRequiresKeysetAndResource(t *testing.T) {
	ks, _ := testKeyset(t)
	for name, opts := range map[string]fence.Options{
		"no keyset":   {Resource: func(*http.Request) string { return "x" }},
		"no resource": {Keyset: ks},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Middleware accepted incomplete options")
				}
			}()
			fence.Middleware(opts)
		})
	}
}

func TestMemoryStoreTokenRule(t *testing.T) {
	var m fence.MemoryStore // the zero value is ready
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		token   uint64
		highest uint64
		ok      bool
	}{
		{"a", 3, 3, true},
		{"a", 3, 3, true},
		{"a", 2, 3, false},
		{"b", 1, 1, true}, // names are independent
		{"a", ^uint64(0), ^uint64(0), true},
		{"a", 1 << 62, ^uint64(0), false},
	} {
		h, ok, err := m.Advance(ctx, c.name, c.token)
		if err != nil || h != c.highest || ok != c.ok {
			t.Fatalf("Advance(%s, %d) = %d, %v, %v; want %d, %v", c.name, c.token, h, ok, err, c.highest, c.ok)
		}
	}
}
