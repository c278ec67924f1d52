// Package housekeepertest helps test and benchmark the housekeeper: an
// in-memory Locker standing in for the coordinator, and a writer of queues
// laid out in Redis exactly as Deckard lays them out.
package housekeepertest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/coordinator-dev/coordinator/housekeeper"
)

// ErrNotHeld is returned by Release of a lease that is no longer held.
var ErrNotHeld = errors.New("housekeepertest: lease not held")

// Locker is an in-memory housekeeper.Locker shared by every Runner of a
// test, as one coordinator would be: one map of names to leases, tokens
// increasing across all names. A lease lives until released or stolen, as a
// lease kept alive by its SDK would; the TTL is checked, not used.
type Locker struct {
	mu     sync.Mutex
	token  uint64
	held   map[string]*Lease
	grants map[string]int
}

// NewLocker returns an empty Locker.
func NewLocker() *Locker {
	return &Locker{held: make(map[string]*Lease), grants: make(map[string]int)}
}

// TryLock grants name, or returns housekeeper.ErrNotAcquired when it is held.
func (l *Locker) TryLock(ctx context.Context, name string, ttl time.Duration) (housekeeper.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("housekeepertest: ttl %v must be positive", ttl)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[name]; ok {
		return nil, housekeeper.ErrNotAcquired
	}
	return l.grantLocked(name), nil
}

func (l *Locker) grantLocked(name string) *Lease {
	l.token++
	le := &Lease{locker: l, name: name, token: l.token, done: make(chan struct{})}
	l.held[name] = le
	l.grants[name]++
	return le
}

// end ends le if it is still held, and reports whether it did.
func (l *Locker) end(le *Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endLocked(le)
}

func (l *Locker) endLocked(le *Lease) bool {
	if l.held[le.name] != le {
		return false
	}
	delete(l.held, le.name)
	close(le.done)
	return true
}

// Steal ends name's lease, if held, and grants name to the caller with a
// new, higher token: another instance taking over. The thief's lease is
// kept alive like any other.
func (l *Locker) Steal(name string) *Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if le, ok := l.held[name]; ok {
		l.endLocked(le)
	}
	return l.grantLocked(name)
}

// Held returns the names held, sorted.
func (l *Locker) Held() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.held))
	for name := range l.held {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Grants returns how many times name was granted.
func (l *Locker) Grants(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grants[name]
}

// Lease is a lease of a Locker.
type Lease struct {
	locker *Locker
	name   string
	token  uint64
	done   chan struct{}
}

var _ housekeeper.Lease = (*Lease)(nil)

// Token is the lease's fencing token.
func (le *Lease) Token() uint64 { return le.token }

// Done is closed when the lease ends.
func (le *Lease) Done() <-chan struct{} { return le.done }

// Deadline is zero: the fake keeps no local validity, only Done.
func (le *Lease) Deadline() time.Time { return time.Time{} }

// Release ends the lease; ErrNotHeld when it had already ended.
func (le *Lease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !le.locker.end(le) {
		return ErrNotHeld
	}
	return nil
}
