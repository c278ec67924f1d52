package client

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/internal/coordtest"
)

// A coordinator with TLS and a bearer token: the Client's options reach
// every call, the KeepAlive stream included.
func TestTLSAndBearerToken(t *testing.T) {
	certFile, keyFile, pool := selfSignedCert(t)
	cfg := coordtest.Config(t, "memory")
	cfg.TLSCert, cfg.TLSKey, cfg.AuthToken = certFile, keyFile, "s3cret"
	coord := coordtest.Start(t, cfg)
	ctx := testCtx(t)

	c := dial(t, coord, WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), WithBearerToken("s3cret"))
	lease, err := c.TryLock(ctx, "secure", WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitRenewed(t, lease.l, 3)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		opts []Option
		want codes.Code
	}{
		{"no token", []Option{WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})}, codes.Unauthenticated},
		{"wrong token", []Option{WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), WithBearerToken("guess")}, codes.Unauthenticated},
		{"no TLS", []Option{WithBearerToken("s3cret")}, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dial(t, coord, tc.opts...).TryLock(ctx, "secure")
			if status.Code(err) != tc.want {
				t.Fatalf("TryLock = %v; want %s", err, tc.want)
			}
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"long identity", []Option{WithIdentity(string(make([]byte, 101)))}},
		{"unprintable identity", []Option{WithIdentity("a\nb")}},
		{"zero TTL", []Option{WithTTL(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := New("127.0.0.1:1", tc.opts...); err == nil {
				_ = c.Close()
				t.Fatal("New accepted it")
			}
		})
	}
	c, err := New("127.0.0.1:1", WithIdentity("worker-7"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Identity() != "worker-7" || c.newHolder() != "worker-7#1" || c.newHolder() != "worker-7#2" {
		t.Fatal("holders are not the identity and a sequence number")
	}
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key, and returns
// their files and a pool that trusts the certificate.
func selfSignedCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "coordinator test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
