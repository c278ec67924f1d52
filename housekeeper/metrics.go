package housekeeper

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Runner's Prometheus metrics.
type metrics struct {
	unlocked   *prometheus.CounterVec   // queue, lock_type
	timedOut   *prometheus.CounterVec   // queue
	duration   *prometheus.HistogramVec // task
	fenced     *prometheus.CounterVec   // task
	leasesLost *prometheus.CounterVec   // task
	leader     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		unlocked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "housekeeper_messages_unlocked_total",
			Help: "Messages moved from a lock set back to the active pool.",
		}, []string{"queue", "lock_type"}),
		timedOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "housekeeper_messages_timed_out_total",
			Help: "In-flight messages whose ack deadline passed, moved back to the active pool.",
		}, []string{"queue"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "housekeeper_batch_duration_seconds",
			Help:    "Duration of one batch script call, as seen by the housekeeper.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms .. ~4 s
		}, []string{"task"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "housekeeper_batches_fenced_total",
			Help: "Batches refused at Redis because their fencing token was stale.",
		}, []string{"task"}),
		leasesLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "housekeeper_leases_lost_total",
			Help: "Held leases found lost (Done closed) before being released.",
		}, []string{"task"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "housekeeper_leader",
			Help: "Whether this instance is the elected leader, which reports the queue gauges: 1 or 0.",
		}),
	}
	var err error
	if m.unlocked, err = register(reg, m.unlocked); err != nil {
		return nil, err
	}
	if m.timedOut, err = register(reg, m.timedOut); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.fenced, err = register(reg, m.fenced); err != nil {
		return nil, err
	}
	if m.leasesLost, err = register(reg, m.leasesLost); err != nil {
		return nil, err
	}
	if m.leader, err = register(reg, m.leader); err != nil {
		return nil, err
	}
	for _, t := range []task{taskUnlock, taskTimeout} {
		m.fenced.WithLabelValues(string(t))
		m.leasesLost.WithLabelValues(string(t))
	}
	return m, nil
}

// register registers c on reg (when not nil). When an identical collector is
// already registered, as with several Runners in one process, it returns
// that one so that they share it.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// QueueCollector reports housekeeper_queue_messages{queue,set}, the size of
// each queue's active, tmp, lock_ack and lock_nack sets, measured at scrape
// time (Queues.Sizes). It reports nothing until enabled, so that of several
// housekeepers only the elected leader pays for the scan and the series are
// not duplicated.
type QueueCollector struct {
	queues  *Queues
	timeout time.Duration
	enabled atomic.Bool
	desc    *prometheus.Desc
}

// NewQueueCollector returns a disabled collector of q's sizes; a scrape
// gives up measuring after timeout (5 s when 0).
func NewQueueCollector(q *Queues, timeout time.Duration) *QueueCollector {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &QueueCollector{
		queues:  q,
		timeout: timeout,
		desc: prometheus.NewDesc("housekeeper_queue_messages",
			"Messages in each set of a Deckard queue (set: active, tmp, lock_ack, lock_nack). Reported by the leader only.",
			[]string{"queue", "set"}, nil),
	}
}

// SetEnabled turns reporting on (for the leader) or off.
func (c *QueueCollector) SetEnabled(on bool) { c.enabled.Store(on) }

// Enabled reports whether the collector reports.
func (c *QueueCollector) Enabled() bool { return c.enabled.Load() }

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.enabled.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	sizes, err := c.queues.Sizes(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for queue, s := range sizes {
		for _, v := range [...]struct {
			set string
			n   int64
		}{{"active", s.Active}, {"tmp", s.Tmp}, {"lock_ack", s.LockAck}, {"lock_nack", s.LockNack}} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v.n), queue, v.set)
		}
	}
}
