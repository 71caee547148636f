package tenure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// WithBearerToken sends "authorization: Bearer <token>" with every call (the
// server's --auth-tokens). Use it over TLS: the token is a password.
func WithBearerToken(token string) grpc.DialOption {
	return WithTokenFunc(func(context.Context) (string, error) { return token, nil })
}

// WithTokenFunc calls fetch before every call and sends the token it returns
// as "authorization: Bearer <token>", so a token can be refreshed (rotated
// files, short-lived tokens). An error from fetch fails the call.
func WithTokenFunc(fetch func(ctx context.Context) (string, error)) grpc.DialOption {
	return grpc.WithPerRPCCredentials(tokenCreds{fetch: fetch})
}

// WithCallMetadata sends these gRPC metadata entries (header names in lower
// case) with every call, e.g. a tracing or tenancy header.
func WithCallMetadata(md map[string]string) grpc.DialOption {
	copied := make(map[string]string, len(md))
	for k, v := range md {
		copied[k] = v
	}
	return grpc.WithPerRPCCredentials(staticMetadata(copied))
}

// tokenCreds adds the bearer token to each call.
type tokenCreds struct {
	fetch func(ctx context.Context) (string, error)
}

func (t tokenCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, err := t.fetch(ctx)
	if err != nil {
		return nil, fmt.Errorf("tenure: bearer token: %w", err)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity is false so a token can also be sent to a
// plaintext server on loopback (the server warns about it); use TLS
// anywhere else.
func (tokenCreds) RequireTransportSecurity() bool { return false }

// staticMetadata adds fixed entries to each call.
type staticMetadata map[string]string

func (m staticMetadata) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return m, nil
}

func (staticMetadata) RequireTransportSecurity() bool { return false }

// TLSConfig says how to reach a Tenure served over TLS (--tls-cert), and
// with mTLS (--tls-client-ca) which client certificate to present.
type TLSConfig struct {
	// CAFile is a PEM file of the CA(s) the server's certificate must chain
	// to; empty (and no CAPEM): the system roots.
	CAFile string
	// CAPEM is the same as PEM bytes, used when CAFile is empty.
	CAPEM []byte
	// CertFile and KeyFile are the client certificate chain and key (PEM)
	// for mTLS; both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name verified in the server's certificate
	// (default: the host of the target).
	ServerName string
}

// TLSCredentials builds transport credentials from cfg, for
// grpc.WithTransportCredentials, e.g.
//
//	creds, err := tenure.TLSCredentials(tenure.TLSConfig{CAFile: "ca.pem", CertFile: "me.pem", KeyFile: "me.key"})
//	client, err := tenure.Dial(addr, grpc.WithTransportCredentials(creds), tenure.WithBearerToken(tok))
func TLSCredentials(cfg TLSConfig) (credentials.TransportCredentials, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	ca := cfg.CAPEM
	if cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tenure: TLS CA: %w", err)
		}
		ca = b
	}
	if len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("tenure: TLS CA: no PEM certificate found")
		}
		tc.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("tenure: mTLS needs both CertFile and KeyFile")
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tenure: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(tc), nil
}
