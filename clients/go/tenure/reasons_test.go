package tenure_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// reasonRow is one row of the "Error reasons" table of clients/README.md.
type reasonRow struct {
	code      string
	retryable bool
}

// reasonTable parses the one table of error reasons in clients/README.md:
// the rows after its `| reason | gRPC code | retryable | what to do |` header.
func reasonTable(t *testing.T) map[string]reasonRow {
	t.Helper()
	const path = "../../README.md" // clients/README.md, from clients/go/tenure
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	lines := strings.Split(string(text), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "| reason | gRPC code | retryable | what to do |" {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s has no error reason table", path)
	}
	rows := map[string]reasonRow{}
	for _, l := range lines[start+1:] {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		if len(cells) != 4 {
			t.Fatalf("%s: reason table row %q has %d cells, want 4", path, l, len(cells))
		}
		name := strings.Trim(cells[0], "`")
		if _, dup := rows[name]; dup {
			t.Fatalf("%s: reason %s is in the table twice", path, name)
		}
		switch cells[2] {
		case "yes":
			rows[name] = reasonRow{code: cells[1], retryable: true}
		case "no":
			rows[name] = reasonRow{code: cells[1], retryable: false}
		default:
			t.Fatalf("%s: reason %s: retryable is %q, want yes or no", path, name, cells[2])
		}
	}
	return rows
}

// Every reason of the generated enum is in the README table, the table has no
// other, and the client's classification is the table's.
func TestReasonsMatchTheTable(t *testing.T) {
	table := reasonTable(t)
	for number, name := range tenurev1.ErrorReason_name {
		reason := tenurev1.ErrorReason(number)
		if reason == tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		row, ok := table[name]
		if !ok {
			t.Errorf("generated reason %s is missing from the table in clients/README.md", name)
			continue
		}
		if got := tenure.Retryable(reason); got != row.retryable {
			t.Errorf("tenure.Retryable(%s) = %v, the table says %v", name, got, row.retryable)
		}
		var code codes.Code
		if err := code.UnmarshalJSON([]byte(`"` + row.code + `"`)); err != nil {
			t.Errorf("reason %s: the table's gRPC code %q is not a gRPC code", name, row.code)
		}
	}
	for name := range table {
		if _, ok := tenurev1.ErrorReason_value[name]; !ok || name == "ERROR_REASON_UNSPECIFIED" {
			t.Errorf("the table in clients/README.md names %s, which the generated ErrorReason lacks", name)
		}
	}
	for _, r := range tenure.RetryableReasons() {
		if !table[r.String()].retryable {
			t.Errorf("RetryableReasons() has %s, which the table calls permanent", r)
		}
	}
}

// statusError is a status error with a Tenure ErrorInfo of the given reason.
func statusError(t *testing.T, code codes.Code, reason string) error {
	t.Helper()
	st, err := status.New(code, "m").WithDetails(&errdetails.ErrorInfo{Domain: tenure.Domain, Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// Reasons are read into the generated enum; unknown ones become UNSPECIFIED
// and are classified by their code, as are failures without a reason.
func TestReasonParsingAndClassification(t *testing.T) {
	err := tenure.FromError(statusError(t, codes.ResourceExhausted, "REQUEST_TOO_LARGE"))
	if tenure.ReasonOf(err) != tenurev1.ErrorReason_REQUEST_TOO_LARGE || tenure.IsRetryable(err) {
		t.Errorf("REQUEST_TOO_LARGE: reason %v, retryable %v; want permanent", tenure.ReasonOf(err), tenure.IsRetryable(err))
	}
	err = tenure.FromError(statusError(t, codes.FailedPrecondition, "LEASE_HELD"))
	if tenure.ReasonOf(err) != tenurev1.ErrorReason_LEASE_HELD || tenure.IsRetryable(err) {
		t.Errorf("LEASE_HELD: reason %v, retryable %v; want permanent", tenure.ReasonOf(err), tenure.IsRetryable(err))
	}
	err = tenure.FromError(statusError(t, codes.ResourceExhausted, "TOO_MANY_REQUESTS"))
	if !tenure.IsRetryable(err) {
		t.Errorf("TOO_MANY_REQUESTS is not retryable")
	}

	newer := tenure.FromError(statusError(t, codes.FailedPrecondition, "SOMETHING_NEW"))
	var te *tenure.Error
	if !errors.As(newer, &te) || te.Reason != tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED || te.RawReason != "SOMETHING_NEW" {
		t.Fatalf("unknown reason: %#v", newer)
	}
	if te.Retryable() || !strings.Contains(te.Error(), "SOMETHING_NEW") {
		t.Errorf("unknown reason with FAILED_PRECONDITION: retryable %v, message %q", te.Retryable(), te.Error())
	}
	if !tenure.IsRetryable(tenure.FromError(statusError(t, codes.Unavailable, "SOMETHING_NEW"))) {
		t.Errorf("unknown reason with UNAVAILABLE is not retryable")
	}

	bare := tenure.FromError(status.Error(codes.Unavailable, "connection refused"))
	if tenure.ReasonOf(bare) != tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED || !tenure.IsRetryable(bare) {
		t.Errorf("no reason, UNAVAILABLE: reason %v, retryable %v", tenure.ReasonOf(bare), tenure.IsRetryable(bare))
	}
	if tenure.IsRetryable(tenure.FromError(status.Error(codes.Unimplemented, "no such method"))) {
		t.Errorf("no reason, UNIMPLEMENTED is retryable")
	}
	if tenure.Retryable(tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED) {
		t.Errorf("ERROR_REASON_UNSPECIFIED is retryable")
	}
}

// ATOMIC_BATCH_UNSUPPORTED is a permanent FAILED_PRECONDITION whose
// metadata names the nats-server version the feature needs.
func TestRequiredNatsServer(t *testing.T) {
	st, err := status.New(codes.FailedPrecondition, "bucket cannot take atomic batch writes").WithDetails(&errdetails.ErrorInfo{
		Domain: tenure.Domain, Reason: "ATOMIC_BATCH_UNSUPPORTED",
		Metadata: map[string]string{"required_nats_server": "2.12", "bucket": "tenure", "stream": "KV_tenure"},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := tenure.FromError(st.Err())
	if tenure.ReasonOf(e) != tenurev1.ErrorReason_ATOMIC_BATCH_UNSUPPORTED || tenure.IsRetryable(e) {
		t.Errorf("ATOMIC_BATCH_UNSUPPORTED: reason %v, retryable %v; want permanent", tenure.ReasonOf(e), tenure.IsRetryable(e))
	}
	if v, ok := tenure.RequiredNatsServer(e); !ok || v != "2.12" {
		t.Errorf("RequiredNatsServer = %q, %v; want 2.12, true", v, ok)
	}
	if _, ok := tenure.RequiredNatsServer(statusError(t, codes.FailedPrecondition, "LEASE_HELD")); ok {
		t.Error("RequiredNatsServer of another reason")
	}
	if _, ok := tenure.RequiredNatsServer(errors.New("other")); ok {
		t.Error("RequiredNatsServer of an unrelated error")
	}
}
