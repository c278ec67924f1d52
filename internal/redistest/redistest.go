// Package redistest gives tests a real Redis: the shared one that `make test`
// starts (COORDINATOR_TEST_REDIS_URL), or private redis-server processes that
// a fault-injection test may stop, restart with or without its data, or pause.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL is the variable naming the shared test Redis.
const EnvURL = "COORDINATOR_TEST_REDIS_URL"

// URL returns the shared test Redis. A test that needs Redis fails, never
// skips, when there is none: `make test` provides one.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		t.Fatalf("%s is not set: run the tests with `make test`, which starts a throwaway Redis, or point it at a Redis the tests may write to", EnvURL)
	}
	return url
}

// Client returns a client of the shared test Redis, closed at the end of t.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Server is a private redis-server process.
type Server struct {
	t       testing.TB
	dir     string
	port    int
	persist bool
	cmd     *exec.Cmd
}

// Start runs a private redis-server on a free loopback port until t ends.
// With persist it keeps an append-only file, so a restart keeps its data.
func Start(t testing.TB, persist bool) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed: `make test` installs it, or see the README")
	}
	s := &Server{t: t, dir: t.TempDir(), persist: persist}
	s.port = freePort(t)
	s.start()
	t.Cleanup(s.Kill)
	return s
}

func freePort(t testing.TB) int {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}

func (s *Server) start() {
	s.t.Helper()
	args := []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir,
		"--save", "", "--maxmemory-policy", "noeviction",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	if s.persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	s.t.Fatalf("redis-server on port %d did not answer; its log:\n%s", s.port, log)
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Kill stops the server at once, as kill -9 would.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port. Without
// persistence it comes back empty: the data loss a coordinator must survive.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// Pause makes the server stop answering clients for d (CLIENT PAUSE), as a
// stalled network or an overloaded Redis would.
func (s *Server) Pause(d time.Duration) {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	if err := c.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		s.t.Fatalf("CLIENT PAUSE: %v", err)
	}
}
