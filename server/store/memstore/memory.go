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

	// quarantineEnd is when grants resume after a restart that found
	// leases possibly still live (monotonic clock); set only by Open.
	quarantineEnd time.Time
	// bounds is the write-ahead state of a persistent store; nil without.
	bounds *bounds

	mu    sync.Mutex
	names map[string]*entry
	// highest is at least every token issued (or, after a restart, the
	// previous run's token bound): every new token is above it, so tokens
	// survive forgetting, restarts and a clock stepping back.
	highest uint64
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
// above every token the store issued (s.highest). Called with s.mu held.
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

// waitWrite waits for the state write a grant or renewal asked for.
func waitWrite(ctx context.Context, written <-chan struct{}) error {
	select {
	case <-written:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Acquire implements store.Leases.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := ctx.Err(); err != nil {
		return store.AcquireResult{}, err
	}
	if req.TTL <= 0 {
		return store.AcquireResult{}, fmt.Errorf("memstore: acquire %q: ttl %s is not positive", req.Name, req.TTL)
	}
	if wait := s.quarantineEnd.Sub(s.clock.Now()); wait > 0 {
		return store.AcquireResult{}, &store.QuarantineError{RetryAfter: wait.Truncate(time.Millisecond) + time.Millisecond}
	}
	for {
		res, written, err := s.acquire(req)
		if written == nil {
			return res, err
		}
		if err := waitWrite(ctx, written); err != nil {
			return store.AcquireResult{}, err
		}
	}
}

// acquire is one attempt of Acquire; it returns a channel to wait on, and
// then nothing changed, when a grant or renewal needs the bounds raised.
func (s *Store) acquire(req store.AcquireRequest) (store.AcquireResult, <-chan struct{}, error) {
	waiterTTL := req.WaiterTTL
	if waiterTTL <= 0 {
		waiterTTL = store.DefaultWaiterTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.sweepIfDue(now)
	e := s.entry(req.Name)

	if req.Token != 0 && (!e.held(now, s.lockDelay) || e.holder != req.Holder || e.token != req.Token) {
		return store.AcquireResult{}, nil, nil
	}
	if e.held(now, s.lockDelay) {
		if e.holder != req.Holder {
			e.queue.enqueue(req.Waiter, now.Add(waiterTTL))
			return store.AcquireResult{Lease: e.lease(req.Name), RetryAt: e.expires.Round(0)}, nil, nil
		}
		if written, err := s.reserve(now, req.TTL+s.lockDelay, 0); written != nil || err != nil {
			return store.AcquireResult{}, written, err
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
		return store.AcquireResult{Acquired: true, Lease: e.lease(req.Name)}, nil, nil
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
		return res, nil, nil
	}
	// Above every token issued before, so that tokens keep increasing after
	// the name was forgotten and across a restart (s.highest starts at the
	// previous run's token bound), and never below the clock in
	// microseconds, so that they do without persistence too.
	token := max(s.highest+1, clockToken(now))
	if written, err := s.reserve(now, req.TTL+s.lockDelay, token); written != nil || err != nil {
		return store.AcquireResult{}, written, err
	}
	e.queue.dequeue(req.Waiter)
	s.highest, e.lastToken = token, token
	e.holder, e.token, e.value = req.Holder, e.lastToken, bytes.Clone(req.Value)
	e.ttl, e.expires = req.TTL, now.Add(req.TTL)
	e.usedUntil = e.expires.Add(s.lockDelay)
	s.changes.Publish(req.Name, struct{}{})
	return store.AcquireResult{Acquired: true, Lease: e.lease(req.Name)}, nil, nil
}

// Renew implements store.Leases.
func (s *Store) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (store.Lease, error) {
	if err := ctx.Err(); err != nil {
		return store.Lease{}, err
	}
	if ttl <= 0 {
		return store.Lease{}, fmt.Errorf("memstore: renew %q: ttl %s is not positive", name, ttl)
	}
	for {
		l, written, err := s.renew(name, holder, token, ttl)
		if written == nil {
			return l, err
		}
		if err := waitWrite(ctx, written); err != nil {
			return store.Lease{}, err
		}
	}
}

func (s *Store) renew(name, holder string, token uint64, ttl time.Duration) (store.Lease, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e, ok := s.names[name]
	if !ok || !e.held(now, s.lockDelay) || e.holder != holder || e.token != token {
		return store.Lease{}, nil, store.ErrLeaseNotHeld
	}
	if written, err := s.reserve(now, ttl+s.lockDelay, 0); written != nil || err != nil {
		return store.Lease{}, written, err
	}
	e.ttl, e.expires = ttl, now.Add(ttl)
	e.usedUntil = e.expires.Add(s.lockDelay)
	return e.lease(name), nil, nil
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

// tokenFloor is the last token of a name without a counter: below every
// token a grant may issue from now on. Called with s.mu held.
func (s *Store) tokenFloor(now time.Time) uint64 {
	return max(s.highest, clockToken(now)-1)
}

// Describe implements store.Leases. LastToken is the counter, or, for a name
// without one (never granted since the process started, or forgotten), the
// larger of the store's highest token and the clock in microseconds less
// one. That is below every token issued after, and at least every token
// issued before: a token is above the highest and never below the clock. With
// a state directory this holds across restarts and clock steps too (the
// highest starts at the previous run's token bound); without, as long as the
// clock does not step back across a restart.
func (s *Store) Describe(ctx context.Context, name string) (store.Description, error) {
	if err := ctx.Err(); err != nil {
		return store.Description{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e, ok := s.names[name]
	if !ok {
		return store.Description{LastToken: s.tokenFloor(now)}, nil
	}
	if e.queue.pruneAll(now) {
		s.changes.Publish(name, struct{}{})
	}
	d := store.Description{LastToken: e.lastToken, Waiters: e.queue.len()}
	if d.LastToken == 0 {
		d.LastToken = s.tokenFloor(now)
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
func (s *Store) Changes(name string) *store.Changes {
	sub := s.changes.Subscribe(name, 1, fanout.Coalesce)
	return store.NewChanges(sub.C, sub.Cancel)
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

// Close closes every Changes channel and, with a state directory, writes
// the end of the leases still held and unlocks the directory. The leases
// stay usable, but a persistent store then refuses a grant or renewal that
// would outlast what it wrote.
func (s *Store) Close() error {
	err := s.closeBounds()
	s.changes.Close()
	return err
}
