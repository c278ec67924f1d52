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
	// Weight is how much of the name's capacity the grant holds: 1 for an
	// exclusive lock; never 0 in a lease a store returns.
	Weight int64
	// Session is the id of the session the lease is attached to; empty for a
	// lease with its own TTL. An attached lease's TTL is the session's and
	// its ExpiresAt the session's expiry as the name last learned it.
	Session string
}

// MaxCapacity is the largest capacity a name may have. It keeps weights
// small enough for the Redis scripts to pack with a waiter's arrival order
// into one ZSET score (a double) without loss; see redisstore's doc.go.
const MaxCapacity = 1_000_000

// RWCapacity is the capacity of a read-write lock: a reader takes weight 1,
// a writer all of it. The holder cap (DefaultMaxHolders) bounds how many
// readers hold at once, well below it.
const RWCapacity = MaxCapacity

// DefaultMaxHolders is how many grants (live, or in their lock delay) a
// name may carry at once when the request sets no MaxHolders.
const DefaultMaxHolders = 1024

// AcquireRequest asks for the lease on Name.
type AcquireRequest struct {
	Name   string
	Holder string
	// TTL is the lease's length; it must be positive, unless Session is
	// set: then it is ignored and the lease lives as long as the session.
	TTL time.Duration
	// Session, when set, attaches the grant to that live session of
	// SessionOwner (else the Acquire fails with a session error, see
	// Sessions). A holder that asks again moves its grant to the request's
	// session, or to its own TTL, keeping the token.
	Session      string
	SessionOwner string
	// Value is stored with the lease (an election's proclaimed value).
	Value []byte
	// KeepValue, when Holder already holds the name, keeps the stored value
	// instead of replacing it with Value: a lock call by an election's leader
	// on its own name must not erase what it proclaimed. A fresh grant stores
	// Value either way.
	KeepValue bool
	// Token, when not zero, makes the request a renewal of that grant (an
	// election's leader renewing or proclaiming in a term it knows): it
	// succeeds only while Holder holds the name under Token, and is
	// otherwise refused without a grant or a place in the queue, with a zero
	// Lease. Without it a term that just ended would be followed by a new
	// one instead of a failure.
	Token uint64
	// Waiter, when set, identifies a caller that waits for the name: it is
	// queued when the name is not granted at once, and keeps its place in the
	// queue across attempts. Without Waiter a request is refused while older
	// waiters are queued, so that waiting callers are served in arrival order.
	Waiter string
	// WaiterTTL is how long the waiter stays queued without another attempt;
	// a waiter whose caller vanished is dropped after it. Zero (or less)
	// means DefaultWaiterTTL.
	WaiterTTL time.Duration
	// Capacity is the name's capacity the caller expects: zero (or less)
	// means 1, an exclusive lock; at most MaxCapacity. While anyone holds
	// the name (a lock delay included) or waits for it, a request with
	// another capacity fails with *CapacityError; otherwise the name takes
	// the request's capacity.
	Capacity int64
	// Weight is how much of the capacity to hold: zero (or less) means 1;
	// at most Capacity. A grant needs the weights held plus those of the
	// live waiters queued ahead plus its own to fit in the capacity. A
	// holder that asks again renews its grant with the weight it holds.
	Weight int64
	// MaxHolders caps the grants a name carries at once (lock delays
	// included); zero (or less) means DefaultMaxHolders. A request that
	// would fit but finds the cap reached fails with *HolderLimitError.
	MaxHolders int
}

// CapacityOrDefault is the request's capacity, 1 when unset.
func (r AcquireRequest) CapacityOrDefault() int64 { return max(r.Capacity, 1) }

// WeightOrDefault is the request's weight, 1 when unset.
func (r AcquireRequest) WeightOrDefault() int64 { return max(r.Weight, 1) }

// MaxHoldersOrDefault is the request's holder cap, DefaultMaxHolders when
// unset.
func (r AcquireRequest) MaxHoldersOrDefault() int {
	if r.MaxHolders <= 0 {
		return DefaultMaxHolders
	}
	return r.MaxHolders
}

// DefaultWaiterTTL is how long a waiter stays queued when its request leaves
// WaiterTTL zero: long enough to outlast a few retries, short enough that a
// vanished caller does not hold a queue up for long.
const DefaultWaiterTTL = 30 * time.Second

// DefaultIdleNameTTL is how long a name's state (its fencing counter, and
// whatever else is left) outlives its last use: its release, the end of its
// last lease plus the lock delay, its last waiter's deadline or its watch.
// Forgetting a name is safe, since tokens restart from the store clock (see
// Leases); what the retention buys is a bounded store (the names used in the
// last ten minutes: at 1,000 new names a second, 600,000 fence keys of about
// 126 B in Redis) while Describe still reports a recent name's exact last
// token, and tolerance of a store clock that steps back: a forgotten name's
// tokens keep increasing unless the clock stepped back by more than the
// retention. Ten minutes is also at least the default longest lease (5m)
// plus a lock delay of up to five minutes, and what the memory store always
// kept.
const DefaultIdleNameTTL = 10 * time.Minute

// DefaultCallTimeout bounds one store call when the store's settings give no
// timeout: long enough for a loaded Redis, short enough that a hung one is
// reported as unavailable while clients still wait.
const DefaultCallTimeout = 2 * time.Second

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

// MaxGroupMembers is the most names one group acquisition may hold: what
// the proto's AcquireGroupRequest.members allows.
const MaxGroupMembers = 32

// GroupMember is one name of a group acquisition and the share of it asked
// for, as in AcquireRequest (0 meaning 1 for both).
type GroupMember struct {
	Name     string
	Capacity int64
	Weight   int64
}

// GroupRequest asks for every member's lease at once, or none. Its fields
// are AcquireRequest's, but for the members' own; a store refuses a name
// listed twice.
type GroupRequest struct {
	Members      []GroupMember
	Holder       string
	TTL          time.Duration
	Session      string
	SessionOwner string
	// Waiter queues the group on every member's name at once (the same id
	// on each), as AcquireRequest.Waiter queues a single request.
	Waiter     string
	WaiterTTL  time.Duration
	MaxHolders int
	// Claim identifies this acquisition among those of the same holder: it
	// is stored as the value of every lease the group is granted or renews,
	// so that the leases a store held for it while it waited are given
	// back only while no later acquisition of the same holder (a retry)
	// has renewed them since (GroupLease.Claim).
	Claim string
}

// Request is the single acquisition of member i, with the group's holder,
// TTL, session and waiter.
func (r GroupRequest) Request(i int) AcquireRequest {
	m := r.Members[i]
	return AcquireRequest{
		Name: m.Name, Holder: r.Holder, TTL: r.TTL, Session: r.Session, SessionOwner: r.SessionOwner,
		Waiter: r.Waiter, WaiterTTL: r.WaiterTTL, Capacity: m.Capacity, Weight: m.Weight, MaxHolders: r.MaxHolders,
		Value: []byte(r.Claim),
	}
}

// GroupLease names one lease of a group: its name and token.
type GroupLease struct {
	Name  string
	Token uint64
	// Claim, when set, releases the lease only while its value is still
	// this acquisition's claim (GroupRequest.Claim).
	Claim string
}

// CheckShares refuses a request whose capacity or weight is out of range:
// 1 <= weight <= capacity <= MaxCapacity, 0 meaning 1. The service refuses
// them first, naming the field.
func CheckShares(req AcquireRequest) error {
	if capacity, weight := req.CapacityOrDefault(), req.WeightOrDefault(); capacity > MaxCapacity || weight > capacity {
		return fmt.Errorf("acquire %q: weight %d, capacity %d: want 1 <= weight <= capacity <= %d", req.Name, weight, capacity, MaxCapacity)
	}
	return nil
}

// CheckGroup refuses a group a store cannot take: no member, more than
// MaxGroupMembers, a name listed twice, a member's share out of range
// (CheckShares), or a TTL that is not positive without a session. The
// service refuses them first, naming the field.
func CheckGroup(req GroupRequest) error {
	switch {
	case len(req.Members) == 0 || len(req.Members) > MaxGroupMembers:
		return fmt.Errorf("acquire group: %d members: want 1 to %d", len(req.Members), MaxGroupMembers)
	case req.TTL <= 0 && req.Session == "":
		return fmt.Errorf("acquire group: ttl %s is not positive", req.TTL)
	}
	seen := make(map[string]struct{}, len(req.Members))
	for i, m := range req.Members {
		if _, dup := seen[m.Name]; dup {
			return fmt.Errorf("acquire group: the name %q is listed twice", m.Name)
		}
		seen[m.Name] = struct{}{}
		if err := CheckShares(req.Request(i)); err != nil {
			return fmt.Errorf("acquire group: %w", err)
		}
	}
	return nil
}

// GroupResult is the outcome of AcquireGroup.
type GroupResult struct {
	// Acquired is true when every member is granted (or renewed); Leases
	// then holds one lease per member, in the request's order.
	Acquired bool
	Leases   []Lease
	// Members, when not acquired, holds each member's answer in the
	// request's order, as a single Acquire of it would have answered: a
	// member that was not in the way is Acquired (it was free, or already
	// held by the caller), a member in the way has its holder and RetryAt.
	// At least one member is in the way.
	Members []AcquireResult
	// Queued, when not nil, says for each member whether the group's
	// waiter is queued on it: a store that takes the members in several
	// state changes queues the group only where it waits (on a Redis
	// Cluster, the members of the slot that refused). Nil means on every
	// member, when the request has a Waiter.
	Queued []bool
	// Held are the leases the caller holds, when not acquired, on some
	// members while it waits for the others: a store that cannot take
	// every member in one state change (a Redis Cluster whose members lie
	// in several slots) takes them in a global order, holding the earlier
	// ones (see redisstore's doc.go). The caller renews them by asking
	// again within their TTL, and releases them when it gives up.
	Held []Lease
}

// Description is a name's state, for debugging and observers.
type Description struct {
	// Held is true while at least one grant is live (unexpired).
	Held bool
	// Lease is the first of Holders: the holder of an exclusive lock.
	Lease Lease
	// Holders are the live grants, in token order.
	Holders []Lease
	// Capacity is the name's capacity (1 for a lock or a name nobody
	// holds or waits for).
	Capacity  int64
	LastToken uint64
	// Waiters counts the live waiters queued for the name, and
	// WaitingWeight sums their weights.
	Waiters       int
	WaitingWeight int64
}

// ListPage is one page of held leases, in name order, and in token order
// within a name (one lease per live grant).
type ListPage struct {
	Leases []Lease
	// Next is the cursor of the following page; empty on the last page.
	Next string
}

// Leases is the compare-and-set state machine: every method is one atomic
// state change or read.
type Leases interface {
	// Acquire grants the lease, renews it when Holder already holds it
	// (keeping the token and weight, replacing TTL, and replacing Value
	// unless KeepValue), or reports a holder.
	Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error)
	// AcquireGroup grants every member of req at once or none: all of
	// them are granted (renewed, for those Holder holds) in one state
	// change when every one fits, each as Acquire would grant it alone;
	// otherwise none is granted and, with a Waiter, the group is queued
	// on every member. A store that spans several state changes says so
	// in GroupResult.Held.
	AcquireGroup(ctx context.Context, req GroupRequest) (GroupResult, error)
	// ReleaseGroup releases each of holder's leases, as Release does one; a
	// store may release them in several state changes. released[i]
	// reports whether leases[i] was held and is released.
	ReleaseGroup(ctx context.Context, holder string, leases []GroupLease) (released []bool, err error)
	// Renew sets a held lease's expiry to ttl (positive) from now. It fails
	// with ErrLeaseNotHeld unless (holder, token) holds the name.
	Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (Lease, error)
	// Release ends a held lease; it reports false when (holder, token) did not
	// hold the name.
	Release(ctx context.Context, name, holder string, token uint64) (bool, error)
	// Dequeue removes a waiter that gave up.
	Dequeue(ctx context.Context, name, waiter string) error
	// RefreshWaiters pushes the deadline of each listed waiter still queued
	// for name to ttl (positive) from now; waiters no longer queued are
	// ignored, never queued again. One call keeps all of a coordinator's
	// parked waiters of a name alive. Each waiter's deadline moves on its
	// own, so a store may move those of a long list in several state
	// changes.
	RefreshWaiters(ctx context.Context, name string, waiters []string, ttl time.Duration) error
	// Describe reports the name's lease, last token and waiters.
	Describe(ctx context.Context, name string) (Description, error)
	// List pages through held leases whose names start with prefix, starting
	// after cursor (empty for the first page), at most limit a page; a limit
	// that is not positive means DefaultListLimit.
	List(ctx context.Context, prefix, cursor string, limit int) (ListPage, error)
	// Ping reports whether the store answers, for health checks.
	Ping(ctx context.Context) error
}

// Change is an announcement of a name's change (see Notifier.Changes).
type Change struct {
	// Granted is the token of the grant announced, or zero for any other
	// change (and when announcements may have been missed). A reader gets
	// the latest announcement, which stands for every one before it: the
	// caller that made a grant knows the name's state right after it, so
	// when that grant is the news it need not look again.
	Granted uint64
	// Released is the token of the grant whose release is announced, or
	// zero for any other change. A coordinator that made the release tells
	// its own waiters at once, and its announcement, coming back later, is
	// then no news to them.
	Released uint64
}

// Changes is a subscription to the announced changes of one name (see
// Notifier.Changes). A store makes one with NewChanges from a channel of its
// own.
type Changes struct {
	// C receives a value for each announcement; a pending value is replaced
	// by the next, so it is always the latest. It is closed when the store
	// closes, never by Cancel, so a reader selecting on it never sees a
	// spurious zero value.
	C <-chan Change

	cancel func()
}

// NewChanges returns the subscription that receives on c and whose Cancel
// calls cancel. Cancel may be called more than once, after the store closed
// too, so cancel must allow that.
func NewChanges(c <-chan Change, cancel func()) *Changes {
	return &Changes{C: c, cancel: cancel}
}

// Cancel ends the subscription: no more values are delivered to C, which
// stays open. It is safe to call more than once.
func (c *Changes) Cancel() { c.cancel() }

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
	// broke. Values coalesce: one pending value, the latest (see Change),
	// stands for any number of changes. Expiry is not announced: callers
	// time it from ExpiresAt. The channel is closed when the store closes;
	// Cancel the subscription when done.
	Changes(name string) *Changes
	// Watch asks for the changes of each name to be announced for at least
	// the next ttl (positive), as for a name with waiters, and reads each
	// name's lease at an instant when it was so marked: it returns one
	// Description a name, in the order given, with Held and Lease filled
	// (LastToken and Waiters, which observers do not need, are left zero).
	// Observers call it for all the names they observe at once, as rarely as
	// announcements allow: a store batches the names into few round trips
	// and may renew a name's mark only when it nears its end, so a long ttl
	// costs less.
	Watch(ctx context.Context, names []string, ttl time.Duration) ([]Description, error)
}

// Store is a whole lease store: the state machine, its sessions and its
// notifications.
type Store interface {
	Leases
	Sessions
	Notifier
	// Close releases the store's resources and closes the channel of every
	// Changes subscription.
	Close() error
}

// ErrLeaseNotHeld reports a renewal of a lease that expired or is held under
// another holder or token.
var ErrLeaseNotHeld = errors.New("lease not held")

// ErrUnavailable reports that the store could not be reached or did not
// answer within its call timeout; the operation may or may not have taken
// effect.
var ErrUnavailable = errors.New("store unavailable")

// QuarantineError refuses grants because the store lost its data recently:
// a holder of a lost lease may still believe it holds it until RetryAfter.
type QuarantineError struct {
	RetryAfter time.Duration
}

func (e *QuarantineError) Error() string {
	return fmt.Sprintf("store lost its data: grants resume in %s", e.RetryAfter)
}

// CapacityError refuses a request whose capacity differs from the one the
// name has while anyone holds it or waits for it.
type CapacityError struct {
	Name  string
	Have  int64 // the name's capacity
	Asked int64 // the request's
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("name %q has capacity %d, request asked for %d", e.Name, e.Have, e.Asked)
}

// HolderLimitError refuses a grant that would take a name past its cap on
// holders (AcquireRequest.MaxHolders).
type HolderLimitError struct {
	Name  string
	Limit int
}

func (e *HolderLimitError) Error() string {
	return fmt.Sprintf("name %q has %d holders, its limit", e.Name, e.Limit)
}
