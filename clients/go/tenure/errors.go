package tenure

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the google.rpc.ErrorInfo domain of every Tenure error.
const Domain = "tenure.v1"

// Reason is the stable, machine-readable cause of a Tenure error: the
// google.rpc.ErrorInfo reason the server sends with every failed call.
type Reason string

// The reasons the server sends. The gRPC code of each is noted.
const (
	// ReasonLeaseHeld: another holder has the lease (FAILED_PRECONDITION).
	// Metadata: holder, fencing_token, ttl_seconds.
	ReasonLeaseHeld Reason = "LEASE_HELD"
	// ReasonLeaseNotHeld: the caller does not hold the lease any more
	// (FAILED_PRECONDITION). Metadata: state.
	ReasonLeaseNotHeld Reason = "LEASE_NOT_HELD"
	// ReasonLeaseNotFound: nobody holds the lease (NOT_FOUND).
	ReasonLeaseNotFound Reason = "LEASE_NOT_FOUND"
	// ReasonInvalidName: the lease name breaks the naming rule (INVALID_ARGUMENT).
	ReasonInvalidName Reason = "INVALID_NAME"
	// ReasonInvalidHolder: the holder is empty, too long or not printable (INVALID_ARGUMENT).
	ReasonInvalidHolder Reason = "INVALID_HOLDER"
	// ReasonInvalidTTL: the TTL is zero, negative or too long (INVALID_ARGUMENT).
	ReasonInvalidTTL Reason = "INVALID_TTL"
	// ReasonInvalidLeaseKey: the lease key is malformed (INVALID_ARGUMENT).
	ReasonInvalidLeaseKey Reason = "INVALID_LEASE_KEY"
	// ReasonInvalidRevision: the expected revision is missing (INVALID_ARGUMENT).
	ReasonInvalidRevision Reason = "INVALID_REVISION"
	// ReasonInvalidMetadata: too many or too large metadata entries (INVALID_ARGUMENT).
	ReasonInvalidMetadata Reason = "INVALID_METADATA"
	// ReasonInvalidWait: the wait is negative or too long (INVALID_ARGUMENT).
	ReasonInvalidWait Reason = "INVALID_WAIT"
	// ReasonInvalidArgument: another argument is malformed (INVALID_ARGUMENT).
	ReasonInvalidArgument Reason = "INVALID_ARGUMENT"
	// ReasonRecordUnreadable: the bucket holds a value under this name that
	// is not a Tenure lease (DATA_LOSS).
	ReasonRecordUnreadable Reason = "RECORD_UNREADABLE"
	// ReasonNATSUnavailable: the server cannot reach NATS (UNAVAILABLE); retry.
	ReasonNATSUnavailable Reason = "NATS_UNAVAILABLE"
	// ReasonShuttingDown: the server is shutting down (UNAVAILABLE); retry
	// elsewhere.
	ReasonShuttingDown Reason = "SHUTTING_DOWN"
	// ReasonInternal: an unexpected server failure (INTERNAL).
	ReasonInternal Reason = "INTERNAL"
)

// Error is a failed Tenure call: the gRPC code, the ErrorInfo reason and
// metadata, and the server's one-line message.
//
// Every error returned by this package for a failed RPC is an *Error; get it
// with errors.As, or just its reason with ReasonOf. Reason is empty when the
// status carried no Tenure ErrorInfo, e.g. when the server could not be
// reached at all (Code is then typically codes.Unavailable or
// codes.DeadlineExceeded).
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the ErrorInfo reason ("" when there was none).
	Reason Reason
	// Message is the server's (or gRPC's) message.
	Message string
	// Metadata is the ErrorInfo metadata, e.g. "holder", "fencing_token"
	// and "ttl_seconds" for LEASE_HELD, "state" for LEASE_NOT_HELD.
	Metadata map[string]string

	status *status.Status
}

// Error implements error.
func (e *Error) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("tenure: %s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("tenure: %s (%s): %s", e.Reason, e.Code, e.Message)
}

// GRPCStatus returns the original status, so status.FromError and
// status.Code work on an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.status == nil {
		return status.New(e.Code, e.Message)
	}
	return e.status
}

// ReasonOf returns the Tenure reason of err, or "" when err is nil or carries
// none. It looks through wrapped errors (errors.As).
func ReasonOf(err error) Reason {
	var te *Error
	if errors.As(err, &te) {
		return te.Reason
	}
	return ""
}

// ErrReleased is the cause of a Session's loss after Release was called.
var ErrReleased = errors.New("tenure: lease released")

// ErrDeadlinePassed is the cause of a Session's loss when its safe deadline
// passed without a successful renewal (server unreachable, renewals stalled).
// The loss error wraps it together with the last renewal error, if any.
var ErrDeadlinePassed = errors.New("tenure: safe deadline passed without a successful renewal")

// FromError turns an error returned by a generated stub (see Client.Stub)
// into an *Error carrying the Tenure reason. Errors that carry no gRPC
// status, and nil, are returned unchanged.
func FromError(err error) error {
	if err == nil {
		return nil
	}
	var te *Error
	if errors.As(err, &te) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message(), status: st}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			e.Reason = Reason(info.GetReason())
			e.Metadata = info.GetMetadata()
			break
		}
	}
	return e
}

// isFatal reports whether a renewal error means the holding is gone or can
// never be renewed, as opposed to a transient failure worth retrying until
// the safe deadline.
func isFatal(err error) bool {
	if errors.Is(err, errTokenChanged) || errors.Is(err, ErrReleased) {
		return true
	}
	var te *Error
	if !errors.As(err, &te) {
		return false
	}
	if te.Reason == ReasonLeaseNotHeld {
		return true
	}
	switch te.Code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound,
		codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented,
		codes.DataLoss, codes.OutOfRange:
		return true
	}
	return false
}
