package dev.tenure.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import dev.tenure.v1.ErrorReason;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.util.Collections;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.Set;

/**
 * A failed Tenure call: the gRPC status plus the {@code google.rpc.ErrorInfo} reason the server
 * attached (domain {@code tenure.v1}) as the generated {@link ErrorReason} of {@code
 * proto/tenure/v1/error_reason.proto}, so every reason the server sends has its value.
 *
 * <p>Failures that carry no Tenure {@code ErrorInfo} (the server could not be reached, a deadline
 * ran out, the call was cancelled), and reasons this client does not know, have the reason {@link
 * ErrorReason#ERROR_REASON_UNSPECIFIED}; {@link #getStatusCode()} then tells what happened and
 * {@link #getReasonText()} has a reason as sent.
 *
 * <p>Whether retrying can help is {@link #isRetryable(ErrorReason)}: the one classification of the
 * reasons, the table "Error reasons" of {@code clients/README.md}.
 */
public final class TenureException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The {@code ErrorInfo.domain} of every Tenure error. */
  public static final String DOMAIN = "tenure.v1";

  /**
   * The reasons after which sending the same request again may succeed (the "Error reasons" table
   * of {@code clients/README.md}); every other reason is permanent. The renew loop decides with it.
   */
  public static final Set<ErrorReason> RETRYABLE_REASONS =
      Collections.unmodifiableSet(
          EnumSet.of(
              ErrorReason.NATS_UNAVAILABLE,
              ErrorReason.WATCH_LAGGED,
              ErrorReason.SHUTTING_DOWN,
              ErrorReason.TOO_MANY_REQUESTS,
              ErrorReason.TOO_MANY_WATCHES,
              ErrorReason.TOO_MANY_WAITERS,
              ErrorReason.TOO_MANY_SHARED_HOLDERS));

  /** The gRPC codes after which a failure without a Tenure reason may pass. */
  private static final Set<Status.Code> RETRYABLE_CODES =
      Collections.unmodifiableSet(
          EnumSet.of(
              Status.Code.UNAVAILABLE,
              Status.Code.DEADLINE_EXCEEDED,
              Status.Code.RESOURCE_EXHAUSTED,
              Status.Code.ABORTED,
              Status.Code.INTERNAL,
              Status.Code.UNKNOWN,
              Status.Code.CANCELLED));

  /**
   * Whether sending the same request again may succeed after a failure with this reason (it is in
   * {@link #RETRYABLE_REASONS}).
   *
   * @param reason a reason
   * @return true for a retryable reason; false for every other one, {@code
   *     ERROR_REASON_UNSPECIFIED} included (classify an error with {@link #isRetryable()})
   */
  public static boolean isRetryable(ErrorReason reason) {
    return RETRYABLE_REASONS.contains(reason);
  }

  /**
   * The generated {@link ErrorReason} of an {@code ErrorInfo.reason} string.
   *
   * @param text the reason as sent, may be null or empty
   * @return its value; {@code ERROR_REASON_UNSPECIFIED} for none or one this client does not know
   */
  public static ErrorReason parseReason(String text) {
    if (text == null || text.isEmpty()) {
      return ErrorReason.ERROR_REASON_UNSPECIFIED;
    }
    try {
      ErrorReason reason = ErrorReason.valueOf(text);
      return reason == ErrorReason.UNRECOGNIZED ? ErrorReason.ERROR_REASON_UNSPECIFIED : reason;
    } catch (IllegalArgumentException e) {
      return ErrorReason.ERROR_REASON_UNSPECIFIED;
    }
  }

  private final ErrorReason reason;
  private final String reasonText;
  private final Status.Code statusCode;
  private final Map<String, String> metadata;

  /**
   * A Tenure error from its parts.
   *
   * @param statusCode the gRPC status code
   * @param reason the typed reason ({@code ERROR_REASON_UNSPECIFIED} when none)
   * @param reasonText the reason as sent ({@code ErrorInfo.reason}), or empty when none was sent
   * @param message a one-line description
   * @param metadata the {@code ErrorInfo.metadata} (copied)
   * @param cause the underlying exception, or null
   */
  public TenureException(
      Status.Code statusCode,
      ErrorReason reason,
      String reasonText,
      String message,
      Map<String, String> metadata,
      Throwable cause) {
    super(message, cause);
    this.statusCode = statusCode;
    this.reason = reason;
    this.reasonText = reasonText == null ? "" : reasonText;
    this.metadata = Collections.unmodifiableMap(new LinkedHashMap<>(metadata));
  }

  /**
   * Converts any failure of a gRPC call into a {@code TenureException}, reading the {@code
   * ErrorInfo} from the {@code grpc-status-details-bin} trailer. A {@code TenureException} is
   * returned as it is.
   *
   * @param t what the gRPC call threw or passed to {@code onError}
   * @return the typed error
   */
  public static TenureException from(Throwable t) {
    return from(t, null, null);
  }

  /**
   * Like {@link #from(Throwable)}, with a message that names the server and the RPC and, for a
   * transport failure, its cause: {@code "tenure at 127.0.0.1:7419: Acquire: UNAVAILABLE: io
   * exception: Connection refused: /127.0.0.1:7419"}.
   *
   * @param t what the gRPC call threw or passed to {@code onError}
   * @param target the server address the call went to, or null
   * @param rpc the RPC name ({@code "Acquire"}, ...), or null
   * @return the typed error
   */
  public static TenureException from(Throwable t, String target, String rpc) {
    if (t instanceof TenureException te) {
      return te;
    }
    Status status = Status.fromThrowable(t);
    String reasonText = "";
    Map<String, String> metadata = Map.of();
    com.google.rpc.Status details = StatusProto.fromThrowable(t);
    if (details != null) {
      for (Any any : details.getDetailsList()) {
        if (!any.is(ErrorInfo.class)) {
          continue;
        }
        try {
          ErrorInfo info = any.unpack(ErrorInfo.class);
          if (DOMAIN.equals(info.getDomain())) {
            reasonText = info.getReason();
            metadata = info.getMetadataMap();
            break;
          }
        } catch (InvalidProtocolBufferException e) {
          // A malformed detail is no reason: fall through to ERROR_REASON_UNSPECIFIED.
        }
      }
    }
    ErrorReason reason = parseReason(reasonText);
    String description = status.getDescription();
    StringBuilder message = new StringBuilder();
    if (target != null) {
      message.append("tenure at ").append(target).append(": ");
    }
    if (rpc != null) {
      message.append(rpc).append(": ");
    }
    message.append(reasonText.isEmpty() ? status.getCode().name() : reasonText);
    if (description != null && !description.isEmpty()) {
      message.append(": ").append(description);
    }
    // grpc-java says only "io exception" for a transport failure: add the causes' messages.
    if (reasonText.isEmpty()) {
      for (Throwable c = status.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
        String m = c.getMessage();
        if (m != null && !m.isEmpty() && !message.toString().contains(m)) {
          message.append(": ").append(m);
        }
      }
    }
    return new TenureException(status.getCode(), reason, reasonText, message.toString(), metadata, t);
  }

  /**
   * The typed reason ({@code LEASE_HELD}, {@code LEASE_NOT_HELD}, ...).
   *
   * @return the reason, {@link ErrorReason#ERROR_REASON_UNSPECIFIED} when the server sent none this
   *     client knows
   */
  public ErrorReason getReason() {
    return reason;
  }

  /**
   * The reason exactly as the server sent it in {@code ErrorInfo.reason}.
   *
   * @return the reason string, empty when there was no Tenure {@code ErrorInfo}
   */
  public String getReasonText() {
    return reasonText;
  }

  /**
   * The gRPC status code of the failure.
   *
   * @return the code, e.g. {@code FAILED_PRECONDITION} for {@code LEASE_HELD}
   */
  public Status.Code getStatusCode() {
    return statusCode;
  }

  /**
   * The machine-readable details of the error ({@code ErrorInfo.metadata}), e.g. {@code holder},
   * {@code fencing_token} and {@code ttl_seconds} for {@code LEASE_HELD}.
   *
   * @return an unmodifiable map, empty when there are none
   */
  public Map<String, String> getMetadata() {
    return metadata;
  }

  /**
   * For {@code LEASE_HELD}: who holds the lease now.
   *
   * @return the current holder, when the server said
   */
  public Optional<String> getHolder() {
    return Optional.ofNullable(metadata.get("holder"));
  }

  /**
   * For {@code ATOMIC_BATCH_UNSUPPORTED} (the server's NATS has no atomic batches, which lock-delay,
   * semaphores, read-write locks and groups need): the nats-server version needed.
   *
   * @return the version, for that reason only
   */
  public Optional<String> getRequiredNatsServer() {
    if (reason != ErrorReason.ATOMIC_BATCH_UNSUPPORTED) {
      return Optional.empty();
    }
    return Optional.ofNullable(metadata.get("required_nats_server"));
  }

  /**
   * For {@code LEASE_HELD}: the fencing token of the current holding.
   *
   * @return the token, when the server said
   */
  public OptionalLong getFencingToken() {
    String value = metadata.get("fencing_token");
    if (value == null) {
      return OptionalLong.empty();
    }
    try {
      return OptionalLong.of(Long.parseUnsignedLong(value));
    } catch (NumberFormatException e) {
      return OptionalLong.empty();
    }
  }

  /**
   * Whether sending the same call again may succeed. With a reason this client knows, that is
   * {@link #isRetryable(ErrorReason)} (NATS or the server away, too many requests, ...); without
   * one (the server could not be reached, the deadline passed, a newer server's reason) it goes by
   * the gRPC code: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL, UNKNOWN and
   * CANCELLED are retryable.
   *
   * @return true when retrying may help
   */
  public boolean isRetryable() {
    if (reason != ErrorReason.ERROR_REASON_UNSPECIFIED) {
      return isRetryable(reason);
    }
    return RETRYABLE_CODES.contains(statusCode);
  }
}
