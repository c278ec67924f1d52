package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The variables FromEnv reads.
const (
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvSampler        = "OTEL_TRACES_SAMPLER"
	EnvSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
	EnvPropagators    = "OTEL_PROPAGATORS"
)

// The OTLP transports (OTEL_EXPORTER_OTLP_PROTOCOL). http/json, the spec's
// third, has no Go exporter.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// The samplers of OTEL_TRACES_SAMPLER that the Go SDK has.
const (
	SamplerAlwaysOn             = "always_on"
	SamplerAlwaysOff            = "always_off"
	SamplerTraceIDRatio         = "traceidratio"
	SamplerParentBasedAlwaysOn  = "parentbased_always_on"
	SamplerParentBasedAlwaysOff = "parentbased_always_off"
	SamplerParentBasedRatio     = "parentbased_traceidratio"
)

var samplers = []string{
	SamplerAlwaysOn, SamplerAlwaysOff, SamplerTraceIDRatio,
	SamplerParentBasedAlwaysOn, SamplerParentBasedAlwaysOff, SamplerParentBasedRatio,
}

// Config is what the environment asks of tracing.
type Config struct {
	// Enabled turns tracing on; the other fields matter only then.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTP (the spec's default).
	Protocol string
	// Sampler is one of the Sampler constants (default
	// parentbased_always_on), SamplerArg the ratio of the ratio samplers
	// (default 1).
	Sampler    string
	SamplerArg float64
	// Propagators are the W3C formats read from and written to calls:
	// "tracecontext" and "baggage" (the default is both; OTEL_PROPAGATORS=none
	// is none).
	Propagators []string
	// Warnings are values the spec says to ignore with a warning; the caller
	// logs them.
	Warnings []string
}

// FromEnv reads the tracing configuration from the environment (lookupEnv
// is os.LookupEnv). A value it cannot honour is an error that names its
// variable, when tracing is on (or OTEL_TRACES_EXPORTER names an exporter
// it does not have); other OTEL_* variables are left to the exporter and
// the SDK, which read them when Start builds those.
func FromEnv(lookupEnv func(string) (string, bool)) (Config, error) {
	get := func(name string) string {
		v, _ := lookupEnv(name)
		return strings.TrimSpace(v)
	}
	var c Config
	switch disabled := strings.ToLower(get(EnvSDKDisabled)); disabled {
	case "true":
		return c, nil
	case "", "false":
	default:
		// The spec: anything but "true" is false, with a warning.
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%q is neither true nor false: read as false", EnvSDKDisabled, disabled))
	}

	var errs []error
	switch exporters := get(EnvTracesExporter); exporters {
	case "":
		c.Enabled = get(EnvEndpoint) != "" || get(EnvTracesEndpoint) != ""
	default:
		for _, e := range strings.Split(exporters, ",") {
			switch e = strings.TrimSpace(strings.ToLower(e)); e {
			case "otlp":
				c.Enabled = true
			case "none":
			default:
				errs = append(errs, fmt.Errorf("%s: exporter %q is not supported (otlp or none)", EnvTracesExporter, e))
			}
		}
		if slices.Contains(strings.Split(strings.ToLower(exporters), ","), "none") {
			c.Enabled = false // none wins, as the spec has it
		}
	}
	if len(errs) > 0 || !c.Enabled {
		// The rest matters only to tracing: variables set for other
		// programs (http/json, say) do not stop a process that does not
		// trace.
		return Config{Warnings: c.Warnings}, errors.Join(errs...)
	}

	protocolVar, protocol := EnvTracesProtocol, get(EnvTracesProtocol)
	if protocol == "" {
		protocolVar, protocol = EnvProtocol, get(EnvProtocol)
	}
	switch protocol {
	case "":
		c.Protocol = ProtocolHTTP
	case ProtocolGRPC, ProtocolHTTP:
		c.Protocol = protocol
	default:
		errs = append(errs, fmt.Errorf("%s: %q is not supported (%s or %s)", protocolVar, protocol, ProtocolGRPC, ProtocolHTTP))
	}

	c.Sampler, c.SamplerArg = SamplerParentBasedAlwaysOn, 1
	if s := strings.ToLower(get(EnvSampler)); s != "" {
		if slices.Contains(samplers, s) {
			c.Sampler = s
		} else {
			errs = append(errs, fmt.Errorf("%s: %q is not supported (%s)", EnvSampler, s, strings.Join(samplers, ", ")))
		}
	}
	if arg := get(EnvSamplerArg); arg != "" && (c.Sampler == SamplerTraceIDRatio || c.Sampler == SamplerParentBasedRatio) {
		ratio, err := strconv.ParseFloat(arg, 64)
		if err != nil || ratio < 0 || ratio > 1 {
			errs = append(errs, fmt.Errorf("%s: %q is not a ratio from 0 to 1", EnvSamplerArg, arg))
		}
		c.SamplerArg = ratio
	}

	c.Propagators = []string{"tracecontext", "baggage"}
	if p := get(EnvPropagators); p != "" {
		c.Propagators = nil
		for _, name := range strings.Split(p, ",") {
			switch name = strings.TrimSpace(strings.ToLower(name)); name {
			case "tracecontext", "baggage":
				if !slices.Contains(c.Propagators, name) {
					c.Propagators = append(c.Propagators, name)
				}
			case "none", "":
			default:
				errs = append(errs, fmt.Errorf("%s: %q is not supported (tracecontext, baggage or none)", EnvPropagators, name))
			}
		}
		if slices.Contains(strings.Split(strings.ToLower(p), ","), "none") {
			c.Propagators = nil
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Propagator returns the propagators of Propagators, composed.
func (c Config) Propagator() propagation.TextMapPropagator {
	var ps []propagation.TextMapPropagator
	for _, name := range c.Propagators {
		switch name {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...)
}

// sampler returns the sampler that Sampler and SamplerArg name.
func (c Config) sampler() sdktrace.Sampler {
	switch c.Sampler {
	case SamplerAlwaysOn:
		return sdktrace.AlwaysSample()
	case SamplerAlwaysOff:
		return sdktrace.NeverSample()
	case SamplerTraceIDRatio:
		return sdktrace.TraceIDRatioBased(c.SamplerArg)
	case SamplerParentBasedAlwaysOff:
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case SamplerParentBasedRatio:
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SamplerArg))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// Service names the process in its spans' resource: service.name, unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
// otherwise, and service.version.
type Service struct {
	Name, Version string
}

// Tracing is a running tracer provider and the propagator of the calls.
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
	sdk        *sdktrace.TracerProvider
}

// Start builds the exporter, the batch span processor and the tracer
// provider that cfg asks for, and routes the SDK's own errors (a failed
// export, say) to log. Nothing is sent before the first span ends: an
// unreachable collector does not fail the start. Call it only when
// cfg.Enabled; Shutdown flushes what is still buffered.
func Start(ctx context.Context, cfg Config, svc Service, log *slog.Logger) (*Tracing, error) {
	if !cfg.Enabled {
		return nil, errors.New("telemetry: tracing is not enabled")
	}
	var client otlptrace.Client
	switch cfg.Protocol {
	case ProtocolGRPC:
		client = otlptracegrpc.NewClient()
	default:
		client = otlptracehttp.NewClient()
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter (%s): %w", cfg.Protocol, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(svc.Name), semconv.ServiceVersion(svc.Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: after ours, so they win
	)
	if err != nil {
		_ = exporter.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing", "err", err)
	}))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(cfg.sampler()),
	)
	return &Tracing{Provider: tp, Propagator: cfg.Propagator(), sdk: tp}, nil
}

// Shutdown ends the tracer provider: spans still buffered are exported,
// within ctx.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush at shutdown: %w", err)
	}
	return nil
}
