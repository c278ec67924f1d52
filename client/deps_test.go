package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheSDKDependsOnNoOpenTelemetrySDK: the SDK is imported by programs
// that choose their own tracing, so of OpenTelemetry it needs only the API
// and otelgrpc; the SDK proper and its exporters stay the program's choice
// (they come with a batch processor, a gRPC or HTTP client of their own…).
func TestTheSDKDependsOnNoOpenTelemetrySDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var otel int
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(pkg, "go.opentelemetry.io/otel/sdk"), strings.HasPrefix(pkg, "go.opentelemetry.io/otel/exporters"):
			t.Errorf("the SDK depends on %s", pkg)
		case strings.HasPrefix(pkg, "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"):
			otel++
		}
	}
	if otel == 0 {
		t.Error("go list shows no otelgrpc: is the output what this test thinks it is?")
	}
}
