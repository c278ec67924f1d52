package linearize

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// ClockSlack is how much the store's clock and the recorder's may disagree
// about when a lease ends: the store may end a lease up to this much before
// the recorder's clock says its TTL ran out, and the model still accepts
// the grant that follows.
const ClockSlack = 100 * time.Millisecond

// Kind is what an operation did.
type Kind int

const (
	// Acquire asks for a lease (TryAcquire, or one member of a group).
	Acquire Kind = iota
	// Release gives a lease back.
	Release
)

// Outcome is what an operation answered.
type Outcome int

const (
	// Unknown is the outcome of an operation that failed or never answered:
	// it may or may not have taken effect.
	Unknown Outcome = iota
	// Granted: the acquisition was granted (Output.Token, Output.Weight).
	Granted
	// Refused: the acquisition was answered without a grant.
	Refused
	// Released: the release was answered, true or false (Output.Released).
	Released
)

// Input is one operation on a name as its caller asked it, with the times
// (since the history's start) it was called and returned: porcupine
// linearizes an operation anywhere in between, and the model needs them to
// bound when a lease may have ended.
type Input struct {
	Kind   Kind
	Name   string
	Holder string
	// Token is the lease a release gives back.
	Token uint64
	// Capacity, Weight and TTL are an acquisition's.
	Capacity, Weight int64
	TTL              time.Duration
	Call, Return     time.Duration
}

// Output is what the operation answered: a grant's token, weight and TTL
// (zero for the one asked for).
type Output struct {
	Outcome Outcome
	Token   uint64
	Weight  int64
	TTL     time.Duration
	// Released is a release's answer.
	Released bool
}

// lease is a grant the model knows of that no release has ended.
type lease struct {
	holder string
	token  uint64
	weight int64
	// ends is the earliest the lease may end by expiry: the call time of
	// its grant (or last renewal) plus its TTL.
	ends time.Duration
}

// issue is a token of a fresh grant and its holder.
type issue struct {
	token  uint64
	holder string
}

// state is one name's state as the model knows it. Steps never modify a
// state: they return a new one.
type state struct {
	// issued are the tokens of the fresh grants, in the order of the
	// linearization, which is increasing order: the last is the highest.
	issued []issue
	leases []lease
}

func (s state) highest() uint64 {
	if len(s.issued) == 0 {
		return 0
	}
	return s.issued[len(s.issued)-1].token
}

// Model is a porcupine model of one name (partition histories by name):
// a lock with fencing of capacity Input.Capacity, whose leases end at their
// release or by expiry. It judges only what the history proves:
//
//   - A grant's token must be above every token granted before it in the
//     linearization, unless it is a renewal: the token of an earlier grant
//     to the same holder (a holder that asks again keeps its token).
//   - A grant's weight plus the weights of the other leases granted before
//     it that cannot have ended must fit in the capacity. A lease cannot
//     have ended if no release of it was linearized before, and the grant's
//     return time is below the lease's grant call time plus its TTL (the
//     one answered; minus ClockSlack).
//   - Refusals and acquisitions with unknown outcome change nothing;
//     releases, whatever they answered or if they never did, end the lease.
//
// Why a correct store's history passes: the store's own order of
// operations is a linearization (each took effect at one moment between its
// call and return), and in it each step above is allowed. A store hands out
// a fresh grant's token above every token it issued before, the model's
// included, and keeps the token on a renewal. A lease the model still
// counts was granted (or last renewed) at some moment after its call, so
// its TTL cannot run out before call + TTL, and a later grant took effect
// before its own return: if that return is below call + TTL, the lease was
// still alive, unless released (a release the store performed before is
// linearized before, and the model dropped the lease). So the store counted
// it too, and the weights fit; that holds for a lease of the grant's own
// holder under another token as well, since a holder that asks while it
// holds is renewed, not granted anew. Everything the model does not know it leaves out, which
// only allows more: an unknown or refused acquisition may have granted a
// lease (that would hold capacity, and raise the floor of tokens), and a
// release that answered false or nothing may have ended one (dropping it
// allows more than keeping it).
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByName,
		Init:      func() any { return state{} },
		Step: func(st, in, out any) (bool, any) {
			return step(st.(state), in.(Input), out.(Output))
		},
		Equal:             func(a, b any) bool { return equal(a.(state), b.(state)) },
		DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
		DescribeState:     func(st any) string { return st.(state).String() },
	}
}

func step(s state, in Input, out Output) (bool, state) {
	if in.Kind == Release {
		return true, s.without(in.Holder, in.Token)
	}
	if out.Outcome != Granted {
		return true, s
	}
	weight := out.Weight
	if weight <= 0 {
		weight = max(in.Weight, 1)
	}
	ttl := out.TTL
	if ttl <= 0 {
		ttl = in.TTL
	}
	next := s.without(in.Holder, out.Token)
	if out.Token <= s.highest() {
		i, found := slices.BinarySearchFunc(s.issued, out.Token, func(is issue, t uint64) int { return cmp.Compare(is.token, t) })
		if !found || s.issued[i].holder != in.Holder {
			return false, s // a token going back, or another holder's
		}
	} else {
		next.issued = append(slices.Clip(next.issued), issue{token: out.Token, holder: in.Holder})
	}
	held := weight
	for _, l := range next.leases {
		if in.Return+ClockSlack < l.ends {
			held += l.weight
		}
	}
	if held > max(in.Capacity, 1) {
		return false, s
	}
	next.leases = append(slices.Clip(next.leases), lease{holder: in.Holder, token: out.Token, weight: weight, ends: in.Call + ttl})
	return true, next
}

// changesNothing reports whether op is an acquisition that was refused or
// whose outcome is unknown: one the model lets through in any state and
// that leaves the state as it was. Leaving such operations out of a
// history changes nothing to whether it is linearizable (put one back at
// its call, in any linearization of the rest), and spares porcupine the
// search: a fault leaves hundreds of failed retries, each of which could
// otherwise be linearized anywhere after its call, and an illegal history
// would then be searched for long past any timeout.
func changesNothing(op porcupine.Operation) bool {
	return op.Input.(Input).Kind == Acquire && op.Output.(Output).Outcome != Granted
}

// without is s with the lease of holder under token ended.
func (s state) without(holder string, token uint64) state {
	i := slices.IndexFunc(s.leases, func(l lease) bool { return l.holder == holder && l.token == token })
	if i < 0 {
		return s
	}
	return state{issued: s.issued, leases: slices.Delete(slices.Clone(s.leases), i, i+1)}
}

func equal(a, b state) bool {
	return slices.Equal(a.issued, b.issued) && slices.Equal(a.leases, b.leases)
}

func (s state) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "highest token %d; leases:", s.highest())
	for _, l := range s.leases {
		fmt.Fprintf(&b, " %s#%d×%d (may end from %s)", l.holder, l.token, l.weight, l.ends)
	}
	return b.String()
}

func describe(in Input, out Output) string {
	var what string
	switch in.Kind {
	case Acquire:
		what = fmt.Sprintf("acquire(%s, %s, weight %d of %d, ttl %s)", in.Name, in.Holder, max(in.Weight, 1), max(in.Capacity, 1), in.TTL)
	case Release:
		what = fmt.Sprintf("release(%s, %s#%d)", in.Name, in.Holder, in.Token)
	}
	var answer string
	switch out.Outcome {
	case Unknown:
		answer = "unknown"
	case Granted:
		answer = fmt.Sprintf("granted #%d×%d", out.Token, out.Weight)
	case Refused:
		answer = "refused"
	case Released:
		answer = fmt.Sprint(out.Released)
	}
	return fmt.Sprintf("%s → %s [%s, %s]", what, answer, in.Call, returned(in, out))
}

func returned(in Input, out Output) string {
	if out.Outcome == Unknown {
		return "∞"
	}
	return in.Return.String()
}

func partitionByName(history []porcupine.Operation) [][]porcupine.Operation {
	byName := map[string][]porcupine.Operation{}
	var names []string
	for _, op := range history {
		n := op.Input.(Input).Name
		if _, ok := byName[n]; !ok {
			names = append(names, n)
		}
		byName[n] = append(byName[n], op)
	}
	parts := make([][]porcupine.Operation, 0, len(names))
	for _, n := range names {
		parts = append(parts, byName[n])
	}
	return parts
}
