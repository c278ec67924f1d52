package server

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/fanout"
	"github.com/coordinator-dev/coordinator/server/store"
)

// observerBuffer is how many events an observer may fall behind before its
// stream is ended; its client then reconnects and starts from the current
// state rather than from a stale backlog.
const observerBuffer = 64

var errObserverTooSlow = status.Error(codes.ResourceExhausted, "observer fell too far behind; observe again to resume from the current state")

// observers runs one watch per observed election in this process, however
// many streams observe it: one store read per change, fanned out to all.
type observers struct {
	store     store.Store
	reconcile time.Duration
	log       *slog.Logger
	// events fans each election's events out to its streams; a stream that
	// falls observerBuffer events behind is evicted.
	events fanout.Hub[string, *coordinatorv1.LeaderEvent]

	mu   sync.Mutex
	hubs map[string]*hub
}

// hub watches one election and keeps its observers in step.
type hub struct {
	name string
	stop context.CancelFunc

	// mu orders a new observer's snapshot against the events published by
	// apply, so that none is lost or seen twice.
	mu        sync.Mutex
	last      *observedState // nil until the first read
	observers int            // guarded by observers.mu
}

func newObservers(st store.Store, reconcile time.Duration, log *slog.Logger) *observers {
	return &observers{store: st, reconcile: reconcile, log: log, hubs: map[string]*hub{}}
}

// observe returns the election's events, starting with its current state.
// The channel is closed when the observer fell too far behind.
func (o *observers) observe(name string) (<-chan *coordinatorv1.LeaderEvent, func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.hubs[name]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		h = &hub{name: name, stop: cancel}
		o.hubs[name] = h
		go o.watch(ctx, h)
	}
	h.observers++
	h.mu.Lock()
	var initial []*coordinatorv1.LeaderEvent
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
			h.stop()
		}
	}
}

// watch reads the election whenever the store says it changed, when its
// leader's term should end, and at every reconcile interval (a missed
// notification or a reconnect must not leave observers on a stale leader).
func (o *observers) watch(ctx context.Context, h *hub) {
	changes := o.store.Changes(h.name)
	defer changes.Cancel()
	for {
		next := o.reconcile
		// Marked with each read, so that no change after the read goes
		// unannounced; the mark outlives a few reconcile intervals.
		d, err := o.store.Watch(ctx, h.name, 3*o.reconcile+time.Second)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			o.log.Warn("observing an election: could not read it; retrying", "election", h.name, "err", err)
			next = min(next, 100*time.Millisecond)
		default:
			cur := &observedState{held: d.Held, lease: d.Lease}
			o.apply(h, cur)
			if cur.held {
				next = min(next, time.Until(cur.lease.ExpiresAt)+time.Millisecond)
			}
		}
		timer := time.NewTimer(max(next, 0))
		select {
		case _, open := <-changes.C:
			if !open { // the store closed: nothing more to observe
				timer.Stop()
				return
			}
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// apply moves the hub to cur and sends observers every change in between.
func (o *observers) apply(h *hub, cur *observedState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.last
	h.last = cur
	if prev == nil {
		o.events.Publish(h.name, snapshotEvent(cur))
		return
	}
	newTerm := cur.held && (!prev.held || cur.lease.Token != prev.lease.Token)
	if prev.held && (!cur.held || newTerm) {
		// A term always ends before the next begins, even when both
		// happened between two reads.
		o.events.Publish(h.name, &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_VACANT})
	}
	switch {
	case newTerm:
		o.events.Publish(h.name, &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_ELECTED, Leader: leaderToProto(cur.lease)})
	case cur.held && !bytes.Equal(cur.lease.Value, prev.lease.Value):
		o.events.Publish(h.name, &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_PROCLAIMED, Leader: leaderToProto(cur.lease)})
	}
}

func snapshotEvent(s *observedState) *coordinatorv1.LeaderEvent {
	if !s.held {
		return &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_VACANT}
	}
	return &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_ELECTED, Leader: leaderToProto(s.lease)}
}
