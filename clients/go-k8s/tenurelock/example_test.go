package tenurelock_test

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/tenure-dev/tenure/clients/go-k8s/tenurelock"
	"github.com/tenure-dev/tenure/clients/go/tenure"
)

// The README's RunOrDie example, compiled (not run) by go vet and go test.
func Example() {
	_ = func(ctx context.Context, addr, identity string, run func(context.Context, uint64)) error {
		client, err := tenure.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer client.Close()
		lock, err := tenurelock.New(client, "controllers.my-operator", identity) // identity: unique per replica
		if err != nil {
			return err
		}
		leaseDuration, renewDeadline, retryPeriod := 15*time.Second, 10*time.Second, 2*time.Second
		if err := lock.CheckTiming(leaseDuration, renewDeadline, retryPeriod); err != nil {
			return err
		}
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   leaseDuration, // the Tenure TTL of each term
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: true, // the next leader takes over at once, not after the TTL
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					term := lock.Term() // this leadership's Tenure term, set before this is called
					if term == nil {
						return // already over
					}
					ctx, cancel := term.Guard(ctx) // ends with the elector's ctx or the term
					defer cancel()
					run(ctx, term.FencingToken()) // pass the token with every downstream write
				},
				OnStoppedLeading: func() { /* exit, as controllers do */ },
			},
		})
		return nil
	}
}
