package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
	"github.com/coordinator-dev/coordinator/internal/fanout"
	"github.com/coordinator-dev/coordinator/server/store"
)

// observerBuffer is how many events an observer may fall behind before its
// stream is ended; its client then reconnects and starts from the current
// state rather than from a stale backlog.
const observerBuffer = 64

const (
	// observeBatch is the most elections one store read covers.
	observeBatch = 256
	// observeReads is how many batch reads run at once.
	observeReads = 4
	// observeCoalesce is how long a read asked for by a term's end waits
	// for others to share its store call.
	observeCoalesce = 5 * time.Millisecond
	// maxReconcileTick is the longest a reconcile read waits for others to
	// share its store call.
	maxReconcileTick = time.Second
	// observeReadTimeout bounds one batch read.
	observeReadTimeout = 10 * time.Second
	// expiryRecheck is the first pause before looking again at a lease that
	// should have ended by this coordinator's clock but has not by the
	// store's (observers and waiters both time expiry, which is not
	// announced); it doubles up to maxExpiryRecheck while that lasts.
	expiryRecheck    = 10 * time.Millisecond
	maxExpiryRecheck = time.Second
)

var errObserverTooSlow = status.Error(codes.ResourceExhausted, "observer fell too far behind; observe again to resume from the current state")

// observers keeps the streams of the elections observed through this
// coordinator in step with the store. One read of an election serves all its
// streams, and one store call reads many elections.
//
// An election is read at once when the store announces a change of it (or
// that announcements may have been missed); reads asked for while others are
// in flight go together in the next batch. It is read when its leader's term
// should end (expiry is not announced), after waiting observeCoalesce for
// company. Otherwise it is read once per reconcile interval on average,
// spread out in time, as a safety net against a change that was never
// announced (the store lost the mark that asks for announcements, with its
// data); those reads are gathered for up to a second. An idle election thus
// costs the store about one read per reconcile interval, however many streams
// observe it.
type observers struct {
	store     store.Store
	reconcile time.Duration
	// reconcileTick is how long reconcile reads are gathered.
	reconcileTick time.Duration
	log           *slog.Logger
	// events fans each election's events out to its streams; a stream that
	// falls observerBuffer events behind is evicted.
	events fanout.Hub[string, *coordinatorv1.ObserveResponse]
	kick   chan struct{} // buffered: wakes the read loop

	mu   sync.Mutex
	hubs map[string]*hub
	// due are the elections to read by dueAt; lazy those whose reconcile
	// is due, since lazySince. Each hub is in one at most.
	due, lazy        []*hub
	dueAt, lazySince time.Time
	running          bool // the read loop runs; it ends when no hub is left
	closed           bool // the store closed: nothing more to read
	// pauseUntil holds reads back after a failed one, by retry.
	pauseUntil time.Time
	retry      *backoff.Backoff
	failing    bool
}

// hub is one observed election.
type hub struct {
	name    string
	changes *store.Changes
	done    chan struct{} // closed when the last observer left
	timer   *time.Timer   // the next timed read: the term's end or the reconcile

	// Guarded by observers.mu.
	observers int
	queued    bool      // in observers.due or observers.lazy
	lazy      bool      // in observers.lazy
	reading   bool      // in a read in flight
	again     bool      // asked for while reading: read once more after
	reads     int       // reads done
	termEnds  time.Time // when the leader read last should be gone; zero: vacant
	recheck   time.Duration

	// mu orders a new observer's snapshot against the events published by
	// apply, so that none is lost or seen twice.
	mu      sync.Mutex
	last    *observedState // nil until the first read
	dropped bool           // no observer left: publish nothing more
}

func newObservers(st store.Store, reconcile time.Duration, log *slog.Logger) *observers {
	return &observers{
		store: st, reconcile: reconcile, log: log,
		reconcileTick: min(max(reconcile/8, 10*time.Millisecond), maxReconcileTick),
		kick:          make(chan struct{}, 1), hubs: map[string]*hub{},
		retry: backoff.New(100*time.Millisecond, 5*time.Second),
	}
}

// markTTL is how long a read marks an election as watched: past the longest
// gap between two reads (one and a half reconcile intervals) with room to
// spare, since the store marks it again only when half of that is gone.
func (o *observers) markTTL() time.Duration { return 4*o.reconcile + 10*time.Second }

// observe returns the election's events, starting with its current state.
// The channel is closed when the observer fell too far behind.
func (o *observers) observe(name string) (<-chan *coordinatorv1.ObserveResponse, func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.hubs[name]
	if !ok {
		h = &hub{name: name, changes: o.store.Changes(name), done: make(chan struct{})}
		h.timer = time.AfterFunc(time.Hour, func() { o.timedRead(h) })
		h.timer.Stop()
		o.hubs[name] = h
		go o.forward(h)
		o.enqueueLocked(h, readNow)
	}
	h.observers++
	h.mu.Lock()
	var initial []*coordinatorv1.ObserveResponse
	if h.last != nil {
		initial = append(initial, snapshotEvent(h.last))
	}
	sub := o.events.Subscribe(name, observerBuffer, fanout.Evict, initial...)
	h.mu.Unlock()

	return sub.C, func() {
		sub.Cancel()
		o.mu.Lock()
		defer o.mu.Unlock()
		if h.observers--; h.observers == 0 && o.hubs[name] == h {
			delete(o.hubs, name)
			h.timer.Stop()
			h.changes.Cancel()
			close(h.done)
			h.mu.Lock()
			h.dropped = true
			h.mu.Unlock()
			o.wake() // the read loop ends with the last hub
		}
	}
}

// forward asks for a read of the election whenever the store announces a
// change of it.
func (o *observers) forward(h *hub) {
	for {
		select {
		case _, open := <-h.changes.C:
			if !open { // the store closed: nothing more to observe
				o.mu.Lock()
				o.closed = true
				o.mu.Unlock()
				o.wake()
				return
			}
			o.mu.Lock()
			if o.hubs[h.name] == h {
				o.enqueueLocked(h, readNow)
			}
			o.mu.Unlock()
		case <-h.done:
			return
		}
	}
}

// timedRead asks for the read h.timer was set for: the end of a term, or a
// reconcile.
func (o *observers) timedRead(h *hub) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hubs[h.name] != h {
		return
	}
	if !h.termEnds.IsZero() && !time.Now().Before(h.termEnds) {
		o.enqueueLocked(h, readSoon)
	} else {
		o.enqueueLocked(h, readLazy)
	}
}

// urgency is how soon a read is wanted.
type urgency int

const (
	readNow  urgency = iota // a change was announced
	readSoon                // a term should have ended: within observeCoalesce
	readLazy                // a reconcile: within reconcileTick
)

// enqueueLocked asks for a read of h. When a read of h is in flight, h is
// read again after it: two reads of one election in flight could end in
// either order. o.mu is held.
func (o *observers) enqueueLocked(h *hub, u urgency) {
	now := time.Now()
	by := now
	if u == readSoon {
		by = now.Add(observeCoalesce)
	}
	switch {
	case h.reading:
		h.again = true
		return
	case h.queued && h.lazy && u != readLazy:
		// The reconcile reads ride along.
		o.promoteLazyLocked(by)
		o.wake()
		return
	case h.queued:
		if !h.lazy && by.Before(o.dueAt) {
			o.dueAt = by
			o.wake()
		}
		return
	}
	h.queued = true
	if u == readLazy {
		if len(o.lazy) == 0 {
			o.lazySince = now
		}
		h.lazy = true
		o.lazy = append(o.lazy, h)
	} else {
		if len(o.due) == 0 || by.Before(o.dueAt) {
			o.dueAt = by
		}
		o.due = append(o.due, h)
	}
	if !o.running {
		o.running = true
		go o.run()
	}
	o.wake()
}

// promoteLazyLocked moves the lazy reads to the due ones, to be read by by.
// o.mu is held.
func (o *observers) promoteLazyLocked(by time.Time) {
	if len(o.lazy) == 0 {
		return
	}
	if len(o.due) == 0 || by.Before(o.dueAt) {
		o.dueAt = by
	}
	for _, h := range o.lazy {
		h.lazy = false
	}
	o.due = append(o.due, o.lazy...)
	o.lazy = o.lazy[:0]
}

func (o *observers) wake() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// run reads the due elections in batches, observeReads batches at a time,
// until no election is observed.
func (o *observers) run() {
	slots := make(chan struct{}, observeReads)
	var reads sync.WaitGroup
	defer reads.Wait()
	for {
		slots <- struct{}{}
		batch := o.nextBatch()
		if batch == nil {
			return
		}
		reads.Go(func() {
			defer func() { <-slots }()
			o.read(batch)
		})
	}
}

// nextBatch waits for elections to read and takes up to observeBatch of
// them, the prompt ones first; nil means that none is observed any more.
func (o *observers) nextBatch() []*hub {
	for {
		o.mu.Lock()
		if len(o.hubs) == 0 {
			o.running = false
			o.mu.Unlock()
			return nil
		}
		if batch, wait := o.takeLocked(time.Now()); batch != nil {
			o.mu.Unlock()
			return batch
		} else if wait > 0 {
			o.mu.Unlock()
			timer := time.NewTimer(wait)
			select {
			case <-o.kick:
			case <-timer.C:
			}
			timer.Stop()
			continue
		}
		o.mu.Unlock()
		<-o.kick
	}
}

// takeLocked returns the next batch when one is ready, or else how long
// until one may be (zero: nothing to wait for). o.mu is held.
func (o *observers) takeLocked(now time.Time) ([]*hub, time.Duration) {
	if o.closed {
		return nil, 0
	}
	if pause := o.pauseUntil.Sub(now); pause > 0 {
		return nil, pause
	}
	if len(o.lazy) > 0 && now.Sub(o.lazySince) >= o.reconcileTick {
		o.promoteLazyLocked(now)
	}
	if len(o.due) > 0 && (len(o.due) >= observeBatch || !now.Before(o.dueAt)) {
		n := min(len(o.due), observeBatch)
		batch := slices.Clone(o.due[:n])
		o.due = slices.Delete(o.due, 0, n)
		// Reconcile reads ride along with prompt ones.
		if extra := min(len(o.lazy), observeBatch-n); extra > 0 {
			batch = append(batch, o.lazy[:extra]...)
			o.lazy = slices.Delete(o.lazy, 0, extra)
		}
		batch = slices.DeleteFunc(batch, func(h *hub) bool {
			h.queued, h.lazy = false, false
			return o.hubs[h.name] != h // nobody observes it any more
		})
		for _, h := range batch {
			h.reading = true
		}
		if len(batch) == 0 {
			return o.takeLocked(now)
		}
		return batch, 0
	}
	var wait time.Duration
	if len(o.due) > 0 {
		wait = max(o.dueAt.Sub(now), time.Nanosecond)
	}
	if len(o.lazy) > 0 {
		if w := max(o.lazySince.Add(o.reconcileTick).Sub(now), time.Nanosecond); wait == 0 || w < wait {
			wait = w
		}
	}
	return nil, wait
}

// read reads a batch of elections, sends their observers what changed, and
// schedules each one's next read.
func (o *observers) read(batch []*hub) {
	names := make([]string, len(batch))
	for i, h := range batch {
		names[i] = h.name
	}
	ctx, cancel := context.WithTimeout(context.Background(), observeReadTimeout)
	ds, err := o.store.Watch(ctx, names, o.markTTL())
	cancel()
	if err == nil && len(ds) != len(batch) {
		err = fmt.Errorf("the store described %d of %d elections", len(ds), len(batch))
	}
	if err != nil {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !o.failing {
			o.log.Warn("observing elections: could not read them; retrying", "elections", len(batch), "err", err)
			o.failing = true
		}
		o.pauseUntil = time.Now().Add(o.retry.Next())
		for _, h := range batch {
			h.reading, h.again = false, false
			if o.hubs[h.name] == h {
				o.enqueueLocked(h, readNow) // once the pause is over
			}
		}
		return
	}

	for i, h := range batch {
		o.apply(h, &observedState{held: ds[i].Held, lease: ds[i].Lease, capacity: ds[i].Capacity, holders: ds[i].Holders})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing {
		o.log.Info("observing elections: reading them again")
		o.failing = false
		o.retry.Reset()
	}
	for i, h := range batch {
		h.reading = false
		h.reads++
		switch {
		case o.hubs[h.name] != h:
		case h.again:
			h.again = false
			o.enqueueLocked(h, readNow)
		default:
			o.scheduleLocked(h, ds[i])
		}
	}
}

// scheduleLocked sets the next timed read of h, just read as d: when its
// leader's term should end, or at the reconcile. The first reconcile of an
// election comes anywhere within one interval, the next ones after half to
// one and a half intervals, so that elections observed at the same moment
// spread out rather than being read together ever after. o.mu is held.
func (o *observers) scheduleLocked(h *hub, d store.Description) {
	next := o.reconcile/2 + spread(o.reconcile)
	if h.reads == 1 {
		next = spread(o.reconcile) + time.Millisecond
	}
	h.termEnds = time.Time{}
	if d.Held {
		// The first grant to end (of a semaphore's, the earliest).
		ends := d.Lease.ExpiresAt
		for _, l := range d.Holders {
			if l.ExpiresAt.Before(ends) {
				ends = l.ExpiresAt
			}
		}
		until := time.Until(ends) + time.Millisecond
		if until > 0 {
			h.recheck = 0
		} else {
			// Gone by our clock, not by the store's: the clocks differ a little.
			h.recheck = min(max(2*h.recheck, expiryRecheck), maxExpiryRecheck)
			until = h.recheck
		}
		h.termEnds = time.Now().Add(until)
		next = min(next, until)
	} else {
		h.recheck = 0
	}
	h.timer.Reset(next)
}

// apply moves the hub to cur and sends observers every change in between.
func (o *observers) apply(h *hub, cur *observedState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dropped {
		// A new hub of the same name may have observers already: they get
		// its own events.
		return
	}
	prev := h.last
	h.last = cur
	if prev == nil {
		o.events.Publish(h.name, snapshotEvent(cur))
		return
	}
	if cur.shared() || prev.shared() {
		// A semaphore's observers get its whole set of grants after each
		// change; a name that turns back into a lock reports its holders
		// once more, empty or its one holder, then leaders.
		if cur.capacity != prev.capacity || !sameHolders(cur.holders, prev.holders) {
			o.events.Publish(h.name, holdersEvent(cur))
		}
		return
	}
	newTerm := cur.held && (!prev.held || cur.lease.Token != prev.lease.Token)
	if prev.held && (!cur.held || newTerm) {
		// A term always ends before the next begins, even when both
		// happened between two reads.
		o.events.Publish(h.name, change(coordinatorv1.LeaderEvent_KIND_VACANT, nil))
	}
	switch {
	case newTerm:
		o.events.Publish(h.name, change(coordinatorv1.LeaderEvent_KIND_ELECTED, leaderToProto(cur.lease)))
	case cur.held && !bytes.Equal(cur.lease.Value, prev.lease.Value):
		o.events.Publish(h.name, change(coordinatorv1.LeaderEvent_KIND_PROCLAIMED, leaderToProto(cur.lease)))
	}
}

// spread returns a random duration in [0, d).
func spread(d time.Duration) time.Duration {
	return rand.N(d) //nolint:gosec // spreading reads in time needs no secret randomness
}

// snapshotEvent is an observer's first message: the election's state, marked
// initial so that a sitting leader does not look like one just elected.
func snapshotEvent(s *observedState) *coordinatorv1.ObserveResponse {
	if s.shared() {
		resp := holdersEvent(s)
		resp.Initial = true
		return resp
	}
	resp := change(coordinatorv1.LeaderEvent_KIND_VACANT, nil)
	if s.held {
		resp = change(coordinatorv1.LeaderEvent_KIND_ELECTED, leaderToProto(s.lease))
	}
	resp.Initial = true
	return resp
}

func change(kind coordinatorv1.LeaderEvent_Kind, leader *coordinatorv1.Leader) *coordinatorv1.ObserveResponse {
	return &coordinatorv1.ObserveResponse{Event: &coordinatorv1.LeaderEvent{Kind: kind, Leader: leader}}
}

// holdersEvent reports a semaphore's grants.
func holdersEvent(s *observedState) *coordinatorv1.ObserveResponse {
	return &coordinatorv1.ObserveResponse{Event: &coordinatorv1.LeaderEvent{
		Kind: coordinatorv1.LeaderEvent_KIND_HOLDERS, Holders: leasesToProto(s.holders), Capacity: uint32(max(s.capacity, 1)),
	}}
}
