// Package store defines the lease state machine every coordinator store
// implements, and the errors it reports.
//
// A store keeps, per name, at most one unexpired lease, a fencing counter and
// a queue of waiters. Every state change is atomic: a Redis store runs each one
// as a single Lua script, the memory store under one mutex. Expiry is measured
// by the store's own clock, never by the caller's.
//
// Guarantees every implementation keeps (the conformance suite in storetest
// proves them):
//   - at most one unexpired holder per name;
//   - every grant's token is larger than every token issued before for that
//     name, including across releases, expiries, restarts and data loss
//     (counters are seeded from the store clock in microseconds when missing);
//   - a renewal keeps the token; acquiring again as the holder is idempotent;
//   - renew and release are compare-and-set on (holder, token);
//   - a free name goes to the oldest live waiter first.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease is a grant of Name to Holder until ExpiresAt (store clock).
type Lease struct {
	Name      string
	Holder    string
	Token     uint64
	Value     []byte
	TTL       time.Duration
	ExpiresAt time.Time
}

// AcquireRequest asks for the lease on Name.
type AcquireRequest struct {
	Name   string
	Holder string
	TTL    time.Duration
	// Value is stored with the lease (an election's proclaimed value).
	Value []byte
	// Waiter, when set, identifies a caller that waits for the name: it is
	// queued when the name is not granted at once, and keeps its place in the
	// queue across attempts. Without Waiter a request is refused while older
	// waiters are queued, so that waiting callers are served in arrival order.
	Waiter string
	// WaiterTTL is how long the waiter stays queued without another attempt;
	// a waiter whose caller vanished is dropped after it.
	WaiterTTL time.Duration
}

// AcquireResult is the outcome of Acquire.
type AcquireResult struct {
	Acquired bool
	// Lease is the granted lease when Acquired, otherwise the current
	// holder's lease (zero when the name is free but older waiters come first).
	Lease Lease
	// Changed reports that the lease is new or its value changed, so that
	// observers must be told.
	Changed bool
	// RetryAt, when not acquired, is the earliest the name may be granted:
	// the end of the holder's lease or of a lock delay; zero when it depends
	// on older waiters instead.
	RetryAt time.Time
}

// Description is a name's state, for debugging and observers.
type Description struct {
	Held      bool
	Lease     Lease
	LastToken uint64
	// Waiters counts the live waiters queued for the name.
	Waiters int
}

// ListPage is one page of held leases, in name order.
type ListPage struct {
	Leases []Lease
	// Next is the cursor of the following page; empty on the last page.
	Next string
}

// Store is the lease state machine.
type Store interface {
	// Acquire grants the lease, renews it when Holder already holds it
	// (keeping the token and replacing TTL and Value), or reports the holder.
	Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error)
	// Renew sets a held lease's expiry to ttl from now. It fails with
	// ErrLeaseNotHeld unless (holder, token) holds the name.
	Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (Lease, error)
	// Release ends a held lease; it reports false when (holder, token) did not
	// hold the name.
	Release(ctx context.Context, name, holder string, token uint64) (bool, error)
	// Dequeue removes a waiter that gave up.
	Dequeue(ctx context.Context, name, waiter string) error
	// Describe reports the name's lease and last issued token.
	Describe(ctx context.Context, name string) (Description, error)
	// List pages through held leases whose names start with prefix, starting
	// after cursor (empty for the first page).
	List(ctx context.Context, prefix, cursor string, limit int) (ListPage, error)
	// Subscribe calls notify with a name whenever its lease is released,
	// granted, re-valued or a waiter leaves its queue, from any coordinator
	// sharing the store, while someone listens for that name: a waiter is
	// queued for it, or it is watched (Watch). Expiry is not announced:
	// callers time it from ExpiresAt. notify must not block. The returned
	// func unsubscribes.
	Subscribe(notify func(name string)) (unsubscribe func())
	// Watch asks for the name's changes to be announced to subscribers for
	// the next ttl, as for a name with waiters, and describes the name at
	// the same instant; observers call it on every read.
	Watch(ctx context.Context, name string, ttl time.Duration) (Description, error)
	// Close releases the store's resources.
	Close() error
}

// ErrLeaseNotHeld reports a renewal of a lease that expired or is held under
// another holder or token.
var ErrLeaseNotHeld = errors.New("lease not held")

// ErrUnavailable reports that the store could not be reached or answered in
// time; the operation may or may not have taken effect.
var ErrUnavailable = errors.New("store unavailable")

// QuarantineError refuses grants because the store lost its data recently:
// a holder of a lost lease may still believe it holds it until RetryAfter.
type QuarantineError struct {
	RetryAfter time.Duration
}

func (e *QuarantineError) Error() string {
	return fmt.Sprintf("store lost its data: grants resume in %s", e.RetryAfter)
}
