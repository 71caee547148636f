package main

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/tenure-dev/tenure/clients/go-k8s/internal/tenuretest"
	"github.com/tenure-dev/tenure/clients/go-k8s/tenurelock"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
	fence "github.com/tenure-dev/tenure/fence/go"
)

func TestMain(m *testing.M) {
	if os.Getenv("TENURELOCK_LOG") != "" { // the managers' logs
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrl.SetLogger(logr.Discard())
		klog.SetLogger(logr.Discard())
	}
	os.Exit(m.Run())
}

// admitted is one write the fenced store admitted.
type admitted struct {
	holder string
	token  uint64
}

// TestManagersElectThroughTenure runs two controller-runtime managers of
// this example, with no Kubernetes API server (the client configuration
// points at a closed port: the manager elects before it needs one). The
// first leads and writes to a store guarded by fence/go's middleware with
// its term's fence proof; when it stops, it releases its term and the
// second leads and writes with a greater token. The store admitted every
// write, in token order, from one leader at a time.
func TestManagersElectThroughTenure(t *testing.T) {
	key := filepath.Join(t.TempDir(), "fence.pem")
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "ed25519", "-out", key).CombinedOutput(); err != nil {
		t.Fatalf("openssl genpkey (openssl is required): %v: %s", err, out)
	}
	srv := tenuretest.Start(t, "--fence-signing-key", key)
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys, err := client.Stub().GetFenceKeys(ctx, &tenurev1.GetFenceKeysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.GetKeys()) != 1 || len(keys.GetKeys()[0].GetPublicKey()) != ed25519.PublicKeySize {
		t.Fatalf("GetFenceKeys: %v", keys.GetKeys())
	}
	ks, err := fence.ParseKeyset(keys.GetKeyset())
	if err != nil {
		t.Fatal(err)
	}

	const election = "controllers.example-test"
	var mu sync.Mutex
	var writes []admitted
	wrote := make(chan admitted, 1024)
	guard := fence.Middleware(fence.Options{Keyset: ks, Resource: func(*http.Request) string { return election }})
	store := httptest.NewServer(guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := fence.FromContext(r.Context())
		wr := admitted{v.Fence.Holder, v.Fence.Token}
		mu.Lock()
		writes = append(writes, wr)
		mu.Unlock()
		wrote <- wr
	})))
	defer store.Close()

	noCluster := &rest.Config{Host: "https://127.0.0.1:1"}
	timing := Timing{2 * time.Second, time.Second, 200 * time.Millisecond}
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) running {
		lock, err := tenurelock.New(client, election, id)
		if err != nil {
			t.Fatal(err)
		}
		mgr, err := newManager(noCluster, lock, timing)
		if err != nil {
			t.Fatal(err)
		}
		if err := mgr.Add(leaderLoop(lock, store.URL, 100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		mctx, mcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		return running{mcancel, done}
	}
	// waitWrites waits for n writes by holder.
	waitWrites := func(holder string, n int) uint64 {
		t.Helper()
		for seen := 0; ; {
			select {
			case wr := <-wrote:
				if wr.holder == holder {
					if seen++; seen == n {
						return wr.token
					}
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: %d of %d writes within 10 s", holder, seen, n)
			}
		}
	}

	a := start("manager-a")
	tokenA := waitWrites("manager-a", 3)
	b := start("manager-b")
	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatalf("manager-a: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("manager-a did not stop")
	}
	tokenB := waitWrites("manager-b", 3)
	if tokenB <= tokenA {
		t.Fatalf("manager-b writes with token %d after manager-a's %d", tokenB, tokenA)
	}
	b.cancel()
	select {
	case err := <-b.done:
		if err != nil {
			t.Fatalf("manager-b: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("manager-b did not stop")
	}

	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(writes); i++ {
		prev, cur := writes[i-1], writes[i]
		if cur.token < prev.token || (cur.token == prev.token) != (cur.holder == prev.holder) {
			t.Fatalf("write %d: %v after %v", i, cur, prev)
		}
	}
	t.Logf("%d fenced writes: manager-a with token %d, then manager-b with token %d", len(writes), tokenA, tokenB)
}
