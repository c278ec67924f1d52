// Package memstore is the embedded, in-process lease store: the default when
// no Redis is configured.
//
// It keeps the same rules as the Redis store (the conformance suite runs
// against both) with one difference a user must know: its state lives in the
// coordinator's memory, so a restart forgets every lease and queue. Fencing
// counters are seeded from the wall clock in microseconds, so tokens still
// increase across a restart (as long as the clock does not step back), but a
// holder from before the restart may still be acting while the name is
// granted again: only a resource that checks fencing tokens is protected
// across a restart.
//
// Expiry uses the monotonic clock and is evaluated lazily on access: there is
// no goroutine or timer per lease. A name nobody has held or waited for in
// ten minutes is forgotten, so that memory follows the names in use rather
// than every name ever used; its next token still comes out larger, since a
// token is never below the clock in microseconds.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/internal/fanout"
	"github.com/coordinator-dev/coordinator/server/store"
)

// Store is an in-memory store.Store. The zero value is not usable; call New.
type Store struct {
	clock     clockwork.Clock
	lockDelay time.Duration
	changes   fanout.Hub[string, struct{}]

	mu       sync.Mutex
	names    map[string]*entry
	acquires int // since the last sweep of idle names
}

type entry struct {
	holder  string // empty when not held
	token   uint64
	value   []byte
	ttl     time.Duration
	expires time.Time // carries a monotonic reading

	lastToken uint64
	queue     []waiter // arrival order
	// delayedUntil is the end of the lock delay after a lease expired.
	delayedUntil time.Time
	// active is the last grant, renewal or release.
	active time.Time
}

const (
	// forgetAfter is how long a name stays known after its last activity.
	// Forgetting it loses its counter, which is safe because a new token is
	// never below the clock in microseconds: ten minutes of clock are far
	// more than the grants any name could have had beyond it.
	forgetAfter = 10 * time.Minute
	// sweepEvery is how many acquires pass between sweeps of idle names.
	sweepEvery = 4096
)

// sweep forgets the names idle for forgetAfter. Called with s.mu held.
func (s *Store) sweep(now time.Time) {
	for name, e := range s.names {
		if len(e.queue) == 0 && !e.held(now, s.lockDelay) && !now.Before(e.delayedUntil) && now.Sub(e.active) > forgetAfter {
			delete(s.names, name)
		}
	}
}

type waiter struct {
	id       string
	deadline time.Time
}

// Option configures a Store.
type Option func(*Store)

// WithClock replaces the real clock, for tests that drive time by hand. A
// nil clock keeps the real one.
func WithClock(clock clockwork.Clock) Option {
	return func(s *Store) {
		if clock != nil {
			s.clock = clock
		}
	}
}

// WithLockDelay keeps the name of a lease that expired (rather than being
// released) from being granted again for d.
func WithLockDelay(d time.Duration) Option {
	return func(s *Store) { s.lockDelay = d }
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{clock: clockwork.NewRealClock(), names: map[string]*entry{}}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

var _ store.Store = (*Store)(nil)

// held reports whether e has an unexpired holder at now, clearing it if it
// expired (starting the lock delay) so that later checks need not repeat
// the comparison.
func (e *entry) held(now time.Time, lockDelay time.Duration) bool {
	if e.holder != "" && !now.Before(e.expires) {
		e.holder, e.token, e.value = "", 0, nil
		e.delayedUntil = e.expires.Add(lockDelay)
	}
	return e.holder != ""
}

// pruneQueue drops the waiters whose deadline passed and reports whether
// the head was among them: the new head must then be told.
func (e *entry) pruneQueue(now time.Time) (headGone bool) {
	if len(e.queue) == 0 {
		return false
	}
	head := e.queue[0].id
	live := e.queue[:0]
	for _, w := range e.queue {
		if now.Before(w.deadline) {
			live = append(live, w)
		}
	}
	clear(e.queue[len(live):])
	e.queue = live
	return len(live) > 0 && live[0].id != head
}

// enqueue adds the waiter at the back, or refreshes its deadline in place.
func (e *entry) enqueue(id string, deadline time.Time) {
	if id == "" {
		return
	}
	for i := range e.queue {
		if e.queue[i].id == id {
			e.queue[i].deadline = deadline
			return
		}
	}
	e.queue = append(e.queue, waiter{id: id, deadline: deadline})
}

func (e *entry) dequeue(id string) bool {
	for i := range e.queue {
		if e.queue[i].id == id {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			return true
		}
	}
	return false
}

func (e *entry) lease(name string) store.Lease {
	return store.Lease{
		Name:      name,
		Holder:    e.holder,
		Token:     e.token,
		Value:     bytes.Clone(e.value),
		TTL:       e.ttl,
		ExpiresAt: e.expires.Round(0),
	}
}

func (s *Store) entry(name string) *entry {
	e, ok := s.names[name]
	if !ok {
		e = &entry{}
		s.names[name] = e
	}
	return e
}

// Acquire implements store.Leases.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := ctx.Err(); err != nil {
		return store.AcquireResult{}, err
	}
	if req.TTL <= 0 {
		return store.AcquireResult{}, fmt.Errorf("memstore: acquire %q: ttl %s is not positive", req.Name, req.TTL)
	}
	waiterTTL := req.WaiterTTL
	if waiterTTL <= 0 {
		waiterTTL = store.DefaultWaiterTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if s.acquires++; s.acquires >= sweepEvery {
		s.acquires = 0
		s.sweep(now)
	}
	e := s.entry(req.Name)

	if e.held(now, s.lockDelay) {
		if e.holder != req.Holder {
			e.enqueue(req.Waiter, now.Add(waiterTTL))
			return store.AcquireResult{Lease: e.lease(req.Name), RetryAt: e.expires.Round(0)}, nil
		}
		revalued := !bytes.Equal(e.value, req.Value)
		e.value = bytes.Clone(req.Value)
		e.ttl, e.expires, e.active = req.TTL, now.Add(req.TTL), now
		e.dequeue(req.Waiter)
		if revalued {
			s.changes.Publish(req.Name, struct{}{})
		}
		return store.AcquireResult{Acquired: true, Lease: e.lease(req.Name)}, nil
	}

	if e.pruneQueue(now) {
		s.changes.Publish(req.Name, struct{}{})
	}
	if now.Before(e.delayedUntil) || (len(e.queue) > 0 && e.queue[0].id != req.Waiter) {
		e.enqueue(req.Waiter, now.Add(waiterTTL))
		var res store.AcquireResult
		if now.Before(e.delayedUntil) {
			res.RetryAt = e.delayedUntil.Round(0)
		}
		return res, nil
	}
	e.dequeue(req.Waiter)
	// Never below the clock in microseconds, so that tokens keep increasing
	// across a restart of the process, which forgets every counter.
	e.lastToken = max(e.lastToken+1, uint64(now.UnixMicro()))
	e.holder, e.token, e.value = req.Holder, e.lastToken, bytes.Clone(req.Value)
	e.ttl, e.expires, e.active = req.TTL, now.Add(req.TTL), now
	s.changes.Publish(req.Name, struct{}{})
	return store.AcquireResult{Acquired: true, Lease: e.lease(req.Name)}, nil
}

// Renew implements store.Leases.
func (s *Store) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (store.Lease, error) {
	if err := ctx.Err(); err != nil {
		return store.Lease{}, err
	}
	if ttl <= 0 {
		return store.Lease{}, fmt.Errorf("memstore: renew %q: ttl %s is not positive", name, ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e, ok := s.names[name]
	if !ok || !e.held(now, s.lockDelay) || e.holder != holder || e.token != token {
		return store.Lease{}, store.ErrLeaseNotHeld
	}
	e.ttl, e.expires, e.active = ttl, now.Add(ttl), now
	return e.lease(name), nil
}

// Release implements store.Leases.
func (s *Store) Release(ctx context.Context, name, holder string, token uint64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e, ok := s.names[name]
	if !ok || !e.held(now, s.lockDelay) || e.holder != holder || e.token != token {
		return false, nil
	}
	e.holder, e.token, e.value, e.active = "", 0, nil, now
	s.changes.Publish(name, struct{}{})
	return true, nil
}

// Dequeue implements store.Leases.
func (s *Store) Dequeue(ctx context.Context, name, waiter string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.names[name]; ok && e.dequeue(waiter) {
		s.changes.Publish(name, struct{}{})
	}
	return nil
}

// Describe implements store.Leases.
func (s *Store) Describe(ctx context.Context, name string) (store.Description, error) {
	if err := ctx.Err(); err != nil {
		return store.Description{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.names[name]
	if !ok {
		return store.Description{}, nil
	}
	now := s.clock.Now()
	if e.pruneQueue(now) {
		s.changes.Publish(name, struct{}{})
	}
	d := store.Description{LastToken: e.lastToken, Waiters: len(e.queue)}
	if e.held(now, s.lockDelay) {
		d.Held, d.Lease = true, e.lease(name)
	}
	return d, nil
}

// List implements store.Leases.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) (store.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return store.ListPage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var names []string
	for name, e := range s.names {
		if strings.HasPrefix(name, prefix) && (cursor == "" || name > cursor) && e.held(now, s.lockDelay) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	var page store.ListPage
	if len(names) > limit {
		names = names[:limit]
		page.Next = names[limit-1]
	}
	for _, name := range names {
		page.Leases = append(page.Leases, s.names[name].lease(name))
	}
	return page, nil
}

// Changes implements store.Notifier. Every change is announced in process,
// which costs nothing while nobody listens.
func (s *Store) Changes(name string) store.Changes {
	return s.changes.Subscribe(name, 1, fanout.Coalesce)
}

// Watch implements store.Notifier: every change is announced anyway, so it
// only describes.
func (s *Store) Watch(ctx context.Context, name string, _ time.Duration) (store.Description, error) {
	return s.Describe(ctx, name)
}

// Close closes every Changes channel. The leases stay usable: there is
// nothing else to release.
func (s *Store) Close() error {
	s.changes.Close()
	return nil
}
