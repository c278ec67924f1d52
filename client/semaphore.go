package client

import (
	"context"
	"fmt"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// MaxCapacity is the largest capacity a name may have (TryAcquireRequest's
// capacity rules).
var MaxCapacity = int64(fieldRules(&coordinatorv1.TryAcquireRequest{}, "capacity").GetMaxValue())

// RWCapacity is the capacity of a read-write lock: a reader holds 1 of it,
// a writer all of it. Every client library uses the same (the proto's
// RW_CAPACITY), so that their readers and writers share a name.
const RWCapacity = int64(coordinatorv1.RWCapacity_RW_CAPACITY)

// Semaphore is a name of a fixed capacity whose shares Acquire and
// TryAcquire take: "at most capacity weight held at once", like
// golang.org/x/sync/semaphore.Weighted, across processes. Each share is a
// *Lease of its own, with its own token, loss signal and release.
// Waiters are served in arrival order, a large request holding back later
// small ones, so that nobody starves. Every user of a name must agree on its
// capacity: while the name is held or awaited, a request with another
// capacity fails with a FailedPrecondition status, reason
// CAPACITY_MISMATCH. A Semaphore is a value that makes calls; it holds
// nothing itself.
type Semaphore struct {
	c        *Client
	name     string
	capacity int64
	kind     string
}

// Semaphore returns the semaphore name of capacity (1 to MaxCapacity; a
// capacity of 1 is the lock name, shared with TryLock and Lock).
func (c *Client) Semaphore(name string, capacity int64) *Semaphore {
	return &Semaphore{c: c, name: name, capacity: capacity, kind: "semaphore"}
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Capacity is the semaphore's capacity.
func (s *Semaphore) Capacity() int64 { return s.capacity }

// TryAcquire takes n of the capacity if it is free now and nobody is
// queued, without waiting; otherwise the error is a *NotAcquiredError
// matching ErrNotAcquired, naming a holder when one holds.
func (s *Semaphore) TryAcquire(ctx context.Context, n int64, opts ...LockOption) (*Lease, error) {
	return s.acquire(ctx, n, false, opts)
}

// Acquire takes n of the capacity, waiting in arrival order until ctx ends;
// it retries transient errors as Lock does.
func (s *Semaphore) Acquire(ctx context.Context, n int64, opts ...LockOption) (*Lease, error) {
	return s.acquire(ctx, n, true, opts)
}

func (s *Semaphore) acquire(ctx context.Context, n int64, wait bool, opts []LockOption) (*Lease, error) {
	if s.capacity < 1 || s.capacity > MaxCapacity {
		return nil, fmt.Errorf("coordinator: %s %q: capacity %d is not within 1 to %d", s.kind, s.name, s.capacity, MaxCapacity)
	}
	if n < 1 || n > s.capacity {
		return nil, fmt.Errorf("coordinator: %s %q: weight %d is not within 1 to the capacity, %d", s.kind, s.name, n, s.capacity)
	}
	l, err := s.c.acquire(ctx, opts, wait, single(s.kind, s.name, s.c.tryAcquire(s.name, uint32(s.capacity), uint32(n))))
	if err != nil {
		return nil, err
	}
	return &Lease{l: l}, nil
}

// RWMutex is a read-write lock on a name: many readers at once, or one
// writer. It is a semaphore of capacity RWCapacity whose readers take 1 and
// writers all of it, so it is fair: a writer waiting behind readers is
// granted before the readers that came after it. How many readers hold at
// once is bounded by the coordinator's holder cap
// (COORDINATOR_MAX_HOLDERS_PER_NAME, 1024 by default).
//
// A writer's token is above every token granted before it: a resource that
// remembers the last writer's token refuses every lower one.
type RWMutex struct {
	readers, writers Semaphore
}

// RWMutex returns the read-write lock name.
func (c *Client) RWMutex(name string) *RWMutex {
	return &RWMutex{
		readers: Semaphore{c: c, name: name, capacity: RWCapacity, kind: "read lock"},
		writers: Semaphore{c: c, name: name, capacity: RWCapacity, kind: "write lock"},
	}
}

// Name is the lock's name.
func (m *RWMutex) Name() string { return m.readers.name }

// RLock takes a read share, waiting in arrival order until ctx ends.
func (m *RWMutex) RLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.readers.Acquire(ctx, 1, opts...)
}

// TryRLock takes a read share if no writer holds or waits, without waiting.
func (m *RWMutex) TryRLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.readers.TryAcquire(ctx, 1, opts...)
}

// Lock takes the lock for writing, waiting in arrival order until ctx
// ends.
func (m *RWMutex) Lock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.writers.Acquire(ctx, RWCapacity, opts...)
}

// TryLock takes the lock for writing if nobody holds or waits for it,
// without waiting.
func (m *RWMutex) TryLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.writers.TryAcquire(ctx, RWCapacity, opts...)
}
