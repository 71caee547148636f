package tenure_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tenure-dev/tenure/clients/go/tenure"
	"github.com/tenure-dev/tenure/clients/go/tenurev1"
)

// Tokens of the secured server: "worker" may acquire, renew and release
// (no watch: its sessions fall back to renewals); "admin" and the mTLS
// client "mtls-client" may do everything.
const (
	workerToken = "worker-token-0123456789"
	adminToken  = "admin-token-0123456789ab"
)

// pki is a throwaway CA with a server and a client certificate, as files.
type pki struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
}

// writePKI makes the CA and the certificates in dir (ECDSA P-256).
func writePKI(t *testing.T, dir string) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tenure test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, prefix string) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		} else {
			tmpl.DNSNames = []string{cn}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(prefix+".pem", "CERTIFICATE", der), write(prefix+".key", "PRIVATE KEY", kder)
	}
	p := pki{caFile: write("ca.pem", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf(2, "localhost", x509.ExtKeyUsageServerAuth, "server")
	p.clientCert, p.clientKey = leaf(3, "mtls-client", x509.ExtKeyUsageClientAuth, "client")
	return p
}

// startSecured starts a Tenure with TLS, optional client certificates
// (mTLS), bearer tokens and grants, and stops it at the end of the test.
func startSecured(t *testing.T) (*server, pki) {
	t.Helper()
	dir := t.TempDir()
	p := writePKI(t, dir)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("worker "+workerToken+"\nadmin "+adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "tenure.toml")
	grants := `
[[grant]]
identity = "worker"
prefixes = [""]
actions = ["acquire", "renew", "release"]

[[grant]]
identity = "admin"
prefixes = [""]
actions = ["*"]

[[grant]]
identity = "mtls-client"
prefixes = [""]
actions = ["*"]
`
	if err := os.WriteFile(config, []byte(grants), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := tenure.TLSCredentials(tenure.TLSConfig{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey})
	if err != nil {
		t.Fatal(err)
	}
	s, err := startServerWith(creds, "--config", config, "--auth-tokens", tokens,
		"--tls-cert", p.serverCert, "--tls-key", p.serverKey,
		"--tls-client-ca", p.caFile, "--tls-client-cert-optional")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.stop() })
	return s, p
}

// dialTLS dials the secured server with its CA and the given options.
func dialTLS(t *testing.T, s *server, cfg tenure.TLSConfig, opts ...grpc.DialOption) *tenure.Client {
	t.Helper()
	creds, err := tenure.TLSCredentials(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tenure.Dial(s.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// One secured server: bearer tokens (static and refreshed by a callback),
// TLS with a CA file, mTLS with a client certificate, per-call metadata, the
// typed UNAUTHENTICATED / PERMISSION_DENIED reasons with messages naming the
// target and the RPC, and the fallback to renewals when the watch is refused.
func TestCredentials(t *testing.T) {
	s, p := startSecured(t)
	ctx := testCtx(t)
	ca := tenure.TLSConfig{CAFile: p.caFile}

	t.Run("no credentials", func(t *testing.T) {
		c := dialTLS(t, s, ca)
		_, err := c.Acquire(ctx, "secure.none", "nobody", 2*time.Second)
		var te *tenure.Error
		if !errors.As(err, &te) || te.Reason != tenurev1.ErrorReason_UNAUTHENTICATED {
			t.Fatalf("Acquire without credentials = %v, want UNAUTHENTICATED", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "tenure at "+s.addr+": Acquire: UNAUTHENTICATED (UNAUTHENTICATED): ") {
			t.Fatalf("message %q does not name the target, RPC and reason", msg)
		}
		if te.Retryable() {
			t.Fatal("UNAUTHENTICATED must not be retryable")
		}
	})

	t.Run("wrong token", func(t *testing.T) {
		c := dialTLS(t, s, ca, tenure.WithBearerToken("not-a-valid-token-at-all"))
		if _, err := c.Get(ctx, "secure.x"); tenure.ReasonOf(err) != tenurev1.ErrorReason_UNAUTHENTICATED {
			t.Fatalf("GetLease with a wrong token = %v, want UNAUTHENTICATED", err)
		}
	})

	t.Run("static token, no grant", func(t *testing.T) {
		c := dialTLS(t, s, ca, tenure.WithBearerToken(workerToken))
		_, err := c.ListLeases(ctx, "")
		if tenure.ReasonOf(err) != tenurev1.ErrorReason_PERMISSION_DENIED || !strings.Contains(err.Error(), "ListLeases: PERMISSION_DENIED") {
			t.Fatalf("worker ListLeases = %v, want PERMISSION_DENIED", err)
		}
	})

	t.Run("token callback and metadata", func(t *testing.T) {
		var calls atomic.Int32
		c := dialTLS(t, s, ca,
			tenure.WithTokenFunc(func(context.Context) (string, error) { calls.Add(1); return adminToken, nil }),
			tenure.WithCallMetadata(map[string]string{"x-tenant": "blue"}))
		sess, err := c.Acquire(ctx, "secure.admin", "admin-1", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		leases, err := c.ListLeases(ctx, "secure.")
		if err != nil || len(leases) != 1 || leases[0].GetFencingToken() != sess.FencingToken() {
			t.Fatalf("ListLeases = %v, %v", leases, err)
		}
		if released, err := sess.Release(ctx); err != nil || !released {
			t.Fatalf("Release = %v, %v", released, err)
		}
		if calls.Load() < 3 {
			t.Fatalf("token callback ran %d times, want once per call", calls.Load())
		}
	})

	t.Run("mTLS", func(t *testing.T) {
		c := dialTLS(t, s, tenure.TLSConfig{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey})
		sess, err := c.Acquire(ctx, "secure.mtls", "mtls-1", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if released, err := sess.Release(ctx); err != nil || !released {
			t.Fatalf("Release = %v, %v", released, err)
		}
	})

	t.Run("watch refused: loss at the next renewal", func(t *testing.T) {
		worker := dialTLS(t, s, ca, tenure.WithBearerToken(workerToken))
		admin := dialTLS(t, s, ca, tenure.WithBearerToken(adminToken))
		sess, err := worker.Acquire(ctx, "secure.fallback", "worker-1", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Release(ctx)
		if _, err := admin.RevokeLease(ctx, "secure.fallback", "test", sess.FencingToken()); err != nil {
			t.Fatal(err)
		}
		waitDone(t, sess, 5*time.Second)
		if tenure.ReasonOf(sess.Err()) != tenurev1.ErrorReason_LEASE_NOT_HELD || errors.Is(sess.Err(), tenure.ErrLostOnWatch) {
			t.Fatalf("loss cause %v, want LEASE_NOT_HELD from a renewal", sess.Err())
		}
	})
}
