// Command controller-runtime runs a controller-runtime manager whose leader
// election goes through Tenure instead of a coordination.k8s.io Lease: the
// manager's LeaderElectionResourceLockInterface is a tenurelock.Lock. Only
// the leader runs the manager's leader-election runnables (controllers, and
// here a small loop that writes to a fenced store with the term's fencing
// token and fence proof).
//
//	go run ./examples/controller-runtime --tenure 127.0.0.1:7419 \
//	    --election controllers.example --store http://127.0.0.1:8080/report
//
// It reads the Kubernetes client configuration as every controller does
// (--kubeconfig, $KUBECONFIG, in-cluster); the election itself needs no
// cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tenure-dev/tenure/clients/go-k8s/tenurelock"
	"github.com/tenure-dev/tenure/clients/go/tenure"
)

func main() {
	host, _ := os.Hostname()
	addr := flag.String("tenure", "127.0.0.1:7419", "Tenure server address")
	election := flag.String("election", "controllers.example", "the election: a Tenure lease name")
	identity := flag.String("identity", fmt.Sprintf("%s_%d", host, os.Getpid()), "this replica's identity (unique per replica)")
	store := flag.String("store", "", "URL of a fenced HTTP store the leader PUTs to (optional)")
	flag.Parse()
	ctrl.SetLogger(zap.New())

	client, err := tenure.Dial(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	defer client.Close()
	lock, err := tenurelock.New(client, *election, *identity)
	if err != nil {
		fail(err)
	}
	mgr, err := newManager(ctrl.GetConfigOrDie(), lock, Timing{15 * time.Second, 10 * time.Second, 2 * time.Second})
	if err != nil {
		fail(err)
	}
	if err := mgr.Add(leaderLoop(lock, *store, 5*time.Second)); err != nil {
		fail(err)
	}
	// Start returns when the signal handler's context ends (the term is
	// then released: LeaderElectionReleaseOnCancel) or when leadership is
	// lost ("leader election lost"): exit either way, as controllers do.
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "controller-runtime example:", err)
	os.Exit(1)
}

// Timing is the elector's LeaseDuration (the TTL of each Tenure term),
// RenewDeadline and RetryPeriod.
type Timing struct{ LeaseDuration, RenewDeadline, RetryPeriod time.Duration }

// newManager is a manager electing its leader with lock.
func newManager(cfg *rest.Config, lock *tenurelock.Lock, t Timing) (manager.Manager, error) {
	if err := lock.CheckTiming(t.LeaseDuration, t.RenewDeadline, t.RetryPeriod); err != nil {
		return nil, err
	}
	return ctrl.NewManager(cfg, ctrl.Options{
		LeaderElection:                      true,
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionID:                    lock.Name(), // names the elector in logs and metrics
		// Release the term when the manager stops, so another replica leads
		// at once instead of after the TTL. Safe when the process exits
		// right after Start returns, as main does.
		LeaderElectionReleaseOnCancel: true,
		// With a custom lock, controller-runtime still gives these to the
		// elector; LeaseDuration is the Tenure TTL of each term.
		LeaseDuration: &t.LeaseDuration,
		RenewDeadline: &t.RenewDeadline,
		RetryPeriod:   &t.RetryPeriod,
		Metrics:       metricsserver.Options{BindAddress: "0"}, // no metrics endpoint in the example
	})
}

// leaderLoop is a leader-election runnable (a RunnableFunc runs only on the
// leader, like a controller): it runs while this replica leads and writes
// with the term's fencing token. A reconciler that writes outside
// Kubernetes would read lock.Term() the same way for each write.
func leaderLoop(lock *tenurelock.Lock, store string, every time.Duration) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		term := lock.Term() // in place before leader-election runnables start
		if term == nil {
			return errors.New("started without a Tenure term")
		}
		// Stop when the manager stops (ctx) and when Tenure ends the term
		// (safe deadline passed, revoked, taken over), whichever is first.
		ctx, cancel := term.Guard(ctx)
		defer cancel()
		log := ctrl.Log.WithName("leader").WithValues("fencingToken", term.FencingToken())
		log.Info("leading")
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if store != "" {
				if err := write(ctx, store, term); err != nil && ctx.Err() == nil {
					log.Error(err, "fenced write")
				}
			}
			select {
			case <-ctx.Done():
				log.Info("no longer leading", "cause", context.Cause(ctx))
				return nil
			case <-tick.C:
			}
		}
	})
}

// write PUTs a line to a fenced HTTP store with the term's fence headers
// (Tenure-Fence, Tenure-Fencing-Token): the store refuses it once a later
// term has written (fence/go's middleware, docs/fencing.md).
func write(ctx context.Context, url string, term *tenurelock.Term) error {
	body := fmt.Sprintf("written by %s at %s\n", term.Holder(), time.Now().Format(time.RFC3339))
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	term.SetFenceHeaders(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("store answered %s", resp.Status)
	}
	return nil
}
