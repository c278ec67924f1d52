package coordinatord

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/protocodec"
)

// The observer replaces go-grpc-middleware's logging and Prometheus
// interceptors on the unary path: it must write the same log line and the
// same series. Both run here on the same calls and their output is compared,
// times aside.
func TestCallObserverMatchesTheMiddlewareItReplaces(t *testing.T) {
	srv := grpc.NewServer()
	coordinatorv1.RegisterCoordinatorServer(srv, coordinatorv1.UnimplementedCoordinatorServer{})
	info := &grpc.UnaryServerInfo{FullMethod: coordinatorv1.Coordinator_TryAcquire_FullMethodName}

	var ours, theirs bytes.Buffer
	level := &slog.LevelVar{}
	newLog := func(w io.Writer) *slog.Logger {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	}
	oursLog, theirsLog := newLog(&ours), newLog(&theirs)
	metrics := newCallMetrics()
	metrics.init(srv)
	observer := (&callObserver{metrics: metrics, log: oursLog, level: callLogLevel, codec: protocodec.New(server.InvalidField)}).UnaryServerInterceptor()

	promMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	promMetrics.InitializeMetrics(srv)
	callLog := logging.LoggerFunc(func(ctx context.Context, l logging.Level, msg string, fields ...any) {
		theirsLog.Log(ctx, slog.Level(l), msg, fields...)
	})
	logged := logging.UnaryServerInterceptor(callLog, logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(callLogLevel))
	prom := promMetrics.UnaryServerInterceptor()
	middleware := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return prom(ctx, req, info, func(ctx context.Context, req any) (any, error) { return logged(ctx, req, info, handler) })
	}

	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}
	base := peer.NewContext(context.Background(), &peer.Peer{Addr: addr, LocalAddr: addr})
	withDeadline, cancel := context.WithTimeout(base, time.Hour)
	defer cancel()
	for _, call := range []struct {
		level slog.Level
		ctx   context.Context
		err   error
	}{
		{slog.LevelDebug, base, nil},
		{slog.LevelDebug, withDeadline, status.Error(codes.FailedPrecondition, "not held")},
		{slog.LevelInfo, withDeadline, status.Error(codes.Unavailable, "store down")},
		{slog.LevelInfo, base, status.Error(codes.Internal, "oops")},
		{slog.LevelInfo, base, context.Canceled},
		{slog.LevelInfo, base, nil}, // not logged at info
	} {
		level.Set(call.level)
		handler := func(context.Context, any) (any, error) {
			if call.err != nil {
				return nil, call.err
			}
			return &coordinatorv1.TryAcquireResponse{}, nil
		}
		req := &coordinatorv1.TryAcquireRequest{Name: "n"}
		_, errOurs := observer(call.ctx, req, info, handler)
		_, errTheirs := middleware(call.ctx, req, info, handler)
		if errOurs != errTheirs { //nolint:errorlint // the very same error
			t.Errorf("errors differ: %v, %v", errOurs, errTheirs)
		}
	}
	times := regexp.MustCompile(`(time|grpc\.start_time|grpc\.request\.deadline|grpc\.time_ms)=\S+`)
	if got, want := times.ReplaceAllString(ours.String(), "$1=T"), times.ReplaceAllString(theirs.String(), "$1=T"); got != want {
		t.Errorf("log lines differ:\nours:\n%s\nmiddleware's:\n%s", got, want)
	}
	if n := strings.Count(ours.String(), "\n"); n != 5 {
		t.Errorf("%d lines logged, want 5:\n%s", n, ours.String())
	}

	for _, name := range []string{"grpc_server_started_total", "grpc_server_handled_total", "grpc_server_msg_received_total", "grpc_server_msg_sent_total", "grpc_server_handling_seconds_count"} {
		got, want := gather(t, metrics, name), gather(t, promMetrics, name)
		if got != want {
			t.Errorf("%s differs:\nours:\n%s\nmiddleware's:\n%s", name, got, want)
		}
	}
}

// gather returns the series of the metric family name (or, for a
// histogram's _count, its sample counts) that c exports, one a line.
func gather(t *testing.T, c prometheus.Collector, name string) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	family := strings.TrimSuffix(name, "_count")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&out, "%s=%q ", l.GetName(), l.GetValue())
			}
			if h := m.GetHistogram(); h != nil {
				fmt.Fprintf(&out, "count %d\n", h.GetSampleCount())
			} else {
				fmt.Fprintf(&out, "%v\n", m.GetCounter().GetValue())
			}
		}
	}
	if out.Len() == 0 {
		t.Fatalf("no %s series", family)
	}
	return out.String()
}
