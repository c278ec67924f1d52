package storemodel

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Model is the lease rules of package store as plain data and plain
// loops: no clock of its own (every call takes now), no index, no cache,
// nothing lazy. What a store decides at random (tokens, session ids) the
// caller passes in, taken from the store's answer; Check verifies them
// against the rules instead (a fresh token above every earlier one of its
// name).
//
// A waiter is gone at its deadline, a grant is live before its end and
// keeps its weight until its end plus the lock delay, an attached grant
// ends when its session does: each is evaluated at every call, so the
// model never holds anything a store may drop lazily. The zero value is
// not usable; call New.
type Model struct {
	lockDelay time.Duration
	names     map[string]*name
	sessions  map[string]*session
}

// name is one name's state.
type name struct {
	// capacity is the name's capacity: 1 until a grant or a queued waiter
	// gives it another. It matters only while anyone holds the name (a
	// lock delay included) or waits for it: then a request must ask for
	// it; otherwise the name takes the request's.
	capacity int64
	// grants are the holders' grants, one a holder, live or in their lock
	// delay, in the order they were granted.
	grants []*grant
	// queue are the waiters in arrival order; one whose deadline passed is
	// gone (dropped by sweep before every use).
	queue []*waiter
	// lastToken is the last token issued for the name (0: none yet).
	lastToken uint64
}

type grant struct {
	holder string
	token  uint64
	weight int64
	value  []byte
	// ttl and expires are the grant's own, for a grant without a
	// session; an attached grant takes both from its session.
	ttl     time.Duration
	expires time.Time
	session string
	// since is when the grant was last made or renewed: the earliest a
	// store that learns a session's expiry lazily may report as its end.
	since time.Time
}

type waiter struct {
	id       string
	weight   int64
	deadline time.Time
}

type session struct {
	id, owner string
	ttl       time.Duration
	expires   time.Time
	closed    bool
}

// New returns an empty model of a store with the given lock delay.
func New(lockDelay time.Duration) *Model {
	return &Model{lockDelay: lockDelay, names: map[string]*name{}, sessions: map[string]*session{}}
}

// ErrInvalid stands for any refusal of a request's arguments (a TTL that is
// not positive, a weight above the capacity, a group naming a name twice):
// stores word those errors as they like.
var ErrInvalid = errors.New("invalid request")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// end is when g stops being live: its session's expiry, or its own.
func (m *Model) end(g *grant) time.Time {
	if g.session != "" {
		return m.sessions[g.session].expires
	}
	return g.expires
}

func (m *Model) live(g *grant, now time.Time) bool { return now.Before(m.end(g)) }

func (m *Model) ttl(g *grant) time.Duration {
	if g.session != "" {
		return m.sessions[g.session].ttl
	}
	return g.ttl
}

func (m *Model) lease(n string, g *grant) store.Lease {
	return store.Lease{Name: n, Holder: g.holder, Token: g.token, Value: bytes.Clone(g.value), TTL: m.ttl(g),
		ExpiresAt: m.end(g), Weight: g.weight, Session: g.session}
}

// state returns name n, swept at now: the grants whose lock delay ended
// and the waiters whose deadline passed are gone.
func (m *Model) state(n string, now time.Time) *name {
	s := m.names[n]
	if s == nil {
		s = &name{capacity: 1}
		m.names[n] = s
	}
	s.grants = slices.DeleteFunc(s.grants, func(g *grant) bool { return !now.Before(m.end(g).Add(m.lockDelay)) })
	s.queue = slices.DeleteFunc(s.queue, func(w *waiter) bool { return !now.Before(w.deadline) })
	return s
}

func (s *name) grantOf(holder string) *grant {
	for _, g := range s.grants {
		if g.holder == holder {
			return g
		}
	}
	return nil
}

func (s *name) used() int64 {
	var sum int64
	for _, g := range s.grants {
		sum += g.weight
	}
	return sum
}

func (s *name) place(id string) int {
	return slices.IndexFunc(s.queue, func(w *waiter) bool { return w.id == id })
}

func (s *name) dequeue(id string) bool {
	i := s.place(id)
	if i < 0 {
		return false
	}
	s.queue = slices.Delete(s.queue, i, i+1)
	return true
}

// enqueue queues the waiter at the back, or moves its deadline if it is
// queued (keeping its place and the weight it came with). A name nobody
// holds or waits for takes the waiter's capacity (capacity checked it).
func (s *name) enqueue(id string, weight, capacity int64, deadline time.Time) {
	s.capacity = capacity
	if i := s.place(id); i >= 0 {
		s.queue[i].deadline = deadline
		return
	}
	s.queue = append(s.queue, &waiter{id: id, weight: weight, deadline: deadline})
}

// sessionAt returns session id of owner if it is live at now.
func (m *Model) sessionAt(id, owner string, now time.Time) (*session, error) {
	ss := m.sessions[id]
	switch {
	case ss == nil:
		return nil, store.ErrSessionNotFound
	case ss.owner != owner:
		return nil, store.ErrSessionNotOwned
	case ss.closed:
		return nil, store.ErrSessionClosed
	case !now.Before(ss.expires):
		return nil, store.ErrSessionExpired
	}
	return ss, nil
}

// one is a single name's part of a request, as a group takes it too.
type one struct {
	name, holder     string
	capacity, weight int64
	waiter           string
	waiterTTL        time.Duration
	maxHolders       int
	token            uint64
	value            []byte
	keepValue        bool
	ttl              time.Duration // the grant's own (unused with a session)
	session          string
}

func single(req store.AcquireRequest) one {
	return one{name: req.Name, holder: req.Holder, capacity: req.CapacityOrDefault(), weight: req.WeightOrDefault(),
		waiter: req.Waiter, waiterTTL: req.WaiterTTL, maxHolders: req.MaxHoldersOrDefault(), token: req.Token,
		value: req.Value, keepValue: req.KeepValue, ttl: req.TTL, session: req.Session}
}

// decision is what one request does to its name.
type decision int

const (
	grantIt  decision = iota // a fresh grant
	renewIt                  // the holder's live grant, renewed
	refuseIt                 // refused (queued, if it waits)
	ignoreIt                 // a Token that is not held: refused, not queued
)

// decide decides r at now, changing nothing. A refusal comes with the
// answer a store gives.
func (m *Model) decide(r one, now time.Time) (decision, store.AcquireResult, error) {
	s := m.state(r.name, now)
	mine := s.grantOf(r.holder)
	mineLive := mine != nil && m.live(mine, now)
	if r.token != 0 && (!mineLive || mine.token != r.token) {
		return ignoreIt, store.AcquireResult{}, nil
	}
	if r.capacity != s.capacity && (len(s.grants) > 0 || len(s.queue) > 0) {
		return 0, store.AcquireResult{}, &store.CapacityError{Name: r.name, Have: s.capacity, Asked: r.capacity}
	}
	if mineLive {
		return renewIt, store.AcquireResult{}, nil
	}
	if mine != nil {
		// In its lock delay: the holder's one grant keeps its weight, and
		// the holder may have no other.
		return refuseIt, store.AcquireResult{RetryAt: m.end(mine).Add(m.lockDelay)}, nil
	}
	if s.used()+r.weight > r.capacity {
		return refuseIt, store.AcquireResult{Lease: m.firstToEnd(r.name, s, now), RetryAt: m.nextFree(s, now)}, nil
	}
	// The live waiters ahead (every one, for a caller not queued) must fit
	// beside it; one that does not wait is refused while anyone waits.
	ahead := int64(0)
	for _, w := range s.queue {
		if r.waiter != "" && w.id == r.waiter {
			break
		}
		if r.waiter == "" {
			return refuseIt, store.AcquireResult{}, nil
		}
		ahead += w.weight
	}
	if s.used()+ahead+r.weight > r.capacity {
		return refuseIt, store.AcquireResult{}, nil
	}
	if len(s.grants) >= r.maxHolders {
		return 0, store.AcquireResult{}, &store.HolderLimitError{Name: r.name, Limit: r.maxHolders}
	}
	return grantIt, store.AcquireResult{}, nil
}

// firstToEnd is the live grant that ends first (the earliest granted of
// those that end together), or a zero lease.
func (m *Model) firstToEnd(n string, s *name, now time.Time) store.Lease {
	var first *grant
	for _, g := range s.grants {
		if m.live(g, now) && (first == nil || m.end(g).Before(m.end(first))) {
			first = g
		}
	}
	if first == nil {
		return store.Lease{}
	}
	return m.lease(n, first)
}

// FirstToEnd are the live grants of n that end first at now: a refusal
// may name any of them.
func (m *Model) FirstToEnd(n string, now time.Time) []store.Lease {
	s := m.state(n, now)
	var out []store.Lease
	first := m.firstToEnd(n, s, now)
	for _, g := range s.grants {
		if m.live(g, now) && m.end(g).Equal(first.ExpiresAt) {
			out = append(out, m.lease(n, g))
		}
	}
	return out
}

// nextFree is the earliest end of a live grant or of a lock delay.
func (m *Model) nextFree(s *name, now time.Time) time.Time {
	var at time.Time
	for _, g := range s.grants {
		end := m.end(g)
		if !now.Before(end) {
			end = end.Add(m.lockDelay)
		}
		if at.IsZero() || end.Before(at) {
			at = end
		}
	}
	return at
}

// apply grants or renews r, which decide let through: a fresh grant takes
// token.
func (m *Model) apply(r one, d decision, token uint64, now time.Time) store.Lease {
	s := m.state(r.name, now)
	if r.waiter != "" {
		s.dequeue(r.waiter)
	}
	g := s.grantOf(r.holder)
	if d == grantIt {
		g = &grant{holder: r.holder, token: token, weight: r.weight, value: bytes.Clone(r.value)}
		s.grants = append(s.grants, g)
		s.capacity, s.lastToken = r.capacity, token
	} else if !r.keepValue {
		g.value = bytes.Clone(r.value)
	}
	g.session, g.since = r.session, now
	if r.session == "" {
		g.ttl, g.expires = r.ttl, now.Add(r.ttl)
	}
	return m.lease(r.name, g)
}

// waiterDeadline is when a waiter queued at now with ttl leaves.
func waiterDeadline(ttl time.Duration, now time.Time) time.Time {
	if ttl <= 0 {
		ttl = store.DefaultWaiterTTL
	}
	return now.Add(ttl)
}

// checkShares refuses a capacity or weight out of range.
func checkShares(n string, capacity, weight int64) error {
	if capacity > store.MaxCapacity || weight > capacity {
		return invalid("%q: weight %d, capacity %d", n, weight, capacity)
	}
	return nil
}

// Acquire is store.Leases.Acquire at now; a fresh grant takes token.
func (m *Model) Acquire(now time.Time, req store.AcquireRequest, token uint64) (store.AcquireResult, error) {
	if req.TTL <= 0 && req.Session == "" {
		return store.AcquireResult{}, invalid("ttl %s", req.TTL)
	}
	r := single(req)
	if err := checkShares(r.name, r.capacity, r.weight); err != nil {
		return store.AcquireResult{}, err
	}
	if req.Session != "" {
		if _, err := m.sessionAt(req.Session, req.SessionOwner, now); err != nil {
			return store.AcquireResult{}, err
		}
	}
	d, res, err := m.decide(r, now)
	switch {
	case err != nil || d == ignoreIt:
		return res, err
	case d == refuseIt:
		if r.waiter != "" {
			m.state(r.name, now).enqueue(r.waiter, r.weight, r.capacity, waiterDeadline(r.waiterTTL, now))
		}
		return res, nil
	}
	return store.AcquireResult{Acquired: true, Lease: m.apply(r, d, token, now)}, nil
}

// AcquireGroup is store.Leases.AcquireGroup at now, in one state change;
// the fresh grants take tokens[i] (member i's), when there is one.
func (m *Model) AcquireGroup(now time.Time, req store.GroupRequest, tokens []uint64) (store.GroupResult, error) {
	if err := store.CheckGroup(req); err != nil {
		return store.GroupResult{}, invalid("%v", err)
	}
	rs := make([]one, len(req.Members))
	for i := range req.Members {
		rs[i] = single(req.Request(i))
		if err := checkShares(rs[i].name, rs[i].capacity, rs[i].weight); err != nil {
			return store.GroupResult{}, err
		}
	}
	if req.Session != "" {
		if _, err := m.sessionAt(req.Session, req.SessionOwner, now); err != nil {
			return store.GroupResult{}, err
		}
	}
	ds := make([]decision, len(rs))
	answers := make([]store.AcquireResult, len(rs))
	refused := false
	for i, r := range rs {
		d, res, err := m.decide(r, now)
		if err != nil {
			return store.GroupResult{}, err
		}
		ds[i], answers[i] = d, res
		if d == refuseIt {
			refused = true
		} else {
			answers[i].Acquired = true
		}
	}
	if refused {
		if req.Waiter != "" {
			m.queueGroup(rs, req.Waiter, now)
		}
		return store.GroupResult{Members: answers}, nil
	}
	res := store.GroupResult{Acquired: true, Leases: make([]store.Lease, len(rs))}
	for i, r := range rs {
		token := uint64(0)
		if i < len(tokens) {
			token = tokens[i]
		}
		res.Leases[i] = m.apply(r, ds[i], token, now)
	}
	return res, nil
}

// queueGroup queues a refused group's waiter on every member: where it is
// queued on some members but not all (its place lapsed on the others), it
// leaves every queue first and queues again at the back of all.
func (m *Model) queueGroup(rs []one, waiter string, now time.Time) {
	queued := 0
	for _, r := range rs {
		if m.state(r.name, now).place(waiter) >= 0 {
			queued++
		}
	}
	if queued > 0 && queued < len(rs) {
		for _, r := range rs {
			m.state(r.name, now).dequeue(waiter)
		}
	}
	for _, r := range rs {
		m.state(r.name, now).enqueue(waiter, r.weight, r.capacity, waiterDeadline(r.waiterTTL, now))
	}
}

// Release is store.Leases.Release at now.
func (m *Model) Release(now time.Time, n, holder string, token uint64) bool {
	s := m.state(n, now)
	g := s.grantOf(holder)
	if g == nil || !m.live(g, now) || g.token != token {
		return false
	}
	s.grants = slices.DeleteFunc(s.grants, func(o *grant) bool { return o == g })
	return true
}

// ReleaseEnded is a release of holder's grant of n under token, attached
// to a session that ended, by a store that has not learned of the end yet
// (see Subject.LazySessions): it reports whether that is what it can be
// (the grant is in its lock delay, or gone with it, holder holding no
// other), and drops the grant.
func (m *Model) ReleaseEnded(now time.Time, n, holder string, token uint64) bool {
	s := m.state(n, now)
	g := s.grantOf(holder)
	switch {
	case g == nil:
		return true
	case g.session == "" || m.live(g, now) || g.token != token:
		return false
	}
	s.grants = slices.DeleteFunc(s.grants, func(o *grant) bool { return o == g })
	return true
}

// ReleaseGroup is store.Leases.ReleaseGroup at now: a lease with a claim
// is released only while its value is that claim.
func (m *Model) ReleaseGroup(now time.Time, holder string, leases []store.GroupLease) []bool {
	out := make([]bool, len(leases))
	for i, l := range leases {
		if l.Claim != "" {
			if g := m.state(l.Name, now).grantOf(holder); g == nil || string(g.value) != l.Claim {
				continue
			}
		}
		out[i] = m.Release(now, l.Name, holder, l.Token)
	}
	return out
}

// Renew is store.Leases.Renew at now.
func (m *Model) Renew(now time.Time, n, holder string, token uint64, ttl time.Duration) (store.Lease, error) {
	if ttl <= 0 {
		return store.Lease{}, invalid("ttl %s", ttl)
	}
	s := m.state(n, now)
	g := s.grantOf(holder)
	switch {
	case g == nil || !m.live(g, now) || g.token != token:
		return store.Lease{}, store.ErrLeaseNotHeld
	case g.session != "":
		return store.Lease{}, store.ErrLeaseInSession
	}
	g.ttl, g.expires, g.since = ttl, now.Add(ttl), now
	return m.lease(n, g), nil
}

// Dequeue is store.Leases.Dequeue at now.
func (m *Model) Dequeue(now time.Time, n, waiter string) {
	m.state(n, now).dequeue(waiter)
}

// RefreshWaiters is store.Leases.RefreshWaiters at now.
func (m *Model) RefreshWaiters(now time.Time, n string, waiters []string, ttl time.Duration) error {
	if ttl <= 0 {
		return invalid("ttl %s", ttl)
	}
	s := m.state(n, now)
	for _, id := range waiters {
		if i := s.place(id); i >= 0 {
			s.queue[i].deadline = now.Add(ttl)
		}
	}
	return nil
}

// Describe is store.Leases.Describe at now, but for LastToken: the last
// token the model saw issued for n, or 0 when it saw none (a store then
// reports a floor of its own; Check checks it). Capacity is 1 for a name
// that nobody holds (a lock delay included) or waits for, as
// store.Description says.
func (m *Model) Describe(now time.Time, n string) store.Description {
	s := m.state(n, now)
	d := store.Description{Capacity: 1, LastToken: s.lastToken, Waiters: len(s.queue)}
	if m.Occupied(n, now) {
		d.Capacity = s.capacity
	}
	for _, w := range s.queue {
		d.WaitingWeight += w.weight
	}
	d.Holders = m.holders(n, s, now)
	if len(d.Holders) > 0 {
		d.Held, d.Lease = true, d.Holders[0]
	}
	return d
}

// holders are the live grants of n as leases, in token order.
func (m *Model) holders(n string, s *name, now time.Time) []store.Lease {
	var out []store.Lease
	for _, g := range s.grants {
		if m.live(g, now) {
			out = append(out, m.lease(n, g))
		}
	}
	slices.SortFunc(out, func(a, b store.Lease) int { return cmpUint(a.Token, b.Token) })
	return out
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// List is store.Leases.List at now.
func (m *Model) List(now time.Time, prefix, cursor string, limit int) store.ListPage {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	var held []string
	for n := range m.names {
		if strings.HasPrefix(n, prefix) && (cursor == "" || n > cursor) && len(m.holders(n, m.state(n, now), now)) > 0 {
			held = append(held, n)
		}
	}
	slices.Sort(held)
	var page store.ListPage
	if len(held) > limit {
		held = held[:limit]
		page.Next = held[limit-1]
	}
	for _, n := range held {
		page.Leases = append(page.Leases, m.holders(n, m.state(n, now), now)...)
	}
	return page
}

// CreateSession is store.Sessions.CreateSession at now; the session takes
// id.
func (m *Model) CreateSession(now time.Time, owner string, ttl time.Duration, id string) (store.Session, error) {
	if ttl <= 0 {
		return store.Session{}, invalid("session ttl %s", ttl)
	}
	ss := &session{id: id, owner: owner, ttl: ttl, expires: now.Add(ttl)}
	m.sessions[id] = ss
	return ss.view(), nil
}

func (ss *session) view() store.Session {
	return store.Session{ID: ss.id, Owner: ss.owner, TTL: ss.ttl, ExpiresAt: ss.expires}
}

// RenewSession is store.Sessions.RenewSession at now: its attached grants
// live on with it.
func (m *Model) RenewSession(now time.Time, id, owner string) (store.Session, error) {
	ss, err := m.sessionAt(id, owner, now)
	if err != nil {
		return store.Session{}, err
	}
	ss.expires = now.Add(ss.ttl)
	return ss.view(), nil
}

// CloseSession is store.Sessions.CloseSession at now: its grants are
// released (no lock delay); closing a closed session succeeds.
func (m *Model) CloseSession(now time.Time, id, owner string) error {
	ss, err := m.sessionAt(id, owner, now)
	if errors.Is(err, store.ErrSessionClosed) {
		return nil
	}
	if err != nil {
		return err
	}
	for n := range m.names {
		s := m.state(n, now)
		s.grants = slices.DeleteFunc(s.grants, func(g *grant) bool { return g.session == id })
	}
	ss.closed = true
	return nil
}

// DescribeSession is store.Sessions.DescribeSession at now.
func (m *Model) DescribeSession(now time.Time, id, owner string) (store.SessionDescription, error) {
	ss, err := m.sessionAt(id, owner, now)
	if err != nil {
		return store.SessionDescription{}, err
	}
	d := store.SessionDescription{Session: ss.view()}
	for n := range m.names {
		if slices.ContainsFunc(m.state(n, now).grants, func(g *grant) bool { return g.session == id }) {
			d.Names = append(d.Names, n)
		}
	}
	slices.Sort(d.Names)
	return d, nil
}

// Occupied reports whether anyone holds n at now, a lock delay included,
// or waits for it.
func (m *Model) Occupied(n string, now time.Time) bool {
	s := m.state(n, now)
	return len(s.grants) > 0 || len(s.queue) > 0
}

// Since is when holder's grant of n was last made or renewed (zero when it
// holds none): a store that learns a session's expiry lazily may report an
// attached grant's end as early as that.
func (m *Model) Since(n, holder string) time.Time {
	if s := m.names[n]; s != nil {
		if g := s.grantOf(holder); g != nil {
			return g.since
		}
	}
	return time.Time{}
}

// LastToken is the last token the model saw issued for n, 0 if none.
func (m *Model) LastToken(n string) uint64 {
	if s := m.names[n]; s != nil {
		return s.lastToken
	}
	return 0
}
