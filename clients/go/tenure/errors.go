package tenure

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// Domain is the google.rpc.ErrorInfo domain of every Tenure error.
const Domain = "tenure.v1"

// Reason is the stable, machine-readable cause of a Tenure error: the
// google.rpc.ErrorInfo reason the server sends with every failed call, as
// the ErrorReason enum generated from proto/tenure/v1/error_reason.proto
// (compare with tenurev1.ErrorReason_LEASE_HELD and the like). Its zero value,
// tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED, stands for "no Tenure
// reason": see Error.Reason.
type Reason = tenurev1.ErrorReason

// retryableReasons is the one classification of the reasons (the "Error
// reasons" table of clients/README.md): sending the same request again may
// succeed after these; every other reason is permanent.
var retryableReasons = map[Reason]bool{
	tenurev1.ErrorReason_NATS_UNAVAILABLE:  true,
	tenurev1.ErrorReason_WATCH_LAGGED:      true,
	tenurev1.ErrorReason_SHUTTING_DOWN:     true,
	tenurev1.ErrorReason_TOO_MANY_REQUESTS: true,
	tenurev1.ErrorReason_TOO_MANY_WATCHES:  true,
	tenurev1.ErrorReason_TOO_MANY_WAITERS:  true,
	// A shared Acquire without a wait found the read-write lock full of
	// shared holders: retry once one leaves (or wait). MODE_MISMATCH is
	// permanent.
	tenurev1.ErrorReason_TOO_MANY_SHARED_HOLDERS: true,
}

// RetryableReasons returns the reasons after which sending the same request
// again may succeed, in enum order; every other reason is permanent.
func RetryableReasons() []Reason {
	out := make([]Reason, 0, len(retryableReasons))
	for r := range retryableReasons {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// Retryable reports whether sending the same request again may succeed after
// a failure with reason r (see RetryableReasons); the renew loop decides with
// it. False for every other reason, including ERROR_REASON_UNSPECIFIED:
// classify an error, which may carry no reason, with IsRetryable or
// Error.Retryable instead.
func Retryable(r Reason) bool {
	return retryableReasons[r]
}

// Error is a failed Tenure call: the gRPC code, the ErrorInfo reason and
// metadata, and the server's one-line message.
//
// Every error returned by this package for a failed RPC is an *Error; get it
// with errors.As, or just its reason with ReasonOf. Reason is
// ERROR_REASON_UNSPECIFIED when the status carried no Tenure ErrorInfo, e.g.
// when the server could not be reached at all (Code is then typically
// codes.Unavailable or codes.DeadlineExceeded), or a reason this client does
// not know (RawReason has it).
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the ErrorInfo reason (ERROR_REASON_UNSPECIFIED when there was
	// none, or one this client does not know).
	Reason Reason
	// RawReason is the ErrorInfo reason exactly as sent ("" when there was
	// none).
	RawReason string
	// Message is the server's (or gRPC's) message.
	Message string
	// Metadata is the ErrorInfo metadata, e.g. "holder", "fencing_token"
	// and "ttl_seconds" for LEASE_HELD, "state" for LEASE_NOT_HELD.
	Metadata map[string]string
	// Target is the server address the call went to ("" when the Client was
	// made by New over a connection that does not say).
	Target string
	// RPC is the call that failed, e.g. "Acquire" ("" for FromError on a
	// raw stub error).
	RPC string

	status *status.Status
}

// Error implements error: "tenure at TARGET: RPC: REASON (CODE): message",
// e.g. "tenure at 127.0.0.1:7001: Acquire: LEASE_HELD (FAILED_PRECONDITION):
// ...", or without a reason "tenure at 127.0.0.1:7001: Acquire: UNAVAILABLE:
// ... connection refused". Codes and reasons print as their proto names.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("tenure")
	if e.Target != "" {
		b.WriteString(" at ")
		b.WriteString(e.Target)
	}
	b.WriteString(": ")
	if e.RPC != "" {
		b.WriteString(e.RPC)
		b.WriteString(": ")
	}
	if e.RawReason != "" {
		fmt.Fprintf(&b, "%s (%s): %s", e.RawReason, CodeName(e.Code), e.Message)
	} else {
		fmt.Fprintf(&b, "%s: %s", CodeName(e.Code), e.Message)
	}
	return b.String()
}

// CodeName is the gRPC code's canonical name, e.g. "FAILED_PRECONDITION"
// (Go's codes.Code.String() says "FailedPrecondition").
func CodeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// GRPCStatus returns the original status, so status.FromError and
// status.Code work on an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.status == nil {
		return status.New(e.Code, e.Message)
	}
	return e.status
}

// Retryable reports whether sending the same request again may succeed. With
// a reason this client knows, that is Retryable(e.Reason); without one (the
// server was not reached, a deadline passed, a proxy or a newer server
// answered) it goes by the gRPC code: Unavailable, DeadlineExceeded,
// ResourceExhausted, Aborted, Internal, Unknown and Canceled are retryable.
func (e *Error) Retryable() bool {
	if e.Reason != tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return Retryable(e.Reason)
	}
	switch e.Code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Internal, codes.Unknown, codes.Canceled:
		return true
	}
	return false
}

// IsRetryable reports whether err is an *Error (looking through wrapped
// errors) that Error.Retryable calls retryable.
func IsRetryable(err error) bool {
	var te *Error
	return errors.As(err, &te) && te.Retryable()
}

// ReasonOf returns the Tenure reason of err, or ERROR_REASON_UNSPECIFIED when
// err is nil or carries none. It looks through wrapped errors (errors.As).
func ReasonOf(err error) Reason {
	var te *Error
	if errors.As(err, &te) {
		return te.Reason
	}
	return tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED
}

// RequiredNatsServer returns the nats-server version named by an
// ATOMIC_BATCH_UNSUPPORTED error (the server's NATS has no atomic batches,
// which lock-delay, semaphores, read-write locks and groups need; metadata
// "required_nats_server") and true, or "" and false for any other error.
func RequiredNatsServer(err error) (string, bool) {
	var te *Error
	if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_ATOMIC_BATCH_UNSUPPORTED {
		return "", false
	}
	v, ok := te.Metadata["required_nats_server"]
	return v, ok && v != ""
}

// parseReason maps an ErrorInfo reason string to the generated enum; an
// unknown one (a newer server) is ERROR_REASON_UNSPECIFIED.
func parseReason(raw string) Reason {
	if v, ok := tenurev1.ErrorReason_value[raw]; ok {
		return Reason(v)
	}
	return tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED
}

// ErrReleased is the cause of a Session's loss after Release was called.
var ErrReleased = errors.New("tenure: lease released")

// ErrTransferred is the cause of a Session's end after Transfer (or an
// elector's ResignTo) handed the holding to a waiter. It wraps ErrReleased:
// errors.Is(err, ErrReleased) holds, as after a release, since the holding
// ended by its holder's choice, not by a loss.
var ErrTransferred = fmt.Errorf("%w: handed over to a waiter", ErrReleased)

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
			e.RawReason = info.GetReason()
			e.Reason = parseReason(e.RawReason)
			e.Metadata = info.GetMetadata()
			break
		}
	}
	return e
}

// callError is FromError(err) with the target and the RPC named.
func callError(target, rpc string, err error) error {
	err = FromError(err)
	var te *Error
	if errors.As(err, &te) {
		te.Target, te.RPC = target, rpc
		return te
	}
	if err == nil {
		return nil
	}
	if target != "" {
		return fmt.Errorf("tenure at %s: %s: %w", target, rpc, err)
	}
	return fmt.Errorf("tenure: %s: %w", rpc, err)
}

// isFatal reports whether a renewal error means the holding is gone or can
// never be renewed, as opposed to a transient failure worth retrying until
// the safe deadline: anything but a retryable *Error.
func isFatal(err error) bool {
	if errors.Is(err, errTokenChanged) || errors.Is(err, ErrReleased) {
		return true
	}
	var te *Error
	if !errors.As(err, &te) {
		return false
	}
	return !te.Retryable()
}
