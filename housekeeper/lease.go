package housekeeper

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
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

// Locker grants leases; TryLock returns an error wrapping ErrNotAcquired
// when another instance holds name.
type Locker interface {
	TryLock(ctx context.Context, name string, ttl time.Duration) (Lease, error)
}

// ErrNotAcquired is what a Locker returns (wrapped or not) when another
// instance holds the name; the Runner then skips the queue quietly.
var ErrNotAcquired = errors.New("housekeeper: lease held by another instance")

// isDone reports whether l is lost or released, or past its deadline: a
// process that was paused (a long GC, a stopped VM) must not start a batch
// on its lease before the goroutine that notices the loss has run. The
// deadline is the Locker's, on the real clock, so it is read against
// time.Now and never against the Runner's (possibly fake) clock.
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

// leaseCache holds the Runner's leases by name. Its clock dates their use,
// which decides when an idle one is released.
type leaseCache struct {
	clock clockwork.Clock
	mu    sync.Mutex
	m     map[string]*heldLease
}

func newLeaseCache(clock clockwork.Clock) *leaseCache {
	return &leaseCache{clock: clock, m: make(map[string]*heldLease)}
}

func (c *leaseCache) get(name string) (Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.m[name]
	if !ok {
		return nil, false
	}
	h.lastSeen = c.clock.Now()
	return h.lease, true
}

func (c *leaseCache) put(name string, t task, l Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[name] = &heldLease{lease: l, task: t, lastSeen: c.clock.Now()}
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

// takeIdle removes and returns task's leases not used for longer than idle.
func (c *leaseCache) takeIdle(t task, idle time.Duration) []Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.clock.Now().Add(-idle)
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
