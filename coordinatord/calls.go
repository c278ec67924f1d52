package coordinatord

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/server/protocodec"
)

// callMetrics are the grpc_server_* series of go-grpc-middleware's Prometheus
// provider (same names, help, labels, buckets and meaning), kept here so that
// a unary call, the hot path, costs no label lookup: every method's series
// are resolved once, before serving.
type callMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec
	// methods is filled by init, before serving, and only read after.
	methods map[string]*methodMetrics // by full method name
}

// numCodes is the number of gRPC codes (OK through Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// methodMetrics are one method's series.
type methodMetrics struct {
	started, received, sent prometheus.Counter
	handling                prometheus.Observer
	handled                 [numCodes]prometheus.Counter
	labels                  [3]string // type, service, method
}

func newCallMetrics() *callMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	return &callMetrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_started_total",
			Help: "Total number of RPCs started on the server.",
		}, labels),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_handled_total",
			Help: "Total number of RPCs completed on the server, regardless of success or failure.",
		}, append(labels[:3:3], "grpc_code")),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_msg_received_total",
			Help: "Total number of RPC stream messages received on the server.",
		}, labels),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_msg_sent_total",
			Help: "Total number of gRPC stream messages sent by the server.",
		}, labels),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: prometheus.DefBuckets,
		}, labels),
		methods: map[string]*methodMetrics{},
	}
}

// Describe implements prometheus.Collector.
func (m *callMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.started.Describe(ch)
	m.handled.Describe(ch)
	m.received.Describe(ch)
	m.sent.Describe(ch)
	m.handling.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *callMetrics) Collect(ch chan<- prometheus.Metric) {
	m.started.Collect(ch)
	m.handled.Collect(ch)
	m.received.Collect(ch)
	m.sent.Collect(ch)
	m.handling.Collect(ch)
}

// init resolves (and so exports, at zero) the series of every method srv
// serves. Call it once every service is registered, before serving.
func (m *callMetrics) init(srv *grpc.Server) {
	for service, info := range srv.GetServiceInfo() {
		for _, method := range info.Methods {
			full := "/" + service + "/" + method.Name
			m.methods[full] = m.resolve(methodType(method.IsClientStream, method.IsServerStream), service, method.Name)
		}
	}
}

func (m *callMetrics) resolve(typ interceptors.GRPCType, service, method string) *methodMetrics {
	mm := &methodMetrics{labels: [3]string{string(typ), service, method}}
	l := mm.labels[:]
	mm.started = m.started.WithLabelValues(l...)
	mm.received = m.received.WithLabelValues(l...)
	mm.sent = m.sent.WithLabelValues(l...)
	mm.handling = m.handling.WithLabelValues(l...)
	for _, code := range interceptors.AllCodes {
		mm.handled[code] = m.handled.WithLabelValues(string(typ), service, method, code.String())
	}
	return mm
}

// method returns the series of a call; one gRPC did not list (none should
// reach here) is resolved on the spot.
func (m *callMetrics) method(fullMethod string, typ interceptors.GRPCType) *methodMetrics {
	if mm := m.methods[fullMethod]; mm != nil {
		return mm
	}
	service, method := splitMethod(fullMethod)
	return m.resolve(typ, service, method)
}

// done counts a finished call as the provider does: a context error counts
// under its own code.
func (mm *methodMetrics) done(err error, elapsed time.Duration) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	if code := st.Code(); int(code) < numCodes {
		mm.handled[code].Inc()
	} else {
		mm.handled[codes.Unknown].Inc()
	}
	mm.handling.Observe(elapsed.Seconds())
}

func methodType(clientStream, serverStream bool) interceptors.GRPCType {
	switch {
	case !clientStream && !serverStream:
		return interceptors.Unary
	case clientStream && !serverStream:
		return interceptors.ClientStream
	case !clientStream && serverStream:
		return interceptors.ServerStream
	}
	return interceptors.BidiStream
}

// splitMethod splits "/service/method" as go-grpc-middleware does.
func splitMethod(fullMethod string) (service, method string) {
	fullMethod = strings.TrimPrefix(fullMethod, "/")
	if i := strings.Index(fullMethod, "/"); i >= 0 {
		return fullMethod[:i], fullMethod[i+1:]
	}
	return "unknown", "unknown"
}

// serviceOf is the service of a full method name, as splitMethod has it.
func serviceOf(fullMethod string) string {
	s, _ := splitMethod(fullMethod)
	return s
}

// callObserver is the first interceptor of every unary call: it counts the
// call in callMetrics, writes the "finished call" line that
// go-grpc-middleware's logging interceptor writes (same message, fields and
// levels, its fields built only when the line is written), and answers a
// request that the codec could not decode.
type callObserver struct {
	metrics *callMetrics
	log     *slog.Logger
	level   func(codes.Code) logging.Level
	codec   *protocodec.Codec
}

// UnaryServerInterceptor observes unary calls.
func (o *callObserver) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		mm := o.metrics.method(info.FullMethod, interceptors.Unary)
		mm.started.Inc()
		mm.received.Inc()
		var resp any
		err := o.codec.Err(req)
		if err == nil {
			resp, err = handler(ctx, req)
		}
		if err == nil {
			mm.sent.Inc()
		}
		elapsed := time.Since(start)
		mm.done(err, elapsed)
		o.finished(ctx, mm, start, elapsed, err)
		return resp, err
	}
}

// finished writes the log line of a finished unary call, when its level is
// enabled, with the fields go-grpc-middleware's logging interceptor gives it.
func (o *callObserver) finished(ctx context.Context, mm *methodMetrics, start time.Time, elapsed time.Duration, err error) {
	if errors.Is(err, io.EOF) {
		err = nil
	}
	code := status.Code(err)
	level := slog.Level(o.level(code))
	if !o.log.Enabled(ctx, level) {
		return
	}
	fields := make([]any, 0, 22)
	fields = append(fields,
		logging.SystemTag[0], logging.SystemTag[1],
		logging.ComponentFieldKey, logging.KindServerFieldValue,
		logging.ServiceFieldKey, mm.labels[1],
		logging.MethodFieldKey, mm.labels[2],
		logging.MethodTypeFieldKey, mm.labels[0])
	if p, ok := peer.FromContext(ctx); ok {
		fields = append(fields, "peer.address", p.Addr.String())
	}
	fields = append(fields, "grpc.start_time", start.Format(time.RFC3339))
	if d, ok := ctx.Deadline(); ok {
		fields = append(fields, "grpc.request.deadline", d.Format(time.RFC3339))
	}
	fields = append(fields, "grpc.code", code.String())
	if err != nil {
		fields = append(fields, "grpc.error", fmt.Sprintf("%v", err))
	}
	fields = append(fields, logging.DurationToTimeMillisFields(elapsed)...)
	o.log.Log(ctx, level, "finished call", fields...)
}

// StreamServerInterceptor counts streams in callMetrics (their log lines and
// codec checks are the interceptors' that follow it).
func (o *callObserver) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		mm := o.metrics.method(info.FullMethod, methodType(info.IsClientStream, info.IsServerStream))
		mm.started.Inc()
		err := handler(srv, &countedStream{ServerStream: ss, mm: mm})
		mm.done(err, time.Since(start))
		return err
	}
}

// countedStream counts a stream's messages.
type countedStream struct {
	grpc.ServerStream
	mm *methodMetrics
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.mm.sent.Inc()
	}
	return err
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.mm.received.Inc()
	}
	return err
}

// forService runs ic on the calls match selects by service, as
// go-grpc-middleware's selector does, without building a CallMeta per call.
func forService(match func(service string) bool, ic grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if match(serviceOf(info.FullMethod)) {
			return ic(ctx, req, info, handler)
		}
		return handler(ctx, req)
	}
}
