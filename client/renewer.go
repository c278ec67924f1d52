package client

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// renewer renews the sessions of a Client: it is the SDK's one renewal
// path. Every lease and leadership the Client holds is attached to a
// session and is valid as long as it; nothing else is renewed.
//
// One scheduler goroutine keeps the sessions in a heap ordered by when each
// next needs attention: its renewal (about ttl/3 after the last successful
// one was sent, or a backoff after a failure) or its local deadline. A due
// renewal is queued as a renew_session operation on the Client's operation
// stream, which stamps it with the time it was sent. A session has at most
// one renewal in flight. A renewed session's deadline becomes the time its
// renewal was sent + the granted TTL − a drift margin; a session still
// unrenewed at its deadline ends with ErrExpired there, whatever is in
// flight, before the coordinator's own expiry. A refusal with a reason
// marked ends_lease (SESSION_EXPIRED, SESSION_CLOSED…) ends it with ErrLost
// at once; any other failure, or the stream breaking with the renewal in
// flight, is retried while the deadline allows. A session's leases end with
// it, with its error.
//
// The scheduler runs only while the Client holds a session: it starts with
// the first and exits with the last.
type renewer struct {
	c *Client

	mu     sync.Mutex
	closed bool
	queue  sessionHeap // every live session

	// The running scheduler, if any: its context and wake-up channel.
	run       context.Context
	cancelRun context.CancelFunc
	wake      chan struct{}

	wg sync.WaitGroup
}

// add starts renewing s.
func (r *renewer) add(s *session) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	heap.Push(&r.queue, s)
	if r.run == nil {
		// Stopped by close, or when the last session ends.
		ctx, cancel := context.WithCancel(r.c.closing)
		r.run, r.cancelRun, r.wake = ctx, cancel, make(chan struct{}, 1)
		r.wg.Add(1)
		go r.schedule(ctx, r.wake)
	} else if s.index == 0 {
		r.poke() // due before the one the scheduler sleeps for
	}
	return nil
}

// attach makes l a lease of s: valid as long as s, and ended with it. It
// fails when s has ended.
func (r *renewer) attach(s *session, l *lease) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.done {
		return fmt.Errorf("coordinator: %s: %w", s.describe(), s.err())
	}
	s.leases[l] = struct{}{}
	return nil
}

// endLease ends l with err unless it has ended already; it returns the
// error l had ended with before, or nil.
func (r *renewer) endLease(l *lease, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.done {
		return l.err()
	}
	l.done = true
	l.finish(err)
	delete(l.session.leases, l)
	return nil
}

// endSession is endLease for a session and every lease attached to it.
func (r *renewer) endSession(s *session, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.done {
		return s.err()
	}
	r.endSessionLocked(s, err)
	return nil
}

func (r *renewer) endSessionLocked(s *session, err error) {
	if s.done {
		return
	}
	s.done = true
	s.finish(err)
	for l := range s.leases {
		l.done = true
		l.finish(err)
	}
	clear(s.leases)
	if s.index >= 0 {
		heap.Remove(&r.queue, s.index)
	}
	// The scheduler stops once no session is left. One that ends sooner can
	// only make it wake early.
	if len(r.queue) == 0 {
		r.poke()
	}
}

// close ends every session (and lease) with ErrClosed, stops the scheduler
// and returns the sessions that were live, for Close to close them on the
// coordinator.
func (r *renewer) close() []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	held := append([]*session(nil), r.queue...)
	for _, s := range held {
		r.endSessionLocked(s, ErrClosed)
	}
	r.stopLocked()
	return held
}

// stopLocked stops the scheduler.
func (r *renewer) stopLocked() {
	if r.run != nil {
		r.cancelRun()
	}
	r.run, r.cancelRun, r.wake = nil, nil, nil
}

// poke wakes the scheduler.
func (r *renewer) poke() {
	if r.wake != nil {
		poke(r.wake)
	}
}

// schedule is the scheduler goroutine.
func (r *renewer) schedule(ctx context.Context, wake <-chan struct{}) {
	defer r.wg.Done()
	timer := r.c.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, ok := r.tick(ctx)
		if !ok {
			return
		}
		timer.Reset(r.c.clock.Until(next))
		select {
		case <-timer.Chan():
		case <-wake:
		case <-ctx.Done():
			return
		}
	}
}

// tick ends the sessions past their deadline, sends the renewals that are
// due, and returns when to look again; false when the scheduler must exit.
func (r *renewer) tick(ctx context.Context) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx.Err() != nil { // stopped while waiting for the lock
		return time.Time{}, false
	}
	now := r.c.clock.Now()
	for len(r.queue) > 0 {
		s := r.queue[0]
		if s.due().After(now) {
			break
		}
		if !now.Before(s.deadline) {
			r.endSessionLocked(s, s.expired())
			continue
		}
		r.sendLocked(s)
		heap.Fix(&r.queue, 0)
	}
	if len(r.queue) == 0 {
		r.stopLocked()
		return time.Time{}, false
	}
	return r.queue[0].due(), true
}

// sendLocked queues a renew_session operation of s on the operation stream.
func (r *renewer) sendLocked(s *session) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_RenewSession{
		RenewSession: &coordinatorv1.RenewSessionRequest{SessionId: s.id},
	}}
	o, err := r.c.stream.submit(op, false, func(o *streamOp, res *coordinatorv1.StreamResult, err error) {
		r.answered(s, o, res, err)
	})
	if err != nil { // the stream is closing with the Client
		r.failedLocked(s, err.Error())
		return
	}
	s.inflight = o
}

// answered applies the outcome of the renewal operation o of s.
func (r *renewer) answered(s *session, o *streamOp, res *coordinatorv1.StreamResult, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.done || s.inflight != o {
		return
	}
	s.inflight = nil
	if err == nil {
		err = resultError(res)
	}
	if err == nil && res.GetRenewSession().GetSession() == nil {
		err = unexpected(res, "renew_session")
	}
	var broke *streamBrokeError
	switch {
	case errors.As(err, &broke):
		// Retried at once, on the next stream.
		s.lastErr = err.Error()
		s.nextRenew = r.c.clock.Now()
		heap.Fix(&r.queue, s.index)
		r.poke()
	case err != nil && endsLease(ErrorReason(err)):
		r.endSessionLocked(s, fmt.Errorf("%w: %s: %s: %s", ErrLost, s.describe(), ErrorReason(err), status.Convert(err).Message()))
	case err != nil:
		// STORE_UNAVAILABLE, DATA_LOSS_QUARANTINE, the stream could not be
		// opened…: this renewal failed; the session holds until its
		// deadline. Try again.
		st := status.Convert(err)
		r.failedLocked(s, st.Code().String()+": "+st.Message())
	case !r.c.clock.Now().Before(s.deadline):
		r.endSessionLocked(s, s.expired())
	default:
		s.granted(o.sent, durationOr(res.GetRenewSession().GetSession().GetTtl(), s.ttl))
		heap.Fix(&r.queue, s.index)
		r.poke()
	}
}

// failedLocked schedules another try of a renewal of s that failed.
func (r *renewer) failedLocked(s *session, why string) {
	if s.retry == nil {
		s.retry = renewalBackoff(s.ttl)
	}
	s.lastErr = why
	s.nextRenew = r.c.clock.Now().Add(s.retry.Next())
	if s.index >= 0 {
		heap.Fix(&r.queue, s.index)
	}
	r.poke()
}

// sessionHeap orders sessions by due.
type sessionHeap []*session

func (h sessionHeap) Len() int           { return len(h) }
func (h sessionHeap) Less(i, j int) bool { return h[i].due().Before(h[j].due()) }
func (h sessionHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *sessionHeap) Push(x any) {
	s := x.(*session)
	s.index = len(*h)
	*h = append(*h, s)
}

func (h *sessionHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	s.index = -1
	*h = old[:len(old)-1]
	return s
}
