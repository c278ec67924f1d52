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
	changes   fanout.Hub[string, store.Change]

	// quarantineEnd is when grants resume after a restart that found
	// leases possibly still live (monotonic clock); set only by Open.
	quarantineEnd time.Time
	// bounds is the write-ahead state of a persistent store; nil without.
	bounds *bounds

	mu    sync.Mutex
	names map[string]*entry
	// sessions are the sessions by id, live or dead (until forgotten: an
	// unknown id is refused as a dead one is).
	sessions map[string]*session
	// highest is at least every token issued (or, after a restart, the
	// previous run's token bound): every new token is above it, so tokens
	// survive forgetting, restarts and a clock stepping back.
	highest uint64
	// nextSweep is when idle names are next looked for.
	nextSweep time.Time
}

type entry struct {
	// capacity is the name's capacity; 0 stands for 1.
	capacity int64
	// grants are the name's grants by holder, live or in their lock delay:
	// one that expired keeps its weight until its expiry plus the lock
	// delay (sweep drops it then); used sums their weights.
	grants map[string]*grant
	used   int64

	lastToken uint64
	queue     queue
	// delayedUntil keeps the whole name from being granted until then:
	// the leases it had when a persistent store was closed (see Open).
	delayedUntil time.Time
	// usedUntil is when the name's last use ends: its release, or the end
	// of its leases and lock delay. It is forgotten idleTTL later.
	usedUntil time.Time
}

// grant is one holder's share of a name.
type grant struct {
	holder  string
	token   uint64
	weight  int64
	value   []byte
	ttl     time.Duration
	expires time.Time // carries a monotonic reading
	// session is the id of the session the grant is attached to, or empty;
	// an attached grant's expires follows its session's (see
	// renewSession).
	session string
}

func (g *grant) live(now time.Time) bool { return now.Before(g.expires) }

func (g *grant) lease(name string) store.Lease {
	return store.Lease{
		Name:      name,
		Holder:    g.holder,
		Token:     g.token,
		Value:     bytes.Clone(g.value),
		TTL:       g.ttl,
		ExpiresAt: g.expires.Round(0),
		Weight:    g.weight,
		Session:   g.session,
	}
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
			s.changes.Publish(name, store.Change{})
		}
		if e.queue.len() == 0 && !e.occupied(now, s.lockDelay) && now.Sub(e.usedUntil) >= s.idleTTL {
			delete(s.names, name)
		}
	}
	s.forgetSessions(now)
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
	s := &Store{clock: clockwork.NewRealClock(), idleTTL: store.DefaultIdleNameTTL, names: map[string]*entry{}, sessions: map[string]*session{}}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

var _ store.Store = (*Store)(nil)

// sweep drops the grants whose lock delay ended, returning their weight.
func (e *entry) sweep(now time.Time, lockDelay time.Duration) {
	for h, g := range e.grants {
		if !now.Before(g.expires.Add(lockDelay)) {
			delete(e.grants, h)
			e.used -= g.weight
		}
	}
}

// held reports whether e has a live grant at now, dropping the grants whose
// lock delay ended.
func (e *entry) held(now time.Time, lockDelay time.Duration) bool {
	e.sweep(now, lockDelay)
	for _, g := range e.grants {
		if g.live(now) {
			return true
		}
	}
	return false
}

// occupied reports whether e has any grant, live or in its lock delay.
func (e *entry) occupied(now time.Time, lockDelay time.Duration) bool {
	e.sweep(now, lockDelay)
	return len(e.grants) > 0 || now.Before(e.delayedUntil)
}

func (e *entry) cap() int64 { return max(e.capacity, 1) }

// live returns the live grants in token order.
func (e *entry) live(now time.Time) []*grant {
	var out []*grant
	for _, g := range e.grants {
		if g.live(now) {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].token < out[j].token })
	return out
}

// leases returns the live grants as leases, in token order.
func (e *entry) leases(name string, now time.Time) []store.Lease {
	gs := e.live(now)
	if len(gs) == 0 {
		return nil
	}
	out := make([]store.Lease, len(gs))
	for i, g := range gs {
		out[i] = g.lease(name)
	}
	return out
}

// freeAt is when the next weight may come free: the earliest end of a live
// grant, or of a lock delay when that comes first.
func (e *entry) freeAt(now time.Time, lockDelay time.Duration) time.Time {
	var at time.Time
	for _, g := range e.grants {
		end := g.expires
		if !g.live(now) {
			end = end.Add(lockDelay)
		}
		if at.IsZero() || end.Before(at) {
			at = end
		}
	}
	return at
}

// lastEnd is when the last grant's lock delay ends.
func (e *entry) lastEnd(lockDelay time.Duration) time.Time {
	var at time.Time
	for _, g := range e.grants {
		at = later(at, g.expires.Add(lockDelay))
	}
	return at
}

// first is the live grant that ends first: the one a refusal names.
func (e *entry) first(name string, now time.Time) store.Lease {
	var f *grant
	for _, g := range e.grants {
		if g.live(now) && (f == nil || g.expires.Before(f.expires)) {
			f = g
		}
	}
	if f == nil {
		return store.Lease{}
	}
	return f.lease(name)
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
	if req.TTL <= 0 && req.Session == "" {
		return store.AcquireResult{}, fmt.Errorf("memstore: acquire %q: ttl %s is not positive", req.Name, req.TTL)
	}
	if err := store.CheckShares(req); err != nil {
		return store.AcquireResult{}, fmt.Errorf("memstore: %w", err)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.sweepIfDue(now)
	term, err := s.termOf(req.Session, req.SessionOwner, req.TTL, now)
	if err != nil {
		return store.AcquireResult{}, nil, fmt.Errorf("memstore: acquire %q in session %s: %w", req.Name, req.Session, err)
	}
	v, err := s.decide(req, now)
	if err != nil || v.none {
		return store.AcquireResult{}, nil, err
	}
	if !v.fits() {
		s.refuse(req, v, now)
		return v.refusal, nil, nil
	}
	token := uint64(0)
	if v.mine == nil {
		token = max(s.highest+1, clockToken(now))
	}
	if written, err := s.reserve(now, term.span(now, s.lockDelay), token); written != nil || err != nil {
		return store.AcquireResult{}, written, err
	}
	return store.AcquireResult{Acquired: true, Lease: s.apply(req, v, term, token)}, nil, nil
}

// term is how long a grant lives: its own TTL, or its session's.
type term struct {
	ttl     time.Duration
	expires time.Time
	session string
}

// termOf is the term of a grant at now: an attached grant lives as long as
// its session, not now plus a TTL of its own. Called with s.mu held.
func (s *Store) termOf(session, owner string, ttl time.Duration, now time.Time) (term, error) {
	if session == "" {
		return term{ttl: ttl, expires: now.Add(ttl)}, nil
	}
	sess, err := s.liveSession(session, owner, now)
	if err != nil {
		return term{}, err
	}
	return term{ttl: sess.ttl, expires: sess.expires, session: session}, nil
}

// span is how long the bounds must cover a grant of the term: to its end
// and lock delay.
func (t term) span(now time.Time, lockDelay time.Duration) time.Duration {
	return t.expires.Sub(now) + lockDelay
}

// verdict is what an acquisition of one name would do at now, decided
// without changing the name but for what any call may do (dropping grants
// whose lock delay ended and dead waiters, and taking the request's
// capacity while nobody holds or waits).
type verdict struct {
	e *entry
	// mine is the caller's live grant, renewed when the request fits.
	mine *grant
	// refusal is the answer when the request does not fit; zero when it
	// fits.
	refusal store.AcquireResult
	refused bool
	// none: a renewal of a token the caller does not hold, refused without
	// a place in the queue.
	none bool
}

func (v verdict) fits() bool { return !v.refused }

// decide decides req, whose shares store.CheckShares let through, at now.
// Called with s.mu held.
func (s *Store) decide(req store.AcquireRequest, now time.Time) (verdict, error) {
	capacity, weight := req.CapacityOrDefault(), req.WeightOrDefault()
	e := s.entry(req.Name)
	e.sweep(now, s.lockDelay)
	mine := e.grants[req.Holder]
	if req.Token != 0 && (mine == nil || !mine.live(now) || mine.token != req.Token) {
		return verdict{none: true}, nil
	}
	if capacity != e.cap() {
		if e.queue.pruneAll(now) {
			s.changes.Publish(req.Name, store.Change{})
		}
		if len(e.grants) > 0 || e.queue.len() > 0 {
			return verdict{}, &store.CapacityError{Name: req.Name, Have: e.cap(), Asked: capacity}
		}
		e.capacity = capacity
	}
	if mine != nil && mine.live(now) {
		return verdict{e: e, mine: mine}, nil
	}
	if e.queue.pruneHead(now) {
		s.changes.Publish(req.Name, store.Change{})
	}
	refuse := func(retryAt time.Time, lease store.Lease) (verdict, error) {
		return verdict{e: e, refused: true, refusal: store.AcquireResult{Lease: lease, RetryAt: retryAt.Round(0)}}, nil
	}
	switch {
	case mine != nil: // in its lock delay: it keeps its weight, and the holder waits as anyone would
		return refuse(mine.expires.Add(s.lockDelay), store.Lease{})
	case now.Before(e.delayedUntil):
		return refuse(e.delayedUntil, store.Lease{})
	case e.used+weight > e.cap():
		return refuse(e.freeAt(now, s.lockDelay), e.first(req.Name, now))
	case !e.queue.fits(req.Waiter, now, e.cap()-e.used-weight):
		return refuse(time.Time{}, store.Lease{})
	case len(e.grants) >= req.MaxHoldersOrDefault():
		return verdict{}, &store.HolderLimitError{Name: req.Name, Limit: req.MaxHoldersOrDefault()}
	}
	return verdict{e: e}, nil
}

// refuse queues req's waiter, if any, on v's name, or refreshes its place.
// Called with s.mu held.
func (s *Store) refuse(req store.AcquireRequest, v verdict, now time.Time) {
	waiterTTL := req.WaiterTTL
	if waiterTTL <= 0 {
		waiterTTL = store.DefaultWaiterTTL
	}
	v.e.queue.enqueue(req.Waiter, req.WeightOrDefault(), now.Add(waiterTTL), now)
}

// apply grants req, which fits (v), for the term: it renews the caller's
// grant (token 0), or grants anew under token, which is above every token
// issued before (s.highest starts at the previous run's token bound, so
// tokens keep increasing after a name was forgotten and across a restart)
// and never below the clock in microseconds, so that they do without
// persistence too. Called with s.mu held, the bounds reserved.
func (s *Store) apply(req store.AcquireRequest, v verdict, t term, token uint64) store.Lease {
	e := v.e
	if mine := v.mine; mine != nil {
		revalued := !req.KeepValue && !bytes.Equal(mine.value, req.Value)
		if revalued {
			mine.value = bytes.Clone(req.Value)
		}
		mine.ttl, mine.expires = t.ttl, t.expires
		s.attach(mine, req.Name, t.session)
		e.usedUntil = e.lastEnd(s.lockDelay)
		e.queue.dequeue(req.Waiter)
		if revalued {
			s.changes.Publish(req.Name, store.Change{})
		}
		return mine.lease(req.Name)
	}
	e.queue.dequeue(req.Waiter)
	s.highest, e.lastToken = token, token
	g := &grant{holder: req.Holder, token: token, weight: req.WeightOrDefault(), value: bytes.Clone(req.Value), ttl: t.ttl, expires: t.expires}
	s.attach(g, req.Name, t.session)
	if e.grants == nil {
		e.grants = map[string]*grant{}
	}
	e.grants[req.Holder] = g
	e.used += g.weight
	e.usedUntil = e.lastEnd(s.lockDelay)
	s.changes.Publish(req.Name, store.Change{Granted: token})
	return g.lease(req.Name)
}

// AcquireGroup implements store.Leases in one state change: every member
// is decided as Acquire would decide it alone, then all are granted, or
// none and the group is queued on every member.
func (s *Store) AcquireGroup(ctx context.Context, req store.GroupRequest) (store.GroupResult, error) {
	if err := ctx.Err(); err != nil {
		return store.GroupResult{}, err
	}
	if err := store.CheckGroup(req); err != nil {
		return store.GroupResult{}, fmt.Errorf("memstore: %w", err)
	}
	if wait := s.quarantineEnd.Sub(s.clock.Now()); wait > 0 {
		return store.GroupResult{}, &store.QuarantineError{RetryAfter: wait.Truncate(time.Millisecond) + time.Millisecond}
	}
	for {
		res, written, err := s.acquireGroup(req)
		if written == nil {
			return res, err
		}
		if err := waitWrite(ctx, written); err != nil {
			return store.GroupResult{}, err
		}
	}
}

// acquireGroup is one attempt of AcquireGroup, as acquire is of Acquire.
func (s *Store) acquireGroup(req store.GroupRequest) (store.GroupResult, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.sweepIfDue(now)
	t, err := s.termOf(req.Session, req.SessionOwner, req.TTL, now)
	if err != nil {
		return store.GroupResult{}, nil, fmt.Errorf("memstore: acquire group of %q in session %s: %w", req.Members[0].Name, req.Session, err)
	}
	verdicts := make([]verdict, len(req.Members))
	refused, fresh := false, 0
	for i := range req.Members {
		v, err := s.decide(req.Request(i), now)
		if err != nil {
			return store.GroupResult{}, nil, err
		}
		verdicts[i] = v
		refused = refused || v.refused
		if v.mine == nil {
			fresh++
		}
	}
	if refused {
		res := store.GroupResult{Members: make([]store.AcquireResult, len(verdicts))}
		requeueIfSplit(req.Waiter, verdicts, now)
		for i, v := range verdicts {
			s.refuse(req.Request(i), v, now)
			res.Members[i] = v.refusal
			if v.fits() {
				res.Members[i].Acquired = true
			}
		}
		return res, nil, nil
	}
	first := max(s.highest+1, clockToken(now))
	if written, err := s.reserve(now, t.span(now, s.lockDelay), first+uint64(fresh)); written != nil || err != nil {
		return store.GroupResult{}, written, err
	}
	res := store.GroupResult{Acquired: true, Leases: make([]store.Lease, len(verdicts))}
	for i, v := range verdicts {
		token := uint64(0)
		if v.mine == nil {
			token = max(s.highest+1, clockToken(now))
		}
		res.Leases[i] = s.apply(req.Request(i), v, t, token)
	}
	return res, nil, nil
}

// requeueIfSplit takes a group's waiter out of every member's queue when it
// is queued on some but not all of them (a place whose deadline passed
// counts as none, dropped or not), so that it queues again at the
// back of all: a place that timed out on one member (its refreshes failed)
// while it lived on another would otherwise put two groups in opposite
// orders in two queues, each waiting for the other for ever. At the back
// of every queue, the group is the newest waiter of each, in one order
// with every other waiter.
func requeueIfSplit(waiter string, verdicts []verdict, now time.Time) {
	if waiter == "" {
		return
	}
	queued := 0
	for _, v := range verdicts {
		if v.e.queue.has(waiter, now) {
			queued++
		}
	}
	if queued == 0 || queued == len(verdicts) {
		return
	}
	for _, v := range verdicts {
		v.e.queue.dequeue(waiter)
	}
}

// ReleaseGroup implements store.Leases in one state change.
func (s *Store) ReleaseGroup(ctx context.Context, holder string, leases []store.GroupLease) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	released := make([]bool, len(leases))
	for i, l := range leases {
		if l.Claim != "" {
			if e, ok := s.names[l.Name]; !ok || e.grants[holder] == nil || string(e.grants[holder].value) != l.Claim {
				continue // renewed since by another acquisition of the holder
			}
		}
		released[i] = s.release(l.Name, holder, l.Token, now)
	}
	return released, nil
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
	if !ok {
		return store.Lease{}, nil, store.ErrLeaseNotHeld
	}
	g := e.grants[holder]
	if g == nil || !g.live(now) || g.token != token {
		return store.Lease{}, nil, store.ErrLeaseNotHeld
	}
	if g.session != "" {
		return store.Lease{}, nil, store.ErrLeaseInSession
	}
	if written, err := s.reserve(now, ttl+s.lockDelay, 0); written != nil || err != nil {
		return store.Lease{}, written, err
	}
	g.ttl, g.expires = ttl, now.Add(ttl)
	e.usedUntil = e.lastEnd(s.lockDelay)
	return g.lease(name), nil, nil
}

// Release implements store.Leases.
func (s *Store) Release(ctx context.Context, name, holder string, token uint64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.release(name, holder, token, s.clock.Now()), nil
}

// release ends (holder, token)'s grant of name, if it holds it. Called
// with s.mu held.
func (s *Store) release(name, holder string, token uint64, now time.Time) bool {
	e, ok := s.names[name]
	if !ok {
		return false
	}
	g := e.grants[holder]
	if g == nil || !g.live(now) || g.token != token {
		return false
	}
	delete(e.grants, holder)
	e.used -= g.weight
	e.usedUntil = later(now, e.lastEnd(s.lockDelay))
	s.changes.Publish(name, store.Change{Released: token})
	return true
}

// Dequeue implements store.Leases.
func (s *Store) Dequeue(ctx context.Context, name, waiter string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.names[name]; ok && e.queue.dequeue(waiter) {
		s.changes.Publish(name, store.Change{})
	}
	return nil
}

// describeHolders fills d's Held, Lease and Holders from the live grants.
func describeHolders(d *store.Description, holders []store.Lease) {
	d.Holders = holders
	if len(holders) > 0 {
		d.Held, d.Lease = true, holders[0]
	}
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
		return store.Description{LastToken: s.tokenFloor(now), Capacity: 1}, nil
	}
	if e.queue.pruneAll(now) {
		s.changes.Publish(name, store.Change{})
	}
	d := store.Description{LastToken: e.lastToken, Capacity: e.cap(), Waiters: e.queue.len(), WaitingWeight: e.queue.weight()}
	if d.LastToken == 0 {
		d.LastToken = s.tokenFloor(now)
	}
	e.sweep(now, s.lockDelay)
	describeHolders(&d, e.leases(name, now))
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
		page.Leases = append(page.Leases, s.names[name].leases(name, now)...)
	}
	return page, nil
}

// Changes implements store.Notifier. Every change is announced in process,
// which costs nothing while nobody listens.
func (s *Store) Changes(name string) *store.Changes {
	sub := s.changes.Subscribe(name, 1, fanout.Replace)
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
		out[i].Capacity = 1
		if e, ok := s.names[name]; ok {
			e.sweep(now, s.lockDelay)
			out[i].Capacity = e.cap()
			describeHolders(&out[i], e.leases(name, now))
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
		s.changes.Publish(name, store.Change{})
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
