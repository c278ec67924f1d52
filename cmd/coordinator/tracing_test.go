package main

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// collector is an OTLP/gRPC trace receiver on loopback that keeps what it
// is sent: "service.name/span name" and each span's attributes.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	spans []string
	attrs map[string]map[string]string
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: lis.Addr().String(), attrs: map[string]map[string]string{}}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				name := service + "/" + sp.GetName()
				c.spans = append(c.spans, name)
				attrs := map[string]string{}
				for _, a := range sp.GetAttributes() {
					attrs[a.GetKey()] = a.GetValue().GetStringValue()
				}
				c.attrs[name] = attrs
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// TestTracingExportsOverOTLPAndFlushesOnSIGTERM runs the binary with the
// standard OTEL_* variables pointing at a collector, makes one call, and
// stops it at once: the call's span and its store span reach the collector
// before the process exits, long before the batch processor's own delay.
func TestTracingExportsOverOTLPAndFlushesOnSIGTERM(t *testing.T) {
	col := startCollector(t)
	p := startBinary(t, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+col.addr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=60000")
	p.waitLog(t, regexp.MustCompile(`msg="tracing on: exporting spans over OTLP" protocol=grpc`))

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
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	for _, want := range []string{"coordinator/coordinator.v1.Coordinator/TryAcquire", "coordinator/store acquire"} {
		if !slices.Contains(col.spans, want) {
			t.Fatalf("the collector got %q; want %q among them", col.spans, want)
		}
	}
	if got := col.attrs["coordinator/store acquire"]; got["coordinator.store.script"] != "acquire" || got["coordinator.store.outcome"] != "acquired" {
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
