package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Acquiring, for TryAcquire and Campaign. Without a wait it is one store
// call. With a wait it is a waitingAcquire, whose methods below are its life
// in the order they happen: it arrives (newWaitingAcquire), joins the name's
// line (waiting.go) and makes its first attempt in arrival order (arrive),
// then waits for its turns and tries again (run, awaitTurn, attempt) until
// it is granted, its give-up time comes (finish), or the caller leaves or the
// coordinator stops (giveUp). A call that gave up, or ended without the
// lease, leaves the store's queue at once (leaveQueue).

// deadlineMargin is kept from an RPC deadline so that a wait that runs out
// still answers not-acquired instead of DeadlineExceeded.
const deadlineMargin = 20 * time.Millisecond

// acquire asks the store for the lease and, given a wait, waits for it in
// the name's line until granted, the wait or the RPC deadline runs out, or
// the caller leaves.
func (s *Service) acquire(ctx context.Context, req store.AcquireRequest, wait time.Duration) (store.AcquireResult, error) {
	if wait == 0 {
		res, err := s.store.Acquire(ctx, req)
		if err == nil && !res.Acquired {
			s.metrics.contended.Inc()
		}
		return s.countAcquire(req, res, err)
	}
	return s.newWaitingAcquire(ctx, req, wait).run(ctx)
}

// countAcquire counts the outcome of an acquire in the metrics and maps a
// store error to its status.
func (s *Service) countAcquire(req store.AcquireRequest, res store.AcquireResult, err error) (store.AcquireResult, error) {
	switch {
	case err == nil && res.Acquired:
		s.metrics.acquired.Inc()
		s.metrics.held.granted(req.Name, res.Lease.Token, res.Lease.TTL)
		return res, nil
	case err == nil:
		s.metrics.notAcquired.Inc()
		return res, nil
	}
	var quarantine *store.QuarantineError
	var holders *store.HolderLimitError
	switch {
	case errors.As(err, &holders):
		s.metrics.notAcquired.Inc()
		return res, s.refuseHolders(holders.Limit, holders.Name)
	case errors.As(err, &quarantine):
		s.metrics.quarantined.Inc()
	default:
		s.metrics.acquireErrors.Inc()
	}
	if req.Session != "" {
		return res, errOfSession(req.Session, err)
	}
	return res, storeError(err)
}

// waitingAcquire is one acquire with a wait, from its arrival to its grant
// or give-up.
type waitingAcquire struct {
	s *Service
	// req names the call's place in the store's queue (Waiter, WaiterTTL).
	req      store.AcquireRequest
	arrived  time.Time
	giveUpAt time.Time
	line     *waitLine
	// waiter is the call's place in the line.
	waiter
}

// newWaitingAcquire is a call's arrival: it gets its place's id in the
// store's queue and the time it gives up at, which is when its wait ends or,
// when the RPC deadline comes first, deadlineMargin before that, so that its
// answer arrives in time.
func (s *Service) newWaitingAcquire(ctx context.Context, req store.AcquireRequest, wait time.Duration) *waitingAcquire {
	arrived, giveUpAt := giveUpTime(ctx, wait)
	req.Waiter = newWaiterID()
	req.WaiterTTL = waiterTTL
	return &waitingAcquire{
		s: s, req: req, arrived: arrived, giveUpAt: giveUpAt,
		waiter: waiter{id: req.Waiter, turn: make(chan struct{}, 1)},
	}
}

// giveUpTime is when a call that arrives now and may wait for wait gives
// up: when its wait ends or, when the RPC deadline comes first,
// deadlineMargin before that, so that its answer arrives in time.
func giveUpTime(ctx context.Context, wait time.Duration) (arrived, giveUpAt time.Time) {
	arrived = time.Now()
	giveUpAt = arrived.Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-deadlineMargin).Before(giveUpAt) {
		giveUpAt = d.Add(-deadlineMargin)
	}
	return arrived, giveUpAt
}

func newWaiterID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// run is the call's life: it arrives in the name's line, then tries again
// whenever it is its turn, until granted, its give-up time, or the caller
// leaves.
func (a *waitingAcquire) run(ctx context.Context) (res store.AcquireResult, err error) {
	defer func() { a.s.metrics.waitSeconds.Observe(time.Since(a.arrived).Seconds()) }()
	a.line = a.s.lines.join(a.req.Name) //nolint:contextcheck // the line outlives this call: it ends with its last waiter
	defer a.s.lines.leave(a.line)

	res, parked, err := a.arrive(ctx)
	if !parked {
		return res, err
	}
	// After leaveQueue: the next waiter then finds our place gone.
	defer func() { a.line.unpark(&a.waiter, a.heldWhole(res, err)) }()
	retryAt := a.line.refused(&a.waiter, res)
	for {
		if err := a.awaitTurn(ctx, retryAt); err != nil {
			a.leaveQueue(ctx)
			return a.giveUp(err)
		}
		if a.line.closed() {
			return store.AcquireResult{}, errStopping
		}
		if at := a.line.deferral(&a.waiter); !at.IsZero() {
			// The waiter before took the whole name until at.
			retryAt = at
			continue
		}
		res, err = a.attempt(ctx)
		if err != nil || res.Acquired || a.timeUp() {
			return a.finish(ctx, res, err)
		}
		retryAt = a.line.refused(&a.waiter, res)
	}
}

// heldWhole is the call's grant when its answer res, err grants it the whole
// of the name's capacity (an exclusive lock, a writer's share), which nobody
// else can be granted before it ends; otherwise the zero Lease.
func (a *waitingAcquire) heldWhole(res store.AcquireResult, err error) store.Lease {
	if err != nil || !res.Acquired || res.Lease.Weight < a.req.CapacityOrDefault() {
		return store.Lease{}
	}
	return res.Lease
}

// arrive makes the call's first attempt, holding the line's entry token so
// that first attempts reach the store in the order callers joined the line,
// and parks the call in the line when it must wait on. When the wait runs
// out before the call's turn to enter, it makes the attempt anyway: a last
// attempt answers with the holder. parked reports that the call waits on
// in the line, res being the first attempt's refusal; otherwise the call is
// done, and res and err are its answer.
func (a *waitingAcquire) arrive(ctx context.Context) (res store.AcquireResult, parked bool, err error) {
	entered, err := a.enter(ctx)
	if err != nil {
		res, err = a.giveUp(err) // not queued yet: no place to leave
		return res, false, err
	}
	seq := a.line.seq()
	res, err = a.attempt(ctx)
	if err != nil || res.Acquired || !entered || a.timeUp() {
		if entered {
			<-a.line.enter
		}
		res, err = a.finish(ctx, res, err)
		return res, false, err
	}
	a.line.park(&a.waiter, seq)
	<-a.line.enter
	return res, true, nil
}

// enter waits for the line's entry token; entered is false when the wait
// ran out first. It fails when the caller leaves or the coordinator stops.
func (a *waitingAcquire) enter(ctx context.Context) (entered bool, err error) {
	timer := time.NewTimer(time.Until(a.giveUpAt))
	defer timer.Stop()
	select {
	case a.line.enter <- struct{}{}:
		return true, nil
	case <-timer.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-a.s.stopping:
		return false, errStopping
	}
}

// awaitTurn waits until the call should try again: it is told it is its
// turn, or its retry time (zero: none) or its give-up time comes. It fails
// when the caller leaves or the coordinator stops.
func (a *waitingAcquire) awaitTurn(ctx context.Context, retryAt time.Time) error {
	return a.s.awaitTurn(ctx, a.turn, retryAt, a.giveUpAt)
}

// awaitTurn waits until a waiting call should try again: it is told on
// turn, or retryAt (zero: none) or giveUpAt comes. It fails when the
// caller leaves or the coordinator stops.
func (s *Service) awaitTurn(ctx context.Context, turn <-chan struct{}, retryAt, giveUpAt time.Time) error {
	wake := giveUpAt
	if !retryAt.IsZero() && retryAt.Before(wake) {
		wake = retryAt
	}
	timer := time.NewTimer(time.Until(wake))
	defer timer.Stop()
	select {
	case <-turn:
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopping:
		return errStopping
	}
	return nil
}

// attempt is one Acquire of the call in the store, which queues it (or
// refreshes its place) when it is not granted.
func (a *waitingAcquire) attempt(ctx context.Context) (store.AcquireResult, error) {
	res, err := a.s.store.Acquire(ctx, a.req)
	if err == nil && !res.Acquired {
		a.s.metrics.contended.Inc()
	}
	return res, err
}

// timeUp reports whether the call's give-up time has come.
func (a *waitingAcquire) timeUp() bool { return !time.Now().Before(a.giveUpAt) }

// finish ends the call with the answer of its last attempt: the grant, or,
// after leaving the store's queue, not-acquired or the store's error.
func (a *waitingAcquire) finish(ctx context.Context, res store.AcquireResult, err error) (store.AcquireResult, error) {
	if err != nil || !res.Acquired {
		a.leaveQueue(ctx)
	}
	return a.s.countAcquire(a.req, res, err)
}

// giveUp ends the call without an answer from the store: err is the
// caller's context's error, or errStopping.
func (a *waitingAcquire) giveUp(err error) (store.AcquireResult, error) {
	if errors.Is(err, errStopping) {
		return store.AcquireResult{}, errStopping
	}
	return a.s.countAcquire(a.req, store.AcquireResult{}, err)
}

// leaveQueue takes the call's place out of the store's queue at once, so
// that the next waiter need not wait for it to time out. The caller's
// context may be cancelled already, so only its values are kept.
func (a *waitingAcquire) leaveQueue(parent context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 2*time.Second)
	defer cancel()
	if err := a.s.store.Dequeue(ctx, a.req.Name, a.req.Waiter); err != nil {
		a.s.log.Warn("could not leave a wait queue; the place times out by itself", "name", a.req.Name, "err", err)
	}
}
