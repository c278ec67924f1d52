package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/otlptest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
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
	startHousekeeper(t, hkBin, coordAddr, token, prefix, "hk-traced", append(otel, "HOUSEKEEPER_METRICS_LISTEN=")...)

	const method = "coordinator.v1.Coordinator/List"
	testwait.Until(t, 60*time.Second, "a trace holding the housekeeper's List and the coordinator's", func() bool {
		return sink.Shared("housekeeper/"+method, "coordinator/"+method)
	})
}
