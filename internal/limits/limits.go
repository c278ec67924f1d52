// Package limits caps what callers may hold in one coordinator: open streams
// and waiting calls, per client connection and in total, and leases per
// holder. A call over a cap fails at once with ResourceExhausted, naming the
// cap and its setting, and is counted in coordinator_limit_refusals_total;
// nothing else is disturbed.
//
// Every cap is per coordinator process: leases granted through another
// coordinator of the same store are not counted here.
package limits

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// Config holds the caps; 0 means no cap.
type Config struct {
	StreamsPerConn  int
	Streams         int
	WaitsPerConn    int
	Waits           int
	LeasesPerHolder int
}

// Defaults fit a coordinator of 2 cores and 1 GiB. An open stream costs
// about 21 KiB (20,000 Observe streams took 433 MB) and a waiting call about
// as much, and Go's collector wants as much again in headroom: 10,000
// streams and 5,000 waiting calls keep the worst case near 600 MB. One
// connection may take a fifth of the streams and two fifths of the waits,
// so that no single client can exhaust them alone. A holder may hold 10,000
// leases: what one KeepAlive stream renews comfortably, and far beyond what
// a process needs unless it leaks them.
const (
	DefaultStreamsPerConn  = 2000
	DefaultStreams         = 10000
	DefaultWaitsPerConn    = 2000
	DefaultWaits           = 5000
	DefaultLeasesPerHolder = 10000
)

// Label values of coordinator_limit_refusals_total, and the settings that
// set each cap: a refusal names both, so that whoever reads it knows what to
// change.
var (
	StreamsPerConn  = Cap{"streams_per_connection", "open streams on this connection", "max-streams-per-conn", "COORDINATOR_MAX_STREAMS_PER_CONN"}
	Streams         = Cap{"streams", "open streams on this coordinator", "max-streams", "COORDINATOR_MAX_STREAMS"}
	WaitsPerConn    = Cap{"waits_per_connection", "waiting calls on this connection", "max-waits-per-conn", "COORDINATOR_MAX_WAITS_PER_CONN"}
	Waits           = Cap{"waits", "waiting calls on this coordinator", "max-waits", "COORDINATOR_MAX_WAITS"}
	LeasesPerHolder = Cap{"leases_per_holder", "leases held by this holder through this coordinator", "max-leases-per-holder", "COORDINATOR_MAX_LEASES_PER_HOLDER"}
)

// Cap names one cap: its metric label, what it counts, and its setting.
type Cap struct {
	Label, What, Flag, Env string
}

// refused counts a refusal, logs it when the cap's last line is old enough,
// and returns the ResourceExhausted error.
func (l *Limiter) refused(c Cap, limit int, subject string) error {
	l.refusals.WithLabelValues(c.Label).Inc()
	l.logMu.Lock()
	l.unlogged[c.Label]++
	n := l.unlogged[c.Label]
	now := time.Now()
	due := now.Sub(l.lastLog[c.Label]) >= refusalLogEvery
	if due {
		l.lastLog[c.Label], l.unlogged[c.Label] = now, 0
	}
	l.logMu.Unlock()
	if due {
		l.log.Warn("a cap was reached: calls refused with ResourceExhausted", "limit", c.Label, "max", limit,
			"setting", c.Env, "refused", n, "subject", subject)
	}
	return c.refuse(limit, subject)
}

func (c Cap) refuse(limit int, subject string) error {
	msg := fmt.Sprintf("too many %s: the limit is %d (-%s, $%s)", c.What, limit, c.Flag, c.Env)
	st := status.New(codes.ResourceExhausted, msg)
	if withDetails, err := st.WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject: subject, Description: msg,
	}}}); err == nil {
		st = withDetails
	}
	return st.Err()
}

// Limiter enforces a Config. Install StatsHandler on the server so that it
// can tell connections apart, and its interceptors.
type Limiter struct {
	cfg      Config
	streams  atomic.Int64
	waits    atomic.Int64
	holders  *holders
	refusals *prometheus.CounterVec

	log      *slog.Logger
	logMu    sync.Mutex
	lastLog  map[string]time.Time
	unlogged map[string]int
}

// refusalLogEvery bounds the log lines about refusals: one per cap per
// interval, with a count, however fast a client hits the cap. Each refused
// call itself is logged at debug.
const refusalLogEvery = 10 * time.Second

// New returns a Limiter for cfg whose metrics register with reg and that
// logs, sparingly, when a cap is reached.
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger) *Limiter {
	l := &Limiter{
		cfg:      cfg,
		log:      log,
		lastLog:  map[string]time.Time{},
		unlogged: map[string]int{},
		holders:  newHolders(cfg.LeasesPerHolder),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordinator_limit_refusals_total",
			Help: "Calls refused with ResourceExhausted because a cap was reached, by cap.",
		}, []string{"limit"}),
	}
	reg.MustRegister(l.refusals,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "coordinator_streams_open",
			Help: "Streams open on this coordinator (health checks aside).",
		}, func() float64 { return float64(l.streams.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "coordinator_waiting_calls",
			Help: "TryAcquire and Campaign calls with a wait in progress.",
		}, func() float64 { return float64(l.waits.Load()) }),
	)
	for _, c := range []Cap{StreamsPerConn, Streams, WaitsPerConn, Waits, LeasesPerHolder} {
		l.refusals.WithLabelValues(c.Label)
	}
	return l
}

// connCounts are one client connection's streams and waiting calls.
type connCounts struct {
	streams, waits atomic.Int64
}

type connKey struct{}

// StatsHandler tags each connection with its counters; every call's context
// derives from its connection's.
func (l *Limiter) StatsHandler() stats.Handler { return connTagger{} }

type connTagger struct{}

func (connTagger) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &connCounts{})
}
func (connTagger) HandleConn(context.Context, stats.ConnStats)                     {}
func (connTagger) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connTagger) HandleRPC(context.Context, stats.RPCStats)                       {}

// take counts one more in conn (when known) and total, unless that passes a
// cap; release undoes it.
func (l *Limiter) take(conn, total *atomic.Int64, perConn, all int, connCap, totalCap Cap) (release func(), err error) {
	if conn != nil {
		if n := conn.Add(1); perConn > 0 && n > int64(perConn) {
			conn.Add(-1)
			return nil, l.refused(connCap, perConn, "connection")
		}
	}
	if n := total.Add(1); all > 0 && n > int64(all) {
		total.Add(-1)
		if conn != nil {
			conn.Add(-1)
		}
		return nil, l.refused(totalCap, all, "coordinator")
	}
	return func() {
		total.Add(-1)
		if conn != nil {
			conn.Add(-1)
		}
	}, nil
}

func connOf(ctx context.Context) *connCounts {
	c, _ := ctx.Value(connKey{}).(*connCounts)
	return c
}

func (l *Limiter) takeStream(ss grpc.ServerStream) (func(), error) {
	var conn *atomic.Int64
	if c, _ := ss.Context().Value(connKey{}).(*connCounts); c != nil {
		conn = &c.streams
	}
	return l.take(conn, &l.streams, l.cfg.StreamsPerConn, l.cfg.Streams, StreamsPerConn, Streams)
}

func (l *Limiter) takeWait(ctx context.Context) (func(), error) {
	var conn *atomic.Int64
	if c := connOf(ctx); c != nil {
		conn = &c.waits
	}
	return l.take(conn, &l.waits, l.cfg.WaitsPerConn, l.cfg.Waits, WaitsPerConn, Waits)
}
