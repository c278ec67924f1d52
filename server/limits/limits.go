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
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Config holds the caps; 0 means no cap.
type Config struct {
	StreamsPerConn  int
	Streams         int
	WaitsPerConn    int
	Waits           int
	LeasesPerHolder int
	// HoldersPerName is enforced by the store, atomically with each grant;
	// the limiter only counts and reports its refusals (RefuseHolders).
	HoldersPerName int
}

// Defaults fit a coordinator of 2 cores and 1 GiB. An open stream costs
// about 21 KiB (20,000 Observe streams took 433 MB) and a waiting call about
// as much, and Go's collector wants as much again in headroom: 10,000
// streams and 5,000 waiting calls keep the worst case near 600 MB. One
// connection may take a fifth of the streams and two fifths of the waits,
// so that no single client can exhaust them alone. A holder may hold 10,000
// leases: far beyond what a process needs unless it leaks them.
const (
	DefaultStreamsPerConn  = 2000
	DefaultStreams         = 10000
	DefaultWaitsPerConn    = 2000
	DefaultWaits           = 5000
	DefaultLeasesPerHolder = 10000
	// DefaultHoldersPerName bounds a semaphore's grants (so the readers of
	// a read-write lock): every one of them is read when one ran out, and
	// sent to each observer of the name.
	DefaultHoldersPerName = 1024
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
	HoldersPerName  = Cap{"holders_per_name", "holders of this name (grants, lock delays included)", "max-holders-per-name", "COORDINATOR_MAX_HOLDERS_PER_NAME"}
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

// Limiter enforces a Config through its interceptors.
type Limiter struct {
	cfg      Config
	streams  atomic.Int64
	waits    atomic.Int64
	conns    conns
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
	for _, c := range []Cap{StreamsPerConn, Streams, WaitsPerConn, Waits, LeasesPerHolder, HoldersPerName} {
		l.refusals.WithLabelValues(c.Label)
	}
	return l
}

// conns counts each client connection's streams and waiting calls. A
// connection is told by its addresses, local and remote, which no two open
// TCP connections share; gRPC gives every call the peer of its connection.
// (Telling them apart with a stats handler instead would cost every call
// gRPC's stats events, which the unary hot path does not need.) An entry
// lives while the connection has something counted.
type conns struct {
	mu sync.Mutex
	m  map[connID]*connCounts
}

type connID struct {
	network, local, remote string
}

// connCounts are one client connection's streams and waiting calls.
type connCounts struct {
	streams, waits int
}

func connOf(ctx context.Context) (connID, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return connID{}, false
	}
	id := connID{network: p.Addr.Network(), remote: p.Addr.String()}
	if p.LocalAddr != nil {
		id.local = p.LocalAddr.String()
	}
	return id, true
}

// take counts one more in the connection's count that field selects, unless
// that passes perConn (0: no cap).
func (c *conns) take(id connID, field func(*connCounts) *int, perConn int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.m[id]
	if cc == nil {
		cc = &connCounts{}
		if c.m == nil {
			c.m = map[connID]*connCounts{}
		}
		c.m[id] = cc
	}
	n := field(cc)
	if perConn > 0 && *n >= perConn {
		c.forgetIfEmpty(id, cc)
		return false
	}
	*n++
	return true
}

// give undoes a take.
func (c *conns) give(id connID, field func(*connCounts) *int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc := c.m[id]; cc != nil {
		*field(cc)--
		c.forgetIfEmpty(id, cc)
	}
}

func (c *conns) forgetIfEmpty(id connID, cc *connCounts) {
	if cc.streams <= 0 && cc.waits <= 0 {
		delete(c.m, id)
	}
}

func streamsOf(cc *connCounts) *int { return &cc.streams }
func waitsOf(cc *connCounts) *int   { return &cc.waits }

// take counts one more in the caller's connection (when known) and in total,
// unless that passes a cap; release undoes it.
func (l *Limiter) take(id connID, known bool, field func(*connCounts) *int, total *atomic.Int64, perConn, all int, connCap, totalCap Cap) (release func(), err error) {
	if known && !l.conns.take(id, field, perConn) {
		return nil, l.refused(connCap, perConn, "connection")
	}
	if n := total.Add(1); all > 0 && n > int64(all) {
		total.Add(-1)
		if known {
			l.conns.give(id, field)
		}
		return nil, l.refused(totalCap, all, "coordinator")
	}
	return func() {
		total.Add(-1)
		if known {
			l.conns.give(id, field)
		}
	}, nil
}

func (l *Limiter) takeStream(ss grpc.ServerStream) (func(), error) {
	id, known := connOf(ss.Context())
	return l.take(id, known, streamsOf, &l.streams, l.cfg.StreamsPerConn, l.cfg.Streams, StreamsPerConn, Streams)
}

func (l *Limiter) takeWait(ctx context.Context) (func(), error) {
	id, known := connOf(ctx)
	return l.take(id, known, waitsOf, &l.waits, l.cfg.WaitsPerConn, l.cfg.Waits, WaitsPerConn, Waits)
}

// RefuseHolders is the error of a grant the store refused because name
// carries limit holders: counted and logged as the other caps' refusals.
func (l *Limiter) RefuseHolders(limit int, name string) error {
	return l.refused(HoldersPerName, limit, "name:"+name)
}
