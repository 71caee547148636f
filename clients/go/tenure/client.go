// Package tenure is a thin helper over the generated Tenure gRPC stubs
// (package tenurev1): it acquires a lease as a Session that renews itself in
// the background and tells the holder, through Done() and Context(), the
// moment it must stop acting as holder; it watches leases as a channel; it
// turns errors into *Error values with a typed Reason; and it offers Fence,
// an in-memory fencing-token check for downstream stores.
//
// A Session never claims to hold a lease past its safe deadline: the local
// monotonic time at which the last successful Acquire or Renew request was
// sent, plus the granted TTL, minus a safety margin. The server's own expiry
// can only come later, so a holder that stops at the safe deadline (or
// earlier, when the server says LEASE_NOT_HELD) never overlaps the next one.
package tenure

import (
	"context"

	"google.golang.org/grpc"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// Client calls a Tenure server. It is safe for concurrent use.
type Client struct {
	rpc    tenurev1.LeaseServiceClient
	elect  tenurev1.ElectionServiceClient
	conn   *grpc.ClientConn // set when Dial made the connection; closed by Close
	target string           // the server address, named in errors
	loss   *lossWatch       // the one watch that follows every live session
	ka     *keepAlive       // the one KeepAlive stream that renews every session
}

// New returns a Client over an existing gRPC connection. Close does not
// close that connection.
func New(cc grpc.ClientConnInterface) *Client {
	target := ""
	if t, ok := cc.(interface{ Target() string }); ok {
		target = t.Target()
	}
	c := &Client{rpc: tenurev1.NewLeaseServiceClient(cc), elect: tenurev1.NewElectionServiceClient(cc), target: target}
	c.loss = newLossWatch(c)
	c.ka = newKeepAlive(c)
	return c
}

// Dial returns a Client over a new connection to target (e.g.
// "127.0.0.1:7419"), made with grpc.NewClient and opts. Pass transport
// credentials, e.g. grpc.WithTransportCredentials(insecure.NewCredentials())
// for a plaintext server. Close the client when done.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, err
	}
	c := &Client{rpc: tenurev1.NewLeaseServiceClient(conn), elect: tenurev1.NewElectionServiceClient(conn), conn: conn, target: target}
	c.loss = newLossWatch(c)
	c.ka = newKeepAlive(c)
	return c, nil
}

// Target is the server address the Client calls.
func (c *Client) Target() string { return c.target }

// Close closes the connection if Dial made it. Sessions still open lose
// their lease at their safe deadline once renewals cannot get through.
func (c *Client) Close() error {
	c.loss.close()
	c.ka.close()
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Stub returns the generated stub, for calls the helper does not wrap.
func (c *Client) Stub() tenurev1.LeaseServiceClient {
	return c.rpc
}

// Get returns the current holding of name, or an *Error with reason
// LEASE_NOT_FOUND when nobody holds it.
func (c *Client) Get(ctx context.Context, name string) (*tenurev1.Lease, error) {
	resp, err := c.rpc.GetLease(ctx, &tenurev1.GetLeaseRequest{Name: name})
	if err != nil {
		return nil, callError(c.target, "GetLease", err)
	}
	return resp.GetLease(), nil
}

// GetLease is Get under the RPC's name.
func (c *Client) GetLease(ctx context.Context, name string) (*tenurev1.Lease, error) {
	return c.Get(ctx, name)
}

// ListLeases returns every held lease whose name starts with prefix ("" for
// all), following the server's pages. It needs the admin grant.
func (c *Client) ListLeases(ctx context.Context, prefix string) ([]*tenurev1.Lease, error) {
	var out []*tenurev1.Lease
	page := ""
	for {
		resp, err := c.rpc.ListLeases(ctx, &tenurev1.ListLeasesRequest{Prefix: prefix, PageToken: page})
		if err != nil {
			return nil, callError(c.target, "ListLeases", err)
		}
		out = append(out, resp.GetLeases()...)
		page = resp.GetNextPageToken()
		if page == "" {
			return out, nil
		}
	}
}

// RevokeLease ends the holding of name whoever holds it (the admin grant),
// logging reason; with fencingToken > 0 only if that holding is still the
// one with that token. It returns the revision of the revoke; LEASE_NOT_FOUND
// when nobody holds name.
func (c *Client) RevokeLease(ctx context.Context, name, reason string, fencingToken uint64) (uint64, error) {
	resp, err := c.rpc.RevokeLease(ctx, &tenurev1.RevokeLeaseRequest{Name: name, Reason: reason, FencingToken: fencingToken})
	if err != nil {
		return 0, callError(c.target, "RevokeLease", err)
	}
	return resp.GetRevision(), nil
}

// RevokeSlot ends the holder of slot of the semaphore name (the admin grant),
// as RevokeLease does for a plain lease: with fencingToken > 0 only if that
// slot is still held with that token. It returns the revision of the revoke.
func (c *Client) RevokeSlot(ctx context.Context, name string, slot uint32, reason string, fencingToken uint64) (uint64, error) {
	resp, err := c.rpc.RevokeLease(ctx, &tenurev1.RevokeLeaseRequest{Name: name, Slot: slot, Reason: reason, FencingToken: fencingToken})
	if err != nil {
		return 0, callError(c.target, "RevokeLease", err)
	}
	return resp.GetRevision(), nil
}

// Inspect returns all GetLease knows about name: the holding (for a
// semaphore the holder with the lowest token), how many Acquires with a
// wait are queued for it across every replica (Waiting; they are granted in
// arrival order), and for a semaphore every holder (Holders), its Limit and
// FreeSlots. LEASE_NOT_FOUND when nobody holds name.
func (c *Client) Inspect(ctx context.Context, name string) (*tenurev1.GetLeaseResponse, error) {
	resp, err := c.rpc.GetLease(ctx, &tenurev1.GetLeaseRequest{Name: name})
	if err != nil {
		return nil, callError(c.target, "GetLease", err)
	}
	return resp, nil
}
