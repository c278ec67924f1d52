package housekeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config's zero fields.
const (
	DefaultBatchSize        = 1000
	DefaultParallelism      = 5
	DefaultInterval         = time.Second
	DefaultLeaseTTL         = 5 * time.Second
	DefaultLeaseIdleTimeout = 30 * time.Second
)

// releaseTimeout bounds the release of leases at shutdown or when fenced.
const releaseTimeout = 2 * time.Second

// Config configures a Runner. Zero fields take the defaults.
type Config struct {
	Prefix          string        // Deckard's key prefix; DefaultPrefix
	BatchSize       int           // most messages one script call moves; DefaultBatchSize
	Parallelism     int           // most queues worked at once, both tasks together; DefaultParallelism
	UnlockInterval  time.Duration // between starts of unlock cycles; DefaultInterval
	TimeoutInterval time.Duration // between starts of timeout cycles; DefaultInterval
	LeaseTTL        time.Duration // TTL asked of the Locker; DefaultLeaseTTL
	// LeaseNamespace, when set, prefixes lease names:
	// "<ns>/housekeeper/unlock/<queue>" instead of "housekeeper/unlock/<queue>".
	LeaseNamespace string
	// LeaseIdleTimeout: a lease of a queue no cycle has found for this long
	// (its sets are gone) is released; DefaultLeaseIdleTimeout.
	LeaseIdleTimeout time.Duration
	Logger           *slog.Logger          // slog.Default() when nil
	Registerer       prometheus.Registerer // where metrics go; none are registered when nil
}

// Runner runs the unlock and timeout tasks on every queue it gets a lease
// for. See the package comment.
type Runner struct {
	queues  *Queues
	locker  Locker
	cfg     Config
	log     *slog.Logger
	m       *metrics
	clock   clockwork.Clock // paces the cycles and dates the leases' use
	sem     chan struct{}   // worker slots, shared by both tasks
	leases  *leaseCache
	running atomic.Bool
	leading atomic.Bool
}

// New returns a Runner working on rdb's queues, gated by locker.
func New(rdb redis.UniversalClient, locker Locker, cfg Config) (*Runner, error) {
	return newRunner(rdb, locker, cfg, clockwork.NewRealClock())
}

func newRunner(rdb redis.UniversalClient, locker Locker, cfg Config, clock clockwork.Clock) (*Runner, error) {
	if locker == nil {
		return nil, errors.New("housekeeper: nil Locker")
	}
	for _, v := range []struct {
		name string
		ptr  *time.Duration
		def  time.Duration
	}{
		{"UnlockInterval", &cfg.UnlockInterval, DefaultInterval},
		{"TimeoutInterval", &cfg.TimeoutInterval, DefaultInterval},
		{"LeaseTTL", &cfg.LeaseTTL, DefaultLeaseTTL},
		{"LeaseIdleTimeout", &cfg.LeaseIdleTimeout, DefaultLeaseIdleTimeout},
	} {
		switch {
		case *v.ptr < 0:
			return nil, fmt.Errorf("housekeeper: %s %v is negative", v.name, *v.ptr)
		case *v.ptr == 0:
			*v.ptr = v.def
		}
	}
	switch {
	case cfg.BatchSize < 0:
		return nil, fmt.Errorf("housekeeper: BatchSize %d is negative", cfg.BatchSize)
	case cfg.BatchSize == 0:
		cfg.BatchSize = DefaultBatchSize
	}
	switch {
	case cfg.Parallelism < 0:
		return nil, fmt.Errorf("housekeeper: Parallelism %d is negative", cfg.Parallelism)
	case cfg.Parallelism == 0:
		cfg.Parallelism = DefaultParallelism
	}
	if cfg.LeaseNamespace != "" {
		cfg.LeaseNamespace = strings.TrimSuffix(cfg.LeaseNamespace, "/") + "/"
	}
	q, err := NewQueues(rdb, cfg.Prefix)
	if err != nil {
		return nil, err
	}
	cfg.Prefix = q.ks.prefix
	m, err := newMetrics(cfg.Registerer, q)
	if err != nil {
		return nil, fmt.Errorf("housekeeper: register metrics: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Runner{
		queues: q,
		locker: locker,
		cfg:    cfg,
		log:    log.With("component", "housekeeper", "prefix", cfg.Prefix),
		m:      m,
		clock:  clock,
		sem:    make(chan struct{}, cfg.Parallelism),
		leases: newLeaseCache(clock),
	}, nil
}

// SetLeader turns the housekeeper_queue_messages gauges of the Runner's
// prefix on (this instance is the elected leader) or off, and sets
// housekeeper_leader. Runners of one prefix sharing a Registerer share these
// series: they report while any of those Runners leads.
func (r *Runner) SetLeader(leader bool) {
	if r.leading.CompareAndSwap(!leader, leader) {
		if leader {
			r.m.queues.leaders.Add(1)
		} else {
			r.m.queues.leaders.Add(-1)
		}
	}
}

// Run works until ctx is cancelled: every UnlockInterval an unlock cycle,
// every TimeoutInterval a timeout cycle, each discovering the queues afresh.
// Once ctx is cancelled it lets the batches in flight finish (their
// script calls are not cancelled), starts no new ones, releases every lease
// it holds, logs how many it released and how many releases failed, and
// returns nil. Redis and Locker failures are logged and retried next cycle,
// never returned. A Runner runs once at a time.
func (r *Runner) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("housekeeper: Runner is already running")
	}
	defer r.running.Store(false)
	var wg sync.WaitGroup
	wg.Go(func() { r.loop(ctx, taskUnlock, r.cfg.UnlockInterval) })
	wg.Go(func() { r.loop(ctx, taskTimeout, r.cfg.TimeoutInterval) })
	wg.Wait()
	res := r.release(context.WithoutCancel(ctx), r.leases.takeAll())
	counts := []any{"released", res.released, "failed", res.failed, "already_lost", res.lost}
	if res.failed > 0 {
		r.log.Warn("stopped; some leases could not be released and will expire within their TTL", append(counts, "err", res.err)...)
	} else {
		r.log.Info("stopped; leases released", counts...)
	}
	return nil
}

// loop starts a cycle of t at once, then every interval (at once when a
// cycle overran it).
func (r *Runner) loop(ctx context.Context, t task, interval time.Duration) {
	timer := r.clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.Chan():
		}
		start := r.clock.Now()
		r.cycle(ctx, t)
		timer.Reset(max(0, interval-r.clock.Since(start)))
	}
}

// cycle discovers t's queues and works each one, at most Parallelism at a
// time, in an order of its own so that instances spread over the queues.
func (r *Runner) cycle(ctx context.Context, t task) {
	found, err := r.queues.discover(ctx, t)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("queue discovery failed", "task", t, "err", err)
		}
		return
	}
	order := make([]string, 0, len(found))
	for queue := range found {
		order = append(order, queue)
	}
	//nolint:gosec // G404: the order only spreads instances over the queues; nothing rests on its being unpredictable
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var wg sync.WaitGroup
queues:
	for _, queue := range order {
		select {
		case <-ctx.Done():
			break queues
		case r.sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-r.sem }()
			r.work(ctx, t, queue, found[queue])
		})
	}
	wg.Wait()
	if ctx.Err() == nil {
		if res := r.release(ctx, r.leases.takeIdle(t, r.cfg.LeaseIdleTimeout)); res.failed > 0 {
			r.log.Warn("releasing the leases of vanished queues failed; they will expire",
				"task", t, "released", res.released, "failed", res.failed, "err", res.err)
		}
	}
}

// work holds t's lease of queue and moves its due messages, batch after
// batch, until none is due, the lease is lost, or ctx ends.
func (r *Runner) work(ctx context.Context, t task, queue string, sets kinds) {
	name := r.cfg.LeaseNamespace + "housekeeper/" + string(t) + "/" + queue
	lease := r.acquire(ctx, t, name)
	if lease == nil {
		return
	}
	switch t {
	case taskUnlock:
		for _, lt := range []struct {
			lock LockType
			set  kind
		}{{LockAck, kindLockAck}, {LockNack, kindLockNack}} {
			if sets.has(lt.set) && !r.drain(ctx, t, queue, name, lease, lt.lock) {
				return
			}
		}
	case taskTimeout:
		r.drain(ctx, t, queue, name, lease, "")
	}
}

// acquire returns the cached lease of name while it is live, else a new one
// from the Locker, else nil (held elsewhere, or the Locker failed).
func (r *Runner) acquire(ctx context.Context, t task, name string) Lease {
	if l, ok := r.leases.get(name); ok {
		if !isDone(l) {
			return l
		}
		r.lost(t, name, l)
	}
	if ctx.Err() != nil {
		return nil
	}
	l, err := r.locker.TryLock(ctx, name, r.cfg.LeaseTTL)
	switch {
	case err == nil && l != nil:
		r.leases.put(name, t, l)
		return l
	case err == nil:
		r.log.Warn("Locker returned neither a lease nor an error", "lease", name)
	case errors.Is(err, ErrNotAcquired):
		r.log.Debug("lease held by another instance; skipping queue this cycle", "lease", name)
	case ctx.Err() != nil:
	default:
		r.log.Warn("cannot get lease; skipping queue this cycle", "lease", name, "err", err)
	}
	return nil
}

// lost forgets a lease found lost, once.
func (r *Runner) lost(t task, name string, l Lease) {
	if r.leases.remove(name, l) {
		r.m.leasesLost.WithLabelValues(string(t)).Inc()
		r.log.Info("lease lost; leaving its queue", "lease", name, "token", l.Token())
	}
}

// drain runs batches of t on queue until one moves fewer than BatchSize. It
// reports false when the queue must be left: lease lost, batch fenced or
// failed, or ctx ended.
func (r *Runner) drain(ctx context.Context, t task, queue, name string, lease Lease, lock LockType) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		if isDone(lease) { // lost since the last batch: stop at this script boundary
			r.lost(t, name, lease)
			return false
		}
		// The batch in flight finishes even when ctx ends meanwhile.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.LeaseTTL)
		start := time.Now()
		var n int
		var err error
		if t == taskUnlock {
			n, err = r.queues.UnlockBatch(bctx, queue, lock, lease.Token(), r.cfg.BatchSize)
		} else {
			n, err = r.queues.TimeoutBatch(bctx, queue, lease.Token(), r.cfg.BatchSize)
		}
		cancel()
		r.m.duration.WithLabelValues(string(t)).Observe(time.Since(start).Seconds())
		if n > 0 {
			if t == taskUnlock {
				r.m.unlocked.WithLabelValues(queue, string(lock)).Add(float64(n))
			} else {
				r.m.timedOut.WithLabelValues(queue).Add(float64(n))
			}
		}
		switch {
		case errors.Is(err, ErrFenced):
			r.m.fenced.WithLabelValues(string(t)).Inc()
			r.log.Warn("batch fenced: lease is stale; releasing it", "lease", name, "err", err)
			if r.leases.remove(name, lease) {
				if res := r.release(ctx, []Lease{lease}); res.err != nil {
					r.log.Warn("releasing the fenced lease failed; it will expire", "lease", name, "err", res.err)
				}
			}
			return false
		case err != nil:
			r.log.Warn("batch failed; leaving queue until next cycle", "task", t, "queue", queue, "err", err)
			return false
		case n < r.cfg.BatchSize:
			return true
		}
	}
}

// releaseResult counts what release did with its leases.
type releaseResult struct {
	released int   // released now
	lost     int   // already lost or released: nothing to do
	failed   int   // Release returned an error: the lease stays until its TTL ends
	err      error // the first of those errors
}

// release releases leases concurrently, each within releaseTimeout of now,
// whether or not ctx is cancelled, and reports how that went: a failed
// release is not fatal (the lease expires), but whoever reports on it must
// not claim that the leases are free.
func (r *Runner) release(ctx context.Context, leases []Lease) releaseResult {
	var res releaseResult
	if len(leases) == 0 {
		return res
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var mu sync.Mutex
	slots := make(chan struct{}, r.cfg.Parallelism)
	var wg sync.WaitGroup
	for _, l := range leases {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			var err error
			done := isDone(l)
			if !done {
				if err = l.Release(ctx); err != nil {
					err = fmt.Errorf("release lease with token %d: %w", l.Token(), err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case done:
				res.lost++
			case err != nil:
				res.failed++
				if res.err == nil {
					res.err = err
				}
			default:
				res.released++
			}
		})
	}
	wg.Wait()
	return res
}
