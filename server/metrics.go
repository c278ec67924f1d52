package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the lease metrics a coordinator exports.
type Metrics struct {
	acquires      *prometheus.CounterVec
	contended     prometheus.Counter
	waitSeconds   prometheus.Histogram
	renewFailures *prometheus.CounterVec
	dataLoss      prometheus.Counter
	held          *heldLeases

	// The series of acquires and renewFailures, resolved once: a label
	// lookup per call is a measurable part of a call's cost.
	acquired, notAcquired, quarantined, acquireErrors prometheus.Counter
	renewNotHeld, renewErrors                         prometheus.Counter
	// streamOps counts stream operations by op and code, as
	// grpc_server_handled_total counts the unary calls (stream.go).
	streamOps *prometheus.CounterVec
}

// NewMetrics registers the lease metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordinator_acquire_total",
			Help: "Acquire and campaign calls by outcome: acquired, not_acquired, quarantined or error.",
		}, []string{"outcome"}),
		contended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coordinator_acquire_contended_total",
			Help: "Acquire attempts (including retries while waiting) that found the name held or queued for.",
		}),
		waitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coordinator_acquire_wait_seconds",
			Help:    "How long acquire calls with a wait waited, whatever their outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		renewFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordinator_renew_failures_total",
			Help: "Renewals of leases and of sessions refused or failed, by reason: not_held (the lease or session is gone) or error.",
		}, []string{"reason"}),
		dataLoss: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coordinator_store_data_loss_total",
			Help: "Times the store was found to have lost its data (each starts a grant quarantine).",
		}),
		held: &heldLeases{leases: map[grantKey]time.Time{}},
		streamOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordinator_stream_operations_total",
			Help: "Operations of operation streams by op (acquire, renew, release, campaign, resign, none) and gRPC code, as the unary calls count in grpc_server_handled_total.",
		}, []string{"op", "code"}),
	}
	reg.MustRegister(m.acquires, m.contended, m.waitSeconds, m.renewFailures, m.dataLoss, m.held, m.streamOps)
	m.acquired = m.acquires.WithLabelValues("acquired")
	m.notAcquired = m.acquires.WithLabelValues("not_acquired")
	m.quarantined = m.acquires.WithLabelValues("quarantined")
	m.acquireErrors = m.acquires.WithLabelValues("error")
	m.renewNotHeld = m.renewFailures.WithLabelValues("not_held")
	m.renewErrors = m.renewFailures.WithLabelValues("error")
	return m
}

// DataLoss counts one detection of store data loss.
func (m *Metrics) DataLoss() { m.dataLoss.Inc() }

// heldLeases counts the leases granted or renewed through this coordinator
// that have neither expired nor been released, by the coordinator's clock:
// each grant once, so that a semaphore's or a read-write lock's holders
// count one each (a token names one grant of its name for ever).
type heldLeases struct {
	mu     sync.Mutex
	leases map[grantKey]time.Time // when each expires
	ops    int
}

type grantKey struct {
	name  string
	token uint64
}

var heldDesc = prometheus.NewDesc("coordinator_leases_held",
	"Leases granted or renewed through this coordinator that have not expired or been released.", nil, nil)

func (h *heldLeases) granted(name string, token uint64, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leases[grantKey{name, token}] = time.Now().Add(ttl)
	if h.ops++; h.ops%4096 == 0 {
		h.pruneLocked(time.Now())
	}
}

func (h *heldLeases) released(name string, token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.leases, grantKey{name, token})
}

func (h *heldLeases) pruneLocked(now time.Time) {
	for g, expires := range h.leases {
		if !now.Before(expires) {
			delete(h.leases, g)
		}
	}
}

func (h *heldLeases) Describe(ch chan<- *prometheus.Desc) { ch <- heldDesc }

func (h *heldLeases) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	h.pruneLocked(time.Now())
	n := len(h.leases)
	h.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(n))
}
