package housekeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config's zero fields.
const (
	DefaultBatchSize         = 1000
	DefaultParallelism       = 5
	DefaultDiscoveryInterval = time.Second
	DefaultProbeInterval     = 500 * time.Millisecond
)

// batchTimeout bounds one batch script call.
const batchTimeout = 5 * time.Second

// Config configures a Runner. Zero fields take the defaults.
type Config struct {
	Prefix      string // Deckard's key prefix; DefaultPrefix
	BatchSize   int    // most messages one script call moves; DefaultBatchSize
	Parallelism int    // most batches in flight at once; DefaultParallelism
	// DiscoveryInterval is the time between the SCANs that find the sets,
	// which the members take in turn (a new queue, or a set that was empty,
	// is found within two of it); DefaultDiscoveryInterval.
	DiscoveryInterval time.Duration
	// ProbeInterval is the time between the rounds that read the head of
	// every set the instance owns, pipelined: a message that falls due before
	// the head its set had when last read is moved within about it;
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	Logger        *slog.Logger          // slog.Default() when nil
	Registerer    prometheus.Registerer // where metrics go; none are registered when nil
	// Storage configures the tasks on Deckard's storage (TTL, max elements,
	// recovery, metrics); with no Storage.Storage only the Redis tasks run.
	Storage StorageConfig

	// clock schedules the work: the intervals, the rounds, when a read head
	// falls due. The real clock unless a test sets a fake one
	// (export_test.go). What bounds a call to Redis or the storage, and what
	// is compared with stored timestamps, stays on the real clock.
	clock clockwork.Clock
}

// Membership tells a Runner the view it works under: CoordinatorMembership
// in a deployment.
type Membership interface {
	// ID is this instance's id, as views name it.
	ID() string
	// View returns the newest view and a channel closed when it changes.
	// The zero View (Token 0) is none: nothing is worked under it.
	View() (View, <-chan struct{})
	// Live reports whether this instance's membership holds now, by its
	// own clock: checked before every batch.
	Live() bool
	// Deadline is when the membership ends by this process's clock unless
	// renewed first: the storage tasks' batches are refused by Redis after it.
	Deadline() time.Time
}

// Runner works the sets that its instance owns under the current view. See
// the package comment.
type Runner struct {
	queues  *Queues
	member  Membership
	cfg     Config
	log     *slog.Logger
	m       *metrics
	deckard *deckardMetrics
	running atomic.Bool
	leading atomic.Bool
	wakeups atomic.Int64 // of the schedule loop, for tests
}

// New returns a Runner working on rdb's queues, dividing them with the
// other instances through member.
func New(rdb redis.UniversalClient, member Membership, cfg Config) (*Runner, error) {
	if member == nil {
		return nil, errors.New("housekeeper: nil Membership")
	}
	if err := errors.Join(
		orDefault("DiscoveryInterval", &cfg.DiscoveryInterval, DefaultDiscoveryInterval),
		orDefault("ProbeInterval", &cfg.ProbeInterval, DefaultProbeInterval),
		orDefault("BatchSize", &cfg.BatchSize, DefaultBatchSize),
		orDefault("Parallelism", &cfg.Parallelism, DefaultParallelism),
	); err != nil {
		return nil, err
	}
	q, err := NewQueues(rdb, cfg.Prefix)
	if err != nil {
		return nil, err
	}
	cfg.Prefix = q.ks.prefix
	if cfg.clock == nil {
		cfg.clock = clockwork.NewRealClock()
	}
	if err := cfg.Storage.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, q)
	if err != nil {
		return nil, fmt.Errorf("housekeeper: register metrics: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Runner{
		queues: q,
		member: member,
		cfg:    cfg,
		log:    log.With("component", "housekeeper", "prefix", cfg.Prefix),
		m:      m,
	}
	if r.deckard, err = newDeckardMetrics(cfg.Registerer, r.ownsMetrics); err != nil {
		return nil, fmt.Errorf("housekeeper: register metrics: %w", err)
	}
	return r, nil
}

// orDefault sets a zero *v to def, and refuses a negative one.
func orDefault[T int | time.Duration](name string, v *T, def T) error {
	switch {
	case *v < 0:
		return fmt.Errorf("housekeeper: %s %v is negative", name, *v)
	case *v == 0:
		*v = def
	}
	return nil
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

// setState is what a Runner knows of one set.
type setState struct {
	owned   bool      // this instance works it under the current view
	readNow bool      // read it at once, not at the next round: newly owned, or just drained
	known   bool      // head is good to drain by: read, and no read or batch failed since
	head    head      // as last read
	due     time.Time // when head falls due, by this process's clock
	busy    bool      // a probe or a drain of it is in flight
	// fencedUnder is the view whose batch was refused by the set's fence:
	// a newer view is in force elsewhere, so the set waits for it here.
	fencedUnder uint64
}

// Run works until ctx is cancelled. One goroutine keeps the schedule: every
// DiscoveryInterval the members in turn SCAN for the sets and publish them in
// an index that the others read; every ProbeInterval the heads of all the
// owned sets are read (probed) together, pipelined, and a set's head is
// also read at once when the set is new to this instance or was just
// drained; a set is drained, batch after batch, when its head falls due.
// Once ctx is cancelled it lets the batches in flight finish (their script
// calls are not cancelled) and returns nil. Redis failures are logged and
// retried, never returned. A Runner runs once at a time.
func (r *Runner) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("housekeeper: Runner is already running")
	}
	defer r.running.Store(false)
	s := &schedule{r: r, sets: make(map[workSet]*setState), events: make(chan func(), 16), slots: r.cfg.Parallelism}
	var storageDone sync.WaitGroup
	if r.cfg.Storage.Storage != nil {
		storageDone.Go(func() { r.runStorage(ctx) })
	}
	s.run(ctx)
	storageDone.Wait()
	return nil
}

// schedule is the state of one Run, owned by its loop goroutine; the
// goroutines it starts hand their results back as events.
type schedule struct {
	r      *Runner
	sets   map[workSet]*setState
	view   View
	events chan func()
	wg     sync.WaitGroup

	slots         int // drains that may still start
	probing       bool
	nextRound     time.Time // when every owned set is next read
	discovering   bool
	nextDiscovery time.Time
	indexSeen     int64 // highest sequence number read from the index
	indexReads    int   // reads of the index so far
}

func (s *schedule) run(ctx context.Context) {
	r := s.r
	clock := r.cfg.clock
	timer := clock.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		view, viewChanged := r.member.View()
		if view.Token != s.view.Token || !slices.Equal(view.Members, s.view.Members) {
			s.reassign(view)
		}
		now := clock.Now()
		// A discovery in flight wakes the loop with its result; an instance
		// outside the view neither discovers nor works.
		wake := now.Add(time.Hour)
		if r.member.Live() && view.Has(r.member.ID()) {
			if !s.discovering && !now.Before(s.nextDiscovery) {
				s.discover(ctx)
			}
			if !s.discovering {
				wake = s.nextDiscovery
			}
			wake = s.work(ctx, now, wake)
		}
		timer.Reset(max(0, clock.Until(wake)))
		select {
		case <-ctx.Done():
		case <-viewChanged:
		case f := <-s.events:
			f()
		case <-timer.Chan():
		}
		r.wakeups.Add(1)
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	for {
		select {
		case f := <-s.events:
			f()
		case <-done:
			return
		}
	}
}

// work starts the probes and drains due now and returns when the schedule
// must next wake, at the latest wake. When a round is due, every owned set
// that is not being drained is read, in one probe; otherwise the sets to
// read at once are. While a probe is in flight no other starts: its result
// wakes the loop.
func (s *schedule) work(ctx context.Context, now, wake time.Time) time.Time {
	round := !s.probing && !now.Before(s.nextRound)
	var probe []workSet
	for w, st := range s.sets {
		if !st.owned || st.busy {
			continue
		}
		if round || st.readNow {
			if !s.probing {
				probe = append(probe, w)
			}
			continue
		}
		if st.known && !st.head.empty && s.view.Token > st.fencedUnder {
			if now.Before(st.due) {
				wake = earliest(wake, st.due)
			} else if s.slots > 0 {
				s.drain(ctx, w, st)
			}
		}
	}
	if round {
		s.nextRound = now.Add(s.r.cfg.ProbeInterval)
	}
	if !s.probing {
		wake = earliest(wake, s.nextRound)
	}
	if len(probe) > 0 {
		s.probe(ctx, probe)
	}
	return wake
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// reassign takes view: each set is owned by the member Owner names.
func (s *schedule) reassign(view View) {
	s.view = view
	for w, st := range s.sets {
		s.own(w, st)
	}
	owned := s.report()
	s.r.log.Debug("view", "token", view.Token, "members", len(view.Members), "member", view.Has(s.r.member.ID()), "owned", owned)
}

// report sets the view and ownership gauges, and returns the sets owned by
// task.
func (s *schedule) report() map[task]int {
	owned := map[task]int{}
	for w, st := range s.sets {
		if st.owned {
			owned[w.task()]++
		}
	}
	s.r.m.view(s.view, owned)
	return owned
}

// own updates st's ownership under the current view; a set this instance
// has just taken over is read at once, its head being unknown here.
func (s *schedule) own(w workSet, st *setState) {
	owned := s.view.Token != 0 && s.view.Owner(w.task(), w.queue) == s.r.member.ID()
	if owned && !st.owned {
		st.known, st.readNow = false, true
	}
	st.owned = owned
}

// fullIndexRead: an instance that is not on discovery duty reads the whole
// index every this many discoveries, which tells it of the sets that are
// gone, and only what is new the other times.
const fullIndexRead = 10

// onDuty reports whether this instance is the one to SCAN in the current
// DiscoveryInterval: the members take turns in view order, by the clock,
// so that the keyspace is scanned once an interval however many instances
// run. Clocks that disagree at a turn's edge make two scans, or none for
// an interval: harmless.
func (s *schedule) onDuty(now time.Time) bool {
	m := s.view.Members
	turn := now.UnixMilli() / s.r.cfg.DiscoveryInterval.Milliseconds()
	return len(m) <= 1 || m[turn%int64(len(m))] == s.r.member.ID()
}

// discover starts finding the sets: on duty, a SCAN whose result it
// publishes in the index; otherwise a read of the index, of what is new
// since the last read or, every fullIndexRead reads, all of it.
func (s *schedule) discover(ctx context.Context) {
	s.discovering = true
	duty := s.onDuty(s.r.cfg.clock.Now())
	after := s.indexSeen
	if s.indexReads%fullIndexRead == 0 {
		after = 0
	}
	q := s.r.queues
	s.wg.Go(func() {
		var found map[workSet]struct{}
		var highest int64
		var err, pubErr error
		if duty {
			if found, err = q.discover(ctx); err == nil {
				pubErr = q.publish(ctx, found)
			}
		} else {
			found, highest, err = q.readIndex(ctx, after)
		}
		s.events <- func() {
			s.discovering = false
			s.nextDiscovery = s.r.cfg.clock.Now().Add(s.r.cfg.DiscoveryInterval)
			if pubErr != nil && ctx.Err() == nil {
				s.r.log.Warn("publishing the sets found failed; the other instances learn of them at their turn", "err", pubErr)
			}
			if err != nil {
				if ctx.Err() == nil {
					s.r.log.Warn("queue discovery failed", "err", err)
				}
				return
			}
			if !duty {
				s.indexReads++
				s.indexSeen = highest
			}
			s.discovered(found, duty || after == 0)
		}
	})
}

// discovered adds the sets found and, when found is all there are (a SCAN
// or a whole index), forgets the others (Redis deletes a set as it empties).
func (s *schedule) discovered(found map[workSet]struct{}, complete bool) {
	changed := false
	for w := range found {
		if _, ok := s.sets[w]; !ok {
			st := &setState{}
			s.own(w, st)
			s.sets[w] = st
			changed = true
		}
	}
	if complete {
		for w, st := range s.sets {
			if _, ok := found[w]; !ok && !st.busy {
				delete(s.sets, w)
				changed = true
			}
		}
	}
	if changed {
		s.report()
	}
}

// probe starts reading the heads of sets.
func (s *schedule) probe(ctx context.Context, sets []workSet) {
	s.probing = true
	for _, w := range sets {
		s.sets[w].busy = true
	}
	s.wg.Go(func() {
		redisNow, heads, errs, err := s.r.queues.heads(context.WithoutCancel(ctx), sets)
		read := s.r.cfg.clock.Now()
		s.events <- func() {
			s.probing = false
			s.r.m.probes.Add(float64(len(sets)))
			if err != nil && ctx.Err() == nil {
				s.r.log.Warn("reading the sets' heads failed", "sets", len(sets), "err", err)
			}
			for i, w := range sets {
				st := s.sets[w]
				if st == nil {
					continue
				}
				st.busy = false
				if err != nil || errs[i] != nil {
					if err == nil && ctx.Err() == nil {
						s.r.log.Warn("reading a set's head failed", "err", errs[i])
					}
					// Not drained until a read succeeds, tried again at the
					// next round.
					st.known, st.readNow = false, false
					continue
				}
				s.probed(st, heads[i], redisNow, read)
			}
		}
	})
}

// probed records a set's head read at local time read, when Redis' clock
// said redisNow.
func (s *schedule) probed(st *setState, h head, redisNow, read time.Time) {
	st.known, st.readNow, st.head = true, false, h
	if !h.empty {
		// Due means score <= Redis' clock in ms; read is no earlier than
		// the moment Redis read its clock, so due is never early.
		untilDue := time.Duration((h.score - float64(redisNow.UnixMilli())) * float64(time.Millisecond))
		st.due = read.Add(untilDue)
	}
}

// drainOutcome is how a drain ended.
type drainOutcome int

const (
	drained     drainOutcome = iota // nothing due was left
	drainLeft                       // stopped: membership or view changed, or shutdown
	drainFenced                     // refused by the fence: a newer view is in force
	drainFailed                     // a batch failed
)

// drain starts moving w's due messages under the current view.
func (s *schedule) drain(ctx context.Context, w workSet, st *setState) {
	s.slots--
	st.busy = true
	view := s.view
	s.wg.Go(func() {
		outcome := s.r.drain(ctx, w, view)
		s.events <- func() {
			s.slots++
			st := s.sets[w]
			if st == nil {
				return
			}
			st.busy = false
			switch outcome {
			case drainFenced: // read at the rounds, not drained under this view
				st.fencedUnder = view.Token
			case drainFailed: // drained again after the next round's read
				st.known = false
			default: // read it again at once: its head has moved
				st.readNow = true
			}
		}
	})
}

// drain runs batches on w under view until one moves fewer than BatchSize.
// Before each batch it checks that the membership holds and the view is
// still the one in force, so that it stops at the next script boundary
// once either changed.
func (r *Runner) drain(ctx context.Context, w workSet, view View) drainOutcome {
	t := w.task()
	for {
		if ctx.Err() != nil || !r.member.Live() {
			return drainLeft
		}
		if cur, _ := r.member.View(); cur.Token != view.Token {
			return drainLeft
		}
		// The batch in flight finishes even when ctx ends meanwhile.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
		start := time.Now()
		n, err := r.queues.batch(bctx, w, view.Token, r.cfg.BatchSize)
		cancel()
		r.m.duration.WithLabelValues(string(t)).Observe(time.Since(start).Seconds())
		if n > 0 {
			r.deckard.moved(w.queue, w.kind, n)
			switch w.kind {
			case kindTmp:
				r.m.timedOut.WithLabelValues(w.queue).Add(float64(n))
			case kindLockNack:
				r.m.unlocked.WithLabelValues(w.queue, string(LockNack)).Add(float64(n))
			default:
				r.m.unlocked.WithLabelValues(w.queue, string(LockAck)).Add(float64(n))
			}
		}
		switch {
		case errors.Is(err, ErrFenced):
			r.m.fenced.WithLabelValues(string(t)).Inc()
			r.log.Info("batch fenced: a newer view is in force; waiting for it", "set", w.String(), "err", err)
			return drainFenced
		case err != nil:
			r.log.Warn("batch failed; reading the set again later", "set", w.String(), "err", err)
			return drainFailed
		case n < r.cfg.BatchSize:
			return drained
		}
	}
}
