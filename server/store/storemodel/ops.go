package storemodel

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind is what an operation calls.
type Kind uint8

// The operations: every method of store.Leases and store.Sessions that
// changes or reads lease state, and the passing of time.
const (
	Acquire Kind = iota
	AcquireGroup
	Release
	ReleaseGroup
	Renew
	Dequeue
	RefreshWaiters
	List
	CreateSession
	RenewSession
	CloseSession
	DescribeSession
	Describe
	Advance
	numKinds
)

var kindNames = [numKinds]string{"acquire", "group", "release", "release-group", "renew", "dequeue", "refresh-waiters",
	"list", "create-session", "renew-session", "close-session", "describe-session", "describe", "advance"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// TokenRef says which token an operation names, resolved when it runs (the
// store chose the tokens): so that any subsequence of operations still
// means what it meant.
type TokenRef uint8

const (
	// NoToken is 0 (an Acquire that is no renewal).
	NoToken TokenRef = iota
	// Mine is the token of the holder's grant of the name (live or in its
	// lock delay), else the last one issued for the name.
	Mine
	// LastIssued is the last token issued for the name (often another
	// holder's).
	LastIssued
	// FirstIssued is the first token issued for the name in the run.
	FirstIssued
)

func (r TokenRef) String() string {
	return [...]string{"none", "mine", "last", "first"}[r]
}

// Member is one name of an operation, with its share and token.
type Member struct {
	Name     string
	Capacity int64 // 0 means 1
	Weight   int64 // 0 means 1
	Token    TokenRef
}

// Op is one operation of a sequence. Names, holders, waiters and owners
// are literal; sessions are slots (the store makes their ids) and tokens
// references (the store makes them), resolved when the operation runs.
type Op struct {
	Kind Kind
	// Members: the name (one) or the group's names.
	Members []Member
	Holder  string
	// TTL: the lease's, the renewal's, the session's or the waiters'
	// refresh; D: how long Advance lets pass.
	TTL time.Duration
	D   time.Duration
	// Session is a slot (1-based; 0: none); Owner the session's owner at
	// its creation; Intruder asks as another owner.
	Session  int
	Owner    string
	Intruder bool
	// Waiter (empty: the caller does not wait) and WaiterTTL; Waiters
	// are RefreshWaiters' list.
	Waiter    string
	WaiterTTL time.Duration
	Waiters   []string
	Value     string
	KeepValue bool
	// Claim is a group's (stored as its leases' value), or, for
	// ReleaseGroup, the claim each lease is released under.
	Claim string
	// MaxHolders: 0 means the default.
	MaxHolders int
	// List's arguments.
	Prefix, Cursor string
	Limit          int
}

func (op Op) String() string {
	var b strings.Builder
	b.WriteString(op.Kind.String())
	b.WriteString("(")
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	for _, m := range op.Members {
		s := m.Name
		if m.Capacity != 0 || m.Weight != 0 {
			s += fmt.Sprintf(" %d/%d", max(m.Weight, 1), max(m.Capacity, 1))
		}
		if m.Token != NoToken {
			s += " token=" + m.Token.String()
		}
		parts = append(parts, s)
	}
	if op.Holder != "" {
		add("holder=%s", op.Holder)
	}
	if op.TTL != 0 {
		add("ttl=%s", op.TTL)
	}
	if op.D != 0 {
		add("%s", op.D)
	}
	if op.Session != 0 {
		add("session=s%d", op.Session)
	}
	if op.Kind == CreateSession {
		add("owner=%q", op.Owner)
	}
	if op.Intruder {
		add("as another owner")
	}
	if op.Waiter != "" {
		add("waiter=%s/%s", op.Waiter, op.WaiterTTL)
	}
	if op.Waiters != nil {
		add("waiters=%v", op.Waiters)
	}
	if op.Value != "" {
		add("value=%q", op.Value)
	}
	if op.KeepValue {
		add("keep-value")
	}
	if op.Claim != "" {
		add("claim=%q", op.Claim)
	}
	if op.MaxHolders != 0 {
		add("max-holders=%d", op.MaxHolders)
	}
	if op.Kind == List {
		add("prefix=%q cursor=%q limit=%d", op.Prefix, op.Cursor, op.Limit)
	}
	b.WriteString(strings.Join(parts, ", "))
	b.WriteString(")")
	return b.String()
}

// Config is what a sequence draws from: small sets, so that operations
// collide. Durations are chosen so that the store's clock can keep them:
// a fake clock any, real time only ends that fall mid-way between two
// Advances (see RealTime).
type Config struct {
	// Names, each with the capacity most requests give it.
	Names      []string
	Capacities []int64
	Holders    []string
	// Sessions is the number of session slots; Owners the owners they
	// are created with.
	Sessions int
	Owners   []string
	// LockDelays: each sequence runs on a store with one of them.
	LockDelays []time.Duration
	// TTLs of leases and renewals, of waiters (0 is the default), of
	// sessions, and of RefreshWaiters.
	TTLs, WaiterTTLs, SessionTTLs, RefreshTTLs []time.Duration
	// Advances are the steps of time; none: time never advances (a store
	// on real time, whose TTLs are long).
	Advances []time.Duration
	// Groups: AcquireGroup and ReleaseGroup are drawn too.
	Groups bool
	// Invalid is the chance (per mille) of an argument out of range.
	Invalid int
}

// FakeClock is a Config for a store on a fake clock: short TTLs, lock
// delays, and steps of time that land on expiries exactly.
var FakeClock = Config{
	Names:       []string{"a", "ab", "b"},
	Capacities:  []int64{1, 2, 3},
	Holders:     []string{"h1", "h2", "h3"},
	Sessions:    2,
	Owners:      []string{"", "o1"},
	LockDelays:  []time.Duration{0, time.Second, 2500 * time.Millisecond},
	TTLs:        []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 30 * time.Second},
	WaiterTTLs:  []time.Duration{0, time.Second, 3 * time.Second, 10 * time.Second},
	SessionTTLs: []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second},
	RefreshTTLs: []time.Duration{time.Second, 5 * time.Second},
	Advances:    []time.Duration{time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second},
	Groups:      true,
	Invalid:     10,
}

// LongTTLs is a Config for a store on real time without waiting: every
// TTL outlasts the sequence, and time never advances, so nothing expires;
// leases end by release and close.
var LongTTLs = Config{
	Names:       FakeClock.Names,
	Capacities:  FakeClock.Capacities,
	Holders:     FakeClock.Holders,
	Sessions:    FakeClock.Sessions,
	Owners:      FakeClock.Owners,
	LockDelays:  []time.Duration{0, time.Second},
	TTLs:        []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute},
	WaiterTTLs:  []time.Duration{time.Minute, 2 * time.Minute},
	SessionTTLs: []time.Duration{time.Minute, 2 * time.Minute},
	RefreshTTLs: []time.Duration{time.Minute, 3 * time.Minute},
	Groups:      true,
	Invalid:     10,
}

// RealTime is a Config for a store on real time whose Advance sleeps:
// with unit u (Check's Window), every TTL is a whole number of units and
// a half, and the lock delay a whole number, so that each end falls in the
// middle of a window between two Advances, never near an operation.
func RealTime(u time.Duration) Config {
	halves := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n)*u + u/2
		}
		return out
	}
	return Config{
		Names:       FakeClock.Names,
		Capacities:  FakeClock.Capacities,
		Holders:     FakeClock.Holders,
		Sessions:    FakeClock.Sessions,
		Owners:      FakeClock.Owners,
		LockDelays:  []time.Duration{0, u},
		TTLs:        append(halves(0, 1), time.Hour),
		WaiterTTLs:  append(halves(0, 2), time.Hour),
		SessionTTLs: halves(0, 1, 3),
		RefreshTTLs: halves(0, 1),
		Advances:    []time.Duration{u},
		Groups:      true,
	}
}

// Source is what a sequence is drawn from: a seeded generator, or a fuzz
// input's bytes.
type Source interface {
	// IntN returns a number in [0, n); n > 0.
	IntN(n int) int
}

// Seeded returns the Source of seed.
func Seeded(seed uint64) Source {
	return rand.New(rand.NewPCG(seed, seed^0x5eed)) //nolint:gosec // a sequence must replay from its seed: no secret here
}

// Bytes is a Source reading a fuzz input: each draw takes a byte (two for
// n > 256), and an exhausted input draws zeros.
type Bytes struct{ b []byte }

// NewBytes returns the Source of b.
func NewBytes(b []byte) *Bytes { return &Bytes{b: b} }

// IntN implements Source.
func (s *Bytes) IntN(n int) int {
	v := 0
	for range 1 + btoi(n > 256) {
		v <<= 8
		if len(s.b) > 0 {
			v |= int(s.b[0])
			s.b = s.b[1:]
		}
	}
	return v % n
}

// Empty reports whether the input is used up (never for nil).
func (s *Bytes) Empty() bool { return s != nil && len(s.b) == 0 }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Sequence is a run's lock delay and operations.
type Sequence struct {
	LockDelay time.Duration
	// Observe describes the names an operation names, and its session,
	// after it: a check at every step, which also lets a store that
	// drops dead waiters as it reads do so more often than its callers
	// would (without it, only Describe operations read).
	Observe bool
	Ops     []Op
}

// Generate draws a sequence of n operations from src (n < 0: until a
// Bytes source is used up, at most -n).
func (c Config) Generate(src Source, n int) Sequence {
	g := gen{c: c, src: src}
	seq := Sequence{LockDelay: pick(src, c.LockDelays), Observe: src.IntN(2) == 0}
	bytes, _ := src.(*Bytes)
	for i := 0; n < 0 && i < -n && !bytes.Empty() || i < n; i++ {
		seq.Ops = append(seq.Ops, g.op())
	}
	return seq
}

func pick[T any](src Source, from []T) T {
	return from[src.IntN(len(from))]
}

type gen struct {
	c   Config
	src Source
}

// chance is true with probability permille/1000.
func (g gen) chance(permille int) bool { return g.src.IntN(1000) < permille }

// The operations' weights, in Kind order.
var weights = [numKinds]int{
	Acquire: 34, AcquireGroup: 8, Release: 10, ReleaseGroup: 3, Renew: 6, Dequeue: 3, RefreshWaiters: 4, List: 2,
	CreateSession: 5, RenewSession: 9, CloseSession: 3, DescribeSession: 2, Describe: 5, Advance: 16,
}

func (g gen) kind() Kind {
	total := 0
	for k, w := range weights {
		if g.allowed(Kind(k)) {
			total += w
		}
	}
	r := g.src.IntN(total)
	for k, w := range weights {
		if !g.allowed(Kind(k)) {
			continue
		}
		if r < w {
			return Kind(k)
		}
		r -= w
	}
	panic("unreachable")
}

func (g gen) allowed(k Kind) bool {
	switch k {
	case AcquireGroup, ReleaseGroup:
		return g.c.Groups
	case Advance:
		return len(g.c.Advances) > 0
	}
	return true
}

// member draws a name and a share of it: mostly the name's own capacity.
func (g gen) member() Member {
	i := g.src.IntN(len(g.c.Names))
	m := Member{Name: g.c.Names[i], Capacity: g.c.Capacities[i]}
	if g.chance(80) {
		m.Capacity = pick(g.src, g.c.Capacities)
	}
	m.Weight = 1 + int64(g.src.IntN(int(m.Capacity)))
	if g.chance(g.c.Invalid) {
		m.Weight = m.Capacity + 1
	}
	return m
}

func (g gen) token(none int) TokenRef {
	if g.chance(none) {
		return NoToken
	}
	return pick(g.src, []TokenRef{Mine, Mine, Mine, Mine, LastIssued, FirstIssued})
}

func (g gen) session(permille int) int {
	if g.chance(permille) {
		return 1 + g.src.IntN(g.c.Sessions)
	}
	return 0
}

func (g gen) waiter(op *Op) {
	switch r := g.src.IntN(100); {
	case r < 45:
	case r < 95:
		op.Waiter = op.Holder
	default:
		op.Waiter = pick(g.src, g.c.Holders) + "'"
	}
	if op.Waiter != "" {
		op.WaiterTTL = pick(g.src, g.c.WaiterTTLs)
	}
}

func (g gen) ttl() time.Duration {
	if g.chance(g.c.Invalid) {
		return 0
	}
	return pick(g.src, g.c.TTLs)
}

func (g gen) maxHolders() int {
	switch r := g.src.IntN(100); {
	case r < 5:
		return 1
	case r < 15:
		return 2
	}
	return 0
}

func (g gen) op() Op {
	op := Op{Kind: g.kind()}
	switch op.Kind {
	case Acquire:
		m := g.member()
		m.Token = g.token(900)
		op.Members = []Member{m}
		op.Holder = pick(g.src, g.c.Holders)
		op.TTL = g.ttl()
		op.Session = g.session(250)
		op.Intruder = op.Session != 0 && g.chance(50)
		g.waiter(&op)
		op.Value = pick(g.src, []string{"", "v1", "v2"})
		op.KeepValue = g.chance(150)
		op.MaxHolders = g.maxHolders()
	case AcquireGroup:
		op.Members = g.distinct(1 + g.src.IntN(3))
		if g.chance(g.c.Invalid) {
			op.Members = append(op.Members, op.Members[0])
		}
		op.Holder = pick(g.src, g.c.Holders)
		op.TTL = g.ttl()
		op.Session = g.session(250)
		op.Intruder = op.Session != 0 && g.chance(50)
		g.waiter(&op)
		op.Claim = pick(g.src, []string{"", "c1", "c2"})
		op.MaxHolders = g.maxHolders()
	case Release, Renew:
		op.Members = []Member{{Name: pick(g.src, g.c.Names), Token: g.token(0)}}
		op.Holder = pick(g.src, g.c.Holders)
		if op.Kind == Renew {
			op.TTL = g.ttl()
		}
	case ReleaseGroup:
		op.Members = g.distinct(1 + g.src.IntN(3))
		for i := range op.Members {
			op.Members[i] = Member{Name: op.Members[i].Name, Token: g.token(0)}
		}
		op.Holder = pick(g.src, g.c.Holders)
		op.Claim = pick(g.src, []string{"", "", "c1", "c2"})
	case Dequeue:
		op.Members = []Member{{Name: pick(g.src, g.c.Names)}}
		op.Waiter = pick(g.src, g.c.Holders)
	case Describe:
		op.Members = []Member{{Name: pick(g.src, g.c.Names)}}
	case RefreshWaiters:
		op.Members = []Member{{Name: pick(g.src, g.c.Names)}}
		op.Waiters = []string{}
		for _, h := range g.c.Holders {
			if g.chance(500) {
				op.Waiters = append(op.Waiters, h)
			}
		}
		op.TTL = pick(g.src, g.c.RefreshTTLs)
	case List:
		op.Prefix = pick(g.src, []string{"", "", "a", "b"})
		op.Cursor = pick(g.src, append([]string{"", ""}, g.c.Names...))
		op.Limit = g.src.IntN(3)
	case CreateSession:
		op.Session = 1 + g.src.IntN(g.c.Sessions)
		op.Owner = pick(g.src, g.c.Owners)
		op.TTL = pick(g.src, g.c.SessionTTLs)
	case RenewSession, CloseSession, DescribeSession:
		op.Session = 1 + g.src.IntN(g.c.Sessions)
		op.Intruder = g.chance(50)
	case Advance:
		op.D = pick(g.src, g.c.Advances)
	}
	return op
}

// distinct draws n members of distinct names (fewer if there are fewer
// names).
func (g gen) distinct(n int) []Member {
	var out []Member
	for range n {
		m := g.member()
		dup := false
		for _, o := range out {
			dup = dup || o.Name == m.Name
		}
		if !dup {
			out = append(out, m)
		}
	}
	return out
}
