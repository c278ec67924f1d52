package coordtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/coordinator-dev/coordinator/coordinatord"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

// Config returns the default server configuration for the given store kind
// ("memory" or "redis"). A Redis store uses the shared test Redis with a key
// prefix of its own, so that tests can share it.
func Config(t testing.TB, storeKind string) coordinatord.Config {
	t.Helper()
	cfg, err := coordinatord.ParseConfig(flag.NewFlagSet("coordtest", flag.ContinueOnError), nil, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = storeKind
	// A test's memory store keeps nothing unless the test asks for a state
	// directory; each test's Redis prefix is new, so its markers are too.
	cfg.StateDir, cfg.RedisNewStore = "", true
	if storeKind == coordinatord.StoreRedis {
		cfg.RedisURL = redistest.URL(t)
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.RedisKeyPrefix = "test-" + hex.EncodeToString(b[:])
	}
	return cfg
}

// Coordinator is a running coordinator under test.
type Coordinator struct {
	t    testing.TB
	cfg  coordinatord.Config
	addr string
	log  *slog.Logger

	mu   sync.Mutex
	srv  *coordinatord.Server
	done chan struct{}
}

// Option changes how Start runs a coordinator.
type Option func(*Coordinator)

// WithLogger gives the coordinator a logger; by default it logs nothing.
func WithLogger(log *slog.Logger) Option {
	return func(c *Coordinator) { c.log = log }
}

// Start runs a coordinator with cfg on a free loopback port until t ends.
func Start(t testing.TB, cfg coordinatord.Config, opts ...Option) *Coordinator {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Coordinator{t: t, cfg: cfg, addr: lis.Addr().String(), log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(c)
	}
	c.serve(lis)
	t.Cleanup(c.Stop)
	return c
}

// Addr is the coordinator's host:port; it stays the same across restarts.
func (c *Coordinator) Addr() string { return c.addr }

// Dial returns a plaintext connection to the coordinator, closed when t
// ends; it follows the coordinator across restarts.
func (c *Coordinator) Dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Server is the running server (nil while stopped).
func (c *Coordinator) Server() *coordinatord.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv
}

func (c *Coordinator) serve(lis net.Listener) {
	c.t.Helper()
	srv, err := coordinatord.New(context.Background(), c.cfg, c.log)
	if err != nil {
		_ = lis.Close()
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	c.mu.Lock()
	c.srv, c.done = srv, done
	c.mu.Unlock()
}

// Stop shuts the coordinator down gracefully (a no-op when stopped).
func (c *Coordinator) Stop() { c.stop(5 * time.Second) }

// Kill stops the coordinator at once, cutting every call and stream as a
// crash would; state in a Redis store survives, a memory store's does not.
func (c *Coordinator) Kill() { c.stop(0) }

func (c *Coordinator) stop(grace time.Duration) {
	c.mu.Lock()
	srv, done := c.srv, c.done
	c.srv = nil
	c.mu.Unlock()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	srv.Shutdown(ctx)
	<-done
}

// Restart kills the coordinator and starts a new one on the same address.
func (c *Coordinator) Restart() {
	c.t.Helper()
	c.Kill()
	var lis net.Listener
	var err error
	// The old listener's port may take a moment to be free again.
	for range 100 {
		if lis, err = net.Listen("tcp", c.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("listen again on %s: %v", c.addr, err)
	}
	c.serve(lis)
}
