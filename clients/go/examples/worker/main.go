// Command worker is the Tenure example worker: it acquires a lease (waiting
// while another worker holds it), then writes to a fenced store with its
// fencing token in a loop until the lease is lost, the store refuses its
// token, or SIGTERM/SIGINT arrives, and releases the lease on the way out.
//
// The fenced store is a directory: a write takes an exclusive flock on
// <dir>/lock, reads <dir>/fence (decimal, missing = 0), refuses a token below
// it, else writes fence=token and appends "<token> <holder> <seq>" to
// <dir>/log. A store that checks the token is what makes a stalled former
// holder harmless.
//
//	worker -addr 127.0.0.1:7419 -name jobs.report -holder w1 -store /tmp/store
//
// With -token-file or TENURE_TOKEN it sends a bearer token; with -ca it
// dials TLS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

func main() {
	addr := flag.String("addr", envOr("TENURE_ADDR", "127.0.0.1:7419"), "Tenure server address")
	name := flag.String("name", "jobs.example", "lease name")
	holder := flag.String("holder", "", "holder name (default: host-pid)")
	store := flag.String("store", "", "fenced store directory (required)")
	ttl := flag.Duration("ttl", 2*time.Second, "lease TTL")
	every := flag.Duration("every", 50*time.Millisecond, "time between writes")
	ca := flag.String("ca", "", "CA file: dial with TLS")
	flag.Parse()
	if *store == "" {
		log.Fatal("worker: -store is required")
	}
	if *holder == "" {
		host, _ := os.Hostname()
		*holder = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *addr, *ca, *name, *holder, *store, *ttl, *every); err != nil {
		log.Fatalf("worker %s: %v", *holder, err)
	}
}

func run(ctx context.Context, addr, ca, name, holder, store string, ttl, every time.Duration) error {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if ca != "" {
		creds, err := tenure.TLSCredentials(tenure.TLSConfig{CAFile: ca})
		if err != nil {
			return err
		}
		opts = []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	}
	if tok := os.Getenv("TENURE_TOKEN"); tok != "" {
		opts = append(opts, tenure.WithBearerToken(tok))
	}
	client, err := tenure.Dial(addr, opts...)
	if err != nil {
		return err
	}
	defer client.Close()

	lease, err := acquire(ctx, client, name, holder, ttl)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting: nothing held, nothing to release
		}
		return err
	}
	// Release on every way out, SIGTERM included (ctx is cancelled then).
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		released, err := lease.Release(rctx)
		log.Printf("released=%v err=%v", released, err)
	}()
	log.Printf("acquired %s token %d", name, lease.FencingToken())

	tick := time.NewTicker(every)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		if !lease.Held() {
			log.Printf("lost: %v", lease.Err())
			return nil
		}
		if err := write(store, lease.FencingToken(), holder, seq); err != nil {
			log.Printf("store refused: %v", err)
			return nil
		}
		select {
		case <-ctx.Done():
			log.Printf("signalled: stopping")
			return nil
		case <-lease.Done():
			log.Printf("lost: %v", lease.Err())
			return nil
		case <-tick.C:
		}
	}
}

// acquire waits for the lease, asking again while it stays held and while
// the server cannot be reached.
func acquire(ctx context.Context, c *tenure.Client, name, holder string, ttl time.Duration) (*tenure.Session, error) {
	for {
		s, err := c.Acquire(ctx, name, holder, ttl, tenure.WithWait(30*time.Second))
		if err == nil {
			return s, nil
		}
		if tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_HELD && !tenure.IsRetryable(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond): // retry pause
		}
	}
}

// errStale is a write refused because a newer holder has written.
var errStale = errors.New("stale fencing token")

// write is one fenced write to the store directory.
func write(dir string, token uint64, holder string, seq int) error {
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	fence := uint64(0)
	if b, err := os.ReadFile(filepath.Join(dir, "fence")); err == nil {
		if fence, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return fmt.Errorf("fence file: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if token < fence {
		return fmt.Errorf("%w: %d < fence %d", errStale, token, fence)
	}
	if err := os.WriteFile(filepath.Join(dir, "fence"), []byte(strconv.FormatUint(token, 10)), 0o644); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%d %s %d\n", token, holder, seq)
	return err
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
