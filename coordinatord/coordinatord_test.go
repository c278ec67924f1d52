package coordinatord_test

import (
	"context"
	"flag"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/coordinatord"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

func TestHealthReportsServingUntilShutdown(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	health := healthpb.NewHealthClient(c.conn)
	for _, service := range []string{"", "coordinator.v1.Coordinator"} {
		resp, err := health.Check(servertest.Timeout(t, 5*time.Second), &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v, %v", service, resp, err)
		}
	}
}

func TestReflectionListsTheService(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	stream, err := reflectionpb.NewServerReflectionClient(c.conn).ServerReflectionInfo(servertest.Timeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "coordinator.v1.Coordinator") {
		t.Fatalf("reflection lists %v", names)
	}
}

func TestMetricsCountLeaseOutcomes(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	if !servertest.Acquire(t, c.client, "m", "a", time.Minute, 0).GetAcquired() {
		t.Fatal("a could not acquire m")
	}
	servertest.Acquire(t, c.client, "m", "b", time.Minute, 0)
	_, _ = c.client.Renew(context.Background(), &coordinatorv1.RenewRequest{Name: "m", Holder: "b", Token: 1, Ttl: durationpb.New(time.Second)})
	// A session's renewal refused counts as a lease's: it is how an SDK
	// learns that its leases are lost.
	sess, err := c.client.CreateSession(context.Background(), &coordinatorv1.CreateSessionRequest{Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.GetSession().GetId()
	if _, err := c.client.CloseSession(context.Background(), &coordinatorv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.RenewSession(context.Background(), &coordinatorv1.RenewSessionRequest{SessionId: id}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("RenewSession of a closed session: %v; want FailedPrecondition", err)
	}

	rec := httptest.NewRecorder()
	c.Server().MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`coordinator_acquire_total{outcome="acquired"} 1`,
		`coordinator_acquire_total{outcome="not_acquired"} 1`,
		`coordinator_acquire_contended_total 1`,
		`coordinator_renew_failures_total{reason="not_held"} 2`,
		`coordinator_leases_held 1`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="TryAcquire"`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestAuthTokenIsRequiredButForHealth(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.AuthToken = "s3cret"
	c := start(t, cfg)
	req := &coordinatorv1.DescribeRequest{Name: "x"}

	_, err := c.client.Describe(servertest.Timeout(t, 5*time.Second), req)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v; want Unauthenticated", err)
	}
	wrong := metadata.AppendToOutgoingContext(servertest.Timeout(t, 5*time.Second), "authorization", "Bearer nope")
	if _, err := c.client.Describe(wrong, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("with a wrong token: %v; want Unauthenticated", err)
	}
	right := metadata.AppendToOutgoingContext(servertest.Timeout(t, 5*time.Second), "authorization", "Bearer s3cret")
	if _, err := c.client.Describe(right, req); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if _, err := healthpb.NewHealthClient(c.conn).Check(servertest.Timeout(t, 5*time.Second), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check without a token: %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(coordinatord.Config) bool
		wantErr string
	}{
		{"defaults", nil, nil, func(c coordinatord.Config) bool {
			return c.Listen == "127.0.0.1:7400" && c.Store == "memory" && c.MaxTTL == 5*time.Minute && c.DataLossQuarantine == 5*time.Minute
		}, ""},
		{"env", nil, map[string]string{"COORDINATOR_STORE": "redis", "COORDINATOR_MAX_TTL": "1m", "COORDINATOR_LISTEN": ":9000"}, func(c coordinatord.Config) bool {
			return c.Store == "redis" && c.MaxTTL == time.Minute && c.DataLossQuarantine == time.Minute && c.Listen == ":9000"
		}, ""},
		{"flag beats env", []string{"-store", "memory"}, map[string]string{"COORDINATOR_STORE": "redis"}, func(c coordinatord.Config) bool {
			return c.Store == "memory"
		}, ""},
		{"quarantine off", nil, map[string]string{"COORDINATOR_DATA_LOSS_QUARANTINE": "0"}, func(c coordinatord.Config) bool {
			return c.DataLossQuarantine == 0
		}, ""},
		{"unknown store", []string{"-store", "etcd"}, nil, nil, "store"},
		{"bad duration", nil, map[string]string{"COORDINATOR_MAX_TTL": "soon"}, nil, "COORDINATOR_MAX_TTL"},
		{"negative quarantine", []string{"-data-loss-quarantine", "-1s"}, nil, nil, "data-loss-quarantine"},
		{"key without cert", []string{"-tls-key", "k.pem"}, nil, nil, "tls-cert"},
		{"braces in prefix", []string{"-redis-key-prefix", "a{b}"}, nil, nil, "redis-key-prefix"},
		{"stray argument", []string{"serve"}, nil, nil, "serve"},
		{"idle name TTL defaults to ten minutes", nil, nil, func(c coordinatord.Config) bool {
			return c.IdleNameTTL == 10*time.Minute && c.StoreTimeout == 2*time.Second
		}, ""},
		{"idle name TTL outlives a long max TTL and lock delay", []string{"-max-ttl", "15m", "-lock-delay", "1m"}, nil, func(c coordinatord.Config) bool {
			return c.IdleNameTTL == 16*time.Minute
		}, ""},
		{"idle name TTL and store timeout from env", nil, map[string]string{"COORDINATOR_IDLE_NAME_TTL": "1h", "COORDINATOR_STORE_TIMEOUT": "750ms"}, func(c coordinatord.Config) bool {
			return c.IdleNameTTL == time.Hour && c.StoreTimeout == 750*time.Millisecond
		}, ""},
		{"idle name TTL below max TTL plus lock delay", []string{"-idle-name-ttl", "5m", "-lock-delay", "1s"}, nil, nil, "idle-name-ttl: 5m0s is below max-ttl + lock-delay (5m0s + 1s)"},
		{"store timeout zero", []string{"-store-timeout", "0"}, nil, nil, "store-timeout"},
		{"access file", nil, map[string]string{"COORDINATOR_ACCESS_FILE": "/etc/coordinator/access"}, func(c coordinatord.Config) bool {
			return c.AccessFile == "/etc/coordinator/access"
		}, ""},
		{"tracing off by default", nil, nil, func(c coordinatord.Config) bool { return !c.Tracing.Enabled }, ""},
		{"tracing on with an OTLP endpoint", nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, func(c coordinatord.Config) bool {
			return c.Tracing.Enabled && c.Tracing.Protocol == "grpc"
		}, ""},
		{"tracing: a bad protocol fails the start", nil, map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grcp"}, nil, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"tracing: an unsupported exporter fails the start", nil, map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, nil, "OTEL_TRACES_EXPORTER"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, tc.args, tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(cfg) {
				t.Fatalf("ParseConfig = %+v, %v", cfg, err)
			}
		})
	}
}

// parse parses a configuration from args and an environment of env only.
func parse(t *testing.T, args []string, env map[string]string) (coordinatord.Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return coordinatord.ParseConfig(fs, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}
