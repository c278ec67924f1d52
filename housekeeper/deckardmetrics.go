package housekeeper

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordinator-dev/coordinator/housekeeper/storage"
)

// deckardMetrics are Deckard's own housekeeping metrics, under Deckard's
// names and labels (takenet/deckard, internal/metrics/metrics.go, as its
// Prometheus exporter names them), so that Deckard's Grafana dashboard keeps
// working when housekeeping moves out of Deckard. Like Deckard, they label
// a queue by its prefix: the part of its name before "::".
//
//	deckard_message_unlock_total{queue,lock_type}       lock_type: lock_ack, lock_nack
//	deckard_message_timeout_total{queue}
//	deckard_ttl_messages_removed_total{queue}           from storage
//	deckard_ttl_messages_cache_removed_total{queue}     from the cache
//	deckard_exceeding_messages_removed_total{queue}     max elements, from storage
//	deckard_exceeding_messages_cache_removed_total{queue}
//	deckard_total_messages{queue}, deckard_oldest_message{queue}  gauges, reported by
//	                                                    the metrics task's owner only
//
// Each counter counts what this instance did; a query sums them over the
// instances, as it sums them over Deckard's replicas.
type deckardMetrics struct {
	unlocked, timedOut                      *prometheus.CounterVec
	ttlRemoved, ttlCacheRemoved             *prometheus.CounterVec
	exceedingRemoved, exceedingCacheRemoved *prometheus.CounterVec
	stats                                   *statsCollector
}

func newDeckardMetrics(reg prometheus.Registerer, owns func() bool) (*deckardMetrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"queue"}, labels...))
	}
	d := &deckardMetrics{
		unlocked:              counter("deckard_message_unlock_total", "Number of unlocked messages.", "lock_type"),
		timedOut:              counter("deckard_message_timeout_total", "Number of message timeouts"),
		ttlRemoved:            counter("deckard_ttl_messages_removed_total", "Number of messages removed from storage for ttl"),
		ttlCacheRemoved:       counter("deckard_ttl_messages_cache_removed_total", "Number of messages removed from cache for ttl"),
		exceedingRemoved:      counter("deckard_exceeding_messages_removed_total", "Number of messages removed from storage for exceeding maximum queue size"),
		exceedingCacheRemoved: counter("deckard_exceeding_messages_cache_removed_total", "Number of messages removed from cache for exceeding maximum queue size"),
		stats:                 newStatsCollector(owns),
	}
	var err error
	for _, c := range []**prometheus.CounterVec{&d.unlocked, &d.timedOut, &d.ttlRemoved, &d.ttlCacheRemoved, &d.exceedingRemoved, &d.exceedingCacheRemoved} {
		if *c, err = register(reg, *c); err != nil {
			return nil, err
		}
	}
	if d.stats, err = register(reg, d.stats); err != nil {
		return nil, err
	}
	return d, nil
}

// queuePrefix is Deckard's label for a queue: its name up to "::".
func queuePrefix(queue string) string {
	prefix, _, _ := strings.Cut(queue, "::")
	return prefix
}

// moved counts messages that unlock (kind lock_ack or lock_nack) or timeout
// (kind tmp) moved in queue.
func (d *deckardMetrics) moved(queue string, k kind, n int) {
	switch k {
	case kindTmp:
		d.timedOut.WithLabelValues(queuePrefix(queue)).Add(float64(n))
	case kindLockAck:
		d.unlocked.WithLabelValues(queuePrefix(queue), "lock_ack").Add(float64(n))
	case kindLockNack:
		d.unlocked.WithLabelValues(queuePrefix(queue), "lock_nack").Add(float64(n))
	}
}

// removed counts what t (TTL or max elements) removed: messages deleted
// from storage, and members removed from the cache per queue.
func (d *deckardMetrics) removed(t task, fromStorage []storage.Ref, fromCache map[string]int64) {
	stored, cached := d.ttlRemoved, d.ttlCacheRemoved
	if t == taskMaxElements {
		stored, cached = d.exceedingRemoved, d.exceedingCacheRemoved
	}
	for _, r := range fromStorage {
		stored.WithLabelValues(queuePrefix(r.Queue)).Inc()
	}
	for queue, n := range fromCache {
		cached.WithLabelValues(queuePrefix(queue)).Add(float64(n))
	}
}

func (d *deckardMetrics) setStats(stats map[string]storage.PrefixStats, at time.Time) {
	d.stats.set(stats, at)
}

func (d *deckardMetrics) statsRead() time.Time { return d.stats.readAt() }

// statsCollector reports deckard_total_messages and deckard_oldest_message
// from the last read of the storage, while owns says this instance is the
// metrics task's owner. The oldest message's age is measured at scrape
// time. A prefix that was stored and is no more reports 0, as in Deckard.
type statsCollector struct {
	owns   func() bool
	total  *prometheus.Desc
	oldest *prometheus.Desc

	mu    sync.Mutex
	stats map[string]storage.PrefixStats
	at    time.Time
}

func newStatsCollector(owns func() bool) *statsCollector {
	return &statsCollector{
		owns:   owns,
		total:  prometheus.NewDesc("deckard_total_messages", "Number of messages a queue has.", []string{"queue"}, nil),
		oldest: prometheus.NewDesc("deckard_oldest_message", "Time the oldest queue message was used.", []string{"queue"}, nil),
	}
}

func (c *statsCollector) set(stats map[string]storage.PrefixStats, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for prefix := range c.stats {
		if _, ok := stats[prefix]; !ok {
			stats[prefix] = storage.PrefixStats{}
		}
	}
	c.stats, c.at = stats, at
}

func (c *statsCollector) readAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.total
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.owns == nil || !c.owns() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for prefix, st := range c.stats {
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(st.Total), prefix)
		var age int64
		if !st.Oldest.IsZero() {
			age = now.Sub(st.Oldest).Milliseconds()
		}
		if !st.Oldest.IsZero() || st.Total == 0 {
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, float64(age), prefix)
		}
	}
}
