package dev.tenure.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.TlsChannelCredentials;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.function.Supplier;

/**
 * How {@link LeaseClient#connect(String, ConnectOptions)} reaches a Tenure server: TLS (with a CA
 * file, and a client certificate for mTLS), a bearer token (fixed, or a supplier asked before
 * every call), and extra metadata on every call. The token is added by an interceptor, so it
 * also works over plaintext for local development (Tenure warns at start when tokens travel in
 * plaintext).
 *
 * <pre>{@code
 * LeaseClient client = LeaseClient.connect("tenure.example:7419",
 *     ConnectOptions.builder().tls(Path.of("ca.pem")).token(() -> vault.read("tenure")).build());
 * }</pre>
 */
public final class ConnectOptions {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final boolean tls;
  private final Path caFile;
  private final Path certFile;
  private final Path keyFile;
  private final String authority;
  private final Supplier<String> token;
  private final Map<String, String> metadata;
  private final boolean lossWatch;
  private final boolean keepAliveStream;

  private ConnectOptions(Builder b) {
    this.lossWatch = b.lossWatch;
    this.keepAliveStream = b.keepAliveStream;
    this.tls = b.tls;
    this.caFile = b.caFile;
    this.certFile = b.certFile;
    this.keyFile = b.keyFile;
    this.authority = b.authority;
    this.token = b.token;
    this.metadata = Map.copyOf(b.metadata);
  }

  /**
   * A builder; with nothing set it gives plaintext without credentials.
   *
   * @return a new builder
   */
  public static Builder builder() {
    return new Builder();
  }

  /** Whether the client keeps its shared loss watch (default true). */
  boolean lossWatch() {
    return lossWatch;
  }

  /** Whether renewals go over one KeepAlive stream (default true) rather than unary Renews. */
  boolean keepAliveStream() {
    return keepAliveStream;
  }

  /** Builds the channel to {@code target} these options describe. */
  ManagedChannel channel(String target) {
    ChannelCredentials credentials;
    if (tls) {
      TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
      try {
        if (caFile != null) {
          b.trustManager(caFile.toFile());
        }
        if (certFile != null) {
          b.keyManager(certFile.toFile(), keyFile.toFile());
        }
      } catch (IOException e) {
        throw new UncheckedIOException("cannot read the TLS files for " + target, e);
      }
      credentials = b.build();
    } else {
      credentials = InsecureChannelCredentials.create();
    }
    ManagedChannelBuilder<?> builder = Grpc.newChannelBuilder(target, credentials);
    if (authority != null) {
      builder.overrideAuthority(authority);
    }
    if (token != null || !metadata.isEmpty()) {
      builder.intercept(new Headers(token, metadata));
    }
    return builder.build();
  }

  /** Adds the bearer token and the extra metadata to every call. */
  private static final class Headers implements ClientInterceptor {
    private final Supplier<String> token;
    private final Map<String, String> metadata;

    Headers(Supplier<String> token, Map<String, String> metadata) {
      this.token = token;
      this.metadata = metadata;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(
        MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          for (Map.Entry<String, String> e : metadata.entrySet()) {
            headers.put(Metadata.Key.of(e.getKey(), Metadata.ASCII_STRING_MARSHALLER), e.getValue());
          }
          if (token != null) {
            headers.put(AUTHORIZATION, "Bearer " + token.get());
          }
          super.start(listener, headers);
        }
      };
    }
  }

  /** Builds {@link ConnectOptions}. */
  public static final class Builder {
    private boolean tls;
    private Path caFile;
    private Path certFile;
    private Path keyFile;
    private String authority;
    private Supplier<String> token;
    private final Map<String, String> metadata = new LinkedHashMap<>();
    private boolean lossWatch = true;
    private boolean keepAliveStream = true;

    private Builder() {}

    /**
     * Whether the sessions' renewals go over one KeepAlive stream per client, the renewals due at
     * the same moment batched into one message (default true). Off, or against a server that
     * answers the stream {@code UNIMPLEMENTED}, each renewal is a unary Renew.
     *
     * @param enabled false for unary Renew calls
     * @return this builder
     */
    public Builder keepAliveStream(boolean enabled) {
      this.keepAliveStream = enabled;
      return this;
    }

    /**
     * Whether the client keeps one WatchLease stream following its sessions' names, so a revoke,
     * expiry or takeover ends a session at once ({@code LEASE_ENDED}). Default true; without it
     * loss is noticed at the next renewal.
     *
     * @param enabled false to rely on renewals alone
     * @return this builder
     */
    public Builder lossWatch(boolean enabled) {
      this.lossWatch = enabled;
      return this;
    }

    /**
     * TLS with the system's trusted roots.
     *
     * @return this builder
     */
    public Builder tls() {
      this.tls = true;
      return this;
    }

    /**
     * TLS with the server certificate checked against the CA in {@code caFile} (PEM).
     *
     * @param caFile the CA certificate(s)
     * @return this builder
     */
    public Builder tls(Path caFile) {
      this.tls = true;
      this.caFile = Objects.requireNonNull(caFile, "caFile");
      return this;
    }

    /**
     * mTLS: present this client certificate chain and key (PEM); implies TLS.
     *
     * @param certFile the certificate chain
     * @param keyFile the private key (PKCS#8 PEM)
     * @return this builder
     */
    public Builder clientCertificate(Path certFile, Path keyFile) {
      this.tls = true;
      this.certFile = Objects.requireNonNull(certFile, "certFile");
      this.keyFile = Objects.requireNonNull(keyFile, "keyFile");
      return this;
    }

    /**
     * The name to verify the server certificate against, if not the target's host.
     *
     * @param authority the server name
     * @return this builder
     */
    public Builder authority(String authority) {
      this.authority = Objects.requireNonNull(authority, "authority");
      return this;
    }

    /**
     * A fixed bearer token, sent as {@code authorization: Bearer <token>} on every call.
     *
     * @param token the token
     * @return this builder
     */
    public Builder token(String token) {
      Objects.requireNonNull(token, "token");
      this.token = () -> token;
      return this;
    }

    /**
     * A bearer token asked of {@code supplier} before every call (for tokens that expire).
     *
     * @param supplier returns the current token
     * @return this builder
     */
    public Builder token(Supplier<String> supplier) {
      this.token = Objects.requireNonNull(supplier, "supplier");
      return this;
    }

    /**
     * An extra header sent with every call.
     *
     * @param key the header name (lower case ASCII)
     * @param value its value
     * @return this builder
     */
    public Builder metadata(String key, String value) {
      metadata.put(Objects.requireNonNull(key, "key"), Objects.requireNonNull(value, "value"));
      return this;
    }

    /**
     * The options.
     *
     * @return the built options
     */
    public ConnectOptions build() {
      return new ConnectOptions(this);
    }
  }
}
