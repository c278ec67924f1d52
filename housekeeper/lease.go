package housekeeper

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lease is a held coordinator lease.
type Lease interface {
	// Token is the lease's fencing token: each grant of a name gets a
	// higher one than every earlier grant of that name.
	Token() uint64
	Done() <-chan struct{} // closed the moment the lease is lost or released
	// Deadline is when the lease stops being valid by this process's clock
	// unless renewed first; zero when the Locker keeps no such deadline.
	Deadline() time.Time
	Release(ctx context.Context) error
}

// Locker grants leases; TryLock returns ErrNotAcquired (or Config.ErrNotAcquired)
// when another instance holds name.
type Locker interface {
	TryLock(ctx context.Context, name string, ttl time.Duration) (Lease, error)
}

// ErrNotAcquired is what a Locker returns when another instance holds the
// name. A Locker with a sentinel of its own is told to the Runner through
// Config.ErrNotAcquired.
var ErrNotAcquired = errors.New("housekeeper: lease held by another instance")

// isDone reports whether l is lost or released, or past its deadline: a
// process that was paused (a long GC, a stopped VM) must not start a batch
// on its lease before the goroutine that notices the loss has run.
func isDone(l Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		d := l.Deadline()
		return !d.IsZero() && !time.Now().Before(d)
	}
}

// heldLease is a lease the Runner keeps across batches and cycles.
type heldLease struct {
	lease    Lease
	task     task
	lastSeen time.Time // when a cycle last found the queue and used the lease
}

// leaseCache holds the Runner's leases by name.
type leaseCache struct {
	mu sync.Mutex
	m  map[string]*heldLease
}

func newLeaseCache() *leaseCache { return &leaseCache{m: make(map[string]*heldLease)} }

func (c *leaseCache) get(name string) (Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.m[name]
	if !ok {
		return nil, false
	}
	h.lastSeen = time.Now()
	return h.lease, true
}

func (c *leaseCache) put(name string, t task, l Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[name] = &heldLease{lease: l, task: t, lastSeen: time.Now()}
}

// remove drops name if it still maps to l, and reports whether it did.
func (c *leaseCache) remove(name string, l Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.m[name]; ok && h.lease == l {
		delete(c.m, name)
		return true
	}
	return false
}

// takeIdle removes and returns task's leases not used since before.
func (c *leaseCache) takeIdle(t task, before time.Time) []Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Lease
	for name, h := range c.m {
		if h.task == t && h.lastSeen.Before(before) {
			out = append(out, h.lease)
			delete(c.m, name)
		}
	}
	return out
}

// takeAll empties the cache.
func (c *leaseCache) takeAll() []Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Lease, 0, len(c.m))
	for name, h := range c.m {
		out = append(out, h.lease)
		delete(c.m, name)
	}
	return out
}
