package redisstore

import (
	"sync"
	"time"
)

// attachments is what this coordinator last learned of the sessions it
// attached grants for: each one's latest proof of life (from an attach or a
// renewal through this store) and when it attached each name. An attached
// acquire of a name this store attached less than half a TTL ago, with a
// proof of life that still has half a TTL left, skips the session's script
// (session.lua attach) and grants with that proof: the cycle of a name used
// again and again in one session (a default session's lock, taken and
// released in a loop) then costs Redis what a lease of its own costs.
//
// Skipping is safe because the two things the attach gives are still true:
//   - The grant carries the attach's time, and the name refuses it once
//     it was detached from the session after that attach (settle.lua): so
//     a grant made with a cached attach lands only while the session's
//     names still hold the name, where the close and the refresh find it.
//     A refused one forgets the cached attach and attaches again.
//   - The proof is a proof of life whose remaining time is counted from
//     when its reply arrived, so the bound it yields is one the session
//     reached anyway; a later renewal only makes the truth later. The one
//     thing a cached proof cannot know is a close made since through
//     another coordinator: a grant made then is trusted until its bound (at
//     most the session's TTL), after which the name asks the session's slot,
//     finds it closed and ends the grant. A close or a refused session call
//     through this store forgets the session at once.
type attachments struct {
	mu       sync.Mutex
	sessions map[string]*attachedSession
}

type attachedSession struct {
	owner string
	alive proof // kind 'a'
	names map[string]attach
}

// attach is when this store attached a name: got on its clock, at on the
// session slot's (the time recorded in the session's names).
type attach struct {
	got time.Time
	at  int64
}

// Bounds of what attachments remembers: past them it forgets everything
// (and attaches again), which costs a script a name, never correctness.
const (
	maxAttachedSessions = 1 << 14
	maxAttachedNames    = 1 << 12 // a session
)

// proof returns the proof of life to attach owner's grant on name to
// session id with, at now, when the attach may be skipped.
func (a *attachments) proof(id, owner, name string, now time.Time) (proof, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[id]
	if s == nil || s.owner != owner {
		return proof{}, false
	}
	half := s.alive.ttl / 2
	at, ok := s.names[name]
	if !ok || now.Sub(at.got) >= half || s.alive.n-now.Sub(s.alive.got) < half {
		return proof{}, false
	}
	p := s.alive
	p.attachedAt = at.at
	return p, true
}

// attached records an attach of name to session id, as owner, and its
// proof.
func (a *attachments) attached(id, owner, name string, p proof) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[id]
	if s == nil || s.owner != owner {
		if a.sessions == nil || len(a.sessions) >= maxAttachedSessions {
			a.sessions = map[string]*attachedSession{}
		}
		s = &attachedSession{owner: owner, names: map[string]attach{}}
		a.sessions[id] = s
	}
	if len(s.names) >= maxAttachedNames {
		clear(s.names)
	}
	s.names[name] = attach{got: p.got, at: p.attachedAt}
	s.alive = p
}

// detached drops name from session id: the name refused a grant attached
// as this store last did (the session's names forgot it since), so the
// next acquire attaches again.
func (a *attachments) detached(id, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[id]; s != nil {
		delete(s.names, name)
	}
}

// renewed records a newer proof of life of session id.
func (a *attachments) renewed(id, owner string, p proof) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[id]; s != nil && s.owner == owner {
		s.alive = p
	}
}

// forget drops session id: it was closed, or refused a call.
func (a *attachments) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, id)
}
