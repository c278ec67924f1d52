package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names the PEM files of one side of a TLS connection.
type TLSFiles struct {
	// Cert and Key are this side's certificate and key: a server's, or a
	// client's for mTLS. They go together.
	Cert, Key string
	// CA is the PEM bundle that verifies the peer: for a server, the CA that
	// must have signed client certificates (mTLS); for a client, the CA of
	// the server, instead of the system roots.
	CA string
	// ServerName overrides the name a client checks the server's
	// certificate against.
	ServerName string
	// InsecureSkipVerify makes a client accept any server certificate; for
	// tests and debugging only.
	InsecureSkipVerify bool
}

// ServerTLS returns the configuration of a TLS server, or nil when f names
// no certificate (plaintext). With a CA, clients must present a certificate
// it signed.
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if f.Cert == "" && f.Key == "" {
		if f.CA != "" {
			return nil, errors.New("a client CA needs a server certificate and key")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if err := loadKeyPair(cfg, f); err != nil {
		return nil, err
	}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS returns the configuration of a TLS client: the server verified
// against f.CA (or the system roots), and a client certificate when f names
// one.
func ClientTLS(f TLSFiles) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         f.ServerName,
		InsecureSkipVerify: f.InsecureSkipVerify, //nolint:gosec // an explicit opt-in flag, documented as unsafe
	}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" || f.Key != "" {
		if err := loadKeyPair(cfg, f); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func loadKeyPair(cfg *tls.Config, f TLSFiles) error {
	if f.Cert == "" || f.Key == "" {
		return errors.New("a TLS certificate and its key go together")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return fmt.Errorf("load TLS key pair: %w", err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	return nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file) //nolint:gosec // G304: the operator names this file in the configuration; reading it is the point
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}
