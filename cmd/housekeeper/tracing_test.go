package main

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/otlptest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

// TestTracedHousekeeperCallsJoinTheCoordinatorsTraces runs a coordinator
// and a housekeeper, both told by the OTEL_* variables to export to one
// collector: the housekeeper's List calls (the leader's membership checks)
// and the coordinator's handling of them are spans of the same traces, so
// the trace context crossed the processes.
func TestTracedHousekeeperCallsJoinTheCoordinatorsTraces(t *testing.T) {
	sink, addr := otlptest.Start(t)
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=100"}

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
	for deadline := time.Now().Add(60 * time.Second); !sink.Shared("housekeeper/"+method, "coordinator/"+method); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no trace holds the housekeeper's List and the coordinator's after 60s; spans: %v", sink.Spans())
		}
	}
}
