package housekeeper

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sizesTimeout bounds the measuring of the queues at one scrape.
const sizesTimeout = 5 * time.Second

// metrics are a Runner's Prometheus metrics. Every series carries the
// Runner's key prefix as the constant label "prefix": Runners on different
// prefixes may have queues of the same name, and their series must not mix.
// Runners on one prefix and one Registerer share these (see register).
type metrics struct {
	unlocked  *prometheus.CounterVec   // queue, lock_type
	timedOut  *prometheus.CounterVec   // queue
	duration  *prometheus.HistogramVec // task
	fenced    *prometheus.CounterVec   // task
	probes    prometheus.Counter       // sets whose head was read
	recovered prometheus.Counter       // messages recovery put back into the cache
	owned     *prometheus.GaugeVec     // task
	viewToken prometheus.Gauge
	members   prometheus.Gauge
	queues    *queueCollector // housekeeper_leader and the queue gauges
}

func newMetrics(reg prometheus.Registerer, q *Queues) (*metrics, error) {
	labels := prometheus.Labels{"prefix": q.ks.prefix}
	m := &metrics{
		unlocked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "housekeeper_messages_unlocked_total",
			Help:        "Messages moved from a lock set back to the active pool.",
			ConstLabels: labels,
		}, []string{"queue", "lock_type"}),
		timedOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "housekeeper_messages_timed_out_total",
			Help:        "In-flight messages whose ack deadline passed, moved back to the active pool.",
			ConstLabels: labels,
		}, []string{"queue"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "housekeeper_batch_duration_seconds",
			Help:        "Duration of one batch script call, as seen by the housekeeper.",
			Buckets:     prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms .. ~4 s
			ConstLabels: labels,
		}, []string{"task"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "housekeeper_batches_fenced_total",
			Help:        "Batches refused at Redis because their fencing token was stale.",
			ConstLabels: labels,
		}, []string{"task"}),
		probes: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "housekeeper_set_reads_total",
			Help:        "Sets whose earliest entry this instance read (one Redis command each).",
			ConstLabels: labels,
		}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "housekeeper_messages_recovered_total",
			Help:        "Messages the recovery task copied from storage back into the cache.",
			ConstLabels: labels,
		}),
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "housekeeper_sets_owned",
			Help:        "Sets this instance works under the view in force (task: unlock for lock_ack and lock_nack, timeout for tmp).",
			ConstLabels: labels,
		}, []string{"task"}),
		viewToken: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "housekeeper_view_token",
			Help:        "Fencing token of the view this instance works under; 0: none (not a member now).",
			ConstLabels: labels,
		}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "housekeeper_view_members",
			Help:        "Instances in the view this instance works under.",
			ConstLabels: labels,
		}),
		queues: newQueueCollector(q, labels),
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
	if m.probes, err = register(reg, m.probes); err != nil {
		return nil, err
	}
	if m.recovered, err = register(reg, m.recovered); err != nil {
		return nil, err
	}
	if m.owned, err = register(reg, m.owned); err != nil {
		return nil, err
	}
	if m.viewToken, err = register(reg, m.viewToken); err != nil {
		return nil, err
	}
	if m.members, err = register(reg, m.members); err != nil {
		return nil, err
	}
	if m.queues, err = register(reg, m.queues); err != nil {
		return nil, err
	}
	for _, t := range []task{taskUnlock, taskTimeout} {
		m.owned.WithLabelValues(string(t))
	}
	for _, t := range []task{taskUnlock, taskTimeout, taskTTL, taskMaxElements, taskRecovery, taskMetrics} {
		m.fenced.WithLabelValues(string(t))
	}
	return m, nil
}

// view reports the view in force and the sets owned under it. Runners of
// one prefix sharing a registry overwrite each other's gauges; one Runner a
// process is the deployment's case.
func (m *metrics) view(v View, owned map[task]int) {
	m.viewToken.Set(float64(v.Token))
	m.members.Set(float64(len(v.Members)))
	for _, t := range []task{taskUnlock, taskTimeout} {
		m.owned.WithLabelValues(string(t)).Set(float64(owned[t]))
	}
}

// register registers c on reg (when not nil). When an identical collector,
// same names and same prefix label, is already registered, as with several
// Runners of one prefix in one process, it returns that one so that they
// share it.
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
		return c, fmt.Errorf("register %T: %w", c, err)
	}
	return c, nil
}

// queueCollector reports housekeeper_leader and, while a Runner of its
// prefix leads, housekeeper_queue_messages{queue,set}: the size of each
// queue's active, tmp, lock_ack and lock_nack sets, measured at scrape time
// (Queues.sizes). Only the leader reports the sizes, so that of several
// housekeepers one pays for the scan and the series are not duplicated.
//
// Runners of one prefix on one Registerer share it. It counts how many of
// them lead rather than holding a flag, so that one Runner stepping down
// cannot silence another that has just been elected.
type queueCollector struct {
	queues  *Queues
	leaders atomic.Int64
	sizes   *prometheus.Desc
	leader  *prometheus.Desc
}

func newQueueCollector(q *Queues, labels prometheus.Labels) *queueCollector {
	return &queueCollector{
		queues: q,
		sizes: prometheus.NewDesc("housekeeper_queue_messages",
			"Messages in each set of a Deckard queue (set: active, tmp, lock_ack, lock_nack). Reported by the leader only.",
			[]string{"queue", "set"}, labels),
		leader: prometheus.NewDesc("housekeeper_leader",
			"Whether this instance is the elected leader, which reports the queue gauges: 1 or 0.",
			nil, labels),
	}
}

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sizes
	ch <- c.leader
}

// Collect implements prometheus.Collector.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	leading := c.leaders.Load() > 0
	var leader float64
	if leading {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	if !leading {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), sizesTimeout)
	defer cancel()
	sizes, err := c.queues.sizes(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.sizes, err)
		return
	}
	for queue, s := range sizes {
		for _, v := range [...]struct {
			set string
			n   int64
		}{{"active", s.active}, {"tmp", s.tmp}, {"lock_ack", s.lockAck}, {"lock_nack", s.lockNack}} {
			ch <- prometheus.MustNewConstMetric(c.sizes, prometheus.GaugeValue, float64(v.n), queue, v.set)
		}
	}
}
