package main

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// traceSink is the collector of the traced rows: an OTLP/gRPC trace
// receiver in this process that counts the spans a coordinator child
// exports and drops them. Its decoding is the bench process's CPU (the
// client's column), as a collector's would be another process's.
type traceSink struct {
	collectortrace.UnimplementedTraceServiceServer
	addr  string
	spans atomic.Int64
	srv   *grpc.Server
}

func startTraceSink() (*traceSink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &traceSink{addr: lis.Addr().String(), srv: grpc.NewServer()}
	collectortrace.RegisterTraceServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

func (s *traceSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	s.spans.Add(n)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (s *traceSink) stop() { s.srv.Stop() }

// tracedEnv is the environment of a coordinator child that traces every
// call and exports its spans to the sink, as OTEL_* variables would in a
// deployment (the batch processor's defaults).
func (s *traceSink) tracedEnv() []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + s.addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_TRACES_SAMPLER=always_on",
	}
}

// clientTracing is the SDK's tracer provider in the traced rows: every
// span sampled, through the batch processor, into an exporter that drops
// them, so that what is measured is the SDK's side of tracing without a
// second collector.
func clientTracing() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()),
	)
}

// counted runs a measurement of a traced row and notes the coordinator's
// spans that reached the sink a second (they arrive in batches, so the
// last of a measurement may count in the next).
func (s *traceSink) counted(measure func() result) (result, string) {
	before := s.spans.Load()
	r := measure()
	return r, fmt.Sprintf("%.0f", float64(s.spans.Load()-before)/r.elapsed.Seconds())
}
