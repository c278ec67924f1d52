package redisstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Replies are built from fuzz bytes as trees of what go-redis returns for a
// script (RESP2): int64, string, []any and nil, plus a few values it never
// returns there (an error, a float, a bool) that a decoder must refuse too.
// Each node is one tag byte and its payload:
//
//	'i' int64 (8 bytes, big-endian)    'b' small int64 (1 byte, signed)
//	's' string (1 length byte, bytes)  't' decimal string of a uint64 (8 bytes)
//	'a' array (1 count byte, nodes)    'n' nil
//	'e' error                          'f' float64 (8 bytes)
//	'B' bool (1 byte)
//
// Input that runs out ends the current array; an unknown tag is nil.
type replyDecoder struct{ b []byte }

func (d *replyDecoder) byte() (byte, bool) {
	if len(d.b) == 0 {
		return 0, false
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c, true
}

func (d *replyDecoder) uint64() uint64 {
	var buf [8]byte
	n := copy(buf[:], d.b)
	d.b = d.b[n:]
	return binary.BigEndian.Uint64(buf[:])
}

func (d *replyDecoder) node(depth int) (any, bool) {
	tag, ok := d.byte()
	if !ok {
		return nil, false
	}
	switch tag {
	case 'i':
		return int64(d.uint64()), true
	case 'b':
		c, _ := d.byte()
		return int64(int8(c)), true
	case 's':
		n, _ := d.byte()
		s := d.b[:min(int(n), len(d.b))]
		d.b = d.b[len(s):]
		return string(s), true
	case 't':
		return strconv.FormatUint(d.uint64(), 10), true
	case 'a':
		n, _ := d.byte()
		arr := []any{}
		for range n {
			if depth > 8 {
				break
			}
			v, ok := d.node(depth + 1)
			if !ok {
				break
			}
			arr = append(arr, v)
		}
		return arr, true
	case 'e':
		return errors.New("ERR fuzzed"), true
	case 'f':
		return float64(d.uint64()) / 7, true
	case 'B':
		c, _ := d.byte()
		return c%2 == 1, true
	}
	return nil, true
}

// encodeReply is the inverse of replyDecoder, for seeds.
func encodeReply(v any) []byte {
	switch v := v.(type) {
	case int64:
		if v == int64(int8(v)) {
			return []byte{'b', byte(int8(v))}
		}
		return binary.BigEndian.AppendUint64([]byte{'i'}, uint64(v))
	case string:
		if len(v) > 255 {
			panic("seed string too long")
		}
		return append([]byte{'s', byte(len(v))}, v...)
	case []any:
		out := []byte{'a', byte(len(v))}
		for _, e := range v {
			out = append(out, encodeReply(e)...)
		}
		return out
	case nil:
		return []byte{'n'}
	}
	panic(fmt.Sprintf("no seed encoding of %T", v))
}

// replySeeds are the replies each script documents, and malformed ones;
// the malformed replies the decoders once read as answers are regression
// seeds in testdata/fuzz/FuzzDecodeReplies.
func replySeeds() []any {
	const at = int64(1_800_000_000_000)
	const sid = "0123456789abcdef0123456789abcdef"
	return []any{
		// acquire
		[]any{int64(-1), int64(1), int64(250)},
		[]any{int64(-2), int64(0), int64(5)},
		[]any{int64(-3), int64(1), int64(1024)},
		[]any{int64(-2), int64(0), int64(0)},
		[]any{int64(1), int64(0), "h", "42", "v", int64(1500), at, int64(0), int64(1), ""},
		[]any{int64(1), int64(0), "h", "42", "v", int64(1500), at, int64(0), int64(1), sid},
		[]any{int64(1), int64(0), "h", "42", "v", int64(1500), at, int64(0), int64(1), "not-an-id"},
		[]any{int64(1), int64(0), "h", "42", "v", int64(1500), at, int64(0), int64(1)},
		[]any{int64(1), int64(0), "h", "42", "v", int64(1500), at, int64(0), int64(0), ""},
		[]any{int64(0), int64(0), "h", "42", "", int64(1500), at, at, int64(3), sid},
		[]any{int64(0), int64(0), "", "", "", int64(0), int64(0), int64(0), int64(0), ""},
		[]any{int64(0), int64(0), "", "", "", int64(0), int64(0), int64(0), int64(0), sid},
		[]any{int64(0), int64(0), "", "", "", int64(0), int64(0), int64(0), int64(1), ""},
		[]any{int64(2), int64(0), "", "", "", int64(0), int64(0), int64(0), int64(0), ""},
		[]any{int64(3), int64(0), "42", at},
		[]any{int64(2), int64(0), "42", at},
		[]any{int64(2), int64(1), "42", at},
		[]any{int64(2), int64(0), "0", at},
		[]any{int64(2), int64(0), "42"},
		[]any{int64(2), int64(0), int64(42), at},
		[]any{int64(-4), int64(0), sid},
		[]any{int64(-4), int64(1), sid, sid},
		[]any{int64(-4), int64(0)},
		[]any{int64(-4), int64(0), "x"},
		[]any{int64(1), int64(0), "h"},
		[]any{int64(1), int64(0), "h", "x", "", int64(1), at, int64(0), int64(1), ""},
		"OK",
		nil,
		// renew
		[]any{int64(1), "h", "7", "v", int64(2000), at, int64(2)},
		[]any{int64(1), "h", "7", "v", int64(2000), at},
		[]any{int64(0)},
		[]any{int64(2)},
		[]any{int64(2), "h"},
		[]any{int64(1), "h"},
		// release, dequeue, refresh waiters
		int64(1), int64(0), int64(3), "1", sid,
		// describe and watch needing proofs
		[]any{int64(-4), sid},
		[]any{int64(-4)},
		// describe
		[]any{int64(1), "9", int64(2), int64(2), int64(0)},
		[]any{int64(5), "9", int64(0), int64(0), int64(1), "h", "9", "", int64(1000), at, int64(2), ""},
		[]any{int64(5), "9", int64(0), int64(0), int64(1), "h", "9", "", int64(1000), at, int64(2), sid},
		[]any{int64(5), "9", int64(0), int64(0), int64(1), "h", "9", "", int64(1000), at, int64(2)},
		[]any{int64(5), "9", int64(0), int64(0), int64(2), "h", "9", "", int64(1000), at, int64(2), ""},
		[]any{int64(1), int64(9), int64(0), int64(0), int64(0)},
		[]any{int64(1), "9", int64(0), int64(0), int64(1), "", "", "", int64(0), int64(0), int64(0), ""},
		// watch
		[]any{int64(1), int64(1), "h", "7", "v", int64(1000), at, int64(1), "", int64(1), int64(0)},
		[]any{int64(1), int64(1), "h", "7", "v", int64(1000), at, int64(1), ""},
		[]any{int64(1), int64(1), "h", "7", "v", int64(1000), at, int64(1)},
		[]any{int64(3), int64(2), "h", "7", "v", int64(1000), at, int64(1), sid, "i", "8", "", int64(1000), at, int64(2), ""},
		[]any{[]any{"h"}, "7", "v", int64(1000), at},
		// acquire detached
		[]any{int64(-5), int64(0)},
		// acquire group (of one, two or three members: the seeds run with
		// each count)
		[]any{int64(-2), int64(0), int64(1), int64(5)},
		[]any{int64(-2), int64(0), int64(2), int64(0)},
		[]any{int64(-3), int64(1), int64(1), int64(1024)},
		[]any{int64(-3), int64(0), int64(4), int64(1024)},
		[]any{int64(-5), int64(0), int64(1)},
		[]any{int64(-5), int64(0), int64(0)},
		[]any{int64(1), int64(0), at, int64(2), "42", int64(1)},
		[]any{int64(1), int64(1), at, int64(2), "42", int64(1), int64(1), "7", int64(3)},
		[]any{int64(1), int64(0), at, int64(2), "42", int64(1), int64(1), "7", int64(3), int64(2), "9", int64(1)},
		[]any{int64(1), int64(0), at, int64(3), "42", int64(1)},
		[]any{int64(1), int64(0), at, int64(2), "0", int64(1)},
		[]any{int64(0), int64(0), int64(0), "h", "42", "", int64(1500), at, at, int64(1), sid},
		[]any{int64(0), int64(0), int64(1), "", "", "", int64(0), int64(0), int64(0), int64(0), "",
			int64(0), "", "", "", int64(0), int64(0), int64(0), int64(0), ""},
		[]any{int64(0), int64(0), int64(1), "", "", "", int64(0), int64(0), int64(0), int64(0), ""},
		[]any{int64(0), int64(0), int64(1), "h", "42", "", int64(1500), at, at, int64(1), ""},
		// release group
		[]any{int64(1)},
		[]any{int64(1), int64(0)},
		[]any{int64(0), sid, int64(1)},
		[]any{int64(2), int64(1), int64(0)},
	}
}

// FuzzDecodeReplies feeds every decoder of script replies arbitrary reply
// shapes. None panics; each accepts exactly the replies its script
// documents (scripts/*.lua, restated below without the decoders' code) and
// decodes them field for field, and refuses every other with an error,
// never reading a malformed reply as an answer (decodeRenew's
// ErrLeaseNotHeld is an answer, not a refusal).
func FuzzDecodeReplies(f *testing.F) {
	for _, r := range replySeeds() {
		for names := range uint8(3) {
			f.Add(names, encodeReply(r))
		}
	}
	f.Fuzz(func(t *testing.T, names uint8, b []byte) {
		d := &replyDecoder{b: b}
		v, _ := d.node(0)

		a, err := decodeAcquire(fuzzAsked, v)
		if want, ok := acquireSpec(fuzzAsked, v); ok != (err == nil) {
			t.Fatalf("decodeAcquire(%#v) = %+v, %v; the reply is documented: %v", v, a, err, ok)
		} else if ok && !sameAcquire(a, want) {
			t.Fatalf("decodeAcquire(%#v) = %+v; want %+v", v, a, want)
		}

		l, err := decodeRenew("job", v)
		want, held, ok := renewSpec("job", v)
		inSession := ok && !held && isSessionReply(v)
		switch {
		case !ok && (err == nil || errors.Is(err, store.ErrLeaseNotHeld) || errors.Is(err, store.ErrLeaseInSession)):
			t.Fatalf("decodeRenew(%#v) = %+v, %v; want a reply error", v, l, err)
		case inSession && !errors.Is(err, store.ErrLeaseInSession):
			t.Fatalf("decodeRenew(%#v) = %+v, %v; want ErrLeaseInSession", v, l, err)
		case inSession:
		case ok && !held && !errors.Is(err, store.ErrLeaseNotHeld):
			t.Fatalf("decodeRenew(%#v) = %+v, %v; want ErrLeaseNotHeld", v, l, err)
		case ok && held && (err != nil || !equalLease(l, want)):
			t.Fatalf("decodeRenew(%#v) = %+v, %v; want %+v", v, l, err, want)
		}

		n, isInt := v.(int64)
		if got, err := decodeDequeue(v); (isInt && (n == 0 || n == 1)) != (err == nil) || (err == nil && got != (n == 1)) {
			t.Fatalf("decodeDequeue(%#v) = %v, %v; the reply is documented (1 or 0)", v, got, err)
		}
		id, isID := v.(string)
		isID = isID && specValidID(id)
		if !isID {
			id = ""
		}
		if got, session, err := decodeRelease(v); (isID || (isInt && (n == 0 || n == 1))) != (err == nil) ||
			(err == nil && (got != (isID || n == 1) || session != id)) {
			t.Fatalf("decodeRelease(%#v) = %v, %q, %v; the reply is documented (1, 0 or a session id)", v, got, session, err)
		}
		if got, err := decodeRefresh(v); (isInt && n >= 0) != (err == nil) || (err == nil && int64(got) != n) {
			t.Fatalf("decodeRefresh(%#v) = %d, %v; the reply is documented (a count): %v", v, got, err, isInt && n >= 0)
		}

		desc, need, err := decodeDescribe("job", v)
		if wantDesc, wantNeed, ok := describeSpec("job", v); ok != (err == nil) {
			t.Fatalf("decodeDescribe(%#v) = %+v, %v; the reply is documented: %v", v, desc, err, ok)
		} else if ok && !slices.Equal(need, wantNeed) {
			t.Fatalf("decodeDescribe(%#v) needs %q; want %q", v, need, wantNeed)
		} else if ok && (desc.Held != wantDesc.Held || desc.LastToken != wantDesc.LastToken || desc.Waiters != wantDesc.Waiters ||
			desc.WaitingWeight != wantDesc.WaitingWeight || desc.Capacity != wantDesc.Capacity ||
			!equalLease(desc.Lease, wantDesc.Lease) || !equalLeases(desc.Holders, wantDesc.Holders)) {
			t.Fatalf("decodeDescribe(%#v) = %+v; want %+v", v, desc, wantDesc)
		}

		members := fuzzGroupAsked[:names%4]
		g, err := decodeAcquireGroup(members, v)
		if want, ok := acquireGroupSpec(members, v); ok != (err == nil) {
			t.Fatalf("decodeAcquireGroup(%d members, %#v) = %+v, %v; the reply is documented: %v", len(members), v, g, err, ok)
		} else if ok && !sameGroup(g, want) {
			t.Fatalf("decodeAcquireGroup(%d members, %#v) = %+v; want %+v", len(members), v, g, want)
		}

		released, sessions, err := decodeReleaseGroup(len(members), v)
		if wantReleased, wantSessions, ok := releaseGroupSpec(len(members), v); ok != (err == nil) {
			t.Fatalf("decodeReleaseGroup(%d, %#v) = %v, %q, %v; the reply is documented: %v", len(members), v, released, sessions, err, ok)
		} else if ok && (!slices.Equal(released, wantReleased) || !slices.Equal(sessions, wantSessions)) {
			t.Fatalf("decodeReleaseGroup(%d, %#v) = %v, %q; want %v, %q", len(members), v, released, sessions, wantReleased, wantSessions)
		}

		watched := make([]string, names%4)
		for i := range watched {
			watched[i] = fmt.Sprintf("n%d", i)
		}
		out := make([]store.Description, len(watched))
		need, err = decodeWatch(watched, v, out)
		if wantOut, wantNeed, ok := watchSpec(watched, v); ok != (err == nil) {
			t.Fatalf("decodeWatch(%q, %#v) = %v; the reply is documented: %v", watched, v, err, ok)
		} else if ok && !slices.Equal(need, wantNeed) {
			t.Fatalf("decodeWatch(%q, %#v) needs %q; want %q", watched, v, need, wantNeed)
		} else if ok && need == nil {
			for i := range out {
				if out[i].Held != wantOut[i].Held || out[i].Capacity != wantOut[i].Capacity ||
					!equalLease(out[i].Lease, wantOut[i].Lease) || !equalLeases(out[i].Holders, wantOut[i].Holders) {
					t.Fatalf("decodeWatch(%q, %#v)[%d] = %+v; want %+v", watched, v, i, out[i], wantOut[i])
				}
			}
		}
	})
}

// specLease reads the five fields {holder, token, value, ttl_ms,
// expires_ms} at i as the scripts document them: holder "" is no lease (the
// other four are placeholders); otherwise the token is a decimal uint64 that
// is not 0 (no lease has token 0), the value a string, ttl_ms and
// expires_ms integers.
func specLease(r []any, i int, name string) (store.Lease, bool) {
	if len(r) < i+5 {
		return store.Lease{}, false
	}
	holder, ok := r[i].(string)
	if !ok {
		return store.Lease{}, false
	}
	if holder == "" {
		return store.Lease{}, true
	}
	tok, ok1 := r[i+1].(string)
	value, ok2 := r[i+2].(string)
	ttl, ok3 := specInt(r, i+3)
	expires, ok4 := specInt(r, i+4)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return store.Lease{}, false
	}
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || token == 0 {
		return store.Lease{}, false
	}
	var val []byte
	if value != "" {
		val = []byte(value)
	}
	return store.Lease{Name: name, Holder: holder, Token: token, Value: val, TTL: time.Duration(ttl) * time.Millisecond, ExpiresAt: time.UnixMilli(expires)}, true
}

// specWeight reads a weight at i: 1 .. store.MaxCapacity for a grant
// (held), 0 otherwise.
func specWeight(r []any, i int, held bool) (int64, bool) {
	if len(r) <= i {
		return 0, false
	}
	w, ok := specInt(r, i)
	if !ok || w > store.MaxCapacity || (held && w < 1) || (!held && w != 0) {
		return 0, false
	}
	return w, true
}

// specCapacity reads a capacity at i: 1 .. store.MaxCapacity.
func specCapacity(r []any, i int) (int64, bool) {
	if len(r) <= i {
		return 0, false
	}
	c, ok := specInt(r, i)
	return c, ok && c >= 1 && c <= store.MaxCapacity
}

// specGrants reads a count at i and that many grants of seven elements
// {holder, token, value, ttl_ms, expires_ms, weight, session}, each with a
// holder; it returns them and the index after them.
func specGrants(r []any, i int, name string) ([]store.Lease, int, bool) {
	if len(r) <= i {
		return nil, 0, false
	}
	n, ok := specInt(r, i)
	if !ok || n < 0 || n > int64(len(r)-i-1)/7 {
		return nil, 0, false
	}
	var out []store.Lease
	for k := range int(n) {
		at := i + 1 + 7*k
		l, ok := specLease(r, at, name)
		if !ok || l.Holder == "" {
			return nil, 0, false
		}
		if l.Weight, ok = specWeight(r, at+5, true); !ok {
			return nil, 0, false
		}
		if l.Session, ok = specSession(r, at+6, true); !ok {
			return nil, 0, false
		}
		out = append(out, l)
	}
	return out, i + 1 + 7*int(n), true
}

// acquireSpec: {-1, lost, retry_after_ms}, {-2, lost, capacity}, {-3, lost,
// max_holders}, {-4, lost, session_id...}, {-5, lost}, {2, lost, token,
// expires_ms} or {status, lost, holder, token, value, ttl_ms, expires_ms,
// retry_at_ms, weight} with status 1 (granted, to a holder) or 0, lost 1
// or 0, and a weight for a holder (0 without).
// fuzzAsked is the grant the fuzzed acquire replies answer.
var fuzzAsked = store.Lease{Name: "job", Holder: "h", Value: []byte("v"), TTL: 1500 * time.Millisecond, Weight: 2}

func acquireSpec(asked store.Lease, v any) (acquireReply, bool) {
	name := asked.Name
	r, ok := v.([]any)
	if !ok || len(r) < 2 {
		return acquireReply{}, false
	}
	status, ok1 := specInt(r, 0)
	lost, ok2 := specInt(r, 1)
	if !ok1 || !ok2 || (lost != 0 && lost != 1) {
		return acquireReply{}, false
	}
	a := acquireReply{lost: lost == 1}
	if status == -5 {
		// Detached: {-5, lost}, whatever follows.
		a.detached = true
		return a, true
	}
	if len(r) < 3 {
		return acquireReply{}, false
	}
	switch status {
	case -1:
		after, ok := specInt(r, 2)
		a.quarantined, a.retryAfter = true, time.Duration(after)*time.Millisecond
		return a, ok
	case -2:
		a.capacity, ok = specCapacity(r, 2)
		return a, ok
	case -3:
		limit, ok := specInt(r, 2)
		a.holderLimit = int(limit)
		return a, ok && limit >= 1
	case -4:
		a.need, ok = specIDs(r, 2)
		return a, ok
	case 2:
		// Granted as asked: a token (decimal, not 0) and an expiry.
		if len(r) < 4 {
			return acquireReply{}, false
		}
		tok, isStr := r[2].(string)
		token, err := strconv.ParseUint(tok, 10, 64)
		at, isInt := specInt(r, 3)
		if !isStr || err != nil || token == 0 || !isInt {
			return acquireReply{}, false
		}
		a.result.Acquired, a.result.Lease = true, asked
		a.result.Lease.Token, a.result.Lease.ExpiresAt = token, time.UnixMilli(at)
		return a, true
	case 0, 1:
	default:
		return acquireReply{}, false
	}
	l, ok := specLease(r, 2, name)
	if !ok || len(r) < 10 || (status == 1 && l.Holder == "") {
		return acquireReply{}, false
	}
	at, ok := specInt(r, 7)
	if !ok {
		return acquireReply{}, false
	}
	if l.Weight, ok = specWeight(r, 8, l.Holder != ""); !ok {
		return acquireReply{}, false
	}
	if l.Session, ok = specSession(r, 9, l.Holder != ""); !ok {
		return acquireReply{}, false
	}
	a.result.Acquired, a.result.Lease = status == 1, l
	if at > 0 {
		a.result.RetryAt = time.UnixMilli(at)
	}
	return a, true
}

// renewSpec: {0} (not held), {2} (attached to a session: not held here
// either, see isSessionReply) or {1, holder, token, value, ttl_ms,
// expires_ms, weight} with a holder.
func renewSpec(name string, v any) (l store.Lease, held, ok bool) {
	r, isArr := v.([]any)
	if !isArr || len(r) == 0 {
		return store.Lease{}, false, false
	}
	switch status, isInt := specInt(r, 0); {
	case !isInt:
		return store.Lease{}, false, false
	case status == 0, status == 2 && len(r) == 1:
		return store.Lease{}, false, true
	case status == 1:
		l, ok := specLease(r, 1, name)
		if !ok || l.Holder == "" {
			return store.Lease{}, false, false
		}
		l.Weight, ok = specWeight(r, 6, true)
		return l, true, ok
	}
	return store.Lease{}, false, false
}

// describeSpec: {-4, session_id...} (proofs needed) or {capacity,
// last_token, waiters, waiting_weight, count, then seven elements per
// grant}, last_token a decimal string, waiters and waiting_weight counts,
// nothing after the grants.
func describeSpec(name string, v any) (store.Description, []string, bool) {
	if need, ok, isNeed := specNeed(v); isNeed {
		return store.Description{}, need, ok
	}
	d, ok := describeGrantsSpec(name, v)
	return d, nil, ok
}

func describeGrantsSpec(name string, v any) (store.Description, bool) {
	r, ok := v.([]any)
	if !ok || len(r) < 5 {
		return store.Description{}, false
	}
	capacity, ok := specCapacity(r, 0)
	last, ok1 := r[1].(string)
	waiters, ok2 := specInt(r, 2)
	weight, ok3 := specInt(r, 3)
	if !ok || !ok1 || !ok2 || !ok3 || waiters < 0 || weight < 0 {
		return store.Description{}, false
	}
	lastToken, err := strconv.ParseUint(last, 10, 64)
	if err != nil {
		return store.Description{}, false
	}
	holders, end, ok := specGrants(r, 4, name)
	if !ok || end != len(r) {
		return store.Description{}, false
	}
	d := store.Description{Capacity: capacity, LastToken: lastToken, Waiters: int(waiters), WaitingWeight: weight, Holders: holders}
	if len(holders) > 0 {
		d.Held, d.Lease = true, holders[0]
	}
	return d, true
}

// watchSpec: {-4, session_id...} (proofs needed) or, per name {capacity,
// count, then seven elements per grant}, nothing after the last name.
func watchSpec(names []string, v any) ([]store.Description, []string, bool) {
	if need, ok, isNeed := specNeed(v); isNeed {
		return nil, need, ok
	}
	out, ok := watchGrantsSpec(names, v)
	return out, nil, ok
}

// specNeed reads {-4, session_id...}: isNeed when the reply starts with
// -4, ok when at least one valid id follows.
func specNeed(v any) (need []string, ok, isNeed bool) {
	r, isArr := v.([]any)
	if !isArr || len(r) == 0 {
		return nil, false, false
	}
	if status, isInt := r[0].(int64); !isInt || status != -4 {
		return nil, false, false
	}
	need, ok = specIDs(r, 1)
	return need, ok, true
}

// specIDs reads the session ids from i to the end: at least one, each 32
// hex digits.
func specIDs(r []any, i int) ([]string, bool) {
	if len(r) <= i {
		return nil, false
	}
	var out []string
	for ; i < len(r); i++ {
		id, ok := r[i].(string)
		if !ok || !specValidID(id) {
			return nil, false
		}
		out = append(out, id)
	}
	return out, true
}

// specSession reads a grant's session at i: "" or, for a grant (held), a
// valid id.
func specSession(r []any, i int, held bool) (string, bool) {
	if len(r) <= i {
		return "", false
	}
	id, ok := r[i].(string)
	return id, ok && (id == "" || (held && specValidID(id)))
}

func specValidID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// isSessionReply reports renew.lua's {2}.
func isSessionReply(v any) bool {
	r, ok := v.([]any)
	if !ok || len(r) != 1 {
		return false
	}
	n, ok := specInt(r, 0)
	return ok && n == 2
}

func watchGrantsSpec(names []string, v any) ([]store.Description, bool) {
	r, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]store.Description, len(names))
	at := 0
	for i, name := range names {
		capacity, ok := specCapacity(r, at)
		if !ok {
			return nil, false
		}
		holders, end, ok := specGrants(r, at+1, name)
		if !ok {
			return nil, false
		}
		out[i] = store.Description{Capacity: capacity, Holders: holders}
		if len(holders) > 0 {
			out[i].Held, out[i].Lease = true, holders[0]
		}
		at = end
	}
	return out, at == len(r)
}

func equalLease(a, b store.Lease) bool {
	return a.Name == b.Name && a.Holder == b.Holder && a.Token == b.Token && bytes.Equal(a.Value, b.Value) &&
		a.TTL == b.TTL && a.ExpiresAt.Equal(b.ExpiresAt) && a.Weight == b.Weight && a.Session == b.Session
}

func equalLeases(a, b []store.Lease) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !equalLease(a[i], b[i]) {
			return false
		}
	}
	return true
}

func sameAcquire(a, b acquireReply) bool {
	return a.lost == b.lost && a.quarantined == b.quarantined && a.retryAfter == b.retryAfter &&
		a.capacity == b.capacity && a.holderLimit == b.holderLimit && slices.Equal(a.need, b.need) && a.detached == b.detached &&
		a.result.Acquired == b.result.Acquired && a.result.RetryAt.Equal(b.result.RetryAt) && equalLease(a.result.Lease, b.result.Lease)
}

// fuzzGroupAsked are the members of the fuzzed group replies: a call of
// one, two or three of them (or none).
var fuzzGroupAsked = []store.Lease{
	{Name: "a", Holder: "h", TTL: 1500 * time.Millisecond, Weight: 1},
	{Name: "b", Holder: "h", TTL: 1500 * time.Millisecond, Weight: 1},
	{Name: "c", Holder: "h", TTL: 1500 * time.Millisecond, Weight: 1},
}

// specInt reads an integer at i: an int64, or its decimal string (a
// script may pass a field it read on as it is).
func specInt(r []any, i int) (int64, bool) {
	if len(r) <= i {
		return 0, false
	}
	switch v := r[i].(type) {
	case int64:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// specToken reads a token at i: a decimal string of a uint64 that is not 0.
func specToken(r []any, i int) (uint64, bool) {
	if len(r) <= i {
		return 0, false
	}
	s, ok := r[i].(string)
	if !ok {
		return 0, false
	}
	t, err := strconv.ParseUint(s, 10, 64)
	return t, err == nil && t != 0
}

// acquireGroupSpec: with lost 1 or 0 and i a member's index from 1,
// {-1, lost, retry_after_ms}, {-2, lost, i, capacity}, {-3, lost, i,
// max_holders}, {-4, lost, session_id...}, {-5, lost, i}, {1, lost,
// expires_ms, then per member: status 2 or 1, token, weight} or {0, lost,
// then per member: status 1 (not in the way: no holder, weight 0, session
// "") or 0, and acquireSpec's eight fields of a refusal}, one member at
// least in the way. Integers may come as decimal strings.
func acquireGroupSpec(asked []store.Lease, v any) (groupReply, bool) {
	r, ok := v.([]any)
	if !ok {
		return groupReply{}, false
	}
	status, ok1 := specInt(r, 0)
	lost, ok2 := specInt(r, 1)
	if !ok1 || !ok2 || (lost != 0 && lost != 1) {
		return groupReply{}, false
	}
	g := groupReply{lost: lost == 1}
	member := func() bool {
		i, ok := specInt(r, 2)
		g.member = int(i - 1)
		return ok && i >= 1 && i <= int64(len(asked))
	}
	switch status {
	case -1:
		after, ok := specInt(r, 2)
		g.quarantined, g.retryAfter = true, time.Duration(after)*time.Millisecond
		return g, ok
	case -2:
		c, ok := specInt(r, 3)
		g.capacity = c
		return g, member() && ok && c >= 1 && c <= store.MaxCapacity
	case -3:
		limit, ok := specInt(r, 3)
		g.holderLimit = int(limit)
		return g, member() && ok && limit >= 1
	case -4:
		g.need, ok = specIDs(r, 2)
		return g, ok
	case -5:
		g.detached = true
		return g, member()
	case 1:
		if len(r) != 3+3*len(asked) {
			return groupReply{}, false
		}
		expires, ok := specInt(r, 2)
		if !ok {
			return groupReply{}, false
		}
		g.acquired = true
		for i, l := range asked {
			at := 3 + 3*i
			st, ok1 := specInt(r, at)
			token, ok2 := specToken(r, at+1)
			weight, ok3 := specInt(r, at+2)
			if !ok1 || (st != 1 && st != 2) || !ok2 || !ok3 || weight < 1 || weight > store.MaxCapacity {
				return groupReply{}, false
			}
			l.Token, l.Weight, l.ExpiresAt = token, weight, time.UnixMilli(expires)
			g.leases = append(g.leases, l)
			g.fresh = append(g.fresh, st == 2)
		}
		return g, true
	case 0:
		if len(r) != 2+9*len(asked) {
			return groupReply{}, false
		}
		inTheWay := false
		for i, l := range asked {
			at := 2 + 9*i
			st, ok := specInt(r, at)
			if !ok || (st != 0 && st != 1) {
				return groupReply{}, false
			}
			m := store.AcquireResult{Acquired: st == 1}
			holder, ok := r[at+1].(string)
			if !ok || (m.Acquired && holder != "") {
				return groupReply{}, false
			}
			if holder != "" {
				token, ok1 := specToken(r, at+2)
				value, ok2 := r[at+3].(string)
				ttl, ok3 := specInt(r, at+4)
				expires, ok4 := specInt(r, at+5)
				if !ok1 || !ok2 || !ok3 || !ok4 {
					return groupReply{}, false
				}
				m.Lease = store.Lease{Name: l.Name, Holder: holder, Token: token, TTL: time.Duration(ttl) * time.Millisecond, ExpiresAt: time.UnixMilli(expires)}
				if value != "" {
					m.Lease.Value = []byte(value)
				}
			}
			retry, ok1 := specInt(r, at+6)
			weight, ok2 := specInt(r, at+7)
			session, ok3 := specSession(r, at+8, holder != "")
			if !ok1 || !ok2 || !ok3 || weight > store.MaxCapacity || (holder != "" && weight < 1) || (holder == "" && weight != 0) {
				return groupReply{}, false
			}
			m.Lease.Weight, m.Lease.Session = weight, session
			if retry > 0 {
				m.RetryAt = time.UnixMilli(retry)
			}
			inTheWay = inTheWay || !m.Acquired
			g.members = append(g.members, m)
		}
		return g, inTheWay
	}
	return groupReply{}, false
}

// releaseGroupSpec: n elements, each release.lua's reply (1, 0 or a
// session id).
func releaseGroupSpec(n int, v any) ([]bool, []string, bool) {
	r, ok := v.([]any)
	if !ok || len(r) != n {
		return nil, nil, false
	}
	released, sessions := make([]bool, n), make([]string, n)
	for i, e := range r {
		switch e := e.(type) {
		case int64:
			if e != 0 && e != 1 {
				return nil, nil, false
			}
			released[i] = e == 1
		case string:
			if !specValidID(e) {
				return nil, nil, false
			}
			released[i], sessions[i] = true, e
		default:
			return nil, nil, false
		}
	}
	return released, sessions, true
}

func sameGroup(a, b groupReply) bool {
	same := a.lost == b.lost && a.quarantined == b.quarantined && a.retryAfter == b.retryAfter && a.capacity == b.capacity &&
		a.holderLimit == b.holderLimit && a.detached == b.detached && slices.Equal(a.need, b.need) && a.acquired == b.acquired &&
		equalLeases(a.leases, b.leases) && slices.Equal(a.fresh, b.fresh) && len(a.members) == len(b.members)
	if a.capacity != 0 || a.holderLimit != 0 || a.detached {
		same = same && a.member == b.member
	}
	for i := range a.members {
		same = same && a.members[i].Acquired == b.members[i].Acquired && a.members[i].RetryAt.Equal(b.members[i].RetryAt) &&
			equalLease(a.members[i].Lease, b.members[i].Lease)
	}
	return same
}
