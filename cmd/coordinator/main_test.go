package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/proctest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testcert"
)

// TestBinaryServesAndShutsDownOnSIGTERM runs the real binary as `make run`
// does (configured through the environment), talks to it, and stops it the
// way an orchestrator would.
func TestBinaryServesAndShutsDownOnSIGTERM(t *testing.T) {
	cmd := exec.Command(buildBinary(t))
	cmd.Env = []string{"COORDINATOR_LISTEN=127.0.0.1:0", "COORDINATOR_METRICS_LISTEN=", "COORDINATOR_LOG_FORMAT=text"}
	cmd.Dir = t.TempDir() // the default state directory is relative to it
	p := proctest.Start(t, cmd)
	addr := p.WaitLog(t, serving)[1]

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

	p.Signal(t, syscall.SIGTERM)
	select {
	case <-p.Done():
		if err := p.Wait(); err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Log())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the coordinator did not stop within its shutdown timeout")
	}
	if !strings.Contains(p.Log(), "shutting down") {
		t.Fatalf("no shutdown line in the log:\n%s", p.Log())
	}
}

func TestMain(m *testing.M) { proctest.Main(m) }

// buildBinary builds the coordinator the first time a test asks for it.
func buildBinary(t *testing.T) string { return proctest.Build(t, ".", ".") }

// serving is the line the coordinator logs (text format) once it serves.
var serving = regexp.MustCompile(`msg="coordinator serving" addr=(\S+)`)

// process is a coordinator binary running under a test, and its address.
type process struct {
	*proctest.Process
	addr string
}

// startBinary builds the coordinator and runs it with env until it serves.
func startBinary(t *testing.T, env ...string) *process {
	t.Helper()
	cmd := exec.Command(buildBinary(t))
	cmd.Env = append([]string{"COORDINATOR_LISTEN=127.0.0.1:0", "COORDINATOR_METRICS_LISTEN=", "COORDINATOR_LOG_FORMAT=text",
		"COORDINATOR_STATE_DIR=" + t.TempDir()}, env...)
	p := &process{Process: proctest.Start(t, cmd)}
	p.addr = p.WaitLog(t, serving)[1]
	return p
}

func TestSIGHUPReReadsTheAccessFileAndKeepsTheRulesOverABadOne(t *testing.T) {
	file := filepath.Join(t.TempDir(), "access")
	write := func(body string) {
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tok-a team-a/\n")
	p := startBinary(t, "COORDINATOR_ACCESS_FILE="+file)
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := coordinatorv1.NewCoordinatorClient(conn)
	describe := func(token, name string) codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		_, err := client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
		return status.Code(err)
	}
	if describe("tok-a", "team-a/x") != codes.OK || describe("tok-b", "team-b/x") != codes.Unauthenticated {
		t.Fatal("the first rules are not in force")
	}

	write("tok-a team-a/\ntok-b team-b/\n")
	p.Signal(t, syscall.SIGHUP)
	p.WaitLog(t, regexp.MustCompile(`msg="access file re-read".* credentials=2`))
	if describe("tok-b", "team-b/x") != codes.OK {
		t.Fatal("the rules re-read on SIGHUP are not in force")
	}

	write("tok-a team-a/\n# a new team, half written:\ntok-c\n")
	p.Signal(t, syscall.SIGHUP)
	p.WaitLog(t, regexp.MustCompile(`level=ERROR msg="access file refused; the previous rules stay in force".*line 3`))
	if describe("tok-b", "team-b/x") != codes.OK || describe("tok-c", "x") != codes.Unauthenticated {
		t.Fatal("the rules before the bad file are not in force")
	}
	p.Signal(t, syscall.SIGTERM)
	if err := p.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

func TestAPlaintextHealthPortServesProbesBesideATLSPort(t *testing.T) {
	cert := testcert.Write(t, "coordinator")
	p := startBinary(t, "COORDINATOR_TLS_CERT="+cert.Cert, "COORDINATOR_TLS_KEY="+cert.Key, "COORDINATOR_HEALTH_LISTEN=127.0.0.1:0")
	healthAddr := p.WaitLog(t, regexp.MustCompile(`msg="health serving.*" addr=(\S+)`))[1]
	conn, err := grpc.NewClient(healthAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, service := range []string{"", "coordinator.v1.Coordinator", "liveness"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) on the health port: %v, %v", service, resp, err)
		}
	}
	// Only health: the lease service is on the TLS port alone.
	_, err = coordinatorv1.NewCoordinatorClient(conn).Describe(ctx, &coordinatorv1.DescribeRequest{Name: "x"})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("Describe on the health port: %v; want Unimplemented", err)
	}
}

func TestVersionPrintsTheModuleAndTheRevisionWhateverTheEnvironment(t *testing.T) {
	cmd := exec.Command(buildBinary(t), "-version")
	cmd.Env = []string{"COORDINATOR_MAX_TTL=soon", "COORDINATOR_STORE=etcd"}
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "coordinator ") ||
		!strings.Contains(string(out), "\nmodule   github.com/coordinator-dev/coordinator ") || !strings.Contains(string(out), "\nrevision ") {
		t.Fatalf("coordinator -version: %v\n%s", err, out)
	}
}

func TestBadConfigurationExitsWithUsageStatus(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{{"-store", "etcd"}, {"-max-ttl", "soon"}, {"stray"}, {"-idle-name-ttl", "1m"}, {"-max-streams", "-1"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("coordinator %v: %v\n%s; want exit status 2", args, err, out)
		}
	}
}
