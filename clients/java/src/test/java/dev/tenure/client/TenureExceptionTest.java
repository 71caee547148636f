package dev.tenure.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import dev.tenure.v1.ErrorReason;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.OptionalLong;
import org.junit.jupiter.api.Test;

/** Reading ErrorInfo out of gRPC statuses, without a server. */
class TenureExceptionTest {
  private static StatusRuntimeException status(Code code, String domain, String reason) {
    ErrorInfo info =
        ErrorInfo.newBuilder()
            .setDomain(domain)
            .setReason(reason)
            .putMetadata("holder", "someone")
            .putMetadata("fencing_token", "42")
            .build();
    return StatusProto.toStatusRuntimeException(
        com.google.rpc.Status.newBuilder()
            .setCode(code.getNumber())
            .setMessage("lease \"a\" is held")
            .addDetails(Any.pack(info))
            .build());
  }

  @Test
  void readsTheReasonAndMetadata() {
    TenureException e =
        TenureException.from(status(Code.FAILED_PRECONDITION, "tenure.v1", "LEASE_HELD"));
    assertEquals(ErrorReason.LEASE_HELD, e.getReason());
    assertEquals("LEASE_HELD", e.getReasonText());
    assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatusCode());
    assertEquals("someone", e.getHolder().orElseThrow());
    assertEquals(OptionalLong.of(42), e.getFencingToken());
    assertEquals("LEASE_HELD: lease \"a\" is held", e.getMessage());
    assertFalse(e.isRetryable());
    assertSame(e, TenureException.from(e));
  }

  @Test
  void unknownReasonsAndOtherDomainsAreUnspecified() {
    TenureException newer =
        TenureException.from(status(Code.FAILED_PRECONDITION, "tenure.v1", "SOMETHING_NEW"));
    assertEquals(ErrorReason.ERROR_REASON_UNSPECIFIED, newer.getReason());
    assertEquals("SOMETHING_NEW", newer.getReasonText());
    assertFalse(newer.isRetryable(), "no known reason: FAILED_PRECONDITION is permanent");
    assertEquals(
        ErrorReason.ERROR_REASON_UNSPECIFIED, TenureException.parseReason("UNRECOGNIZED"));
    assertEquals(ErrorReason.ERROR_REASON_UNSPECIFIED, TenureException.parseReason(null));

    TenureException foreign =
        TenureException.from(status(Code.FAILED_PRECONDITION, "example.com", "LEASE_HELD"));
    assertEquals(ErrorReason.ERROR_REASON_UNSPECIFIED, foreign.getReason());
    assertTrue(foreign.getMetadata().isEmpty());
  }

  @Test
  void atomicBatchUnsupportedNamesTheNatsServerVersion() {
    ErrorInfo info =
        ErrorInfo.newBuilder()
            .setDomain("tenure.v1")
            .setReason("ATOMIC_BATCH_UNSUPPORTED")
            .putMetadata("required_nats_server", "2.12")
            .putMetadata("bucket", "tenure")
            .putMetadata("stream", "KV_tenure")
            .build();
    TenureException e =
        TenureException.from(
            StatusProto.toStatusRuntimeException(
                com.google.rpc.Status.newBuilder()
                    .setCode(Code.FAILED_PRECONDITION.getNumber())
                    .setMessage("bucket cannot take atomic batch writes")
                    .addDetails(Any.pack(info))
                    .build()));
    assertEquals(ErrorReason.ATOMIC_BATCH_UNSUPPORTED, e.getReason());
    assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatusCode());
    assertEquals("2.12", e.getRequiredNatsServer().orElseThrow());
    assertFalse(e.isRetryable());
    assertTrue(
        TenureException.from(status(Code.FAILED_PRECONDITION, "tenure.v1", "LEASE_HELD"))
            .getRequiredNatsServer()
            .isEmpty());
  }

  @Test
  void transportFailuresAreRetryable() {
    TenureException down =
        TenureException.from(Status.UNAVAILABLE.withDescription("refused").asRuntimeException());
    assertEquals(ErrorReason.ERROR_REASON_UNSPECIFIED, down.getReason());
    assertEquals(Status.Code.UNAVAILABLE, down.getStatusCode());
    assertTrue(down.isRetryable());
    assertTrue(
        TenureException.from(status(Code.UNAVAILABLE, "tenure.v1", "NATS_UNAVAILABLE"))
            .isRetryable());
    assertFalse(
        TenureException.from(status(Code.FAILED_PRECONDITION, "tenure.v1", "LEASE_NOT_HELD"))
            .isRetryable());
  }

  @Test
  void permanentReasonsAreNotRetriedWhateverTheirCode() {
    // INTERNAL was retryable here once; the proto calls it permanent (report it).
    assertFalse(
        TenureException.from(status(Code.INTERNAL, "tenure.v1", "INTERNAL")).isRetryable());
    assertFalse(
        TenureException.from(status(Code.RESOURCE_EXHAUSTED, "tenure.v1", "REQUEST_TOO_LARGE"))
            .isRetryable());
    assertTrue(
        TenureException.from(status(Code.RESOURCE_EXHAUSTED, "tenure.v1", "TOO_MANY_REQUESTS"))
            .isRetryable());
  }

  @Test
  void readWriteLockReasons() {
    // A reader refused at --max-shared-holders may retry (like TOO_MANY_WAITERS) ...
    TenureException full =
        TenureException.from(
            status(Code.RESOURCE_EXHAUSTED, "tenure.v1", "TOO_MANY_SHARED_HOLDERS"));
    assertEquals(ErrorReason.TOO_MANY_SHARED_HOLDERS, full.getReason());
    assertTrue(full.isRetryable());
    assertTrue(TenureException.RETRYABLE_REASONS.contains(ErrorReason.TOO_MANY_SHARED_HOLDERS));
    // ... a name used another way, an upgrade or a downgrade of a shared holding may not.
    TenureException mismatch =
        TenureException.from(status(Code.FAILED_PRECONDITION, "tenure.v1", "MODE_MISMATCH"));
    assertEquals(ErrorReason.MODE_MISMATCH, mismatch.getReason());
    assertFalse(mismatch.isRetryable());
    assertFalse(TenureException.isRetryable(ErrorReason.MODE_MISMATCH));
  }
}
