package redisstore

import (
	"cmp"
	"context"
	"sync"
	"time"
)

// detacher makes a session's names forget the names its grants were
// released from, seconds after the release instead of at the session's
// next refresh (every half hour): a client that locks a new name for each
// job in one session (the SDK's default session) would otherwise leave
// every name among its session's names, about 90 bytes each, for an hour.
//
// A release of a session's grant records the name (unless it was the last
// grant of a hot name or of one with waiters, whose grants come back:
// release.lua). detachDelay
// later, the session's slot is asked for its time and a proof of life
// (session.lua check), and the names are settled with it and detached
// (detachNames): a name that holds a grant of the session again keeps its
// place, one that was attached again since the check is not forgotten, and
// one forgotten refuses the grants of attaches made before (acquire.lua),
// so that no grant of the session lands on a name its names left. A dead
// session is the reaper's or its close's, an unreachable slot the next
// refresh's: what the detacher misses costs keys until then, never
// correctness.
type detacher struct {
	mu      sync.Mutex
	delay   time.Duration         // detachDelay; tests set their own
	queue   []releasedName        // in the order they are due
	pending map[releasedName]bool // what the queue holds
}

type releasedName struct {
	session, name string
	due           time.Time
}

const (
	// detachDelay is how long after a release its name is detached: a
	// name taken again at once (a lock in a loop) is then held, or hot.
	detachDelay = 2 * time.Second
	// maxDetachPending bounds the names waiting: past it a release is not
	// recorded, and its name waits for the refresh.
	maxDetachPending = 1 << 17
)

// released records that session id released a grant of name at now.
func (d *detacher) released(id, name string, now time.Time) {
	key := releasedName{session: id, name: name}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[key] || len(d.queue) >= maxDetachPending {
		return
	}
	if d.pending == nil {
		d.pending = map[releasedName]bool{}
	}
	d.pending[key] = true
	key.due = now.Add(cmp.Or(d.delay, detachDelay))
	d.queue = append(d.queue, key)
}

// takeDue removes the names due at now, by session.
func (d *detacher) takeDue(now time.Time) map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for n < len(d.queue) && !now.Before(d.queue[n].due) {
		n++
	}
	if n == 0 {
		return nil
	}
	due := map[string][]string{}
	for _, r := range d.queue[:n] {
		due[r.session] = append(due[r.session], r.name)
		delete(d.pending, releasedName{session: r.session, name: r.name})
	}
	d.queue = append(d.queue[:0], d.queue[n:]...)
	return due
}

// detachDue detaches the names released detachDelay ago or more from their
// sessions.
func (s *Store) detachDue(ctx context.Context, now time.Time) {
	for id, names := range s.detacher.takeDue(now) {
		if ctx.Err() != nil {
			return
		}
		reply, err := s.session(ctx, "check", id, "", 0, "")
		got := time.Now()
		if err != nil {
			// Redis does not answer: the rest of this sweep's names wait
			// for their sessions' refreshes rather than hold up the reaper.
			s.log.Debug("released names were not detached from their sessions; their refreshes will", "error", err)
			return
		}
		if reply.err != nil {
			continue
		}
		if !s.canDetach(reply.ttl) {
			continue // detachNames would keep them
		}
		if err := s.detachNames(ctx, id, reply, got, names); err != nil {
			s.log.Debug("released names were not all detached from their session; its next refresh tries again", "session", id, "error", err)
		}
	}
}
