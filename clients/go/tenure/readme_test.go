package tenure_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// readmeExample is the README's usage example, verbatim between the markers.
func readmeExample(ctx context.Context, addr string, runJob func(ctx context.Context, fencingToken uint64) error) error {
	// README example start
	client, err := tenure.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer client.Close()
	lease, err := client.Acquire(ctx, "jobs.nightly-report", "worker-1", 10*time.Second)
	if err != nil {
		return err // tenure.ReasonOf(err) == tenurev1.ErrorReason_LEASE_HELD: someone else has it
	}
	defer lease.Release(context.Background())
	// Work under lease.Context(): it is cancelled the moment the lease is lost.
	return runJob(lease.Context(), lease.FencingToken())
	// README example end
}

// between returns the lines strictly between the first line containing
// start and the next line containing end.
func between(t *testing.T, text, start, end string) []string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.Contains(l, start) {
			for j := i + 1; j < len(lines); j++ {
				if strings.Contains(lines[j], end) {
					return lines[i+1 : j]
				}
			}
		}
	}
	t.Fatalf("no %q ... %q block", start, end)
	return nil
}

// The README's example is the code above, and it works against a server.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	// The marker line, then a ```go fence, the code, and a closing fence.
	block := between(t, string(readme), "<!-- example: tenure/readme_test.go -->", "<!-- end example -->")
	if len(block) < 3 || block[0] != "```go" || block[len(block)-1] != "```" {
		t.Fatalf("README example is not one ```go block: %q", block)
	}
	inReadme := block[1 : len(block)-1]
	inTest := between(t, string(self), "// README example "+"start", "// README example "+"end")
	for i, l := range inTest {
		inTest[i] = strings.TrimPrefix(l, "\t")
	}
	if got, want := strings.Join(inReadme, "\n"), strings.Join(inTest, "\n"); got != want {
		t.Fatalf("README example differs from readme_test.go:\n--- README\n%s\n--- test\n%s", got, want)
	}

	ctx := testCtx(t)
	c := newClient(t, shared.addr)
	var fence tenure.Fence
	ran := false
	err = readmeExample(ctx, shared.addr, func(jobCtx context.Context, token uint64) error {
		ran = true
		if jobCtx.Err() != nil {
			return errors.New("job context already done")
		}
		l, err := c.Get(ctx, "jobs.nightly-report")
		if err != nil {
			return err
		}
		if l.GetHolder() != "worker-1" || l.GetFencingToken() != token || !fence.Accept("report", token) {
			t.Errorf("job saw lease %v with token %d", l, token)
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("example: err %v, job ran %v", err, ran)
	}
	if _, err := c.Get(ctx, "jobs.nightly-report"); tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_NOT_FOUND {
		t.Fatalf("after the example the lease should be released: %v", err)
	}
}
