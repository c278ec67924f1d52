package telemetry

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/otlptest"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestFromEnvDecidesWhetherTracingIsOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
	}{
		{"nothing set", nil, false},
		{"unrelated OTEL_ variables", map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_HEADERS": "a=b"}, false},
		{"exporter otlp", map[string]string{EnvTracesExporter: "otlp"}, true},
		{"exporter OTLP, any case", map[string]string{EnvTracesExporter: " OTLP "}, true},
		{"an endpoint", map[string]string{EnvEndpoint: "http://localhost:4318"}, true},
		{"a traces endpoint", map[string]string{EnvTracesEndpoint: "http://localhost:4318/v1/traces"}, true},
		{"an empty endpoint", map[string]string{EnvEndpoint: ""}, false},
		{"exporter none beats an endpoint", map[string]string{EnvTracesExporter: "none", EnvEndpoint: "http://localhost:4318"}, false},
		{"none in a list wins", map[string]string{EnvTracesExporter: "otlp,none"}, false},
		{"SDK disabled beats the exporter", map[string]string{EnvSDKDisabled: "true", EnvTracesExporter: "otlp"}, false},
		{"SDK disabled, any case", map[string]string{EnvSDKDisabled: "TRUE", EnvEndpoint: "http://localhost:4318"}, false},
		{"SDK disabled false", map[string]string{EnvSDKDisabled: "false", EnvTracesExporter: "otlp"}, true},
		{"SDK disabled: not a bool reads as false", map[string]string{EnvSDKDisabled: "yes", EnvTracesExporter: "otlp"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromEnv(env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.Enabled != tc.on {
				t.Errorf("Enabled = %v, want %v", c.Enabled, tc.on)
			}
		})
	}
}

func TestFromEnvReadsProtocolSamplerAndPropagators(t *testing.T) {
	on := func(vars map[string]string) map[string]string {
		vars[EnvTracesExporter] = "otlp"
		return vars
	}
	for _, tc := range []struct {
		name        string
		env         map[string]string
		protocol    string
		sampler     string
		arg         float64
		propagators []string
	}{
		{"defaults", on(map[string]string{}), ProtocolHTTP, SamplerParentBasedAlwaysOn, 1, []string{"tracecontext", "baggage"}},
		{"grpc", on(map[string]string{EnvProtocol: "grpc"}), ProtocolGRPC, SamplerParentBasedAlwaysOn, 1, []string{"tracecontext", "baggage"}},
		{"the traces protocol wins", on(map[string]string{EnvProtocol: "grpc", EnvTracesProtocol: "http/protobuf"}), ProtocolHTTP, SamplerParentBasedAlwaysOn, 1, []string{"tracecontext", "baggage"}},
		{"ratio sampler", on(map[string]string{EnvSampler: "parentbased_traceidratio", EnvSamplerArg: "0.25"}), ProtocolHTTP, SamplerParentBasedRatio, 0.25, []string{"tracecontext", "baggage"}},
		{"an argument the sampler takes none of is ignored", on(map[string]string{EnvSampler: "always_on", EnvSamplerArg: "lots"}), ProtocolHTTP, SamplerAlwaysOn, 1, []string{"tracecontext", "baggage"}},
		{"tracecontext only", on(map[string]string{EnvPropagators: "tracecontext"}), ProtocolHTTP, SamplerParentBasedAlwaysOn, 1, []string{"tracecontext"}},
		{"no propagators", on(map[string]string{EnvPropagators: "none"}), ProtocolHTTP, SamplerParentBasedAlwaysOn, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromEnv(env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.Protocol != tc.protocol || c.Sampler != tc.sampler || c.SamplerArg != tc.arg || !slices.Equal(c.Propagators, tc.propagators) {
				t.Errorf("got protocol %q, sampler %q (%v), propagators %q; want %q, %q (%v), %q",
					c.Protocol, c.Sampler, c.SamplerArg, c.Propagators, tc.protocol, tc.sampler, tc.arg, tc.propagators)
			}
		})
	}
}

func TestFromEnvRefusesWhatItCannotHonourNamingTheVariable(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the variable the error names
	}{
		{"http/json has no Go exporter", map[string]string{EnvEndpoint: "x", EnvProtocol: "http/json"}, EnvProtocol},
		{"a misspelt protocol", map[string]string{EnvEndpoint: "x", EnvProtocol: "gprc"}, EnvProtocol},
		{"a bad traces protocol", map[string]string{EnvEndpoint: "x", EnvTracesProtocol: "udp"}, EnvTracesProtocol},
		{"an unknown exporter", map[string]string{EnvTracesExporter: "zipkin"}, EnvTracesExporter},
		{"an unknown sampler", map[string]string{EnvTracesExporter: "otlp", EnvSampler: "jaeger_remote"}, EnvSampler},
		{"a ratio that is no number", map[string]string{EnvTracesExporter: "otlp", EnvSampler: "traceidratio", EnvSamplerArg: "half"}, EnvSamplerArg},
		{"a ratio above 1", map[string]string{EnvTracesExporter: "otlp", EnvSampler: "traceidratio", EnvSamplerArg: "2"}, EnvSamplerArg},
		{"an unknown propagator", map[string]string{EnvTracesExporter: "otlp", EnvPropagators: "b3"}, EnvPropagators},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromEnv(env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want+":") {
				t.Fatalf("FromEnv = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestFromEnvIgnoresTheSettingsOfTracingWhenItIsOff(t *testing.T) {
	for _, vars := range []map[string]string{
		{EnvProtocol: "http/json", EnvSampler: "xray", EnvPropagators: "b3"},
		{EnvTracesExporter: "none", EnvEndpoint: "http://c:4318", EnvProtocol: "http/json"},
		{EnvSDKDisabled: "true", EnvTracesExporter: "zipkin"},
	} {
		c, err := FromEnv(env(vars))
		if err != nil || c.Enabled {
			t.Errorf("FromEnv(%v) = %+v, %v; want tracing off, and no error for settings it does not use", vars, c, err)
		}
	}
}

func TestFromEnvWarnsOfASDKDisabledThatIsNoBool(t *testing.T) {
	c, err := FromEnv(env(map[string]string{EnvSDKDisabled: "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], EnvSDKDisabled) {
		t.Fatalf("warnings %q, want one naming %s", c.Warnings, EnvSDKDisabled)
	}
}

// TestShutdownFlushesSpansOverEitherProtocol ends a span and shuts down at
// once, well before the batch processor's own delay (5 s): the span must
// reach the collector, over gRPC and over HTTP, with the service name of
// OTEL_SERVICE_NAME.
func TestShutdownFlushesSpansOverEitherProtocol(t *testing.T) {
	sink, addr := otlptest.Start(t)
	web := sink.ServeHTTP(t)

	for _, tc := range []struct {
		protocol, endpoint string
	}{
		{ProtocolGRPC, "http://" + addr},
		{ProtocolHTTP, web},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			vars := map[string]string{EnvEndpoint: tc.endpoint, EnvProtocol: tc.protocol, "OTEL_SERVICE_NAME": "svc-" + tc.protocol}
			for k, v := range vars {
				t.Setenv(k, v) // the exporter and the resource read the process's environment
			}
			cfg, err := FromEnv(env(vars))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr, err := Start(ctx, cfg, Service{Name: "default-name", Version: "1.2.3"}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			_, span := tr.Provider.Tracer("test").Start(ctx, "flushed-"+tc.protocol)
			span.End()
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			want := "svc-" + tc.protocol + "/flushed-" + tc.protocol
			if !slices.Contains(sink.Names(), want) {
				t.Fatalf("the collector got %q, want %q among them", sink.Names(), want)
			}
		})
	}
}

func TestStartRefusesAConfigThatIsOff(t *testing.T) {
	if _, err := Start(context.Background(), Config{}, Service{Name: "x"}, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("Start of a disabled config succeeded")
	}
}
