package store

import (
	"context"
	"errors"
	"time"
)

// Session is a liveness that leases attach to: one renewal keeps every
// attached lease, and when the session ends (expiry or close) they all end
// with it. Its ID is a capability of its owner: only a caller with the same
// Owner may renew it, close it, or attach leases to it.
type Session struct {
	// ID is random (128 bits, printable), made by the store.
	ID string
	// Owner is the creator's identity (the authenticated principal; empty
	// without authentication, when anyone may use the session).
	Owner string
	// TTL is how long a renewal keeps the session.
	TTL time.Duration
	// ExpiresAt is the end of the session unless it is renewed (store
	// clock).
	ExpiresAt time.Time
}

// SessionDescription is a session and the names its leases are attached to.
type SessionDescription struct {
	Session
	// Names are the names on which the session holds a lease, in name order.
	Names []string
}

// Sessions manages sessions. Attaching a lease is AcquireRequest.Session;
// an attached lease's TTL and expiry are its session's.
type Sessions interface {
	// CreateSession starts a session of owner for ttl (positive).
	CreateSession(ctx context.Context, owner string, ttl time.Duration) (Session, error)
	// RenewSession extends a live session by its TTL from now, in one store
	// operation whatever the number of leases attached. It fails with
	// ErrSessionNotFound, ErrSessionExpired or ErrSessionClosed (the
	// session is dead for ever), or ErrSessionNotOwned.
	RenewSession(ctx context.Context, id, owner string) (Session, error)
	// CloseSession ends a session and releases every lease attached to it
	// (waiters are granted, observers hear the vacancies; no lock delay).
	// Closing a closed session succeeds; an expired one fails with
	// ErrSessionExpired (its leases ended with it).
	CloseSession(ctx context.Context, id, owner string) error
	// DescribeSession reports a live session and its names.
	DescribeSession(ctx context.Context, id, owner string) (SessionDescription, error)
}

// A session error: each refuses the session for ever (a dead session never
// revives), except ErrSessionNotOwned, which refuses the caller.
var (
	ErrSessionNotFound = errors.New("session not found")
	ErrSessionExpired  = errors.New("session expired")
	ErrSessionClosed   = errors.New("session closed")
	ErrSessionNotOwned = errors.New("session belongs to another owner")
	// ErrLeaseInSession refuses Renew of a lease attached to a session:
	// renewing the session renews it.
	ErrLeaseInSession = errors.New("lease is attached to a session: renew the session instead")
)
