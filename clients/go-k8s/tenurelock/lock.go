// Package tenurelock is a client-go resourcelock.Interface backed by a
// Tenure lease, so that any controller electing with client-go's
// leaderelection package (leaderelection.RunOrDie, or controller-runtime's
// manager through Options.LeaderElectionResourceLockInterface) elects
// through Tenure and learns the fencing token of its term.
//
// The election is the Tenure lease of the lock's name. The elector's calls
// map onto Tenure as follows:
//
//   - Get is GetLease: the holding as a LeaderElectionRecord, or a
//     Kubernetes NotFound error (apierrors.IsNotFound) when nobody holds it.
//   - Create, and Update by a candidate that holds no term, is an Acquire
//     without wait, with a TTL of LeaseDurationSeconds: a new term with a new
//     fencing token. LEASE_HELD is an AlreadyExists (Create) or Conflict
//     (Update) error, so the elector keeps retrying.
//   - Update by the holder is a Renew with the last revision. LEASE_NOT_HELD
//     ends the term: the error makes the elector step down.
//   - Update with an empty HolderIdentity (ReleaseOnCancel) is a Release.
//
// The lease's TTL is enforced by Tenure, not by the candidates' clocks: a
// crashed leader's term expires on the server TTL seconds after its last
// renewal and Get then answers NotFound, so a candidate takes over without
// waiting LeaseDuration on its own clock. The elector still trusts its own
// clock to decide when it stops leading; Term.Context ends at the term's
// safe deadline whatever the elector believes, and the fencing token makes
// a downstream store refuse a deposed leader's late writes.
package tenurelock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TransitionsKey is the lease metadata key that keeps the record's
// LeaderTransitions (Tenure keeps the other fields itself).
const TransitionsKey = "k8s-leader-transitions"

// The events client-go's LeaderElector records through RecordEvent. The
// lock follows "stopped leading" to know the elector's term is over.
const (
	EventBecameLeader   = "became leader"
	EventStoppedLeading = "stopped leading"
)

// ErrStoppedLeading ends a term whose elector stopped leading without
// releasing it (ReleaseOnCancel off, or the release failed): the lease is
// left to expire on the server.
var ErrStoppedLeading = errors.New("tenurelock: the elector stopped leading")

// errTermEnded refuses a new term while the elector may still believe it
// leads through one that has ended.
var errTermEnded = errors.New("tenurelock: the term ended; a new one starts once the elector has stepped down")

// GroupResource is the resource named in the Kubernetes API errors the lock
// returns (NotFound, AlreadyExists, Conflict).
var GroupResource = schema.GroupResource{Group: "tenure.dev", Resource: "leases"}

// Option configures a Lock.
type Option func(*Lock)

// WithEventHandler is called with each event the elector records through
// RecordEvent ("became leader", "stopped leading").
func WithEventHandler(fn func(identity, event string)) Option {
	return func(l *Lock) { l.onEvent = fn }
}

// WithCallTimeout bounds each Tenure call the lock makes (default 5 s).
// Renewals are also cut off at the term's safe deadline.
func WithCallTimeout(d time.Duration) Option {
	return func(l *Lock) { l.callTimeout = d }
}

// WithSafetyMargin sets the margin subtracted from the granted TTL to form
// a term's safe deadline (default tenure.DefaultSafetyMargin(ttl): a tenth
// of the TTL, at most 1 s).
func WithSafetyMargin(d time.Duration) Option {
	return func(l *Lock) { l.margin, l.marginSet = d, true }
}

// WithoutWatch turns off the watch that ends a term as soon as Tenure shows
// it gone (revoked by an operator, expired, taken over); the next renewal
// still finds out (LEASE_NOT_HELD).
func WithoutWatch() Option {
	return func(l *Lock) { l.noWatch = true }
}

// Lock is a resourcelock.Interface on the Tenure lease name. Use one Lock
// per elector (per candidate); its methods are safe for concurrent use.
type Lock struct {
	client      *tenure.Client
	name        string
	identity    string
	onEvent     func(identity, event string)
	callTimeout time.Duration
	margin      time.Duration
	marginSet   bool
	noWatch     bool

	rpcMu sync.Mutex // serialises the elector's calls that change the lease

	mu          sync.Mutex
	term        *Term  // the current term: nil when none; ended but kept until the elector steps down
	pendingKey  string // lease key of an Acquire whose outcome is unknown, reused by the next
	transitions int    // the highest LeaderTransitions seen
}

// New returns a Lock on the Tenure lease name for the candidate identity
// (its holder name in Tenure: unique per candidate, 1 to 256 bytes of
// printable text). client is shared freely; the Lock does not close it.
func New(client *tenure.Client, name, identity string, opts ...Option) (*Lock, error) {
	if client == nil {
		return nil, errors.New("tenurelock: a tenure.Client is required")
	}
	if name == "" || identity == "" {
		return nil, errors.New("tenurelock: a name and an identity are required")
	}
	l := &Lock{client: client, name: name, identity: identity, callTimeout: 5 * time.Second}
	for _, o := range opts {
		o(l)
	}
	if l.callTimeout <= 0 {
		return nil, fmt.Errorf("tenurelock: call timeout %v is not positive", l.callTimeout)
	}
	if l.marginSet && l.margin < 0 {
		return nil, fmt.Errorf("tenurelock: safety margin %v is negative", l.margin)
	}
	return l, nil
}

var _ resourcelock.Interface = (*Lock)(nil)

// Identity is the candidate's identity (its Tenure holder name).
func (l *Lock) Identity() string { return l.identity }

// Describe names the lock in the elector's logs: "tenure:<name>".
func (l *Lock) Describe() string { return "tenure:" + l.name }

// Name is the Tenure lease name of the election.
func (l *Lock) Name() string { return l.name }

// RecordEvent is called by the elector with "became leader" and "stopped
// leading". After "stopped leading" a term that is still live ends with
// ErrStoppedLeading (it is not released: the lease expires on the server
// unless the elector released it), and the lock may start a new term.
func (l *Lock) RecordEvent(event string) {
	if event == EventStoppedLeading {
		l.mu.Lock()
		t := l.term
		l.setTerm(nil)
		l.mu.Unlock()
		if t != nil {
			t.end(ErrStoppedLeading)
		}
	}
	if l.onEvent != nil {
		l.onEvent(l.identity, event)
	}
}

// Term returns the current term: the one this candidate leads with, or the
// one that just ended while the elector has not stepped down yet (its
// Context is done). nil when this candidate holds no term. Call it in
// OnStartedLeading: the term is in place before the elector calls it.
func (l *Lock) Term() *Term {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
}

// FencingToken is the current term's fencing token, 0 without a term.
func (l *Lock) FencingToken() uint64 {
	if t := l.Term(); t != nil {
		return t.FencingToken()
	}
	return 0
}

// setTerm replaces the current term; the caller holds mu.
func (l *Lock) setTerm(t *Term) { l.term = t }

// record is the JSON of the raw record Get returns: the
// LeaderElectionRecord and the Tenure holding it comes from, so that every
// renewal changes the raw bytes the elector compares.
type record struct {
	resourcelock.LeaderElectionRecord
	FencingToken uint64 `json:"fencingToken"`
	Revision     uint64 `json:"revision"`
}

// Get reads the holding. When nobody holds the name it returns a
// Kubernetes NotFound error (apierrors.IsNotFound) wrapping Tenure's
// LEASE_NOT_FOUND.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, l.callTimeout)
	defer cancel()
	lease, err := l.client.Get(ctx, l.name)
	if err != nil {
		if tenure.ReasonOf(err) == tenurev1.ErrorReason_LEASE_NOT_FOUND {
			return nil, nil, kubeError(apierrors.NewNotFound(GroupResource, l.name), err)
		}
		return nil, nil, err
	}
	rec := recordOf(lease)
	l.mu.Lock()
	l.transitions = max(l.transitions, rec.LeaderTransitions)
	t := l.term
	l.mu.Unlock()
	if t != nil && lease.GetSlot() == 0 && lease.GetFencingToken() > t.FencingToken() {
		// A later holding of the name: this term is over.
		t.end(fmt.Errorf("%w: %q is held with fencing token %d (by %q)", tenure.ErrLostOnWatch, l.name, lease.GetFencingToken(), lease.GetHolder()))
	}
	raw, err := json.Marshal(record{LeaderElectionRecord: rec, FencingToken: lease.GetFencingToken(), Revision: lease.GetRevision()})
	if err != nil {
		return nil, nil, err
	}
	return &rec, raw, nil
}

// recordOf is a holding as a LeaderElectionRecord.
func recordOf(lease *tenurev1.Lease) resourcelock.LeaderElectionRecord {
	rec := resourcelock.LeaderElectionRecord{
		HolderIdentity:       lease.GetHolder(),
		LeaseDurationSeconds: int(lease.GetTtl().AsDuration() / time.Second),
	}
	if t := lease.GetAcquireTime(); t != nil {
		rec.AcquireTime = metav1.NewTime(t.AsTime())
	}
	if t := lease.GetRenewTime(); t != nil {
		rec.RenewTime = metav1.NewTime(t.AsTime())
	}
	if n, err := strconv.Atoi(lease.GetMetadata()[TransitionsKey]); err == nil && n >= 0 {
		rec.LeaderTransitions = n
	}
	return rec
}

// Create starts a term (an Acquire without wait) for ler, which must name
// this candidate. A held lease is an AlreadyExists error.
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.identity {
		return fmt.Errorf("tenurelock: Create for %q on the lock of %q", ler.HolderIdentity, l.identity)
	}
	l.rpcMu.Lock()
	defer l.rpcMu.Unlock()
	return l.acquire(ctx, ler, func(err error) error {
		return kubeError(apierrors.NewAlreadyExists(GroupResource, l.name), err)
	})
}

// Update renews the current term (the holder's update), starts a term
// (another candidate's update, after the elector saw the record expire), or
// releases the term (an empty HolderIdentity, as ReleaseOnCancel writes).
// A term that Tenure no longer holds is a Conflict error.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.rpcMu.Lock()
	defer l.rpcMu.Unlock()
	switch ler.HolderIdentity {
	case "":
		return l.release(ctx)
	case l.identity:
	default:
		return fmt.Errorf("tenurelock: Update for %q on the lock of %q", ler.HolderIdentity, l.identity)
	}
	l.mu.Lock()
	t := l.term
	l.mu.Unlock()
	if t == nil {
		return l.acquire(ctx, ler, func(err error) error {
			return kubeError(apierrors.NewConflict(GroupResource, l.name, err), err)
		})
	}
	return l.renew(ctx, t, ler)
}

// ttlOf is the TTL a record asks for.
func ttlOf(ler resourcelock.LeaderElectionRecord) (time.Duration, error) {
	if ler.LeaseDurationSeconds < 1 {
		return 0, fmt.Errorf("tenurelock: lease duration of %d s: Tenure grants whole seconds, at least 1 s", ler.LeaseDurationSeconds)
	}
	return time.Duration(ler.LeaseDurationSeconds) * time.Second, nil
}

// acquire starts a term; held maps LEASE_HELD to the elector's error.
func (l *Lock) acquire(ctx context.Context, ler resourcelock.LeaderElectionRecord, held func(error) error) error {
	ttl, err := ttlOf(ler)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if t := l.term; t != nil {
		var refuse error
		switch {
		case t.Err() == nil:
			refuse = fmt.Errorf("tenurelock: %q already leads %q with fencing token %d", l.identity, l.name, t.FencingToken())
		case time.Since(t.lastSentTime()) < 2*t.TTL():
			// The last term ended (see Term.Err) but the elector has not
			// stepped down yet: a new term now would let it lead on as if
			// nothing had happened, under another fencing token.
			refuse = errTermEnded
		default:
			l.setTerm(nil) // an elector that never said "stopped leading"
		}
		if refuse != nil {
			l.mu.Unlock()
			return kubeError(apierrors.NewConflict(GroupResource, l.name, refuse), refuse)
		}
	}
	transitions := max(ler.LeaderTransitions, l.transitions+1)
	key := l.pendingKey
	if key == "" {
		key = mintKey()
		l.pendingKey = key
	}
	l.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, l.callTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := l.client.Stub().Acquire(cctx, &tenurev1.AcquireRequest{
		Name:     l.name,
		Holder:   l.identity,
		Ttl:      durationpb.New(ttl),
		LeaseKey: key,
		Metadata: map[string]string{TransitionsKey: strconv.Itoa(transitions)},
	})
	if err != nil {
		err = callError(l.client.Target(), "Acquire", err)
		if settled(err) {
			l.mu.Lock()
			l.pendingKey = "" // else the next Acquire reuses the key: the same holding if this one was granted
			l.mu.Unlock()
		}
		if tenure.ReasonOf(err) == tenurev1.ErrorReason_LEASE_HELD {
			return held(err)
		}
		return err
	}
	lease := resp.GetLease()
	t := newTerm(l, lease, resp.GetLeaseKey(), sent)
	l.mu.Lock()
	l.pendingKey = ""
	l.transitions = max(l.transitions, transitions)
	l.setTerm(t)
	l.mu.Unlock()
	if !l.noWatch {
		go t.watch()
	}
	return nil
}

// settled reports whether a failed call's outcome is known: the server
// refused it with a permanent error. After a transport failure, a timeout
// or a retryable error, the request may still have been applied.
func settled(err error) bool {
	var te *tenure.Error
	if !errors.As(err, &te) || te.Retryable() {
		return false
	}
	switch te.Code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return false
	}
	return true
}

// renew renews the term t; a refusal ends it and is a Conflict error.
func (l *Lock) renew(ctx context.Context, t *Term, ler resourcelock.LeaderElectionRecord) error {
	if err := t.Err(); err != nil {
		return kubeError(apierrors.NewConflict(GroupResource, l.name, err), err)
	}
	ttl, err := ttlOf(ler)
	if err != nil {
		return err
	}
	// A renewal answered after the safe deadline is of no use.
	until := time.Now().Add(l.callTimeout)
	if d := t.SafeDeadline(); d.Before(until) {
		until = d
	}
	cctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	sent := time.Now()
	resp, err := l.client.Stub().Renew(cctx, &tenurev1.RenewRequest{
		Name:             l.name,
		ExpectedRevision: t.Revision(),
		LeaseKey:         t.leaseKey,
		Ttl:              durationpb.New(ttl),
	})
	if err != nil {
		err = callError(l.client.Target(), "Renew", err)
		if settled(err) {
			t.end(err) // LEASE_NOT_HELD and other permanent refusals
			return kubeError(apierrors.NewConflict(GroupResource, l.name, err), err)
		}
		return err
	}
	lease := resp.GetLease()
	if lease.GetFencingToken() != t.FencingToken() {
		err := fmt.Errorf("tenurelock: renewal returned fencing token %d, the term's is %d", lease.GetFencingToken(), t.FencingToken())
		t.end(err)
		return kubeError(apierrors.NewConflict(GroupResource, l.name, err), err)
	}
	return t.renewed(sent, lease)
}

// release ends the current term and releases it on the server. Nothing
// held is not an error.
func (l *Lock) release(ctx context.Context) error {
	l.mu.Lock()
	t := l.term
	l.mu.Unlock()
	if t == nil {
		return nil
	}
	live := t.Err() == nil
	t.end(tenure.ErrReleased) // first: the leader stops before anyone else can take over
	if !live {
		return nil // already over on the server, or at its safe deadline
	}
	cctx, cancel := context.WithTimeout(ctx, l.callTimeout)
	defer cancel()
	_, err := l.client.Stub().Release(cctx, &tenurev1.ReleaseRequest{
		Name:             l.name,
		ExpectedRevision: t.Revision(),
		LeaseKey:         t.leaseKey,
	})
	switch r := tenure.ReasonOf(tenure.FromError(err)); {
	case err == nil, r == tenurev1.ErrorReason_LEASE_NOT_HELD, r == tenurev1.ErrorReason_LEASE_NOT_FOUND:
		l.mu.Lock()
		if l.term == t {
			l.setTerm(nil)
		}
		l.mu.Unlock()
		return nil
	}
	return callError(l.client.Target(), "Release", err)
}

// statusError is a Kubernetes API error (apierrors.IsNotFound, IsConflict
// and IsAlreadyExists recognise it) that wraps the Tenure error behind it,
// for errors.As(err, *tenure.Error) and tenure.ReasonOf.
type statusError struct {
	*apierrors.StatusError
	cause error
}

func kubeError(k *apierrors.StatusError, cause error) error {
	return &statusError{StatusError: k, cause: cause}
}

func (e *statusError) Error() string {
	msg := e.StatusError.Error()
	if strings.Contains(msg, e.cause.Error()) {
		return msg // a Conflict's message has it already
	}
	return msg + ": " + e.cause.Error()
}

func (e *statusError) Unwrap() error { return e.cause }

// As lets errors.As find the *apierrors.StatusError too.
func (e *statusError) As(target any) bool {
	if p, ok := target.(**apierrors.StatusError); ok {
		*p = e.StatusError
		return true
	}
	return false
}

// callError is a stub error as a *tenure.Error naming the server and the RPC.
func callError(target, rpc string, err error) error {
	err = tenure.FromError(err)
	var te *tenure.Error
	if errors.As(err, &te) {
		te.Target, te.RPC = target, rpc
		return te
	}
	return fmt.Errorf("tenure at %s: %s: %w", target, rpc, err)
}

// CheckTiming checks the elector's timings (LeaderElectionConfig's
// LeaseDuration, RenewDeadline and RetryPeriod, or controller-runtime's
// manager options of the same names) for this lock:
//
//   - LeaseDuration is the TTL of each term. Tenure grants whole seconds and
//     the elector sends whole seconds (it truncates), so it must be a whole
//     number of seconds, at least 1 s.
//   - RetryPeriod + RenewDeadline must end before the term's safe deadline
//     (LeaseDuration minus the safety margin): a leader whose renewals fail
//     is told to stop by the elector (its OnStartedLeading context ends) at
//     most RetryPeriod + RenewDeadline after its last successful renewal,
//     and Tenure may give the lease to another candidate from LeaseDuration
//     after that renewal was sent. Term.Context ends at the safe deadline
//     regardless; this check makes the elector's own context end first too.
//
// client-go's own rules (LeaseDuration > RenewDeadline > 1.2 RetryPeriod)
// are checked by leaderelection.NewLeaderElector.
func (l *Lock) CheckTiming(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	if leaseDuration < time.Second || leaseDuration%time.Second != 0 {
		return fmt.Errorf("tenurelock: lease duration %v: Tenure grants whole seconds, at least 1 s", leaseDuration)
	}
	margin := tenure.DefaultSafetyMargin(leaseDuration)
	if l.marginSet && l.margin < leaseDuration {
		margin = l.margin
	}
	if safe := leaseDuration - margin; retryPeriod+renewDeadline >= safe {
		return fmt.Errorf("tenurelock: retry period %v + renew deadline %v is not below the term's safe time %v (lease duration %v - safety margin %v): a leader whose renewals fail would be told to stop only after another could lead",
			retryPeriod, renewDeadline, safe, leaseDuration, margin)
	}
	return nil
}
