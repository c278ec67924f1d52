package housekeeper

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/coordinator-dev/coordinator/housekeeper/storage"
)

// The storage tasks: Deckard's TTL, max elements, recovery and metrics.
const (
	taskTTL         task = "ttl"
	taskMaxElements task = "max_elements"
	taskRecovery    task = "recovery"
	taskMetrics     task = "metrics"
)

// Defaults of StorageConfig's zero fields: Deckard's where it has one.
const (
	DefaultStorageInterval = time.Second      // housekeeper.task.{ttl,max_elements,update}.delay
	DefaultMetricsInterval = time.Minute      // housekeeper.task.metrics.delay
	DefaultConfigInterval  = 5 * time.Second  // how often max_elements is read
	DefaultRecheckInterval = time.Minute      // how often a configured queue is counted in storage anyway
	DefaultTTLBatch        = 10_000           // Deckard's TTL find limit
	DefaultRecoveryBatch   = 4_000            // Deckard's recovery page
	storageTimeout         = 60 * time.Second // bounds one storage step (a read, or a delete and its cache removal)
	stepGrace              = 5 * time.Second  // how long a step goes on after shutdown began
)

// StorageConfig configures the storage tasks. Zero fields take the
// defaults; a nil Storage turns the storage tasks off.
type StorageConfig struct {
	Storage *storage.Storage // Deckard's MongoDB
	// Interval is how often TTL, max elements and recovery look for work
	// (a task with work left goes on at once); DefaultStorageInterval.
	Interval time.Duration
	// MetricsInterval is how often the queue metrics are read from storage;
	// DefaultMetricsInterval.
	MetricsInterval time.Duration
	// ConfigInterval is how often the queues' max_elements are read;
	// DefaultConfigInterval.
	ConfigInterval time.Duration
	// RecheckInterval is how often a queue with max_elements is counted in
	// storage although its cache did not grow past it (a message stored
	// whose cache write failed); DefaultRecheckInterval.
	RecheckInterval time.Duration
	TTLBatch        int // most expired messages one TTL step reads and deletes; DefaultTTLBatch
	RecoveryBatch   int // most messages one recovery batch copies; DefaultRecoveryBatch
}

func (c *StorageConfig) setDefaults() error {
	return errors.Join(
		orDefault("Storage.Interval", &c.Interval, DefaultStorageInterval),
		orDefault("Storage.MetricsInterval", &c.MetricsInterval, DefaultMetricsInterval),
		orDefault("Storage.ConfigInterval", &c.ConfigInterval, DefaultConfigInterval),
		orDefault("Storage.RecheckInterval", &c.RecheckInterval, DefaultRecheckInterval),
		orDefault("Storage.TTLBatch", &c.TTLBatch, DefaultTTLBatch),
		orDefault("Storage.RecoveryBatch", &c.RecoveryBatch, DefaultRecoveryBatch),
	)
}

// storageTasks runs the storage tasks of one Run. Each belongs to one
// member of the view (View.Owner with an empty queue), so that the
// storage's cost does not grow with the number of instances: a step serves
// every queue at once. Every
// step checks first that the membership holds and that the view is still
// the one the work was planned under, so that a member that left or lost a
// task stops at the next step.
type storageTasks struct {
	r   *Runner
	st  *storage.Storage
	cfg StorageConfig

	// Max elements, owned by its loop.
	limits     map[string]int64 // queue -> max_elements
	limitsRead time.Time
	counted    map[string]time.Time // queue -> when last counted in storage while owned
	countedFor uint64               // the view counted was kept under
}

func (r *Runner) runStorage(ctx context.Context) {
	t := &storageTasks{r: r, st: r.cfg.Storage.Storage, cfg: r.cfg.Storage, counted: map[string]time.Time{}}
	var wg sync.WaitGroup
	wg.Go(func() { t.loop(ctx, taskTTL, t.cfg.Interval, t.ttl) })
	wg.Go(func() { t.loop(ctx, taskMaxElements, t.cfg.Interval, t.maxElements) })
	wg.Go(func() { t.loop(ctx, taskRecovery, t.cfg.Interval, t.recovery) })
	wg.Go(func() { t.loop(ctx, taskMetrics, t.cfg.MetricsInterval, t.metrics) })
	wg.Wait()
}

// loop runs step every interval, and at once when the view changes, while
// this instance is a live member of the view in force.
func (t *storageTasks) loop(ctx context.Context, name task, interval time.Duration, step func(context.Context, View) error) {
	timer := t.r.cfg.clock.NewTimer(0)
	defer timer.Stop()
	for {
		view, changed := t.r.member.View()
		if t.r.member.Live() && view.Has(t.r.member.ID()) {
			start := time.Now()
			err := step(ctx, view)
			t.r.m.duration.WithLabelValues(string(name)).Observe(time.Since(start).Seconds())
			switch {
			case errors.Is(err, ErrFenced), errors.Is(err, ErrRecoveryMoved), errors.Is(err, ErrLeaseEnded):
				t.r.m.fenced.WithLabelValues(string(name)).Inc()
				t.r.log.Info("storage task stopped: another instance has taken it over", "task", name, "err", err)
			case err != nil && ctx.Err() == nil:
				t.r.log.Warn("storage task failed; trying again later", "task", name, "err", err)
			}
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-timer.Chan():
		}
	}
}

// owns reports whether this instance is the one member of view that runs
// the global task t.
func (t *storageTasks) owns(view View, name task) bool {
	return view.Owner(name, "") == t.r.member.ID()
}

// stillOn reports whether the membership holds and view is still in force:
// checked before every step.
func (t *storageTasks) stillOn(ctx context.Context, view View) bool {
	if ctx.Err() != nil || !t.r.member.Live() {
		return false
	}
	cur, _ := t.r.member.View()
	return cur.Token == view.Token
}

// stepContext bounds one step by storageTimeout. A step begun goes on for
// stepGrace after ctx ends, so that a storage delete is followed by its cache
// removal, but no longer: a storage that stopped answering does not hold a
// shutdown up.
func stepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storageTimeout)
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(stepGrace)
		defer t.Stop()
		select {
		case <-sctx.Done():
		case <-t.C:
			cancel()
		}
	})
	return sctx, func() {
		stop()
		cancel()
	}
}

// ttl deletes the expired messages, storage first and then the cache, as
// Deckard's TTL task does: in steps of TTLBatch, earliest expiry first,
// until a step finds fewer.
func (t *storageTasks) ttl(ctx context.Context, view View) error {
	if !t.owns(view, taskTTL) {
		return nil
	}
	for t.stillOn(ctx, view) {
		done, err := t.ttlStep(ctx)
		if err != nil || done {
			return err
		}
	}
	return nil
}

func (t *storageTasks) ttlStep(ctx context.Context) (done bool, err error) {
	sctx, cancel := stepContext(ctx)
	defer cancel()
	if recovering, err := t.r.queues.RecoveryPending(sctx); recovering || err != nil {
		return true, err
	}
	now := time.Now()
	refs, err := t.st.Expired(sctx, now, t.cfg.TTLBatch)
	if err != nil || len(refs) == 0 {
		return true, err
	}
	deleted, err := t.st.DeleteExpired(sctx, refs, now)
	t.r.deckard.removed(taskTTL, deleted, nil)
	if err != nil {
		return true, err
	}
	cacheRemoved, err := t.r.queues.RemoveMessages(sctx, idsByQueue(deleted))
	t.r.deckard.removed(taskTTL, nil, cacheRemoved)
	return len(refs) < t.cfg.TTLBatch, err
}

func idsByQueue(refs []storage.Ref) map[string][]string {
	out := make(map[string][]string)
	for _, r := range refs {
		out[r.Queue] = append(out[r.Queue], r.ID)
	}
	return out
}

// maxElements trims the queues this instance owns whose max_elements they
// exceed. A queue is counted in storage only when its cache holds more than
// its max_elements, when the task has just come here, and every
// RecheckInterval: the work follows what changed.
func (t *storageTasks) maxElements(ctx context.Context, view View) error {
	if !t.owns(view, taskMaxElements) {
		t.limits = nil // read afresh when it is this instance's again
		return nil
	}
	sctx, cancel := stepContext(ctx)
	defer cancel()
	clock := t.r.cfg.clock
	if t.limits == nil || clock.Since(t.limitsRead) >= t.cfg.ConfigInterval {
		limits, err := t.st.MaxElements(sctx)
		if err != nil {
			return err
		}
		t.limits, t.limitsRead = limits, clock.Now()
	}
	if view.Token != t.countedFor {
		// A new view may have moved the task here: count every queue.
		clear(t.counted)
		t.countedFor = view.Token
	}
	owned := slices.Collect(maps.Keys(t.limits))
	if len(owned) == 0 {
		return nil
	}
	slices.Sort(owned)
	if recovering, err := t.r.queues.RecoveryPending(sctx); recovering || err != nil {
		return err
	}
	sizes, err := t.r.queues.Sizes(sctx, owned)
	if err != nil {
		return err
	}
	var trim, recount []string
	now := clock.Now()
	for _, queue := range owned {
		switch {
		case sizes[queue] > t.limits[queue]:
			trim = append(trim, queue)
		case now.Sub(t.counted[queue]) >= t.cfg.RecheckInterval:
			recount = append(recount, queue)
		}
	}
	if len(recount) > 0 {
		counts, err := t.st.Counts(sctx, recount)
		if err != nil {
			return err
		}
		for _, queue := range recount {
			t.counted[queue] = now
			if counts[queue] > t.limits[queue] {
				trim = append(trim, queue)
			}
		}
	}
	cancel()
	for len(trim) > 0 && t.stillOn(ctx, view) {
		var err error
		if trim, err = t.trimStep(ctx, trim, sizes); err != nil {
			return err
		}
	}
	return nil
}

// trimBatch is the most messages one max-elements step deletes per queue,
// trimReaders how many queues' excess a step reads at once, and
// trimTogether the most messages, by the cache's count, of the queues whose
// excess a step reads in one query.
const (
	trimBatch    = 10_000
	trimReaders  = 4
	trimTogether = 100_000
)

// trimStep deletes the messages of queues beyond their newest
// max_elements, at most trimBatch a queue, storage first and then the
// cache, all in one delete. The small queues' excess (up to trimTogether
// messages in all, by their cache's sizes) is read in one query
// (storage.ExcessOf), each large queue's on its own (storage.Excess),
// trimReaders at a time. It returns the queues that had more.
func (t *storageTasks) trimStep(ctx context.Context, queues []string, sizes map[string]int64) (more []string, err error) {
	sctx, cancel := stepContext(ctx)
	defer cancel()
	excess := make([][]storage.Ref, len(queues))
	errs := make([]error, len(queues))
	together := map[string]int64{}
	var budget int64
	for _, queue := range queues {
		if n := sizes[queue]; budget+n <= trimTogether {
			together[queue] = t.limits[queue]
			budget += n
		}
	}
	if len(together) > 1 {
		small, err := t.st.ExcessOf(sctx, together)
		if err != nil {
			return nil, err
		}
		for i, queue := range queues {
			if _, ok := together[queue]; ok {
				excess[i] = small[queue]
			}
		}
	} else {
		clear(together)
	}
	sem := make(chan struct{}, trimReaders)
	var wg sync.WaitGroup
	for i, queue := range queues {
		if _, ok := together[queue]; ok {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			excess[i], errs[i] = t.st.Excess(sctx, queue, t.limits[queue], trimBatch)
		})
	}
	wg.Wait()
	var refs []storage.Ref
	for i, queue := range queues {
		refs = append(refs, excess[i]...)
		if len(excess[i]) == trimBatch {
			more = append(more, queue)
		}
		t.counted[queue] = t.r.cfg.clock.Now()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		return nil, nil
	}
	deleted, err := t.st.Delete(sctx, refs)
	t.r.deckard.removed(taskMaxElements, deleted, nil)
	if err != nil {
		return nil, err
	}
	cacheRemoved, err := t.r.queues.RemoveMessages(sctx, idsByQueue(deleted))
	t.r.deckard.removed(taskMaxElements, nil, cacheRemoved)
	return more, err
}

// recovery copies the storage back into the cache after the cache lost it,
// with Deckard's state and semantics (see the package comment), batch after
// batch until it is finished or this instance must stop.
func (t *storageTasks) recovery(ctx context.Context, view View) error {
	if !t.owns(view, taskRecovery) {
		return nil
	}
	sctx, cancel := stepContext(ctx)
	state, err := t.r.queues.Recovery(sctx)
	if err == nil && state.Finished() && state.Running {
		// A start that lost a race with a finish left the flag up.
		err = t.r.queues.setRecovery(sctx, false, "")
	}
	if err != nil || state.Finished() {
		cancel()
		return err
	}
	if state.StorageBreakpoint == "" && !state.Running {
		state, err = t.startRecovery(sctx, view)
	}
	cancel()
	if err != nil {
		return err
	}
	for !state.Finished() && t.stillOn(ctx, view) {
		if state, err = t.recoveryStep(ctx, view, state); err != nil {
			return err
		}
	}
	return nil
}

// startRecovery takes the breakpoint's fence and records the newest _id as
// the recovery's bound, as Deckard starts one; an empty storage finishes it
// at once.
func (t *storageTasks) startRecovery(ctx context.Context, view View) (RecoveryState, error) {
	if err := t.r.queues.AdvanceRecovery(ctx, view.Token, "", ""); err != nil {
		return RecoveryState{}, err
	}
	newest, err := t.st.NewestID(ctx)
	if err != nil {
		return RecoveryState{}, err
	}
	if newest == "" {
		t.r.log.Info("recovery: the storage is empty; nothing to recover")
		return t.finishRecovery(ctx, view, "")
	}
	if err := t.r.queues.setRecovery(ctx, true, newest); err != nil {
		return RecoveryState{}, err
	}
	t.r.log.Info("recovery started: copying the storage into the cache", "up_to", newest)
	return RecoveryState{Running: true, UpTo: newest}, nil
}

func (t *storageTasks) finishRecovery(ctx context.Context, view View, read string) (RecoveryState, error) {
	if err := t.r.queues.AdvanceRecovery(ctx, view.Token, read, recoveryFinished); err != nil {
		return RecoveryState{}, err
	}
	if err := t.r.queues.setRecovery(ctx, false, ""); err != nil {
		return RecoveryState{}, err
	}
	return RecoveryState{StorageBreakpoint: recoveryFinished}, nil
}

// recoveryStep copies one page after the breakpoint into the cache, then
// moves the breakpoint past it (to "finished" after a short page). The
// inserts are fenced per queue and refused once the membership lease has
// ended by Redis' clock; the move is fenced and compare-and-set. A kill
// between the two leaves the breakpoint where it was: the page is copied
// again, and the inserts skip what is there.
func (t *storageTasks) recoveryStep(ctx context.Context, view View, state RecoveryState) (RecoveryState, error) {
	sctx, cancel := stepContext(ctx)
	defer cancel()
	page, err := t.st.Page(sctx, state.StorageBreakpoint, state.UpTo, t.cfg.RecoveryBatch)
	if err != nil {
		return state, err
	}
	if len(page) > 0 {
		redisNow, after, err := t.r.queues.redisClock(sctx)
		if err != nil {
			return state, err
		}
		validUntil := t.r.member.Deadline().Add(redisNow.Sub(after))
		byQueue := make(map[string][]Recovered)
		for _, m := range page {
			byQueue[m.Queue] = append(byQueue[m.Queue], Recovered{ID: m.ID, Score: m.Score})
		}
		n, err := t.r.queues.InsertRecovered(sctx, byQueue, view.Token, validUntil)
		t.r.m.recovered.Add(float64(n))
		if err != nil {
			return state, err
		}
	}
	if len(page) < t.cfg.RecoveryBatch {
		t.r.log.Info("recovery finished")
		return t.finishRecovery(sctx, view, state.StorageBreakpoint)
	}
	next := page[len(page)-1].InternalID.Hex()
	if err := t.r.queues.AdvanceRecovery(sctx, view.Token, state.StorageBreakpoint, next); err != nil {
		return state, err
	}
	state.StorageBreakpoint = next
	return state, nil
}

// metrics reads Deckard's queue metrics from storage while this instance is
// their owner; the gauges report them only while it still is.
func (t *storageTasks) metrics(ctx context.Context, view View) error {
	if !t.owns(view, taskMetrics) {
		return nil
	}
	if last := t.r.deckard.statsRead(); !last.IsZero() && t.r.cfg.clock.Since(last) < t.cfg.MetricsInterval/2 {
		return nil // a view change woke the loop; the figures are fresh
	}
	sctx, cancel := stepContext(ctx)
	defer cancel()
	stats, err := t.st.Stats(sctx)
	if err != nil {
		return err
	}
	t.r.deckard.setStats(stats, t.r.cfg.clock.Now())
	return nil
}

// ownsMetrics reports whether this instance reports the queue metrics now.
func (r *Runner) ownsMetrics() bool {
	view, _ := r.member.View()
	return r.member.Live() && view.Token != 0 && view.Owner(taskMetrics, "") == r.member.ID()
}
