package dev.tenure.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * A failed Tenure call: the gRPC status plus the {@code google.rpc.ErrorInfo} reason the server
 * attached (domain {@code tenure.v1}) as a typed {@link Reason}.
 *
 * <p>Failures that carry no Tenure {@code ErrorInfo} (the server could not be reached, a deadline
 * ran out, the call was cancelled) have the reason {@link Reason#UNKNOWN}; {@link #getStatusCode()}
 * then tells what happened.
 */
public final class TenureException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The {@code ErrorInfo.domain} of every Tenure error. */
  public static final String DOMAIN = "tenure.v1";

  /** Why a Tenure call failed: the stable {@code ErrorInfo.reason} strings of the API. */
  public enum Reason {
    /** Another holder has the lease (FAILED_PRECONDITION; metadata holder, fencing_token, ttl_seconds). */
    LEASE_HELD,
    /** The caller does not hold the lease (any more) (FAILED_PRECONDITION; metadata state). */
    LEASE_NOT_HELD,
    /** Nobody holds the lease (NOT_FOUND). */
    LEASE_NOT_FOUND,
    /** The lease name breaks the naming rule (INVALID_ARGUMENT). */
    INVALID_NAME,
    /** The holder is empty, too long or not printable (INVALID_ARGUMENT). */
    INVALID_HOLDER,
    /** The TTL is zero, negative or above the server's maximum (INVALID_ARGUMENT). */
    INVALID_TTL,
    /** The lease key is too short, too long or not printable ASCII (INVALID_ARGUMENT). */
    INVALID_LEASE_KEY,
    /** The expected revision is missing (INVALID_ARGUMENT). */
    INVALID_REVISION,
    /** The metadata has too many entries or is too large (INVALID_ARGUMENT). */
    INVALID_METADATA,
    /** The wait is negative or above the server's maximum (INVALID_ARGUMENT). */
    INVALID_WAIT,
    /** Another argument is malformed (INVALID_ARGUMENT). */
    INVALID_ARGUMENT,
    /** The bucket holds a value under this name that Tenure cannot read (DATA_LOSS). */
    RECORD_UNREADABLE,
    /** The server cannot reach NATS (UNAVAILABLE); retry shortly. */
    NATS_UNAVAILABLE,
    /** The server is shutting down (UNAVAILABLE); retry on another replica. */
    SHUTTING_DOWN,
    /** An unexpected server failure (INTERNAL). */
    INTERNAL,
    /**
     * No Tenure reason: the failure came from gRPC itself (unreachable server, deadline, cancel)
     * or the reason is one this client does not know; see {@link #getStatusCode()} and {@link
     * #getReasonText()}.
     */
    UNKNOWN;

    static Reason parse(String text) {
      if (text == null || text.isEmpty()) {
        return UNKNOWN;
      }
      try {
        return Reason.valueOf(text);
      } catch (IllegalArgumentException e) {
        return UNKNOWN;
      }
    }
  }

  private final Reason reason;
  private final String reasonText;
  private final Status.Code statusCode;
  private final Map<String, String> metadata;

  /**
   * A Tenure error from its parts.
   *
   * @param statusCode the gRPC status code
   * @param reason the typed reason
   * @param reasonText the reason as sent ({@code ErrorInfo.reason}), or empty when none was sent
   * @param message a one-line description
   * @param metadata the {@code ErrorInfo.metadata} (copied)
   * @param cause the underlying exception, or null
   */
  public TenureException(
      Status.Code statusCode,
      Reason reason,
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
          // A malformed detail is no reason: fall through to UNKNOWN.
        }
      }
    }
    Reason reason = Reason.parse(reasonText);
    String description = status.getDescription();
    StringBuilder message = new StringBuilder();
    message.append(reasonText.isEmpty() ? status.getCode().name() : reasonText);
    if (description != null && !description.isEmpty()) {
      message.append(": ").append(description);
    } else if (status.getCause() != null) {
      message.append(": ").append(status.getCause());
    }
    return new TenureException(status.getCode(), reason, reasonText, message.toString(), metadata, t);
  }

  /**
   * The typed reason ({@code LEASE_HELD}, {@code LEASE_NOT_HELD}, ...).
   *
   * @return the reason, {@link Reason#UNKNOWN} when the server sent none this client knows
   */
  public Reason getReason() {
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
   * Whether retrying the same call later may succeed: the server or NATS was unreachable or
   * overloaded, or the call ran out of time. Refusals ({@code LEASE_HELD}, {@code LEASE_NOT_HELD},
   * {@code INVALID_*}) are not retryable as they are.
   *
   * @return true for transient failures
   */
  public boolean isRetryable() {
    switch (reason) {
      case NATS_UNAVAILABLE:
      case SHUTTING_DOWN:
      case INTERNAL:
        return true;
      case UNKNOWN:
        break;
      default:
        return false;
    }
    switch (statusCode) {
      case UNAVAILABLE:
      case DEADLINE_EXCEEDED:
      case RESOURCE_EXHAUSTED:
      case ABORTED:
      case INTERNAL:
      case UNKNOWN:
      case CANCELLED:
        return true;
      default:
        return false;
    }
  }
}
