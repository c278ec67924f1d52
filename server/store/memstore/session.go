package memstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

var _ store.Sessions = (*Store)(nil)

// session is a liveness that grants attach to. Its grants' expires equal
// its own, set again at each renewal: the memory store has no other shard
// to learn it from, so the bound of an attached grant is the truth.
type session struct {
	id, owner string
	ttl       time.Duration
	expires   time.Time // carries a monotonic reading
	closed    bool
	// names are the names on which the session may hold grants; one it no
	// longer holds is dropped when next visited.
	names map[string]struct{}
}

func (ss *session) view() store.Session {
	return store.Session{ID: ss.id, Owner: ss.owner, TTL: ss.ttl, ExpiresAt: ss.expires.Round(0)}
}

// newSessionID is 128 random bits, in hex.
func newSessionID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("memstore: session id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// session returns the session id of owner, dead or alive. Called with s.mu
// held.
func (s *Store) session(id, owner string) (*session, error) {
	ss, ok := s.sessions[id]
	if !ok {
		return nil, store.ErrSessionNotFound
	}
	if ss.owner != owner {
		return nil, store.ErrSessionNotOwned
	}
	return ss, nil
}

// liveSession returns the session id of owner if it is alive at now.
// Called with s.mu held.
func (s *Store) liveSession(id, owner string, now time.Time) (*session, error) {
	ss, err := s.session(id, owner)
	switch {
	case err != nil:
		return nil, err
	case ss.closed:
		return nil, store.ErrSessionClosed
	case !now.Before(ss.expires):
		return nil, store.ErrSessionExpired
	}
	return ss, nil
}

// attach records g on name as a grant of session id (empty: of its own
// TTL). Called with s.mu held, after id was found alive.
func (s *Store) attach(g *grant, name, id string) {
	g.session = id
	if id != "" {
		s.sessions[id].names[name] = struct{}{}
	}
}

// forgetSessions drops the sessions dead for the idle retention: an
// unknown id is refused as a dead one is, and ids are never made twice.
// Called with s.mu held.
func (s *Store) forgetSessions(now time.Time) {
	for id, ss := range s.sessions {
		if (ss.closed || !now.Before(ss.expires)) && now.Sub(ss.expires) >= s.idleTTL {
			delete(s.sessions, id)
		}
	}
}

// eachGrant calls f with each grant the session holds, by name, and drops
// the names where it holds none. Called with s.mu held.
func (s *Store) eachGrant(ss *session, f func(name string, e *entry, g *grant)) {
	for name := range ss.names {
		e, ok := s.names[name]
		found := false
		if ok {
			for _, g := range e.grants {
				if g.session == ss.id {
					found = true
					f(name, e, g)
				}
			}
		}
		if !found {
			delete(ss.names, name)
		}
	}
}

// CreateSession implements store.Sessions.
func (s *Store) CreateSession(ctx context.Context, owner string, ttl time.Duration) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	if ttl <= 0 {
		return store.Session{}, fmt.Errorf("memstore: create session: ttl %s is not positive", ttl)
	}
	id, err := newSessionID()
	if err != nil {
		return store.Session{}, err
	}
	for {
		sess, written, err := s.createSession(id, owner, ttl)
		if written == nil {
			return sess, err
		}
		if err := waitWrite(ctx, written); err != nil {
			return store.Session{}, err
		}
	}
}

func (s *Store) createSession(id, owner string, ttl time.Duration) (store.Session, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.sweepIfDue(now)
	if written, err := s.reserve(now, ttl+s.lockDelay, 0); written != nil || err != nil {
		return store.Session{}, written, err
	}
	ss := &session{id: id, owner: owner, ttl: ttl, expires: now.Add(ttl), names: map[string]struct{}{}}
	s.sessions[id] = ss
	return ss.view(), nil, nil
}

// RenewSession implements store.Sessions. It sets the expiry of each
// attached grant too: in memory that costs a visit a lease, not a store
// operation.
func (s *Store) RenewSession(ctx context.Context, id, owner string) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	for {
		sess, written, err := s.renewSession(id, owner)
		if written == nil {
			return sess, err
		}
		if err := waitWrite(ctx, written); err != nil {
			return store.Session{}, err
		}
	}
}

func (s *Store) renewSession(id, owner string) (store.Session, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	ss, err := s.liveSession(id, owner, now)
	if err != nil {
		return store.Session{}, nil, fmt.Errorf("memstore: renew session %s: %w", id, err)
	}
	if written, err := s.reserve(now, ss.ttl+s.lockDelay, 0); written != nil || err != nil {
		return store.Session{}, written, err
	}
	ss.expires = now.Add(ss.ttl)
	s.eachGrant(ss, func(_ string, e *entry, g *grant) {
		g.expires = ss.expires
		e.usedUntil = e.lastEnd(s.lockDelay)
	})
	return ss.view(), nil, nil
}

// CloseSession implements store.Sessions.
func (s *Store) CloseSession(ctx context.Context, id, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	ss, err := s.liveSession(id, owner, now)
	switch {
	case errors.Is(err, store.ErrSessionClosed):
		return nil
	case err != nil:
		return fmt.Errorf("memstore: close session %s: %w", id, err)
	}
	ss.closed = true
	s.eachGrant(ss, func(name string, e *entry, g *grant) {
		delete(e.grants, g.holder)
		e.used -= g.weight
		e.usedUntil = later(now, e.lastEnd(s.lockDelay))
		s.changes.Publish(name, store.Change{})
	})
	return nil
}

// DescribeSession implements store.Sessions.
func (s *Store) DescribeSession(ctx context.Context, id, owner string) (store.SessionDescription, error) {
	if err := ctx.Err(); err != nil {
		return store.SessionDescription{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, err := s.liveSession(id, owner, s.clock.Now())
	if err != nil {
		return store.SessionDescription{}, fmt.Errorf("memstore: describe session %s: %w", id, err)
	}
	d := store.SessionDescription{Session: ss.view()}
	s.eachGrant(ss, func(name string, _ *entry, _ *grant) { d.Names = append(d.Names, name) })
	sort.Strings(d.Names)
	d.Names = slices.Compact(d.Names)
	return d, nil
}
