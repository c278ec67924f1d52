package app

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/envflag"
	"github.com/coordinator-dev/coordinator/internal/testkit/testcert"
)

// handshake runs one TLS handshake between configurations on loopback and
// returns the client's error.
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		_ = conn.(*tls.Conn).Handshake()
		_, _ = io.Copy(io.Discard, conn) // until the client hangs up
		_ = conn.Close()
	}()
	conn, err := tls.Dial("tcp", lis.Addr().String(), client)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	// With TLS 1.3 a refused client certificate shows on the first read.
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
		return err
	}
	return nil
}

func TestTLSConfigs(t *testing.T) {
	server := testcert.Write(t, "server")
	client := testcert.Write(t, "client")
	stranger := testcert.Write(t, "stranger")
	tests := []struct {
		name    string
		server  TLSFiles
		client  TLSFiles
		wantErr bool
	}{
		{"server verified by its CA", TLSFiles{Cert: server.Cert, Key: server.Key}, TLSFiles{CA: server.Cert}, false},
		{"server not trusted", TLSFiles{Cert: server.Cert, Key: server.Key}, TLSFiles{CA: stranger.Cert}, true},
		{"mTLS with a client certificate", TLSFiles{Cert: server.Cert, Key: server.Key, CA: client.Cert}, TLSFiles{CA: server.Cert, Cert: client.Cert, Key: client.Key}, false},
		{"mTLS without a client certificate", TLSFiles{Cert: server.Cert, Key: server.Key, CA: client.Cert}, TLSFiles{CA: server.Cert}, true},
		{"mTLS with a certificate of another CA", TLSFiles{Cert: server.Cert, Key: server.Key, CA: client.Cert}, TLSFiles{CA: server.Cert, Cert: stranger.Cert, Key: stranger.Key}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ServerTLS(tt.server)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ClientTLS(tt.client)
			if err != nil {
				t.Fatal(err)
			}
			if err := handshake(t, s, c); (err != nil) != tt.wantErr {
				t.Fatalf("handshake error %v; want an error: %v", err, tt.wantErr)
			}
		})
	}
}

func TestTLSFilesRefused(t *testing.T) {
	cert := testcert.Write(t, "x")
	tests := []struct {
		name  string
		load  func() error
		wants string
	}{
		{"no certificate means plaintext", func() error {
			cfg, err := ServerTLS(TLSFiles{})
			if cfg != nil {
				return errors.New("a config without files")
			}
			return err
		}, ""},
		{"client CA without a server certificate", func() error { _, err := ServerTLS(TLSFiles{CA: cert.Cert}); return err }, "needs a server certificate"},
		{"certificate without its key", func() error { _, err := ServerTLS(TLSFiles{Cert: cert.Cert}); return err }, "go together"},
		{"missing CA file", func() error { _, err := ClientTLS(TLSFiles{CA: "/nonexistent/ca.pem"}); return err }, "read CA"},
		{"CA file without a certificate", func() error { _, err := ClientTLS(TLSFiles{CA: cert.Key}); return err }, "holds no PEM certificate"},
		{"key pair that does not load", func() error { _, err := ClientTLS(TLSFiles{Cert: cert.Key, Key: cert.Cert}); return err }, "load TLS key pair"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.load()
			if tt.wants == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wants) {
				t.Fatalf("err = %v; want one saying %q", err, tt.wants)
			}
		})
	}
}

func TestLogConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		logs    []string // what a logger made from the config writes for Debug then Info
	}{
		{"defaults: info, text", nil, "", []string{"level=INFO msg=info"}},
		{"debug, json", map[string]string{"X_LOG_LEVEL": "debug", "X_LOG_FORMAT": "json"}, "", []string{`"level":"DEBUG"`, `"level":"INFO"`}},
		{"unknown level", map[string]string{"X_LOG_LEVEL": "loud"}, "log-level", nil},
		{"unknown format", map[string]string{"X_LOG_FORMAT": "xml"}, "log-format", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			var c LogConfig
			v := envflag.New(fs, func(k string) (string, bool) { s, ok := tt.env[k]; return s, ok })
			c.Flags(v, "X")
			if err := v.Parse(nil); err != nil {
				t.Fatal(err)
			}
			err := c.Check()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Check = %v; want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			log := c.Logger(&out)
			log.Debug("debug")
			log.Info("info")
			for _, want := range tt.logs {
				if !strings.Contains(out.String(), want) {
					t.Errorf("log %q lacks %q", out.String(), want)
				}
			}
			if c.Level > slog.LevelDebug && strings.Contains(out.String(), "debug") {
				t.Errorf("log %q holds a debug line at level %s", out.String(), c.Level)
			}
		})
	}
}

func TestParseError(t *testing.T) {
	var out bytes.Buffer
	if code := ParseError(&out, "prog", flag.ErrHelp); code != ExitOK || out.Len() != 0 {
		t.Fatalf("-help: exit %d, output %q; want %d and nothing", code, out.String(), ExitOK)
	}
	if code := ParseError(&out, "prog", errors.New("bad flag")); code != ExitUsage || out.String() != "prog: bad flag\n" {
		t.Fatalf("bad flag: exit %d, output %q; want %d and 'prog: bad flag'", code, out.String(), ExitUsage)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
