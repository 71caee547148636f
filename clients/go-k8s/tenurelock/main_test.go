package tenurelock_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/tenure-dev/tenure/clients/go-k8s/tenurelock"
	"github.com/tenure-dev/tenure/clients/go/tenure"
)

// candidateEnv makes the test binary a candidate process (see
// candidateMain) instead of running the tests.
const candidateEnv = "TENURELOCK_CANDIDATE"

func TestMain(m *testing.M) {
	if os.Getenv(candidateEnv) != "" {
		os.Exit(candidateMain())
	}
	if os.Getenv("TENURELOCK_LOG") == "" {
		klog.SetLogger(logr.Discard()) // the electors' logs: TENURELOCK_LOG=1 shows them
	}
	os.Exit(m.Run())
}

// candidateMain is one candidate process: client-go's RunOrDie over a
// tenurelock.Lock on $TENURELOCK_NAME of the Tenure at $TENURELOCK_ADDR, as
// $TENURELOCK_CANDIDATE. It prints "started TOKEN UNIXNANO" when it starts
// leading and "ended TOKEN UNIXNANO CAUSE" when it stops (the end of
// term.Guard of the elector's context), and on SIGTERM stops, releasing
// its term (ReleaseOnCancel), and exits.
func candidateMain() int {
	klog.SetLogger(logr.Discard())
	id := os.Getenv(candidateEnv)
	client, err := tenure.Dial(os.Getenv("TENURELOCK_ADDR"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer client.Close()
	lock, err := tenurelock.New(client, os.Getenv("TENURELOCK_NAME"), id)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Name:            id,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				term := lock.Term()
				lead, cancel := term.Guard(ctx)
				defer cancel()
				fmt.Printf("started %d %d\n", term.FencingToken(), time.Now().UnixNano())
				<-lead.Done()
				fmt.Printf("ended %d %d %v\n", term.FencingToken(), time.Now().UnixNano(), context.Cause(lead))
			},
			OnStoppedLeading: func() {},
		},
	})
	return 0
}
