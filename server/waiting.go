package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Waiting calls. The store queues waiters in the order their first attempt
// reaches it and grants a free name to the oldest live one. Each coordinator
// therefore keeps its waiting calls of a name in a line, in the order of
// their first attempts (made one at a time), so that only the first of the
// line can be next: it alone retries when the name changes or its holder's
// lease should end, and when it leaves, the next one retries at once, or,
// when it leaves holding the whole name, once that grant should end (or is
// released: announced, and told at once when the release was made through
// this coordinator). The others stay parked and send nothing; one
// RefreshWaiters call per line and heartbeat keeps all their places. A
// handoff within a line then costs the store one Acquire, the grant's,
// however long the queue.
//
// This file is the lines; a waiting call itself, from its arrival to its
// grant or give-up, is a waitingAcquire (acquire.go), which uses its line's
// join, park, refused, unpark and leave.

const (
	// waiterHeartbeat is how often a line refreshes its waiters' places, and
	// how often its first waiter looks again while the name is free but
	// another waiter comes first (one whose coordinator vanished, until its
	// place times out).
	waiterHeartbeat = time.Second
	// waiterTTL is how long a place outlives its last refresh: the longest a
	// vanished coordinator's waiters hold a queue up.
	waiterTTL = 3 * time.Second
	// stallTimeout is how long the first waiter may find the name free with
	// another waiter first before it goes to the back of the line and every
	// waiter of the line tries once. No live waiter of another coordinator
	// stays first that long, and a dead one's place times out sooner, so the
	// waiter ahead must be one of ours: one that kept its place while the
	// first lost its own (the store was out of reach for about waiterTTL)
	// and queued again at the back of the store's queue.
	stallTimeout = 2 * waiterTTL
	// refreshTimeout bounds one refresh of a line's places.
	refreshTimeout = waiterHeartbeat
)

// waitLines are this coordinator's lines, one per name with waiting calls.
type waitLines struct {
	store store.Store
	log   *slog.Logger

	mu    sync.Mutex
	lines map[string]*waitLine
}

// waitLine is the waiting calls of one name, in the store's queue order.
type waitLine struct {
	name    string
	changes *store.Changes
	// enter holds one token: a caller makes its first attempt holding it, so
	// that attempts reach the store in the order callers join the line.
	enter chan struct{}
	done  chan struct{} // closed when the line is dropped

	users int // callers in the line or entering it; guarded by waitLines.mu

	mu        sync.Mutex
	parked    []*waiter // in queue order; parked[0] alone retries
	changeSeq uint64    // changes announced so far
	// stalledSince is when parked[0] began to find the name free with
	// another waiter ahead, time after time; zero otherwise.
	stalledSince time.Time
	// recheck is the pause before looking again at a lease that should be
	// over by now (see expiryRecheck); zero while none is.
	recheck time.Duration
	// ownGrant is the token of the last grant of the whole name to a
	// waiter of the line that left with it: its announcement is no news to
	// the next waiter, which unpark told when to look again.
	ownGrant uint64
	// lastRelease is the token of the last release the line heard of,
	// either from this coordinator's own Release or from its announcement:
	// whichever comes second is no news.
	lastRelease uint64
	storeClosed bool
}

// waiter is one waiting call.
type waiter struct {
	id   string
	turn chan struct{} // buffered: try again now, or see deferUntil
	// deferUntil, when not zero, is when to try again instead of now: the
	// waiter before it left holding the whole name until then. Guarded by
	// waitLine.mu, like every signal.
	deferUntil time.Time
}

func newWaitLines(st store.Store, log *slog.Logger) *waitLines {
	return &waitLines{store: st, log: log, lines: map[string]*waitLine{}}
}

// join returns the line of name, creating it; call leave when done.
func (ls *waitLines) join(name string) *waitLine {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.lines[name]
	if !ok {
		// Subscribed before anyone's first attempt: no change after it goes
		// unheard.
		l = &waitLine{name: name, changes: ls.store.Changes(name), enter: make(chan struct{}, 1), done: make(chan struct{})}
		ls.lines[name] = l
		go ls.run(l)
	}
	l.users++
	return l
}

// leave drops the line when its last caller left.
func (ls *waitLines) leave(l *waitLine) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l.users--; l.users == 0 {
		delete(ls.lines, l.name)
		close(l.done)
	}
}

// run tells the line's first waiter of the name's changes and refreshes the
// line's places every heartbeat, until the line is dropped.
func (ls *waitLines) run(l *waitLine) {
	defer l.changes.Cancel()
	var refreshing sync.WaitGroup
	defer refreshing.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // before the Wait: a refresh in flight ends at once
	heartbeat := time.NewTicker(waiterHeartbeat)
	defer heartbeat.Stop()
	refreshed := make(chan struct{}, 1)
	inFlight, failing := false, false
	changes := l.changes.C
	for {
		select {
		case change, open := <-changes:
			if !open { // the store closed: nothing more to wait for
				changes = nil
				l.closeStore()
				continue
			}
			l.heard(change)
		case <-heartbeat.C:
			ids := l.ids()
			if inFlight || len(ids) == 0 {
				continue
			}
			// On a goroutine of its own, so that a slow store does not hold
			// back the news of a change.
			inFlight = true
			refreshing.Go(func() {
				defer func() { refreshed <- struct{}{} }()
				rctx, rcancel := context.WithTimeout(ctx, refreshTimeout)
				defer rcancel()
				err := ls.store.RefreshWaiters(rctx, l.name, ids, waiterTTL)
				switch {
				case err != nil && ctx.Err() == nil && !failing:
					// Once per run of failures. Places that time out meanwhile
					// are taken again when their waiters retry.
					ls.log.Warn("could not refresh the places of waiting calls; retrying", "name", l.name, "waiters", len(ids), "err", err)
					failing = true
				case err == nil:
					failing = false
				}
			})
		case <-refreshed:
			inFlight = false
		case <-l.done:
			return
		}
	}
}

// released tells the line of name, if any, of a release of token made
// through this coordinator, as soon as the store granted it: the line's
// first waiter need not wait for the release's announcement to come back.
func (ls *waitLines) released(name string, token uint64) {
	ls.mu.Lock()
	l := ls.lines[name]
	ls.mu.Unlock()
	if l != nil {
		l.heard(store.Change{Released: token})
	}
}

// heard tells the line's first waiter of a change, unless it is no news: the
// announcement of the whole-name grant a waiter of the line left with (the
// next one was told when to look again), or a release heard of already.
func (l *waitLine) heard(change store.Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case change.Released != 0 && change.Released == l.lastRelease:
		return
	case change.Released != 0:
		l.lastRelease = change.Released
	}
	l.changeSeq++
	if len(l.parked) > 0 && (change.Granted == 0 || change.Granted != l.ownGrant) {
		l.parked[0].signal()
	}
}

// ids returns the ids of the parked waiters.
func (l *waitLine) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, len(l.parked))
	for i, w := range l.parked {
		ids[i] = w.id
	}
	return ids
}

// seq counts the changes announced so far.
func (l *waitLine) seq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changeSeq
}

func (l *waitLine) closeStore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.storeClosed = true
	for _, w := range l.parked {
		w.signal()
	}
}

// closed reports whether the store closed.
func (l *waitLine) closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.storeClosed
}

// park appends w to the line, after its first attempt. A change announced
// since that attempt began (at seq) found nobody to tell if the line was
// empty: w, first now, then tries again at once.
func (l *waitLine) park(w *waiter, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parked = append(l.parked, w)
	if l.storeClosed || (len(l.parked) == 1 && l.changeSeq != seq) {
		w.signal()
	}
}

// unpark takes w out of the line. When w was first, the next waiter is first
// now. If w leaves holding the whole name (held, its grant; zero when it
// does not), the next waiter tries again when that grant should end, or at
// the next change announced but that grant: its release is. Otherwise the
// next waiter tries at once: it takes the name, or learns when to look again.
func (l *waitLine) unpark(w *waiter, held store.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, p := range l.parked {
		if p == w {
			l.parked = append(l.parked[:i], l.parked[i+1:]...)
			if i == 0 && len(l.parked) > 0 {
				l.stalledSince = time.Time{}
				next := l.parked[0]
				// ExpiresAt is the store's clock, as RetryAt is (see refused).
				if at := held.ExpiresAt.Add(time.Millisecond); held.Token != 0 && at.After(time.Now()) {
					l.ownGrant = held.Token
					next.deferTo(at)
				} else {
					next.signal()
				}
			}
			return
		}
	}
}

// deferral returns, and forgets, when w was told to try again by deferTo
// (zero: now).
func (l *waitLine) deferral(w *waiter) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := w.deferUntil
	w.deferUntil = time.Time{}
	if !at.After(time.Now()) {
		return time.Time{}
	}
	// Held until then: not a stall, whatever an attempt of w that began
	// before the grant found.
	l.stalledSince = time.Time{}
	return at
}

// refused takes the answer of an attempt of w that was not granted, and
// says when w should try again without being told to; zero means only when
// told (w is not first).
func (l *waitLine) refused(w *waiter, res store.AcquireResult) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.parked) == 0 || l.parked[0] != w {
		return time.Time{}
	}
	if !res.RetryAt.IsZero() {
		// Held, or in its lock delay. Expiry is not announced: look again
		// when it should be over.
		l.stalledSince = time.Time{}
		at := res.RetryAt.Add(time.Millisecond)
		if now := time.Now(); at.After(now) {
			l.recheck = 0
		} else {
			// Over by our clock, not by the store's: the clocks differ a
			// little. Look again soon, not in a loop.
			l.recheck = min(max(2*l.recheck, expiryRecheck), maxExpiryRecheck)
			at = now.Add(l.recheck)
		}
		return at
	}
	// Free, but another waiter comes first. A live one takes the name at
	// once, which is announced; the place of a dead one times out, and the
	// next attempt drops it.
	now := time.Now()
	switch {
	case l.stalledSince.IsZero():
		l.stalledSince = now
	case now.Sub(l.stalledSince) >= stallTimeout && len(l.parked) > 1:
		// Stuck behind one of ours: w lost its place and queued again at
		// the back; the one the store has first does not know it.
		l.parked = append(l.parked[1:], w)
		l.stalledSince = time.Time{}
		for _, p := range l.parked[:len(l.parked)-1] {
			p.signal()
		}
		return time.Time{}
	}
	return now.Add(waiterHeartbeat)
}

// signal tells w to try again now; its line's mu is held.
func (w *waiter) signal() {
	w.deferUntil = time.Time{}
	w.wake()
}

// deferTo tells w to try again at at; its line's mu is held.
func (w *waiter) deferTo(at time.Time) {
	w.deferUntil = at
	w.wake()
}

func (w *waiter) wake() {
	select {
	case w.turn <- struct{}{}:
	default:
	}
}
