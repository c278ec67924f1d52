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
	wake      *wakeups
	reconcile time.Duration
	log       *slog.Logger

	mu   sync.Mutex
	hubs map[string]*hub
}

// hub watches one election and keeps its observers in step.
type hub struct {
	name string
	stop context.CancelFunc

	mu   sync.Mutex
	last *observedState // nil until the first read
	subs map[chan *coordinatorv1.LeaderEvent]struct{}
}

func newObservers(st store.Store, wake *wakeups, reconcile time.Duration, log *slog.Logger) *observers {
	return &observers{store: st, wake: wake, reconcile: reconcile, log: log, hubs: map[string]*hub{}}
}

// observe returns the election's events, starting with its current state.
// The channel is closed when the observer fell too far behind.
func (o *observers) observe(name string) (<-chan *coordinatorv1.LeaderEvent, func()) {
	ch := make(chan *coordinatorv1.LeaderEvent, observerBuffer)
	o.mu.Lock()
	h, ok := o.hubs[name]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		h = &hub{name: name, stop: cancel, subs: map[chan *coordinatorv1.LeaderEvent]struct{}{}}
		o.hubs[name] = h
		go o.watch(ctx, h)
	}
	h.mu.Lock()
	if h.last != nil {
		ch <- snapshotEvent(h.last)
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	o.mu.Unlock()

	return ch, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		h.mu.Lock()
		delete(h.subs, ch)
		empty := len(h.subs) == 0
		h.mu.Unlock()
		if empty && o.hubs[name] == h {
			delete(o.hubs, name)
			h.stop()
		}
	}
}

// watch reads the election whenever the store says it changed, when its
// leader's term should end, and at every reconcile interval (a missed
// notification or a reconnect must not leave observers on a stale leader).
func (o *observers) watch(ctx context.Context, h *hub) {
	woken, stopWatching := o.wake.watch(h.name)
	defer stopWatching()
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
			h.apply(cur)
			if cur.held {
				next = min(next, time.Until(cur.lease.ExpiresAt)+time.Millisecond)
			}
		}
		timer := time.NewTimer(max(next, 0))
		select {
		case <-woken:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// apply moves the hub to cur and sends observers every change in between.
func (h *hub) apply(cur *observedState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.last
	h.last = cur
	if prev == nil {
		h.broadcast(snapshotEvent(cur))
		return
	}
	newTerm := cur.held && (!prev.held || cur.lease.Token != prev.lease.Token)
	if prev.held && (!cur.held || newTerm) {
		// A term always ends before the next begins, even when both
		// happened between two reads.
		h.broadcast(&coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_VACANT})
	}
	switch {
	case newTerm:
		h.broadcast(&coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_ELECTED, Leader: leaderToProto(cur.lease)})
	case cur.held && !bytes.Equal(cur.lease.Value, prev.lease.Value):
		h.broadcast(&coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_PROCLAIMED, Leader: leaderToProto(cur.lease)})
	}
}

// broadcast sends ev to every observer, dropping those that fell behind.
func (h *hub) broadcast(ev *coordinatorv1.LeaderEvent) {
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

func snapshotEvent(s *observedState) *coordinatorv1.LeaderEvent {
	if !s.held {
		return &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_VACANT}
	}
	return &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_ELECTED, Leader: leaderToProto(s.lease)}
}
