// Package telemetry sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables, for the binaries: which variables turn it on, the
// OTLP exporter over gRPC or HTTP, the sampler, the propagators and the
// resource, and the flush at shutdown.
//
// Tracing is off unless asked for, which is stricter than the OTel spec's
// default exporter (otlp): a process whose environment says nothing about
// tracing exports nothing and pays nothing. It is on when
// OTEL_TRACES_EXPORTER is otlp, or, with OTEL_TRACES_EXPORTER unset, when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set;
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none keep it off whatever
// else is set. FromEnv reads the variables that decide what is built and
// refuses bad values naming the variable, so that a typo fails the start
// instead of silently exporting nothing; the exporters and the batch span
// processor read their own (endpoint, headers, timeout, TLS, compression,
// OTEL_BSP_*) as the OTel SDK documents them.
//
// It is a leaf, like every package in internal/: it imports nothing of this
// module.
package telemetry
