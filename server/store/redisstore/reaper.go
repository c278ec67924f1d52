package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// reaper settles the names of sessions that expired without a close, soon
// after they did, so that their keys go a retention after the session's
// end, as a released name's do, instead of the session keep (an hour):
// renewals do not visit names, so an attached grant's key outlives its
// bound by the session keep, and nothing else visits the names of a
// client that vanished.
//
// The store remembers when each session it created, renewed or attached
// through is due to expire, on its own clock. Once that passed, it asks
// the session's slot (session.lua reap): an expired session's names are
// settled with the proof of its expiry, as a close settles them with the
// proof of the close (settle.lua takes a name left with no attached grant
// back to the retention), and then forgotten (reaped); a session still
// alive was renewed through another coordinator, which reaps it in turn;
// a closed one was settled by its close; an unknown one has no keys left.
// A coordinator that stops forgets what it had to reap: those names keep
// their keys the session keep, as when none reaped.
type reaper struct {
	mu  sync.Mutex
	due map[string]time.Time // session id → when to look, this clock
}

const (
	// reapGrace is how long after a session's expiry, as this store
	// learned it, the reaper looks: its slot's clock may run behind ours.
	reapGrace = time.Second
	// reapRetry is how long the reaper waits to try a session again after
	// its slot or a name's failed to answer.
	reapRetry = 5 * time.Second
	// maxReapedSessions bounds what the reaper remembers: a session past
	// it is not reaped, which costs keys an hour, never correctness.
	maxReapedSessions = 1 << 16
)

// expires records that session id expires after remaining, unless renewed.
func (r *reaper) expires(id string, remaining time.Duration) {
	at := time.Now().Add(remaining + reapGrace)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, known := r.due[id]; known || len(r.due) < maxReapedSessions {
		r.due[id] = at
	}
}

// ended records what a call on session id learned of its end, err being
// the session's refusal: an expired session is reaped at once, a closed
// or unknown one forgotten (ErrSessionNotOwned and a quarantine say
// nothing of it).
func (r *reaper) ended(id string, err error) {
	switch {
	case errors.Is(err, store.ErrSessionExpired):
		r.expires(id, -reapGrace)
	case errors.Is(err, store.ErrSessionClosed), errors.Is(err, store.ErrSessionNotFound):
		r.forget(id)
	}
}

// forget drops session id: it is closed, or dead and reaped.
func (r *reaper) forget(id string) {
	r.mu.Lock()
	delete(r.due, id)
	r.mu.Unlock()
}

// takeDue removes and returns the sessions due at now.
func (r *reaper) takeDue(now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, at := range r.due {
		if !now.Before(at) {
			ids = append(ids, id)
			delete(r.due, id)
		}
	}
	return ids
}

// reapDue reaps the sessions due at now.
func (s *Store) reapDue(ctx context.Context, now time.Time) {
	for _, id := range s.reaper.takeDue(now) {
		if ctx.Err() != nil {
			return
		}
		s.reap(ctx, id)
	}
}

// reap settles the names of session id if it expired.
func (s *Store) reap(ctx context.Context, id string) {
	reply, err := s.session(ctx, "reap", id, "", 0, "")
	if err != nil {
		s.reaper.expires(id, reapRetry)
		return
	}
	var q *store.QuarantineError
	switch {
	case reply.err == nil, errors.Is(reply.err, store.ErrSessionClosed), errors.Is(reply.err, store.ErrSessionNotFound):
		// Alive (renewed elsewhere: that coordinator reaps it), closed
		// (its close settled its names) or gone with its keys.
		return
	case errors.As(reply.err, &q):
		s.reaper.expires(id, max(q.RetryAfter, reapRetry))
		return
	case !errors.Is(reply.err, store.ErrSessionExpired):
		s.log.Warn("a session's slot refused to reap it; its names go after the session keep", "session", id, "error", reply.err)
		return
	}
	s.attachments.forget(id)
	if _, err := s.settleNames(ctx, reply.names, proofSet{id: {kind: 'e', n: reply.ago}}, "", 0, 0); err != nil {
		s.log.Debug("an expired session's names were not all settled; trying again", "session", id, "error", err)
		s.reaper.expires(id, reapRetry)
		return
	}
	if _, err := s.session(ctx, "reaped", id, "", 0, ""); err != nil {
		s.log.Debug("an expired session's names were settled but not forgotten", "session", id, "error", err)
	}
}
