package main

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/otlptest"
)

// TestTracingExportsOverOTLPAndFlushesOnSIGTERM runs the binary with the
// standard OTEL_* variables pointing at a collector, makes one call, and
// stops it at once: the call's span and its store span reach the collector
// before the process exits, long before the batch processor's own delay.
func TestTracingExportsOverOTLPAndFlushesOnSIGTERM(t *testing.T) {
	col, addr := otlptest.Start(t)
	p := startBinary(t, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+addr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=60000")
	p.WaitLog(t, regexp.MustCompile(`msg="tracing on: exporting spans over OTLP" protocol=grpc`))

	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := coordinatorv1.NewCoordinatorClient(conn).TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "traced", Holder: "h", Ttl: durationpb.New(time.Minute)})
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("TryAcquire: %v, %v", resp, err)
	}
	p.Signal(t, syscall.SIGTERM)
	if err := p.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}

	for _, want := range []string{"coordinator/coordinator.v1.Coordinator/TryAcquire", "coordinator/store acquire"} {
		if !slices.Contains(col.Names(), want) {
			t.Fatalf("the collector got %q; want %q among them", col.Names(), want)
		}
	}
	st, _ := col.Find("coordinator/store acquire")
	if got := st.Attributes; got["coordinator.store.script"] != "acquire" || got["coordinator.store.outcome"] != "acquired" {
		t.Errorf("store span attributes %v", got)
	}
}

func TestABadTracingVariableFailsTheStartNamingIt(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin)
	cmd.Env = []string{"COORDINATOR_LISTEN=127.0.0.1:0", "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Fatalf("coordinator with OTEL_EXPORTER_OTLP_PROTOCOL=http/json: %v\n%s; want exit status 2 naming the variable", err, out)
	}
}
