// Package store defines the lease state machine every coordinator store
// implements (Leases), the change notifications that let callers wait
// without polling (Notifier), and the errors both report.
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
//
// Notifications are hints, not a log: a change may be announced more than
// once, and a broken Redis subscription is reported as "look again" rather
// than replayed. Callers re-read the state they care about after each one.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordinator-dev/coordinator/internal/fanout"
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
	// TTL is the lease's length; it must be positive.
	TTL time.Duration
	// Value is stored with the lease (an election's proclaimed value).
	Value []byte
	// Waiter, when set, identifies a caller that waits for the name: it is
	// queued when the name is not granted at once, and keeps its place in the
	// queue across attempts. Without Waiter a request is refused while older
	// waiters are queued, so that waiting callers are served in arrival order.
	Waiter string
	// WaiterTTL is how long the waiter stays queued without another attempt;
	// a waiter whose caller vanished is dropped after it. Zero (or less)
	// means DefaultWaiterTTL.
	WaiterTTL time.Duration
}

// DefaultWaiterTTL is how long a waiter stays queued when its request leaves
// WaiterTTL zero: long enough to outlast a few retries, short enough that a
// vanished caller does not hold a queue up for long.
const DefaultWaiterTTL = 30 * time.Second

// DefaultListLimit is the page size of List when the caller gives none.
const DefaultListLimit = 100

// AcquireResult is the outcome of Acquire.
type AcquireResult struct {
	Acquired bool
	// Lease is the granted lease when Acquired, otherwise the current
	// holder's lease (zero when the name is free but older waiters come first).
	Lease Lease
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

// Leases is the compare-and-set state machine: every method is one atomic
// state change or read.
type Leases interface {
	// Acquire grants the lease, renews it when Holder already holds it
	// (keeping the token and replacing TTL and Value), or reports the holder.
	Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error)
	// Renew sets a held lease's expiry to ttl (positive) from now. It fails
	// with ErrLeaseNotHeld unless (holder, token) holds the name.
	Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (Lease, error)
	// Release ends a held lease; it reports false when (holder, token) did not
	// hold the name.
	Release(ctx context.Context, name, holder string, token uint64) (bool, error)
	// Dequeue removes a waiter that gave up.
	Dequeue(ctx context.Context, name, waiter string) error
	// Describe reports the name's lease and last issued token.
	Describe(ctx context.Context, name string) (Description, error)
	// List pages through held leases whose names start with prefix, starting
	// after cursor (empty for the first page), at most limit a page; a limit
	// that is not positive means DefaultListLimit.
	List(ctx context.Context, prefix, cursor string, limit int) (ListPage, error)
}

// Changes is a subscription to the announced changes of one name.
type Changes = *fanout.Subscription[string, struct{}]

// Notifier announces changes of names, from any coordinator sharing the
// store, so that waiting calls and observers look again instead of polling.
type Notifier interface {
	// Changes subscribes to name without blocking. Its channel receives a
	// value after the name's lease is released, granted or re-valued, or a
	// waiter leaves its queue (or its dead head is dropped), while someone
	// listens for that name: a waiter is queued for it, or it is watched
	// (Watch). It also receives one whenever announcements may have been
	// missed: when a store that hears of changes through a subscription
	// (Redis pub/sub) has that subscription confirmed, at first or after it
	// broke. Values coalesce: one pending value stands for any number of
	// changes. Expiry is not announced: callers time it from ExpiresAt. The
	// channel is closed when the store closes; Cancel the subscription when
	// done.
	Changes(name string) Changes
	// Watch asks for the name's changes to be announced for the next ttl,
	// as for a name with waiters, and describes the name at the same
	// instant; observers call it on every read.
	Watch(ctx context.Context, name string, ttl time.Duration) (Description, error)
}

// Store is a whole lease store: the state machine and its notifications.
type Store interface {
	Leases
	Notifier
	// Close releases the store's resources and closes the channel of every
	// Changes subscription.
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
