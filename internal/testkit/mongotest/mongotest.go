package mongotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

const (
	// EnvURI names the shared test server.
	EnvURI = "COORDINATOR_TEST_MONGODB_URI"
	// EnvFerretDB names the FerretDB binary that Start runs.
	EnvFerretDB = "COORDINATOR_TEST_FERRETDB"
)

// URI is the shared test server's connection string.
func URI(t testing.TB) string {
	t.Helper()
	uri := os.Getenv(EnvURI)
	if uri == "" {
		t.Fatalf("%s is not set: run the tests with make test, or under scripts/with-ferretdb.sh", EnvURI)
	}
	return uri
}

// Database returns a database of the test's own on the shared test server,
// dropped when the test ends.
func Database(t testing.TB) *mongo.Database {
	t.Helper()
	uri := URI(t)
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatalf("connect to %s: %v", uri, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Ping(ctx, nil); err != nil {
		_ = client.Disconnect(ctx) // expired: ends at once
		t.Fatalf("no MongoDB at %s (%s): %v", uri, EnvURI, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	db := client.Database("test_" + hex.EncodeToString(b))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	})
	return db
}

// Server is a private FerretDB process. Disconnect its clients with a
// short context: once the server is killed, Disconnect otherwise spends the
// client's server selection timeout (30 s by default) ending its sessions.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start runs a private FerretDB on a free loopback port, its data in a
// directory of the test's, until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(EnvFerretDB)
	if bin == "" {
		t.Fatalf("%s is not set: run the tests with make test, or under scripts/with-ferretdb.sh", EnvFerretDB)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()} // removed after Kill: cleanups run last first
	if err := os.Mkdir(filepath.Join(s.dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	for range 5 {
		s.port = freePort(t)
		if s.start() {
			return s
		}
	}
	t.Fatalf("FerretDB found no free port (the last was %d)", s.port)
	return nil
}

// URI is the server's connection string.
func (s *Server) URI() string { return fmt.Sprintf("mongodb://127.0.0.1:%d/", s.port) }

// Kill stops the server at once, as kill -9 would.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port, with the
// data it had.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if !s.start() {
		s.t.Fatalf("FerretDB could not listen on its port %d again: another process took it", s.port)
	}
}

// start runs the server on s.port and waits until it answers. It returns
// false when another process has the port (FerretDB then exits, or the one
// answering is not it), and fails the test on any other trouble.
func (s *Server) start() bool {
	s.t.Helper()
	logPath := filepath.Join(s.dir, "ferretdb.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer func() { _ = log.Close() }() // the child has its own descriptor
	s.cmd = exec.Command(s.bin,
		"--handler=sqlite", "--sqlite-url=file:"+filepath.Join(s.dir, "data")+"/", "--state-dir="+s.dir,
		"--listen-addr=127.0.0.1:"+strconv.Itoa(s.port), "--telemetry=disable",
		"--debug-addr=-", // no debug listener on 127.0.0.1:8088
		"--log-level=warn")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start FerretDB (%s): %v", s.bin, err)
	}
	done := make(chan struct{})
	s.done = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(done) }(s.cmd)

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case <-done:
			state := s.cmd.ProcessState
			s.cmd = nil
			out, _ := os.ReadFile(logPath)
			if strings.Contains(string(out), "address already in use") {
				return false
			}
			s.t.Fatalf("FerretDB on port %d exited (%v); its log:\n%s", s.port, state, out)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			s.Kill()
			out, _ := os.ReadFile(logPath)
			s.t.Fatalf("FerretDB on port %d did not accept connections in 10 s; its log:\n%s", s.port, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid, err := s.pid()
	if err != nil {
		s.Kill()
		out, _ := os.ReadFile(logPath)
		s.t.Fatalf("FerretDB on port %d does not answer: %v; its log:\n%s", s.port, err, out)
	}
	if pid != s.cmd.Process.Pid { // another server had the port
		s.Kill()
		return false
	}
	return true
}

// pid asks the server on s's port for its process id (serverStatus).
func (s *Server) pid() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Disconnect(ctx) }()
	var status struct {
		PID int64 `bson:"pid"`
	}
	if err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&status); err != nil {
		return 0, err
	}
	return int(status.PID), nil
}

func freePort(t testing.TB) int {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}
