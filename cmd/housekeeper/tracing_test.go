package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

// spanSink is an OTLP/gRPC trace receiver that keeps, for each
// "service.name/span name", the trace ids of its spans.
type spanSink struct {
	collectortrace.UnimplementedTraceServiceServer
	mu     sync.Mutex
	traces map[string]map[string]bool
}

func (s *spanSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
				if s.traces[name] == nil {
					s.traces[name] = map[string]bool{}
				}
				s.traces[name][hex.EncodeToString(sp.GetTraceId())] = true
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// shared reports whether some trace holds spans named a and b.
func (s *spanSink) shared(a, b string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.traces[a] {
		if s.traces[b][id] {
			return true
		}
	}
	return false
}

// TestTracedHousekeeperCallsJoinTheCoordinatorsTraces runs a coordinator
// and a housekeeper, both told by the OTEL_* variables to export to one
// collector: the housekeeper's List calls (the leader's membership checks)
// and the coordinator's handling of them are spans of the same traces, so
// the trace context crossed the processes.
func TestTracedHousekeeperCallsJoinTheCoordinatorsTraces(t *testing.T) {
	sink := &spanSink{traces: map[string]map[string]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + lis.Addr().String(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=100"}

	const token = "s3cret"
	hkBin, coordBin := buildBinaries(t)
	coordAddr := startCoordinator(t, coordBin, redistest.URL(t), token, otel...)
	prefix := fmt.Sprintf("hk-trace-%d", time.Now().UnixNano())
	cmd := exec.Command(hkBin)
	cmd.Env = append(append(os.Environ(),
		"HOUSEKEEPER_COORDINATOR_ADDR="+coordAddr,
		"HOUSEKEEPER_COORDINATOR_TOKEN="+token,
		"HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN=true",
		"HOUSEKEEPER_REDIS_URL="+redistest.URL(t),
		"HOUSEKEEPER_PREFIX="+prefix,
		"HOUSEKEEPER_LEASE_NAMESPACE="+prefix,
		"HOUSEKEEPER_INSTANCE_ID=hk-traced",
		"HOUSEKEEPER_METRICS_LISTEN=",
	), otel...)
	cmd.Stderr = &prefixWriter{t: t, prefix: "housekeeper: "}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	const method = "coordinator.v1.Coordinator/List"
	for deadline := time.Now().Add(60 * time.Second); !sink.shared("housekeeper/"+method, "coordinator/"+method); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			sink.mu.Lock()
			t.Fatalf("no trace holds the housekeeper's List and the coordinator's after 60s; spans by name: %v", sink.traces)
		}
	}
}
