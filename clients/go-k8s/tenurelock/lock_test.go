package tenurelock_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/tenure-dev/tenure/clients/go-k8s/internal/tenuretest"
	"github.com/tenure-dev/tenure/clients/go-k8s/tenurelock"
	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
	fence "github.com/tenure-dev/tenure/fence/go"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rec is the record the elector writes for id.
func rec(id string, transitions int) resourcelock.LeaderElectionRecord {
	now := metav1.Now()
	return resourcelock.LeaderElectionRecord{HolderIdentity: id, LeaseDurationSeconds: int(leaseDuration / time.Second),
		AcquireTime: now, RenewTime: now, LeaderTransitions: transitions}
}

// TestInterfaceCalls drives the resourcelock.Interface the way the elector
// does, checking each call's effect on Tenure and the Kubernetes error kinds
// the elector relies on.
func TestInterfaceCalls(t *testing.T) {
	srv := tenuretest.Start(t)
	ctx := testCtx(t)
	name := electionName(t)
	c := srv.Client(t)
	a, err := tenurelock.New(c, name, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := tenurelock.New(srv.Client(t), name, "b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Identity() != "a" || a.Describe() != "tenure:"+name {
		t.Fatalf("Identity %q, Describe %q", a.Identity(), a.Describe())
	}

	// Nobody holds it: NotFound, as the elector expects, wrapping Tenure's
	// reason.
	_, _, err = a.Get(ctx)
	if !apierrors.IsNotFound(err) || tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_NOT_FOUND {
		t.Fatalf("Get of a free election: %v; want NotFound (LEASE_NOT_FOUND)", err)
	}
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.Status().Code != http.StatusNotFound {
		t.Fatalf("Get of a free election: %v is not a *StatusError 404", err)
	}

	// Create: a term, held in Tenure by a with the requested TTL.
	if err := a.Create(ctx, rec("a", 4)); err != nil {
		t.Fatal(err)
	}
	term := a.Term()
	if term == nil || !term.Held() || term.FencingToken() == 0 || a.FencingToken() != term.FencingToken() {
		t.Fatalf("after Create: term %v", term)
	}
	lease, err := c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if lease.GetHolder() != "a" || lease.GetFencingToken() != term.FencingToken() || lease.GetTtl().AsDuration() != leaseDuration {
		t.Fatalf("Tenure holds %v; want a's term of %v", lease, leaseDuration)
	}
	if len(term.FenceProof()) != 0 {
		t.Fatal("a fence proof from a server that signs none")
	}

	// Get: the record of the holding.
	got, raw1, err := b.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.HolderIdentity != "a" || got.LeaseDurationSeconds != 2 || got.LeaderTransitions != 4 ||
		!got.AcquireTime.Time.Equal(lease.GetAcquireTime().AsTime()) || got.RenewTime.IsZero() {
		t.Fatalf("Get: %+v; lease %v", got, lease)
	}

	// Another candidate cannot take it: AlreadyExists or Conflict, so the
	// elector keeps trying.
	if err := b.Create(ctx, rec("b", 5)); !apierrors.IsAlreadyExists(err) || tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_HELD {
		t.Fatalf("Create by b while a holds: %v; want AlreadyExists (LEASE_HELD)", err)
	}
	if err := b.Update(ctx, rec("b", 5)); !apierrors.IsConflict(err) || tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_HELD {
		t.Fatalf("Update by b while a holds: %v; want Conflict (LEASE_HELD)", err)
	}
	if b.Term() != nil {
		t.Fatal("b has a term")
	}

	// The holder's Update renews: a new revision (and raw record), the same
	// token; a second term is refused.
	rev := term.Revision()
	deadline := term.SafeDeadline()
	if err := a.Update(ctx, rec("a", 4)); err != nil {
		t.Fatal(err)
	}
	if term.Revision() <= rev || !term.SafeDeadline().After(deadline) || a.Term() != term {
		t.Fatalf("renewal: revision %d -> %d, deadline moved %v", rev, term.Revision(), term.SafeDeadline().Sub(deadline))
	}
	_, raw2, err := b.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(raw1, raw2) {
		t.Fatal("the raw record did not change with a renewal: followers would not see the leader alive")
	}
	if err := a.Create(ctx, rec("a", 4)); !apierrors.IsConflict(err) {
		t.Fatalf("Create by the holder: %v; want Conflict", err)
	}

	// Release (ReleaseOnCancel writes an empty holder): the term ends
	// first, then the lease is free at once.
	if err := a.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(term.Err(), tenure.ErrReleased) || term.Context().Err() == nil || a.Term() != nil {
		t.Fatalf("after release: term err %v, lock term %v", term.Err(), a.Term())
	}
	if _, _, err := b.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("Get after the release: %v; want NotFound", err)
	}

	// b takes over through Update (the elector's path when it saw the
	// record expire): a greater token, and LeaderTransitions counted on.
	if err := b.Update(ctx, rec("b", 0)); err != nil {
		t.Fatal(err)
	}
	bt := b.Term()
	if bt == nil || bt.FencingToken() <= term.FencingToken() {
		t.Fatalf("b's term %v after a's token %d", bt, term.FencingToken())
	}
	got, _, err = a.Get(ctx)
	if err != nil || got.HolderIdentity != "b" || got.LeaderTransitions != 5 {
		t.Fatalf("Get after b took over: %+v, %v; want b with 5 transitions", got, err)
	}

	// A term revoked by an operator ends at once (the watch), and the
	// holder's next Update is a Conflict that makes the elector step down.
	if _, err := c.RevokeLease(ctx, name, "test", bt.FencingToken()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-bt.Done():
	case <-time.After(time.Second):
		t.Fatalf("b's term still held 1 s after the revoke")
	}
	if !errors.Is(bt.Err(), tenure.ErrLostOnWatch) {
		t.Fatalf("b's term ended with %v; want ErrLostOnWatch", bt.Err())
	}
	if err := b.Update(ctx, rec("b", 5)); !apierrors.IsConflict(err) {
		t.Fatalf("renewal of a revoked term: %v; want Conflict", err)
	}
	// Until the elector has stepped down, the lock starts no new term.
	if err := b.Create(ctx, rec("b", 5)); !apierrors.IsConflict(err) {
		t.Fatalf("a new term before the elector stepped down: %v; want Conflict", err)
	}
	b.RecordEvent(tenurelock.EventStoppedLeading)
	if b.Term() != nil {
		t.Fatal("the lock keeps a term after the elector stopped leading")
	}
	if err := b.Create(ctx, rec("b", 5)); err != nil {
		t.Fatalf("a new term after the elector stepped down: %v", err)
	}
	if tok := b.FencingToken(); tok <= bt.FencingToken() {
		t.Fatalf("new term token %d, not above %d", tok, bt.FencingToken())
	}
	// Without ReleaseOnCancel the elector only says it stopped: the term
	// ends without a release, and Tenure expires it.
	nt := b.Term()
	b.RecordEvent(tenurelock.EventStoppedLeading)
	if !errors.Is(nt.Err(), tenurelock.ErrStoppedLeading) {
		t.Fatalf("term after stopped leading: %v", nt.Err())
	}
	if l, err := c.Get(ctx, name); err != nil || l.GetFencingToken() != nt.FencingToken() {
		t.Fatalf("Tenure after stopped leading without release: %v, %v; want the term left to expire", l, err)
	}

	// Records Tenure cannot honour.
	if err := a.Update(ctx, rec("b", 0)); err == nil {
		t.Fatal("Update of another candidate's record accepted")
	}
	short := rec("a", 0)
	short.LeaseDurationSeconds = 0
	if err := a.Create(ctx, short); err == nil {
		t.Fatal("a lease duration under 1 s accepted")
	}
}

// TestTermSafeDeadline checks that a term whose renewals stop ends at its
// safe deadline, before Tenure lets another candidate in.
func TestTermSafeDeadline(t *testing.T) {
	srv := tenuretest.Start(t)
	ctx := testCtx(t)
	name := electionName(t)
	a, _ := tenurelock.New(srv.Client(t), name, "a", tenurelock.WithoutWatch())
	b, _ := tenurelock.New(srv.Client(t), name, "b")
	if err := a.Create(ctx, rec("a", 0)); err != nil {
		t.Fatal(err)
	}
	term := a.Term()
	select {
	case <-term.Done():
	case <-time.After(leaseDuration + time.Second):
		t.Fatal("the term did not end at its safe deadline")
	}
	if !errors.Is(term.Err(), tenure.ErrDeadlinePassed) {
		t.Fatalf("term ended with %v", term.Err())
	}
	if err := b.Create(ctx, rec("b", 0)); err == nil {
		// Tenure expires no earlier than the safe deadline; the order
		// only matters the other way round.
		t.Logf("b took over right at a's safe deadline")
	}
	if err := a.Update(ctx, rec("a", 0)); !apierrors.IsConflict(err) {
		t.Fatalf("renewal after the safe deadline: %v; want Conflict", err)
	}
}

func TestCheckTiming(t *testing.T) {
	l, err := tenurelock.New(&tenure.Client{}, "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lease, renew, retry time.Duration
		ok                  bool
	}{
		{15 * time.Second, 10 * time.Second, 2 * time.Second, true}, // controller-runtime's defaults
		{leaseDuration, renewDeadline, retryPeriod, true},
		{1500 * time.Millisecond, time.Second, 100 * time.Millisecond, false}, // not whole seconds
		{15 * time.Second, 12 * time.Second, 2 * time.Second, false},          // 14 s is not below 14 s
		{500 * time.Millisecond, 200 * time.Millisecond, 100 * time.Millisecond, false},
	} {
		if err := l.CheckTiming(tc.lease, tc.renew, tc.retry); (err == nil) != tc.ok {
			t.Errorf("CheckTiming(%v, %v, %v) = %v, want ok %v", tc.lease, tc.renew, tc.retry, err, tc.ok)
		}
	}
}

// TestTermFenceProof checks that a term of a signing Tenure carries a fence
// proof of the term that verifies against the server's keys, and sets the
// fence headers.
func TestTermFenceProof(t *testing.T) {
	key := filepath.Join(t.TempDir(), "fence.pem")
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "ed25519", "-out", key).CombinedOutput(); err != nil {
		t.Fatalf("openssl genpkey (openssl is required): %v: %s", err, out)
	}
	der, err := exec.Command("openssl", "pkey", "-in", key, "-pubout", "-outform", "DER").Output()
	if err != nil || len(der) < ed25519.PublicKeySize {
		t.Fatalf("openssl pkey -pubout: %v", err)
	}
	pub := ed25519.PublicKey(der[len(der)-ed25519.PublicKeySize:])
	srv := tenuretest.Start(t, "--fence-signing-key", key)
	ctx := testCtx(t)
	c := srv.Client(t)
	keys, err := c.Stub().GetFenceKeys(ctx, &tenurev1.GetFenceKeysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.GetKeys()) != 1 || !pub.Equal(ed25519.PublicKey(keys.GetKeys()[0].GetPublicKey())) {
		t.Fatalf("GetFenceKeys: %v; want the signing key", keys.GetKeys())
	}
	ks, err := fence.ParseKeyset(keys.GetKeyset())
	if err != nil {
		t.Fatal(err)
	}

	name := electionName(t)
	lock, _ := tenurelock.New(c, name, "leader-1")
	if err := lock.Create(ctx, rec("leader-1", 0)); err != nil {
		t.Fatal(err)
	}
	term := lock.Term()
	v, err := ks.VerifyText(term.FenceProofText())
	if err != nil {
		t.Fatal(err)
	}
	if f := v.Fence; f.Name != name || f.Token != term.FencingToken() || f.Holder != "leader-1" || f.Slot != 0 ||
		time.Duration(f.TTLSeconds)*time.Second != leaseDuration {
		t.Fatalf("the proof states %+v; the term is %v", f, term)
	}
	if err := lock.Update(ctx, rec("leader-1", 0)); err != nil {
		t.Fatal(err)
	}
	if v2, err := ks.Verify(lock.Term().FenceProof()); err != nil || v2.Fence != v.Fence {
		t.Fatalf("the proof after a renewal: %+v, %v", v2, err)
	}
	req, _ := http.NewRequest(http.MethodPut, "http://store.invalid/x", nil)
	term.SetFenceHeaders(req)
	if req.Header.Get(tenure.FenceHeader) != term.FenceProofText() ||
		req.Header.Get(tenure.FencingTokenHeader) != strconv.FormatUint(term.FencingToken(), 10) {
		t.Fatalf("fence headers %v", req.Header)
	}
}
