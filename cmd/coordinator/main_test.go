package main

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// TestBinaryServesAndShutsDownOnSIGTERM runs the real binary as `make run`
// does (configured through the environment), talks to it, and stops it the
// way an orchestrator would.
func TestBinaryServesAndShutsDownOnSIGTERM(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "coordinator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"COORDINATOR_LISTEN=127.0.0.1:0", "COORDINATOR_METRICS_LISTEN=", "COORDINATOR_LOG_FORMAT=text"}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	serving := regexp.MustCompile(`msg="coordinator serving" addr=(\S+)`)
	var addr string
	var log []string
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the coordinator exited before serving:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, line)
			if m := serving.FindStringSubmatch(line); m != nil {
				addr = m[1]
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no 'coordinator serving' line:\n%s", strings.Join(log, "\n"))
		}
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", resp, err)
	}
	resp, err := coordinatorv1.NewCoordinatorClient(conn).TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{
		Name: "demo/job", Holder: "alice", Ttl: durationpb.New(30 * time.Second),
	})
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("TryAcquire: %v, %v", resp, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for line := range lines {
			log = append(log, line)
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, strings.Join(log, "\n"))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the coordinator did not stop within its shutdown timeout")
	}
	if !strings.Contains(strings.Join(log, "\n"), "shutting down") {
		t.Fatalf("no shutdown line in the log:\n%s", strings.Join(log, "\n"))
	}
}

func TestBadConfigurationExitsWithUsageStatus(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "coordinator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"-store", "etcd"}, {"-max-ttl", "soon"}, {"stray"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("coordinator %v: %v\n%s; want exit status 2", args, err, out)
		}
	}
}
