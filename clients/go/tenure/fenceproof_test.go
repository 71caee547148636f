package tenure_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
	fence "github.com/tenure-dev/tenure/fence/go"
)

// signingServer starts Tenure with a fence signing key that openssl
// generates in a temporary folder, and returns it with the key's 32-byte
// public key (read back with openssl, independently of Tenure).
func signingServer(t *testing.T) (*server, ed25519.PublicKey) {
	t.Helper()
	key := filepath.Join(t.TempDir(), "fence.pem")
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "ed25519", "-out", key).CombinedOutput(); err != nil {
		t.Fatalf("openssl genpkey (openssl is required): %v: %s", err, out)
	}
	der, err := exec.Command("openssl", "pkey", "-in", key, "-pubout", "-outform", "DER").Output()
	if err != nil || len(der) < ed25519.PublicKeySize {
		t.Fatalf("openssl pkey -pubout: %v (%d bytes)", err, len(der))
	}
	srv, err := startServerWith(insecure.NewCredentials(), "--fence-signing-key", key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.stop(); err != nil {
			t.Error(err)
		}
	})
	return srv, ed25519.PublicKey(der[len(der)-ed25519.PublicKeySize:])
}

// serverKeyset pins the keys the server serves through GetFenceKeys,
// checking them against the signing key's public key.
func serverKeyset(t *testing.T, c *tenure.Client, want ed25519.PublicKey) *fence.Keyset {
	t.Helper()
	resp, err := c.Stub().GetFenceKeys(testCtx(t), &tenurev1.GetFenceKeysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetKeys()) != 1 {
		t.Fatalf("GetFenceKeys: %d keys, want the signing key only", len(resp.GetKeys()))
	}
	k := resp.GetKeys()[0]
	if !k.GetActive() || !want.Equal(ed25519.PublicKey(k.GetPublicKey())) || k.GetKeyId() != fence.KeyID(want) {
		t.Fatalf("GetFenceKeys: key %x (id %s, active %v); want the signing key %x (id %s)",
			k.GetPublicKey(), k.GetKeyId(), k.GetActive(), []byte(want), fence.KeyID(want))
	}
	ks, err := fence.ParseKeyset(resp.GetKeyset())
	if err != nil {
		t.Fatalf("the keyset of GetFenceKeys: %v\n%s", err, resp.GetKeyset())
	}
	if ids := ks.KeyIDs(); len(ids) != 1 || ids[0] != k.GetKeyId() {
		t.Fatalf("the keyset pins %v, want [%s]", ids, k.GetKeyId())
	}
	return ks
}

// verifyGrant verifies a holding's proof and checks it states the holding.
func verifyGrant(t *testing.T, ks *fence.Keyset, proof []byte, l *tenurev1.Lease) fence.Fence {
	t.Helper()
	if len(proof) == 0 {
		t.Fatalf("%s: no fence proof from a server with a signing key", l.GetName())
	}
	v, err := ks.Verify(proof)
	if err != nil {
		t.Fatalf("%s: %v", l.GetName(), err)
	}
	f := v.Fence
	if f.Name != l.GetName() || f.Token != l.GetFencingToken() || f.Slot != l.GetSlot() || f.Holder != l.GetHolder() ||
		time.Duration(f.TTLSeconds)*time.Second != l.GetTtl().AsDuration() || f.Bucket == "" {
		t.Fatalf("the proof states %+v; the grant is %v", f, l)
	}
	if at := l.GetAcquireTime().AsTime(); f.GrantedAtMs != uint64(at.UnixMilli()) {
		t.Fatalf("the proof's grant time %d is not the lease's acquire_time %v (%d)", f.GrantedAtMs, at, at.UnixMilli())
	}
	return f
}

func TestFenceProofsVerifyWithTheServersKeys(t *testing.T) {
	srv, pub := signingServer(t)
	c := newClient(t, srv.addr)
	ctx := testCtx(t)
	ks := serverKeyset(t, c, pub)

	// A lease: the proof states it, in bytes and as text, and renewals do
	// not change it.
	s, err := c.Acquire(ctx, leaseName(t, "lease"), "worker-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(context.Background())
	proof := s.FenceProof()
	verifyGrant(t, ks, proof, s.Lease())
	if v, err := ks.VerifyText(s.FenceProofText()); err != nil || v.Fence.Token != s.FencingToken() {
		t.Fatalf("FenceProofText: %+v, %v", v, err)
	}
	proof[0] ^= 0xff // FenceProof returns a copy: changing it changes nothing
	if bytes.Equal(s.FenceProof(), proof) {
		t.Fatal("FenceProof shares its bytes with the session")
	}
	if err := s.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	verifyGrant(t, ks, s.FenceProof(), s.Lease())

	// A semaphore slot: the proof states its slot.
	slot, err := c.Semaphore(leaseName(t, "sem"), 3).Acquire(ctx, "trainer-7", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release(context.Background())
	if f := verifyGrant(t, ks, slot.FenceProof(), slot.Lease()); f.Slot == 0 || f.Slot != slot.Slot() {
		t.Fatalf("semaphore proof slot %d, session slot %d", f.Slot, slot.Slot())
	}

	// A group: every member has its own proof.
	names := []string{leaseName(t, "g1"), leaseName(t, "g2")}
	g, err := c.AcquireGroup(ctx, names, "mover", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(context.Background())
	proofs := g.FenceProofs()
	for i, l := range g.Leases() {
		verifyGrant(t, ks, proofs[i], l)
		if !bytes.Equal(g.FenceProof(l.GetName()), proofs[i]) {
			t.Fatalf("FenceProof(%s) is not FenceProofs()[%d]", l.GetName(), i)
		}
	}
	if g.FenceProof("not-a-member") != nil {
		t.Fatal("a proof for a name outside the group")
	}

	// An election term.
	term, err := c.Elect(ctx, leaseName(t, "election"), "node-1", "10.0.0.1:5432", 10*time.Second, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Release(context.Background())
	verifyGrant(t, ks, term.FenceProof(), term.Lease())
}

func TestFenceHeadersPassAFencedHTTPStore(t *testing.T) {
	srv, pub := signingServer(t)
	c := newClient(t, srv.addr)
	ctx := testCtx(t)
	ks := serverKeyset(t, c, pub)

	// A store guarding /<lease name> with the Go fence middleware.
	store := httptest.NewServer(fence.Middleware(fence.Options{
		Keyset:   ks,
		Resource: func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/") },
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := fence.FromContext(r.Context())
		fmt.Fprintf(w, "%s %d", v.Fence.Holder, v.Fence.Token)
	})))
	defer store.Close()
	write := func(set func(*http.Request), name string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, store.URL+"/"+name, strings.NewReader("data"))
		if err != nil {
			t.Fatal(err)
		}
		set(req)
		resp, err := store.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}

	name := leaseName(t, "orders")
	first, err := c.Acquire(ctx, name, "worker-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPut, "/", nil)
	first.SetFenceHeaders(req)
	if req.Header.Get(tenure.FenceHeader) != first.FenceProofText() || req.Header.Get(tenure.FencingTokenHeader) != fmt.Sprint(first.FencingToken()) {
		t.Fatalf("headers %v", req.Header)
	}
	if code, body := write(first.SetFenceHeaders, name); code != http.StatusOK || body != fmt.Sprintf("worker-1 %d", first.FencingToken()) {
		t.Fatalf("the holder's write: %d %s", code, body)
	}
	// Another lease's proof is not for this resource.
	if code, body := write(first.SetFenceHeaders, leaseName(t, "payments")); code != http.StatusConflict || !strings.Contains(body, "FENCE_WRONG_NAME") {
		t.Fatalf("a write to another lease's resource: %d %s", code, body)
	}

	// The lease passes on: the next holder writes, the first is stale.
	if _, err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := c.Acquire(ctx, name, "worker-2", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(context.Background())
	if code, body := write(second.SetFenceHeaders, name); code != http.StatusOK || body != fmt.Sprintf("worker-2 %d", second.FencingToken()) {
		t.Fatalf("the next holder's write: %d %s", code, body)
	}
	code, body := write(first.SetFenceHeaders, name)
	want := fmt.Sprintf(`"token":"%d","highest":"%d"`, first.FencingToken(), second.FencingToken())
	if code != http.StatusConflict || !strings.Contains(body, `"reason":"FENCE_STALE"`) || !strings.Contains(body, want) {
		t.Fatalf("the first holder's late write: %d %s; want FENCE_STALE with %s", code, body, want)
	}

	// A group member's headers.
	members := []string{leaseName(t, "m1"), leaseName(t, "m2")}
	g, err := c.AcquireGroup(ctx, members, "mover", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(context.Background())
	for _, m := range members {
		code, body := write(func(r *http.Request) {
			if err := g.SetFenceHeaders(r, m); err != nil {
				t.Fatal(err)
			}
		}, m)
		if code != http.StatusOK || body != fmt.Sprintf("mover %d", g.FencingToken(m)) {
			t.Fatalf("member %s: %d %s", m, code, body)
		}
	}
	if err := g.SetFenceHeaders(httptest.NewRequest(http.MethodPut, "/", nil), "not-a-member"); err == nil {
		t.Fatal("SetFenceHeaders accepted a name outside the group")
	}
}

func TestNoFenceProofWithoutASigningKey(t *testing.T) {
	c := newClient(t, shared.addr)
	ctx := testCtx(t)
	resp, err := c.Stub().GetFenceKeys(ctx, &tenurev1.GetFenceKeysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetKeys()) != 0 || strings.TrimSpace(stripComments(resp.GetKeyset())) != "" {
		t.Fatalf("GetFenceKeys without a signing key: %v", resp)
	}
	s, err := c.Acquire(ctx, leaseName(t, "lease"), "worker-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(context.Background())
	if len(s.FenceProof()) != 0 || s.FenceProofText() != "" {
		t.Fatalf("a proof from a server without a signing key: %x", s.FenceProof())
	}
	req := httptest.NewRequest(http.MethodPut, "/", nil)
	req.Header.Set(tenure.FenceHeader, "left over")
	s.SetFenceHeaders(req)
	if _, ok := req.Header[tenure.FenceHeader]; ok || req.Header.Get(tenure.FencingTokenHeader) != fmt.Sprint(s.FencingToken()) {
		t.Fatalf("headers without a proof: %v; want the token only", req.Header)
	}
}

// stripComments drops `#` comments from keyset text.
func stripComments(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		b.WriteString(line)
	}
	return b.String()
}
