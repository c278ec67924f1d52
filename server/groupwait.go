package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// A group that waits. It is a waitingAcquire (acquire.go) in the line of
// every member at once: its place in each line is a waiter of its own, all
// sharing one turn, so that the group tries again when it is told to by any
// of its lines (it is first there, and the name changed) or when the last
// of its blockers' leases should end. Its first attempt holds the entry
// token of every line, taken in name order so that two groups entering
// lines they share never wait for each other; its places therefore follow
// the store's queue order in every line, as a single call's do.
//
// A store that holds some members while it waits for the others
// (GroupResult.Held: a Redis Cluster with members in several slots) keeps
// them only for the group's TTL: the group asks again within a third of it
// to renew them, and gives them back when it gives up. Such a store queues
// the group only where it waits (GroupResult.Queued), and the group is
// parked in those lines alone: parked in a line whose store queue does not
// hold it, it would stand first there while the waiter the store has first
// is never told to try, and that waiter may be the one holding what the
// group waits for. An attempt that may queue it in new lines holds their
// entry tokens, as a first attempt does.

// waitingGroup is one group acquisition with a wait, from its arrival to
// its grant or give-up.
type waitingGroup struct {
	s        *Service
	req      store.GroupRequest
	arrived  time.Time
	giveUpAt time.Time
	// lines and places are the group's lines and its place in each, in
	// the request's order; entering is the order they are entered in.
	lines    []*waitLine
	places   []*waiter
	entering []int
	// parked says in which lines the group is parked.
	parked []bool
	// held are the members the store held for the group at its last
	// attempt (GroupResult.Held).
	held []store.Lease
}

// newWaitingGroup is a group's arrival: its waiter id, the same in the
// store's queue of every member, and its give-up time (see
// newWaitingAcquire).
func (s *Service) newWaitingGroup(ctx context.Context, req store.GroupRequest, wait time.Duration) *waitingGroup {
	arrived, giveUpAt := giveUpTime(ctx, wait)
	req.Waiter = newWaiterID()
	req.WaiterTTL = waiterTTL
	turn := make(chan struct{}, 1)
	places := make([]*waiter, len(req.Members))
	for i := range places {
		places[i] = &waiter{id: req.Waiter, turn: turn}
	}
	entering := make([]int, len(req.Members))
	for i := range entering {
		entering[i] = i
	}
	slices.SortFunc(entering, func(a, b int) int {
		switch na, nb := req.Members[a].Name, req.Members[b].Name; {
		case na < nb:
			return -1
		case na > nb:
			return 1
		}
		return 0
	})
	return &waitingGroup{s: s, req: req, arrived: arrived, giveUpAt: giveUpAt, places: places, entering: entering,
		parked: make([]bool, len(req.Members))}
}

// run is the group's life, as waitingAcquire.run is a single call's.
func (g *waitingGroup) run(ctx context.Context) (res store.GroupResult, err error) {
	defer func() { g.s.metrics.waitSeconds.Observe(time.Since(g.arrived).Seconds()) }()
	g.lines = make([]*waitLine, len(g.req.Members))
	for i, m := range g.req.Members {
		g.lines[i] = g.s.lines.join(m.Name) //nolint:contextcheck // the line outlives this call: it ends with its last waiter
	}
	defer func() {
		for _, l := range g.lines {
			g.s.lines.leave(l)
		}
	}()

	// After leave: the next waiter of each line then finds our place gone.
	// Registered before the first attempt, which may park the group and
	// still end the call (its wait ran out).
	defer func() {
		for i, l := range g.lines {
			if g.parked[i] {
				l.unpark(g.places[i], g.heldWhole(i, res, err))
			}
		}
	}()
	var parked bool
	res, parked, err = g.arrive(ctx)
	if !parked {
		return res, err
	}
	retryAt := g.refused(res)
	for {
		if err := g.awaitTurn(ctx, retryAt); err != nil {
			g.leave(ctx)
			return g.giveUp(err)
		}
		if g.closed() {
			g.giveBack(ctx)
			return store.GroupResult{}, errStopping
		}
		if at := g.deferral(); !at.IsZero() {
			// A waiter before the group took a whole member until at.
			retryAt = at
			continue
		}
		entered, err := g.enter(ctx, g.unparked())
		if err != nil {
			g.leave(ctx)
			return g.giveUp(err)
		}
		res, err = g.attemptParking(ctx)
		g.exit(entered)
		if err != nil || res.Acquired || g.timeUp() {
			return g.finish(ctx, res, err)
		}
		retryAt = g.refused(res)
	}
}

// arrive makes the group's first attempt holding the entry token of every
// line, and parks the group in each when it must wait on (see
// waitingAcquire.arrive).
func (g *waitingGroup) arrive(ctx context.Context) (res store.GroupResult, parked bool, err error) {
	entered, err := g.enter(ctx, g.entering)
	if err != nil {
		res, err = g.giveUp(err) // not queued yet: no place to leave
		return res, false, err
	}
	res, err = g.attemptParking(ctx)
	g.exit(entered)
	if err != nil || res.Acquired || entered == nil || g.timeUp() {
		res, err = g.finish(ctx, res, err)
		return res, false, err
	}
	return res, true, nil
}

// unparked are the lines the group is not parked in, in name order.
func (g *waitingGroup) unparked() []int {
	var out []int
	for _, i := range g.entering {
		if !g.parked[i] {
			out = append(out, i)
		}
	}
	return out
}

// enter takes the entry token of each of lines (indices, in name order),
// and returns them; none, and no token held, when the wait ran out first.
// It fails when the caller leaves or the coordinator stops.
func (g *waitingGroup) enter(ctx context.Context, lines []int) (entered []int, err error) {
	if len(lines) == 0 {
		return nil, nil
	}
	timer := time.NewTimer(time.Until(g.giveUpAt))
	defer timer.Stop()
	for n, i := range lines {
		select {
		case g.lines[i].enter <- struct{}{}:
			continue
		case <-timer.C:
		case <-ctx.Done():
			err = ctx.Err()
		case <-g.s.stopping:
			err = errStopping
		}
		g.exit(lines[:n])
		return nil, err
	}
	return lines, nil
}

// exit gives back the entry tokens of lines.
func (g *waitingGroup) exit(lines []int) {
	for _, i := range lines {
		<-g.lines[i].enter
	}
}

// attemptParking is an attempt that, refused, parks the group in the lines
// of the members it is now queued on and takes it out of the others.
func (g *waitingGroup) attemptParking(ctx context.Context) (store.GroupResult, error) {
	seqs := make([]uint64, len(g.lines))
	for i, l := range g.lines {
		seqs[i] = l.seq()
	}
	res, err := g.attempt(ctx)
	if err != nil || res.Acquired {
		return res, err
	}
	for i, l := range g.lines {
		queued := res.Queued == nil || res.Queued[i]
		switch {
		case queued && !g.parked[i]:
			l.park(g.places[i], seqs[i])
			g.parked[i] = true
		case !queued && g.parked[i]:
			l.unpark(g.places[i], store.Lease{})
			g.parked[i] = false
		}
	}
	return res, nil
}

// awaitTurn waits until the group should try again: one of its lines
// tells it to, or its retry time (zero: none) or give-up time comes.
func (g *waitingGroup) awaitTurn(ctx context.Context, retryAt time.Time) error {
	return g.s.awaitTurn(ctx, g.places[0].turn, retryAt, g.giveUpAt) // the turn every place shares
}

// refused takes the answer of an attempt that was not granted and says
// when to try again without being told: when the last of the members in
// the way should come free, or zero when one of them waits for older
// waiters (a line tells the group when it is first there). Held members
// are renewed by an attempt within a third of their TTL.
func (g *waitingGroup) refused(res store.GroupResult) time.Time {
	var at time.Time
	told, poll := false, false
	for i, m := range res.Members {
		if i >= len(g.lines) || m.Acquired {
			continue // not in the way
		}
		if !g.parked[i] {
			// Not queued there: no line tells the group; it looks again.
			poll = true
			continue
		}
		switch r := g.lines[i].refused(g.places[i], m); {
		case r.IsZero():
			told = true
		case r.After(at):
			at = r
		}
	}
	if told {
		at = time.Time{}
	}
	if look := time.Now().Add(waiterHeartbeat); poll && (at.IsZero() || look.Before(at)) {
		at = look
	}
	if len(g.held) > 0 && g.req.Session == "" {
		if renew := time.Now().Add(g.req.TTL / 3); at.IsZero() || renew.Before(at) {
			at = renew
		}
	}
	return at
}

// deferral returns when the group was told to try again by the lines that
// deferred it (the latest: every member must be free), zero for now.
func (g *waitingGroup) deferral() time.Time {
	var at time.Time
	for i, l := range g.lines {
		if !g.parked[i] {
			continue
		}
		if d := l.deferral(g.places[i]); d.After(at) {
			at = d
		}
	}
	return at
}

// closed reports whether the store closed.
func (g *waitingGroup) closed() bool {
	return slices.ContainsFunc(g.lines, (*waitLine).closed)
}

// heldWhole is the group's lease of member i when the answer grants it the
// whole of that name's capacity; otherwise the zero Lease.
func (g *waitingGroup) heldWhole(i int, res store.GroupResult, err error) store.Lease {
	if err != nil || !res.Acquired || i >= len(res.Leases) {
		return store.Lease{}
	}
	m := g.req.Members[i]
	if l := res.Leases[i]; l.Weight >= max(m.Capacity, 1) {
		return l
	}
	return store.Lease{}
}

// attempt is one AcquireGroup of the group in the store, which queues it
// on every member (or refreshes its places) when it is not granted.
func (g *waitingGroup) attempt(ctx context.Context) (store.GroupResult, error) {
	res, err := g.s.store.AcquireGroup(ctx, g.req)
	if err == nil && !res.Acquired {
		g.s.metrics.contended.Inc()
	}
	if err == nil {
		g.held = res.Held
	} else {
		// Members taken before the failure are held too; releasing one
		// that is not is a no-op.
		g.held = append(g.held, res.Held...)
	}
	return res, err
}

func (g *waitingGroup) timeUp() bool { return !time.Now().Before(g.giveUpAt) }

// finish ends the group with the answer of its last attempt: the grant, or,
// after leaving the queues, not-acquired or the store's error.
func (g *waitingGroup) finish(ctx context.Context, res store.GroupResult, err error) (store.GroupResult, error) {
	if err != nil || !res.Acquired {
		g.leave(ctx)
	}
	return g.s.countGroup(g.req, res, err)
}

// giveUp ends the group without an answer from the store: err is the
// caller's context's error, or errStopping.
func (g *waitingGroup) giveUp(err error) (store.GroupResult, error) {
	if errors.Is(err, errStopping) {
		return store.GroupResult{}, errStopping
	}
	return g.s.countGroup(g.req, store.GroupResult{}, err)
}

// leave takes the group's places out of every member's queue at once, and
// gives back the members held for it. The caller's context may be
// cancelled already, so only its values are kept.
func (g *waitingGroup) leave(parent context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range g.req.Members {
		wg.Go(func() {
			if err := g.s.store.Dequeue(ctx, m.Name, g.req.Waiter); err != nil {
				g.s.log.Warn("could not leave a wait queue; the place times out by itself", "name", m.Name, "err", err)
			}
		})
	}
	wg.Wait()
	g.giveBack(ctx)
}

// giveBack releases the members held for the group.
func (g *waitingGroup) giveBack(ctx context.Context) {
	if len(g.held) > 0 {
		g.s.releaseHeld(ctx, g.req.Holder, g.req.Claim, g.held)
		g.held = nil
	}
}
