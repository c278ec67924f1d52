package redisstore

import (
	"bytes"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/server/store"
)

// One script per state transition; each file's header lists its KEYS, ARGV
// and reply, and each reply has exactly one decoder below, so that the
// position of a field is known in one place. Script.Run sends EVALSHA and
// falls back to EVAL on NOSCRIPT (a restarted or flushed Redis), so loading
// them at start-up is only a warm-up.
var (
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/renew.lua
	renewSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/dequeue.lua
	dequeueSrc string
	// acquireGroupSrc and releaseGroupSrc take many names of one slot at
	// once, with acquire.lua's and release.lua's code as functions
	// (acquireOne, releaseOne).
	//go:embed scripts/acquire_group.lua
	acquireGroupSrc string
	//go:embed scripts/release_group.lua
	releaseGroupSrc string
	//go:embed scripts/describe.lua
	describeSrc string
	//go:embed scripts/watch.lua
	watchSrc string
	//go:embed scripts/refresh_waiters.lua
	refreshWaitersSrc string
	//go:embed scripts/start.lua
	startSrc string
	//go:embed scripts/quarantine.lua
	quarantineSrc string
	// holdersSrc goes in front of every script that reads grant records or
	// queue weights: their encoding lives in it alone (acquire and release
	// take its decoders after their uncontended paths: holdersDecoders).
	// grantsSrc, which reads
	// all of a name's grants, goes in front of describe and watch, and into
	// acquire at grantsLine, after its uncontended path: a script's local
	// functions are made at each call, so that path makes as few as it can.
	//go:embed scripts/holders.lua
	holdersSrc string
	//go:embed scripts/grants.lua
	grantsSrc string
	// markerSrc, the data-loss check, goes into acquire and session at
	// markerLine: they must check the marker alike.
	//go:embed scripts/marker.lua
	markerSrc string

	dequeueScript        = redis.NewScript(dequeueSrc)
	describeScript       = redis.NewScript(holdersSrc + grantsSrc + attachedSrc + describeSrc)
	watchScript          = redis.NewScript(holdersSrc + grantsSrc + attachedSrc + watchSrc)
	refreshWaitersScript = redis.NewScript(refreshWaitersSrc)
	startScript          = redis.NewScript(startSrc)
	quarantineScript     = redis.NewScript(quarantineSrc)

	// sharedScripts are the scripts every store runs as they are; each
	// store has its own copy of the others (storeScripts).
	sharedScripts = []*redis.Script{
		dequeueScript, describeScript, watchScript, refreshWaitersScript, quarantineScript, sessionScript, settleScript,
	}
)

// storeScripts are the scripts of one cycle (acquire, renew, release),
// which run far more often than the others: the settings every call of a
// store would pass are constants of the store's copy instead (a line put
// in front, settingsLine), since each argument costs Redis a string at
// every call, and converting it a number. Stores of one configuration
// share one script in Redis' cache.
type storeScripts struct {
	acquire, renew, release *redis.Script
	// acquireGroup and releaseGroup are a group's: acquire's and
	// release's code, for several names of one slot in one call.
	acquireGroup, releaseGroup *redis.Script
}

// settingsLine declares the constants of storeScripts: the quarantine, the
// lock delay, the idle retention and how long a lease key outlives attached
// grants' bounds (ms), and the store's pub/sub channel.
const settingsLine = "local QUARANTINE, LOCK_DELAY, IDLE, KEEP, CHANNEL = %d, %d, %d, %d, %s\n"

func newStoreScripts(quarantineMS, lockDelayMS, idleMS, keepMS int64, channel string) storeScripts {
	settings := fmt.Sprintf(settingsLine, quarantineMS, lockDelayMS, idleMS, keepMS, luaString(channel))
	return storeScripts{
		acquire:      redis.NewScript(settings + holdersHead + withGrants(withMarker(withDecoders(acquireSrc)))),
		renew:        redis.NewScript(settings + holdersSrc + renewSrc),
		release:      redis.NewScript(settings + holdersHead + withDecoders(releaseSrc)),
		acquireGroup: redis.NewScript(settings + holdersHead + acquireGroupCode),
		releaseGroup: redis.NewScript(settings + holdersHead + releaseGroupCode),
	}
}

// acquireOneLine is the line of acquire.lua after which its code decides
// one name (acquire_one, in acquire_group.lua); the part before it reads
// the clock and checks the data-loss marker, once a script. The group
// scripts take the other parts at their lines: acquireHeadLine,
// acquireOneAt and releaseOneAt.
const (
	acquireOneLine  = "-- (acquire_one starts here: scripts.go)\n"
	acquireHeadLine = "-- (acquire.lua's head goes here: scripts.go)\n"
	acquireOneAt    = "-- (acquire_one goes here: scripts.go)\n"
	releaseOneAt    = "-- (release.lua goes here as release_one: scripts.go)\n"
)

// acquireGroupCode and releaseGroupCode are the group scripts but for the
// settings line and holders.lua's head: acquire.lua's head, then its code
// that decides one name as acquire_one(KEYS, ARGV, MODE, CUR), and release.lua
// as release_one(KEYS, ARGV), whose arguments stand for the globals each
// script reads, a member's own. Each local function is made only where
// its definition runs: release_one only where a group undoes grants.
var acquireGroupCode, releaseGroupCode = func() (string, string) {
	head, body := splitAt(acquireSrc, acquireOneLine)
	acquireOne := "local function acquire_one(KEYS, ARGV, MODE, CUR)\n" + withGrants(withDecoders(body)) + "end\n"
	releaseOne := "local function release_one(KEYS, ARGV)\n" + withDecoders(releaseSrc) + "end\n"
	group := insertAt(insertAt(acquireGroupSrc, acquireHeadLine, withMarker(head)), acquireOneAt, acquireOne)
	return insertAt(group, releaseOneAt, releaseOne), insertAt(releaseGroupSrc, releaseOneAt, releaseOne)
}()

// luaString is s as a Lua string literal that reads back as s whatever its
// bytes (a key prefix may hold any but braces): every byte but letters,
// digits and ":_-./" as a three-digit decimal escape.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := range len(s) {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(":_-./", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03d", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// all are the scripts New loads. A group's are loaded at their first use
// instead (EVALSHA falls back to EVAL): every script loaded into Redis
// makes every call of any script cost it a few more instructions (0.5 to
// 1.5% of a cycle with the group scripts loaded, in
// scripts/callgrind-cycle.sh's runs), which a deployment that takes no
// groups need not pay.
func (s storeScripts) all() []*redis.Script { return []*redis.Script{s.acquire, s.renew, s.release} }

// grantsLine is the line of acquire.lua that grants.lua replaces, up to its
// grantsEnd line, and attachedLine the one attached.lua replaces;
// markerLine the line of acquire.lua and session.lua that marker.lua
// replaces; decodersLine the line of acquire.lua and release.lua, after
// their uncontended paths, that holders.lua's decoders replace (the part
// after its decodersFrom line): each local function a script defines costs
// Redis about 400 instructions at every call (more with many upvalues), and
// those paths need none of them.
const (
	grantsLine   = "-- (grants.lua goes here: scripts.go)\n"
	grantsEnd    = "-- (acquire.lua's part of grants.lua ends here: scripts.go)\n"
	attachedLine = "  -- (attached.lua goes here: scripts.go)\n"
	markerLine   = "-- (marker.lua goes here: scripts.go)\n"
	decodersLine = "-- (holders.lua's decoders go here: scripts.go)\n"
	decodersFrom = "-- (holders.lua's decoders follow: scripts.go)\n"
)

// holdersHead is holders.lua up to its decoders, holdersDecoders the rest.
var holdersHead, holdersDecoders = splitAt(holdersSrc, decodersFrom)

// withDecoders puts holders.lua's decoders into src at decodersLine.
func withDecoders(src string) string { return insertAt(src, decodersLine, holdersDecoders) }

// splitAt returns src before and after line, which it must hold once.
func splitAt(src, line string) (string, string) {
	if strings.Count(src, line) != 1 {
		panic("redisstore: a script has not one " + strings.TrimSpace(line) + " line")
	}
	before, after, _ := strings.Cut(src, line)
	return before, after
}

// grantsHead is the part of grants.lua that acquire.lua uses.
var grantsHead, _ = splitAt(grantsSrc, grantsEnd)

// withGrants puts acquire.lua's part of grants.lua into src at grantsLine,
// and attached.lua at attachedLine: in the block that settles attached
// grants, so that the calls that need not settle define none of its
// functions.
func withGrants(src string) string {
	return insertAt(insertAt(src, grantsLine, grantsHead), attachedLine, attachedSrc)
}

// withMarker puts marker.lua into src at markerLine.
func withMarker(src string) string { return insertAt(src, markerLine, markerSrc) }

// insertAt replaces line in src, which must hold it once, with code.
func insertAt(src, line, code string) string {
	if strings.Count(src, line) != 1 {
		panic("redisstore: a script has not one " + strings.TrimSpace(line) + " line")
	}
	return strings.Replace(src, line, code, 1)
}

// acquireReply is acquire.lua's reply.
type acquireReply struct {
	// lost reports that this call found Redis' data lost.
	lost bool
	// quarantined refuses the call for retryAfter.
	quarantined bool
	retryAfter  time.Duration
	// capacity, when not 0, refuses the call: the name has this capacity.
	capacity int64
	// holderLimit, when not 0, refuses the call: the name carries this
	// many grants, its cap.
	holderLimit int
	// need, when not empty, refuses the call until it brings proofs of
	// these sessions.
	need []string
	// detached refuses the call: the session was detached from the name
	// after the attach the call carried; it attaches again.
	detached bool
	result   store.AcquireResult
}

// decodeAcquire reads acquire.lua's reply to a call asking for asked (the
// grant the caller would get: name, holder, value, ttl, weight, session;
// no token, no expiry):
//
//	{-1, lost, retry_after_ms}
//	{-2, lost, capacity}
//	{-3, lost, max_holders}
//	{-4, lost, session_id...}
//	{2, lost, token, expires_ms}   granted as asked
//	{status, lost, holder, token, value, ttl_ms, expires_ms, retry_at_ms, weight, session}
func decodeAcquire(asked store.Lease, v any) (acquireReply, error) {
	r := newReplyReader("acquire", v)
	var a acquireReply
	status := r.int(0)
	a.lost = r.flag(1)
	switch status {
	case -1:
		a.quarantined = true
		a.retryAfter = time.Duration(r.int(2)) * time.Millisecond
		return a, r.err
	case -2:
		if a.capacity = r.int(2); a.capacity < 1 {
			r.fail(2, "capacity")
		}
		return a, r.err
	case -3:
		if a.holderLimit = int(r.int(2)); a.holderLimit < 1 {
			r.fail(2, "holder limit")
		}
		return a, r.err
	case -4:
		a.need = r.ids(2)
		return a, r.err
	case -5:
		a.detached = true
		return a, r.err
	case 2:
		a.result.Acquired = true
		a.result.Lease = asked
		if a.result.Lease.Token = r.token(2); a.result.Lease.Token == 0 {
			r.fail(2, "token, never 0")
		}
		a.result.Lease.ExpiresAt = time.UnixMilli(r.int(3))
		// A value of its own, as a long reply gives; the empty value is
		// nil, as the memory store has it.
		a.result.Lease.Value = nil
		if len(asked.Value) > 0 {
			a.result.Lease.Value = bytes.Clone(asked.Value)
		}
		return a, r.err
	}
	a.result.Acquired = status == 1
	a.result.Lease = r.lease(2, asked.Name)
	a.result.Lease.Weight = r.weight(8, a.result.Lease.Holder != "")
	a.result.Lease.Session = r.session(9, a.result.Lease.Holder != "")
	if a.result.Acquired && a.result.Lease.Holder == "" {
		r.fail(2, "the holder of the grant")
	}
	if at := r.int(7); at > 0 {
		a.result.RetryAt = time.UnixMilli(at)
	}
	if r.err == nil && status != 0 && status != 1 {
		r.err = fmt.Errorf("redisstore: acquire: unexpected script reply: status %d", status)
	}
	return a, r.err
}

// groupReply is acquire_group.lua's reply.
type groupReply struct {
	lost        bool
	quarantined bool
	retryAfter  time.Duration
	// member is the index (in the call's members) of the member that
	// failed the call: with capacity, holderLimit or detached, as in
	// acquireReply.
	member      int
	capacity    int64
	holderLimit int
	detached    bool
	need        []string
	// acquired: leases holds one lease a member; otherwise members holds
	// each member's answer.
	acquired bool
	leases   []store.Lease
	members  []store.AcquireResult
	// fresh[i] reports that leases[i] is a new grant, not a renewal.
	fresh []bool
}

// groupMemberElems is how many elements a member's answer takes in
// acquire_group.lua's refusal, and groupGrantElems in its grant.
const (
	groupMemberElems = 9
	groupGrantElems  = 3
)

// decodeAcquireGroup reads acquire_group.lua's reply to a call asking for
// asked (a member each, as the grant would be: name, holder, ttl, weight,
// session; no token, no expiry):
//
//	{-1, lost, retry_after_ms}
//	{-2, lost, i, capacity}
//	{-3, lost, i, max_holders}
//	{-4, lost, session_id...}
//	{-5, lost, i}
//	{1, lost, expires_ms, then per member: status, token, weight}
//	{0, lost, then per member: status, holder, token, value, ttl_ms, expires_ms, retry_at_ms, weight, session}
//
// with i a member's index from 1.
func decodeAcquireGroup(asked []store.Lease, v any) (groupReply, error) {
	r := newReplyReader("acquire group", v)
	var g groupReply
	status := r.int(0)
	g.lost = r.flag(1)
	member := func() int {
		i := r.int(2)
		if i < 1 || i > int64(len(asked)) {
			r.fail(2, "member index")
			return 0
		}
		return int(i - 1)
	}
	switch status {
	case -1:
		g.quarantined = true
		g.retryAfter = time.Duration(r.int(2)) * time.Millisecond
	case -2:
		g.member = member()
		g.capacity = r.capacity(3)
	case -3:
		g.member = member()
		if g.holderLimit = int(r.int(3)); g.holderLimit < 1 {
			r.fail(3, "holder limit")
		}
	case -4:
		g.need = r.ids(2)
	case -5:
		g.member = member()
		g.detached = true
	case 1:
		g.acquired = true
		if len(r.v) != 3+groupGrantElems*len(asked) {
			r.fail(len(r.v), fmt.Sprintf("a grant of %d members", len(asked)))
			return g, r.err
		}
		expires := time.UnixMilli(r.int(2))
		g.leases, g.fresh = make([]store.Lease, len(asked)), make([]bool, len(asked))
		for i, l := range asked {
			at := 3 + groupGrantElems*i
			switch r.int(at) {
			case 2:
				g.fresh[i] = true
			case 1:
			default:
				r.fail(at, "grant status")
			}
			if l.Token = r.token(at + 1); l.Token == 0 {
				r.fail(at+1, "token, never 0")
			}
			l.Weight = r.weight(at+2, true)
			l.ExpiresAt = expires
			g.leases[i] = l
		}
	case 0:
		if len(r.v) != 2+groupMemberElems*len(asked) {
			r.fail(len(r.v), fmt.Sprintf("a refusal of %d members", len(asked)))
			return g, r.err
		}
		g.members = make([]store.AcquireResult, len(asked))
		inTheWay := false
		for i, l := range asked {
			at := 2 + groupMemberElems*i
			m := &g.members[i]
			m.Acquired = r.flag(at)
			m.Lease = r.lease(at+1, l.Name)
			held := m.Lease.Holder != ""
			if m.Acquired && held {
				r.fail(at+1, "no holder for a member not in the way")
			}
			m.Lease.Weight = r.weight(at+7, held)
			m.Lease.Session = r.session(at+8, held)
			if t := r.int(at + 6); t > 0 {
				m.RetryAt = time.UnixMilli(t)
			}
			inTheWay = inTheWay || !m.Acquired
		}
		if !inTheWay && r.err == nil {
			r.fail(2, "a member in the way")
		}
	default:
		r.fail(0, "acquire group status")
	}
	return g, r.err
}

// decodeReleaseGroup reads release_group.lua's reply: an element per
// lease, as decodeRelease reads release.lua's. sessions[i] is the session
// of the i-th lease when it was attached to one (see release.lua).
func decodeReleaseGroup(n int, v any) (released []bool, sessions []string, err error) {
	r := newReplyReader("release group", v)
	if r.err == nil && len(r.v) != n {
		r.fail(len(r.v), fmt.Sprintf("%d releases", n))
	}
	if r.err != nil {
		return nil, nil, r.err
	}
	released, sessions = make([]bool, n), make([]string, n)
	for i, e := range r.v {
		if released[i], sessions[i], err = decodeRelease(e); err != nil {
			return nil, nil, fmt.Errorf("redisstore: release group: lease %d: %w", i, err)
		}
	}
	return released, sessions, nil
}

// decodeRenew reads renew.lua's reply: {0} when not held, {2} when attached
// to a session, else {1, holder, token, value, ttl_ms, expires_ms, weight}.
// Only {0} is ErrLeaseNotHeld: a reply that is none of them is an error,
// never a lost lease.
func decodeRenew(name string, v any) (store.Lease, error) {
	r := newReplyReader("renew", v)
	if len(r.v) == 1 && r.int(0) == 2 {
		return store.Lease{}, store.ErrLeaseInSession
	}
	if !r.flag(0) {
		if r.err != nil {
			return store.Lease{}, r.err
		}
		return store.Lease{}, store.ErrLeaseNotHeld
	}
	l := r.lease(1, name)
	if r.err == nil && l.Holder == "" {
		r.fail(1, "the holder of the renewed lease")
	}
	l.Weight = r.weight(6, true)
	return l, r.err
}

// decodeRelease reads release.lua's reply: 1 when released, the id of its
// session when it released an attached grant, else 0.
func decodeRelease(v any) (released bool, session string, err error) {
	if id, ok := v.(string); ok {
		if !validSessionID(id) {
			return false, "", replyErr("release", 0, v, "session id")
		}
		return true, id, nil
	}
	released, err = decodeFlag("release", v)
	return released, "", err
}

// decodeDequeue reads dequeue.lua's reply: 1 when the waiter was queued,
// else 0.
func decodeDequeue(v any) (bool, error) {
	return decodeFlag("dequeue", v)
}

// decodeRefresh reads refresh_waiters.lua's reply: how many deadlines moved.
func decodeRefresh(v any) (int, error) {
	n, err := decodeInt("refresh waiters", v)
	if err == nil && n < 0 {
		return 0, replyErr("refresh waiters", 0, v, "count")
	}
	return int(n), err
}

// decodeFlag reads a reply that is 1 or 0.
func decodeFlag(op string, v any) (bool, error) {
	n, err := decodeInt(op, v)
	if err == nil && n != 0 && n != 1 {
		return false, replyErr(op, 0, v, "1 or 0")
	}
	return n == 1, err
}

// decodeInt reads an integer reply, as replyReader.int reads element 0 of
// an array, without making one.
func decodeInt(op string, v any) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	return 0, replyErr(op, 0, v, "integer")
}

func replyErr(op string, i int, got any, want string) error {
	return fmt.Errorf("redisstore: %s: unexpected script reply: element %d is %T (%v), want %s", op, i, got, got, want)
}

// decodeWatch reads watch.lua's reply, per name {capacity, count, then
// seven elements per grant}, or {-4, session_id...}: the ids it returns. It
// fills out[i] for names[i].
func decodeWatch(names []string, v any, out []store.Description) ([]string, error) {
	if need, ok, err := decodeNeed("watch", v); ok {
		return need, err
	}
	r := newReplyReader("watch", v)
	at := 0
	for i, name := range names {
		if r.err != nil {
			break
		}
		out[i] = store.Description{Capacity: r.capacity(at)}
		at = r.holders(at+1, name, &out[i])
	}
	if r.err == nil && at != len(r.v) {
		return nil, fmt.Errorf("redisstore: watch: unexpected script reply: %d elements for %d names, %d read", len(r.v), len(names), at)
	}
	return nil, r.err
}

// decodeDescribe reads describe.lua's reply: {capacity, last_token,
// waiters, waiting_weight, count, then seven elements per grant}, or
// {-4, session_id...}: the ids it returns.
func decodeDescribe(name string, v any) (store.Description, []string, error) {
	if need, ok, err := decodeNeed("describe", v); ok {
		return store.Description{}, need, err
	}
	r := newReplyReader("describe", v)
	d := store.Description{Capacity: r.capacity(0)}
	d.LastToken = r.token(1)
	if d.Waiters = int(r.int(2)); d.Waiters < 0 {
		r.fail(2, "count")
	}
	if d.WaitingWeight = r.int(3); d.WaitingWeight < 0 {
		r.fail(3, "weight")
	}
	if at := r.holders(4, name, &d); r.err == nil && at != len(r.v) {
		r.fail(at, "the end of the reply")
	}
	return d, nil, r.err
}

// replyReader reads a script's array reply, remembering the first error.
type replyReader struct {
	op  string
	v   []any
	err error
}

// newReplyReader returns a reader by value, so that it can live on its
// caller's stack.
func newReplyReader(op string, v any) replyReader {
	r := replyReader{op: op}
	switch v := v.(type) {
	case []any:
		r.v = v
	default:
		r.err = fmt.Errorf("redisstore: %s: unexpected script reply %T (%v), want an array", op, v, v)
	}
	return r
}

func (r *replyReader) fail(i int, want string) {
	if r.err == nil {
		var got any
		if i < len(r.v) {
			got = r.v[i]
		}
		r.err = replyErr(r.op, i, got, want)
	}
}

// int reads an integer, or its decimal string: a script may pass a field it
// read on as it is, since converting it costs Redis more than the reply.
func (r *replyReader) int(i int) int64 {
	if i < len(r.v) {
		switch v := r.v[i].(type) {
		case int64:
			return v
		case string:
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	r.fail(i, "integer")
	return 0
}

// flag reads an integer that is 1 or 0.
func (r *replyReader) flag(i int) bool {
	n := r.int(i)
	if n != 0 && n != 1 {
		r.fail(i, "1 or 0")
	}
	return n == 1
}

func (r *replyReader) str(i int) string {
	if i < len(r.v) {
		if s, ok := r.v[i].(string); ok {
			return s
		}
	}
	r.fail(i, "string")
	return ""
}

// bytes reads a value; the empty value is nil, as the memory store has it.
// strs reads the strings from element i to the end.
func (r *replyReader) strs(i int) []string {
	var all []string
	for ; i < len(r.v); i++ {
		all = append(all, r.str(i))
	}
	return all
}

func (r *replyReader) bytes(i int) []byte {
	if s := r.str(i); s != "" {
		return []byte(s)
	}
	return nil
}

func (r *replyReader) token(i int) uint64 {
	s := r.str(i)
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		r.fail(i, "decimal token")
	}
	return t
}

// lease reads the five fields {holder, token, value, ttl_ms, expires_ms}
// that start at i: the zero Lease when holder is "". A lease's token is
// never 0.
func (r *replyReader) lease(i int, name string) store.Lease {
	holder := r.str(i)
	if holder == "" {
		return store.Lease{}
	}
	token := r.token(i + 1)
	if token == 0 {
		r.fail(i+1, "token, never 0")
	}
	return store.Lease{
		Name:      name,
		Holder:    holder,
		Token:     token,
		Value:     r.bytes(i + 2),
		TTL:       time.Duration(r.int(i+3)) * time.Millisecond,
		ExpiresAt: time.UnixMilli(r.int(i + 4)),
	}
}

// grantElems is how many elements a grant takes in describe's and watch's
// replies.
const grantElems = 7

// session reads a grant's session id: "" for none (always, without a
// holder), else one this store makes.
func (r *replyReader) session(i int, held bool) string {
	id := r.str(i)
	if id != "" && (!held || !validSessionID(id)) {
		r.fail(i, "session id")
	}
	return id
}

// ids reads the session ids from i to the end: at least one.
func (r *replyReader) ids(i int) []string {
	if i >= len(r.v) {
		r.fail(i, "session id")
		return nil
	}
	out := make([]string, 0, len(r.v)-i)
	for ; i < len(r.v); i++ {
		id := r.str(i)
		if !validSessionID(id) {
			r.fail(i, "session id")
		}
		out = append(out, id)
	}
	return out
}

// capacity reads a name's capacity, 1 .. store.MaxCapacity.
func (r *replyReader) capacity(i int) int64 {
	c := r.int(i)
	if c < 1 || c > store.MaxCapacity {
		r.fail(i, "capacity")
	}
	return c
}

// weight reads a grant's weight: at least 1 when held, else 0.
func (r *replyReader) weight(i int, held bool) int64 {
	w := r.int(i)
	if (held && w < 1) || (!held && w != 0) || w > store.MaxCapacity {
		r.fail(i, "weight")
	}
	return w
}

// holders reads a count at i and that many grants of seven elements
// {holder, token, value, ttl_ms, expires_ms, weight, session} after it into
// d's Holders (and Held and Lease), and returns the index after them.
func (r *replyReader) holders(i int, name string, d *store.Description) int {
	n := r.int(i)
	if n < 0 || n > int64(len(r.v)-i-1)/grantElems {
		r.fail(i, "count of grants")
		return len(r.v)
	}
	i++
	for range n {
		l := r.lease(i, name)
		if r.err == nil && l.Holder == "" {
			r.fail(i, "the holder of a grant")
		}
		l.Weight = r.weight(i+5, true)
		l.Session = r.session(i+6, true)
		d.Holders = append(d.Holders, l)
		i += grantElems
	}
	if len(d.Holders) > 0 {
		d.Held, d.Lease = true, d.Holders[0]
	}
	return i
}
