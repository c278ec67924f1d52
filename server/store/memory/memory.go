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
// the idle retention (WithIdleNameTTL, store.DefaultIdleNameTTL) is
// forgotten, so that memory follows the names in use rather than every name
// ever used; its next token still comes out larger, since a token is never
// below the clock in microseconds.
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
	idleTTL   time.Duration
	changes   fanout.Hub[string, struct{}]

	mu    sync.Mutex
	names map[string]*entry
	// nextSweep is when idle names are next looked for.
	nextSweep time.Time
}

type entry struct {
	holder  string // empty when not held
	token   uint64
	value   []byte
	ttl     time.Duration
	expires time.Time // carries a monotonic reading

	lastToken uint64
	queue     queue
	// delayedUntil is the end of the lock delay after a lease expired.
	delayedUntil time.Time
	// usedUntil is when the name's last use ends: its release, or the end
	// of its lease and lock delay. It is forgotten idleTTL later.
	usedUntil time.Time
}

// sweepsPerRetention is how many sweeps for idle names run per idle
// retention: a name is forgotten at most a quarter of the retention late,
// and a sweep, which visits every name, runs rarely enough to cost little.
const sweepsPerRetention = 4

// sweepIfDue forgets the names idle for the retention, when a sweep is due.
// Forgetting a name loses its counter, which is safe because a new token is
// never below the clock in microseconds, and the counter runs ahead of the
// clock only by the grants made faster than one a microsecond, far less than
// the retention's worth of microseconds. Called with s.mu held.
func (s *Store) sweepIfDue(now time.Time) {
	if now.Before(s.nextSweep) {
		return
	}
	s.nextSweep = now.Add(s.idleTTL / sweepsPerRetention)
	for name, e := range s.names {
		if e.queue.pruneAll(now) {
			s.changes.Publish(name, struct{}{})
		}
		if e.queue.len() == 0 && !e.held(now, s.lockDelay) && now.Sub(e.usedUntil) >= s.idleTTL {
			delete(s.names, name)
		}
	}
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

// WithIdleNameTTL sets how long a name nobody holds, waits for or watches
// stays known; d <= 0 keeps store.DefaultIdleNameTTL.
func WithIdleNameTTL(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.idleTTL = d
		}
	}
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{clock: clockwork.NewRealClock(), idleTTL: store.DefaultIdleNameTTL, names: map[string]*entry{}}
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
	s.sweepIfDue(now)
	e := s.entry(req.Name)

	if e.held(now, s.lockDelay) {
		if e.holder != req.Holder {
			e.queue.enqueue(req.Waiter, now.Add(waiterTTL))
			return store.AcquireResult{Lease: e.lease(req.Name), RetryAt: e.expires.Round(0)}, nil
		}
		revalued := !req.KeepValue && !bytes.Equal(e.value, req.Value)
		if revalued {
			e.value = bytes.Clone(req.Value)
		}
		e.ttl, e.expires = req.TTL, now.Add(req.TTL)
		e.usedUntil = e.expires.Add(s.lockDelay)
		e.queue.dequeue(req.Waiter)
		if revalued {
			s.changes.Publish(req.Name, struct{}{})
		}
		return store.AcquireResult{Acquired: true, Lease: e.lease(req.Name)}, nil
	}

	if e.queue.pruneHead(now) {
		s.changes.Publish(req.Name, struct{}{})
	}
	if now.Before(e.delayedUntil) || (e.queue.len() > 0 && e.queue.head() != req.Waiter) {
		e.queue.enqueue(req.Waiter, now.Add(waiterTTL))
		var res store.AcquireResult
		if now.Before(e.delayedUntil) {
			res.RetryAt = e.delayedUntil.Round(0)
		}
		return res, nil
	}
	e.queue.dequeue(req.Waiter)
	// Never below the clock in microseconds, so that tokens keep increasing
	// across a restart of the process, which forgets every counter, and
	// after the name was forgotten.
	e.lastToken = max(e.lastToken+1, clockToken(now))
	e.holder, e.token, e.value = req.Holder, e.lastToken, bytes.Clone(req.Value)
	e.ttl, e.expires = req.TTL, now.Add(req.TTL)
	e.usedUntil = e.expires.Add(s.lockDelay)
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
	e.ttl, e.expires = ttl, now.Add(ttl)
	e.usedUntil = e.expires.Add(s.lockDelay)
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
	e.holder, e.token, e.value, e.usedUntil = "", 0, nil, now
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
	if e, ok := s.names[name]; ok && e.queue.dequeue(waiter) {
		s.changes.Publish(name, struct{}{})
	}
	return nil
}

// clockToken is the least token a grant at now may issue.
func clockToken(now time.Time) uint64 {
	return uint64(now.UnixMicro())
}

// Describe implements store.Leases. LastToken is the counter, or, for a name
// without one (never granted since the process started, or forgotten), the
// clock in microseconds less one. That is below every token issued after, and
// at least every token issued before: a token is the counter plus one or the
// clock in microseconds at its grant, whichever is larger, so a counter runs
// ahead of the clock only by the grants made faster than one a microsecond,
// a lead that the restart or the idle retention since has left far behind.
// Both hold as long as the clock does not step back.
func (s *Store) Describe(ctx context.Context, name string) (store.Description, error) {
	if err := ctx.Err(); err != nil {
		return store.Description{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e, ok := s.names[name]
	if !ok {
		return store.Description{LastToken: clockToken(now) - 1}, nil
	}
	if e.queue.pruneAll(now) {
		s.changes.Publish(name, struct{}{})
	}
	d := store.Description{LastToken: e.lastToken, Waiters: e.queue.len()}
	if d.LastToken == 0 {
		d.LastToken = clockToken(now) - 1
	}
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
// only reads the leases, filling Held and Lease as the Redis store does.
func (s *Store) Watch(ctx context.Context, names []string, ttl time.Duration) ([]store.Description, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("memstore: watch: ttl %s is not positive", ttl)
	}
	out := make([]store.Description, len(names))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for i, name := range names {
		if e, ok := s.names[name]; ok && e.held(now, s.lockDelay) {
			out[i] = store.Description{Held: true, Lease: e.lease(name)}
		}
	}
	return out, nil
}

// RefreshWaiters implements store.Leases.
func (s *Store) RefreshWaiters(ctx context.Context, name string, waiters []string, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("memstore: refresh waiters of %q: ttl %s is not positive", name, ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.names[name]
	if !ok {
		return nil
	}
	now := s.clock.Now()
	// The dead are dropped first, so that none is revived.
	if e.queue.pruneAll(now) {
		s.changes.Publish(name, struct{}{})
	}
	deadline := now.Add(ttl)
	for _, w := range waiters {
		e.queue.refresh(w, deadline)
	}
	return nil
}

// Ping implements store.Leases: the store is this process.
func (s *Store) Ping(ctx context.Context) error {
	return ctx.Err()
}

// Close closes every Changes channel. The leases stay usable: there is
// nothing else to release.
func (s *Store) Close() error {
	s.changes.Close()
	return nil
}
