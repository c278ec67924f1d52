// Package coordinatord is the coordinator process: its configuration, the
// store it opens, the gRPC server around server.Service with health (driven
// by the store's reachability), reflection, authentication and per-name
// access (server/access), caps (server/limits), a codec that reports
// undecodable requests as invalid (server/protocodec), logging, metrics,
// tracing when the OTEL_* variables turn it on (internal/telemetry,
// otelgrpc, server/store/storetrace; tracing.go), and the run loop that serves until a signal (SIGHUP re-reads the
// access file). cmd/coordinator is a thin main over it, and coordtest starts
// it whole for tests.
//
// # Layering
//
// The process layer, the top of the server side: only its binary
// (cmd/coordinator) and tests import it. It imports the service (server), the
// middleware (server/access, server/limits, server/protocodec), the store
// interface, both implementations and the tracing decorator, the generated
// API and leaves of internal/ (app, envflag, telemetry); never the SDK, the housekeeper or a test kit.
// Besides its own tests, it holds the service's tests through a whole
// coordinator.
package coordinatord
