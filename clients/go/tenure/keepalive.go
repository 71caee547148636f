package tenure

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// keepAliveLinger is how long the writer waits after the first renewal of
// a request for others due at the same moment, so that they share it.
const keepAliveLinger = time.Millisecond

// maxKeepAliveBatch is the most entries the helper puts in one KeepAlive
// request (the server's --max-keepalive-entries defaults to 1000).
const maxKeepAliveBatch = 500

// errUseUnary tells a session to renew with a unary Renew: the server has no
// KeepAlive (UNIMPLEMENTED), or refused the stream for a reason a unary
// Renew answers on its own.
var errUseUnary = errors.New("tenure: renew with a unary call")

// keepAlive sends the renewals of every live Session of a Client over one
// KeepAlive stream. Renewals queued while a request is being written go out
// together in the next one, so sessions due at the same moment share a
// message. The stream opens with the first renewal and is reopened after it
// breaks; the entries pending on a broken stream fail with its error and
// their sessions retry as after a failed unary Renew (the safe-deadline rule
// is unchanged). A server without KeepAlive (UNIMPLEMENTED) turns the
// helper to unary Renew calls for good.
type keepAlive struct {
	c *Client

	mu          sync.Mutex
	queue       []*kaCall // waiting to be written
	running     bool      // the writer goroutine is running
	unsupported bool      // the server answered UNIMPLEMENTED
	closed      bool      // Client.Close was called
	stream      *kaStream // the open stream; nil when none
	nextID      uint64

	// Counters, for tests and logs.
	entries  atomic.Uint64 // entries sent over streams
	requests atomic.Uint64 // request messages sent
	streams  atomic.Uint64 // streams opened
}

// kaCall is one renewal waiting for its result.
type kaCall struct {
	entry *tenurev1.KeepAliveEntry
	done  chan kaResult // buffered: the sender never blocks
}

// kaResult is a renewal's outcome: the renewed holding or an error.
type kaResult struct {
	lease *tenurev1.Lease
	err   error
}

// kaStream is one open KeepAlive stream and its requests awaiting answers.
type kaStream struct {
	stream tenurev1.LeaseService_KeepAliveClient
	cancel context.CancelFunc

	mu      sync.Mutex
	pending [][]*kaCall // written requests, in order; answers come in order
	err     error       // why the stream ended; nil while open
}

func newKeepAlive(c *Client) *keepAlive { return &keepAlive{c: c} }

// renew renews entry over the shared stream and returns the renewed holding,
// the entry's own error (an *Error, as a unary Renew would return), a stream
// error (retry later), or errUseUnary.
func (k *keepAlive) renew(ctx context.Context, entry *tenurev1.KeepAliveEntry) (*tenurev1.Lease, error) {
	call := &kaCall{entry: entry, done: make(chan kaResult, 1)}
	k.mu.Lock()
	if k.unsupported || k.closed {
		k.mu.Unlock()
		return nil, errUseUnary
	}
	k.nextID++
	entry.Id = k.nextID
	k.queue = append(k.queue, call)
	if !k.running {
		k.running = true
		go k.write()
	}
	k.mu.Unlock()
	select {
	case r := <-call.done:
		return r.lease, r.err
	case <-ctx.Done():
		return nil, callError(k.c.target, "KeepAlive", status.FromContextError(ctx.Err()).Err())
	}
}

// write sends the queued renewals, a batch per message, until the queue is
// empty.
func (k *keepAlive) write() {
	for {
		time.Sleep(keepAliveLinger) // gather the renewals due now (not a synchronisation)
		k.mu.Lock()
		if len(k.queue) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		n := min(len(k.queue), maxKeepAliveBatch)
		batch := k.queue[:n:n]
		k.queue = k.queue[n:]
		st := k.stream
		if st != nil && st.failed() != nil {
			st = nil
		}
		if st == nil {
			st = k.open()
			k.stream = st
		}
		k.mu.Unlock()
		st.send(k, batch)
	}
}

// open opens a stream and starts reading its answers. Opening a gRPC
// stream does not wait for the server: a refusal arrives as the first
// read's error, and fails the requests written by then.
func (k *keepAlive) open() *kaStream {
	ctx, cancel := context.WithCancel(context.Background())
	st := &kaStream{cancel: cancel}
	stream, err := k.c.rpc.KeepAlive(ctx)
	if err != nil {
		st.fail(k, err)
		return st
	}
	k.streams.Add(1)
	st.stream = stream
	go st.read(k)
	return st
}

// send writes one request of batch; a failed write ends the stream (the
// read then fails every pending request with the stream's error).
func (st *kaStream) send(k *keepAlive, batch []*kaCall) {
	req := &tenurev1.KeepAliveRequest{Entries: make([]*tenurev1.KeepAliveEntry, len(batch))}
	for i, c := range batch {
		req.Entries[i] = c.entry
	}
	st.mu.Lock()
	if st.err != nil {
		err := st.err
		st.mu.Unlock()
		deliver(k, batch, err)
		return
	}
	st.pending = append(st.pending, batch)
	st.mu.Unlock()
	if err := st.stream.Send(req); err != nil {
		st.cancel() // the read sees the stream's real status and fails pending
		return
	}
	k.requests.Add(1)
	k.entries.Add(uint64(len(batch)))
}

// read matches each response to the oldest pending request until the
// stream ends, then fails whatever is still pending.
func (st *kaStream) read(k *keepAlive) {
	for {
		resp, err := st.stream.Recv()
		if err != nil {
			st.fail(k, err)
			return
		}
		st.mu.Lock()
		if len(st.pending) == 0 {
			st.mu.Unlock()
			st.fail(k, status.Error(codes.Internal, "KeepAlive answered a request that was not sent"))
			return
		}
		batch := st.pending[0]
		st.pending = st.pending[1:]
		st.mu.Unlock()
		results := resp.GetResults()
		for i, c := range batch {
			if i >= len(results) || results[i].GetId() != c.entry.GetId() {
				c.done <- kaResult{err: callError(k.c.target, "KeepAlive", status.Error(codes.Internal, "KeepAlive answered with results that do not match the request"))}
				continue
			}
			c.done <- k.result(results, i)
		}
	}
}

// result turns the i-th result of a response into the holding or a typed
// *Error. An error that repeats an earlier one of the same response
// (same_as: the server sends it as code, reason and that result's index)
// takes its message and metadata from that one.
func (k *keepAlive) result(results []*tenurev1.KeepAliveResult, i int) kaResult {
	e := results[i].GetError()
	if e == nil {
		return kaResult{lease: results[i].GetLease()}
	}
	full := e
	if e.SameAs != nil && int(e.GetSameAs()) < i {
		if first := results[e.GetSameAs()].GetError(); first != nil {
			full = first
		}
	}
	raw := e.GetReason()
	return kaResult{err: &Error{
		Code:      codes.Code(e.GetCode()),
		Reason:    parseReason(raw),
		RawReason: raw,
		Message:   full.GetMessage(),
		Metadata:  full.GetMetadata(),
		Target:    k.c.target,
		RPC:       "KeepAlive",
	}}
}

// failed returns why the stream ended, or nil while it is open.
func (st *kaStream) failed() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}

// fail ends the stream with err (once) and fails every pending request:
// UNIMPLEMENTED turns the helper to unary renewals; a retryable error is
// returned to the sessions (they retry as after a failed Renew); any other
// stream refusal (credentials, limits, the idle timeout) sends the pending
// renewals as unary Renew calls, which get their own answers.
func (st *kaStream) fail(k *keepAlive, err error) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	err = callError(k.c.target, "KeepAlive", err)
	st.err = err
	pending := st.pending
	st.pending = nil
	st.mu.Unlock()
	if st.cancel != nil {
		st.cancel()
	}
	var te *Error
	if errors.As(err, &te) && te.Code == codes.Unimplemented {
		k.mu.Lock()
		k.unsupported = true
		k.mu.Unlock()
	}
	for _, batch := range pending {
		deliver(k, batch, err)
	}
}

// deliver ends each call of batch after the stream failed with err.
func deliver(k *keepAlive, batch []*kaCall, err error) {
	out := err
	if !IsRetryable(err) {
		out = errUseUnary
	}
	for _, c := range batch {
		c.done <- kaResult{err: out}
	}
}

// close ends the stream for good (Client.Close).
func (k *keepAlive) close() {
	k.mu.Lock()
	k.closed = true
	st := k.stream
	k.stream = nil
	k.mu.Unlock()
	if st != nil && st.cancel != nil {
		st.cancel() // not CloseSend: the writer may be sending
	}
}
