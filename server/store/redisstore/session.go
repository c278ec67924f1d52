package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/server/store"
)

var (
	//go:embed scripts/session.lua
	sessionSrc string
	//go:embed scripts/attached.lua
	attachedSrc string
	//go:embed scripts/settle.lua
	settleSrc string

	sessionScript = redis.NewScript(withMarker(sessionSrc))
	settleScript  = redis.NewScript(holdersSrc + attachedSrc + settleSrc)
)

var _ store.Sessions = (*Store)(nil)

// minSessionKeep is the least time a session's keys, and the lease keys of
// the grants attached to it, outlive the session's end and the grants'
// bounds. The bound of a name nobody looks at goes stale (renewals do not
// visit names), so its key must outlive the bound by more than a renewal
// refreshes the names' bounds (sessionKeep/2); an hour makes that refresh,
// one script a name, cost little beside the renewals.
const minSessionKeep = time.Hour

// maxProofRounds bounds how often a call asks for proofs of sessions and
// tries again: more rounds mean grants keep appearing under new sessions.
const maxProofRounds = 4

// sessionIDBytes is how random a session id is: 128 bits, in hex.
const sessionIDBytes = 16

func newSessionID() (string, error) {
	var b [sessionIDBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redisstore: session id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// validSessionID reports whether id is one this store could have made: it
// becomes a hash tag, so nothing else may reach a key.
func validSessionID(id string) bool {
	if len(id) != 2*sessionIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// sessionKeys are the keys of one session: KEYS of session.lua.
func (s *Store) sessionKeys(id string) []string {
	base := s.prefix + ":{" + id + "}"
	marker := s.marker
	if s.cluster {
		marker = s.slotMarker(slotOf(id))
	}
	return []string{base + sessionSuffix, base + namesSuffix, marker}
}

func (s *Store) sessionKeepMS() int64 { return max(s.idleMS, minSessionKeep.Milliseconds()) }

// sessionReply is session.lua's reply.
type sessionReply struct {
	lost      bool
	err       error // a session error or *store.QuarantineError
	ago       time.Duration
	ttl       time.Duration
	remaining time.Duration
	expires   time.Time
	// at is when the call ran, in ms of the slot's clock: for an attach,
	// the time recorded for the name, which its grant carries.
	at    int64
	names []string
}

// decodeSession reads session.lua's reply (see its header).
func decodeSession(v any) (sessionReply, error) {
	r := newReplyReader("session", v)
	var a sessionReply
	status := r.int(0)
	a.lost = r.flag(1)
	switch status {
	case -1:
		a.err = &store.QuarantineError{RetryAfter: time.Duration(r.int(2)) * time.Millisecond}
	case -2:
		a.err = store.ErrSessionNotFound
	case -3:
		a.err = store.ErrSessionNotOwned
	case -4:
		a.err = store.ErrSessionClosed
	case -5:
		a.err = store.ErrSessionExpired
		a.ago = time.Duration(r.int(2)) * time.Millisecond
		a.names = r.strs(3)
	case 1:
		a.ttl = time.Duration(r.int(2)) * time.Millisecond
		a.remaining = time.Duration(r.int(3)) * time.Millisecond
		a.expires = time.UnixMilli(r.int(4))
		a.at = r.int(5)
		a.names = r.strs(6)
	default:
		r.fail(0, "session status")
	}
	return a, r.err
}

// session runs session.lua's op on session id: arg is create's ttl (ms)
// and prune's time, names are prune's.
func (s *Store) session(ctx context.Context, op, id, owner string, arg int64, name string, names ...string) (sessionReply, error) {
	if !validSessionID(id) {
		return sessionReply{err: store.ErrSessionNotFound}, nil
	}
	args := append(make([]any, 0, 7+len(names)), op, owner, arg, s.quarantineMS, s.idleMS, name, s.sessionKeepMS())
	for _, n := range names {
		args = append(args, n)
	}
	v, replicated, err := s.callWait(ctx, "session "+op, op != "check" && op != "describe" && op != "reap", sessionScript, s.sessionKeys(id), args...)
	if err != nil {
		return sessionReply{}, err
	}
	reply, err := decodeSession(v)
	if err != nil {
		return sessionReply{}, err
	}
	if reply.lost {
		s.dataLost()
	}
	if reply.err == nil {
		if err := replicated(); err != nil {
			return sessionReply{}, err
		}
	}
	return reply, nil
}

// sessionErr wraps a session reply's error for op.
func sessionErr(op, id string, err error) error {
	var q *store.QuarantineError
	if errors.As(err, &q) {
		return err
	}
	return fmt.Errorf("redisstore: %s %s: %w", op, id, err)
}

// CreateSession implements store.Sessions.
func (s *Store) CreateSession(ctx context.Context, owner string, ttl time.Duration) (store.Session, error) {
	if ttl <= 0 {
		return store.Session{}, fmt.Errorf("redisstore: create session: ttl %s is not positive", ttl)
	}
	id, err := newSessionID()
	if err != nil {
		return store.Session{}, err
	}
	reply, err := s.session(ctx, "create", id, owner, durationMS(ttl), "")
	if err != nil {
		return store.Session{}, err
	}
	if reply.err != nil {
		return store.Session{}, sessionErr("create session", id, reply.err)
	}
	s.reaper.expires(id, reply.remaining)
	return store.Session{ID: id, Owner: owner, TTL: reply.ttl, ExpiresAt: reply.expires}, nil
}

// RenewSession implements store.Sessions: one script in the session's slot.
// When the session's names are due a refresh (every sessionKeep/2), it then
// carries the session's expiry to each of them, one pipelined script a name,
// so that their keys outlive the session, and forgets the names that hold
// none of its grants any more (detachNames); a failed refresh is retried at
// the next renewal.
func (s *Store) RenewSession(ctx context.Context, id, owner string) (store.Session, error) {
	reply, err := s.session(ctx, "renew", id, owner, 0, "")
	if err != nil {
		return store.Session{}, err
	}
	got := time.Now()
	if reply.err != nil {
		s.attachments.forget(id)
		s.reaper.ended(id, reply.err)
		return store.Session{}, sessionErr("renew session", id, reply.err)
	}
	s.attachments.renewed(id, owner, proof{kind: 'a', n: reply.remaining, got: got, ttl: reply.ttl})
	s.reaper.expires(id, reply.remaining)
	if len(reply.names) > 0 {
		if err := s.detachNames(ctx, id, reply, got, reply.names); err != nil {
			s.log.Warn("a session's names were not refreshed; the next renewal tries again", "session", id, "error", err)
			_ = s.client.HSet(ctx, s.sessionKeys(id)[0], "refreshed", "0").Err()
		}
	}
	return store.Session{ID: id, Owner: owner, TTL: reply.ttl, ExpiresAt: reply.expires}, nil
}

// detachNames settles names with the proof of life of session id that
// alive (its slot's reply, arrived at got) gives, carrying the session's
// expiry to them, and makes the session's names forget those that hold
// none of its grants: each is first detached at alive.at (settle.lua), so
// that a grant attached before then is refused if it lands later, and
// forgotten only if not attached again since (session.lua prune).
//
// The mark must outlive every grant attached before it that may still land
// and be believed (detachHold); a retention shorter than that could let a
// grant or release of the name take its key, mark and all, sooner. With
// such a retention a name is forgotten only once its last attach is an
// hour (the session keep) and two TTLs old instead, more than a call takes
// between the attach and its grant, even on a connection that stalled (it
// delivers or drops the call within minutes).
func (s *Store) detachNames(ctx context.Context, id string, alive sessionReply, got time.Time, names []string) error {
	proofs := proofSet{id: {kind: 'a', n: alive.remaining, got: got, ttl: alive.ttl}}
	hold := s.detachHold(alive.ttl)
	detachAt, before := alive.at, alive.at
	if !s.canDetach(alive.ttl) {
		detachAt, before = 0, alive.at-(2*alive.ttl).Milliseconds()-s.sessionKeepMS()
	}
	free, err := s.settleNames(ctx, names, proofs, id, detachAt, hold)
	for chunk := range slices.Chunk(free, maxPruneNames) {
		if _, perr := s.session(ctx, "prune", id, "", before, "", chunk...); perr != nil {
			err = errors.Join(err, fmt.Errorf("prune: %w", perr))
		}
	}
	return err
}

// maxPruneNames bounds the names one prune call forgets, so that a call
// holds Redis up no longer than about a pipeline of commands.
const maxPruneNames = 256

// detachHold is how long a name's detach mark must last at least: longer
// than a grant attached before the mark can take to land and be believed.
// Its attach's proof is spent within the session's TTL (ttl), and the call
// that carries it ends within a call timeout, the attach's own before it;
// a second more covers the slots' clocks.
func (s *Store) detachHold(ttl time.Duration) time.Duration {
	return ttl + 2*s.callTimeout + time.Second
}

// canDetach reports whether names may be detached from a session of ttl:
// whether the retention covers a mark's hold (detachNames says why).
func (s *Store) canDetach(ttl time.Duration) bool {
	return s.detachHold(ttl).Milliseconds() <= s.idleMS
}

// CloseSession implements store.Sessions: the session's script marks it
// closed and returns its names, then each name releases the session's
// grants (pipelined, announced). A coordinator that stops in between leaves
// grants that end when their bounds pass, the check then finding the
// session closed; a second close does the releases again.
func (s *Store) CloseSession(ctx context.Context, id, owner string) error {
	s.attachments.forget(id)
	reply, err := s.session(ctx, "close", id, owner, 0, "")
	if err != nil {
		return err
	}
	if reply.err != nil {
		s.reaper.ended(id, reply.err)
		return sessionErr("close session", id, reply.err)
	}
	s.reaper.forget(id)
	if _, err := s.settleNames(ctx, reply.names, proofSet{id: {kind: 'c'}}, "", 0, 0); err != nil {
		return err
	}
	if len(reply.names) > 0 {
		// Settled: the names need not outlive the session any more.
		if _, err := s.session(ctx, "reaped", id, "", 0, ""); err != nil {
			s.log.Debug("a closed session's names were settled but not forgotten", "session", id, "error", err)
		}
	}
	return nil
}

// DescribeSession implements store.Sessions. Its names are those where the
// session holds a grant: the session's names (which keep a released name
// until it is detached) each read once, in one pipeline.
func (s *Store) DescribeSession(ctx context.Context, id, owner string) (store.SessionDescription, error) {
	reply, err := s.session(ctx, "describe", id, owner, 0, "")
	if err != nil {
		return store.SessionDescription{}, err
	}
	if reply.err != nil {
		return store.SessionDescription{}, sessionErr("describe session", id, reply.err)
	}
	names, err := s.namesHolding(ctx, id, reply.names)
	if err != nil {
		return store.SessionDescription{}, fmt.Errorf("redisstore: describe session %s: %w", id, err)
	}
	slices.Sort(names)
	return store.SessionDescription{
		Session: store.Session{ID: id, Owner: owner, TTL: reply.ttl, ExpiresAt: reply.expires},
		Names:   names,
	}, nil
}

// namesHolding returns those of names whose lease key holds a grant
// attached to session id: a record (a field 'h:' + holder) that names the
// session (holders.lua). The session is alive, so a grant past its bound is
// still held.
func (s *Store) namesHolding(ctx context.Context, id string, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(names))
	if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.HGetAll(ctx, s.keys(name).lease)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var held []string
	for i, cmd := range cmds {
		for f, v := range cmd.Val() {
			if strings.HasPrefix(f, "h:") && recordSession(v) == id {
				held = append(held, names[i])
				break
			}
		}
	}
	return held, nil
}

// recordSession is the session a grant record (holders.lua:
// token:weight:ttl:expires:session:value) is attached to, or "".
func recordSession(rec string) string {
	parts := strings.SplitN(rec, ":", 6)
	if len(parts) < 6 {
		return ""
	}
	return parts[4]
}

// proof is what a session's slot said of it: kind a (alive, n remaining,
// as of got; ttl is the session's), e (expired n ago), c (closed) or g
// (gone). A proof from an attach has the time the slot recorded for the
// name (attachedAt, ms of the slot's clock), which the grant carries.
type proof struct {
	kind       byte
	n          time.Duration
	got        time.Time
	ttl        time.Duration
	attachedAt int64
}

// left is what remains (ms, at least 1) at now of session id's proof of
// life; false when it ran out or there is none.
func (p proofSet) left(id string, now time.Time) (int64, bool) {
	pr, ok := p[id]
	if !ok || pr.kind != 'a' {
		return 0, false
	}
	n := (pr.n - now.Sub(pr.got)).Milliseconds()
	return n, n >= 1
}

// proveOwn asks the slot of req's session, as its owner, for its proof of
// life, adding req's name to its names (before the grant: a stale entry is
// harmless, a missing one would leave the grant out of a close).
func (s *Store) proveOwn(ctx context.Context, p proofSet, req store.AcquireRequest) error {
	reply, err := s.session(ctx, "attach", req.Session, req.SessionOwner, 0, req.Name)
	if err != nil {
		return err
	}
	if reply.err != nil {
		s.attachments.forget(req.Session)
		s.reaper.ended(req.Session, reply.err)
		return sessionErr(fmt.Sprintf("acquire %q in session", req.Name), req.Session, reply.err)
	}
	s.reaper.expires(req.Session, reply.remaining)
	p[req.Session] = proof{kind: 'a', n: reply.remaining, got: time.Now(), ttl: reply.ttl, attachedAt: reply.at}
	s.attachments.attached(req.Session, req.SessionOwner, req.Name, p[req.Session])
	return nil
}

// proofSet maps session ids to proofs.
type proofSet map[string]proof

// text is the proofs as attached.lua reads them. A proof of life counts
// down from when its reply arrived: the name applies it as its own now
// plus what is left, so the bound is no earlier than the session's expiry
// (the check ran before the reply arrived, the name's script after it is
// sent). One whose time ran out is left out, to be asked again; so is
// skip's (acquire.lua makes the attaching session's own proof from its
// remaining time, an argument it has anyway).
func (p proofSet) text(now time.Time, skip string) (string, []string) {
	var b strings.Builder
	var stale []string
	for id, pr := range p {
		if id == skip {
			continue
		}
		n := pr.n
		if pr.kind == 'a' {
			if n -= now.Sub(pr.got); n <= 0 {
				stale = append(stale, id)
				continue
			}
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id)
		b.WriteByte('=')
		b.WriteByte(pr.kind)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(max(n.Milliseconds(), 0), 10))
	}
	return b.String(), stale
}

// prove asks each session's slot for a proof of it into p (check: anyone
// may ask, the answer gives nothing away but liveness). A quarantined slot
// fails the call: its sessions' liveness is unknown.
func (s *Store) prove(ctx context.Context, p proofSet, ids []string) error {
	for _, id := range ids {
		reply, err := s.session(ctx, "check", id, "", 0, "")
		if err != nil {
			return err
		}
		got := time.Now()
		switch {
		case reply.err == nil:
			p[id] = proof{kind: 'a', n: reply.remaining, got: got, ttl: reply.ttl}
		case errors.Is(reply.err, store.ErrSessionExpired):
			p[id] = proof{kind: 'e', n: reply.ago}
		case errors.Is(reply.err, store.ErrSessionClosed):
			p[id] = proof{kind: 'c'}
		case errors.Is(reply.err, store.ErrSessionNotFound):
			p[id] = proof{kind: 'g'}
		default:
			return sessionErr("check session", id, reply.err)
		}
	}
	return nil
}

// withProofs runs attempt with the proofs gathered so far until it needs
// none it lacks; attempt returns the ids of the sessions it needs proven.
// The text attempt gets leaves out the proof of session mine (when not ""),
// which the attempt sends in a form of its own (an attached acquire's
// remaining time) and keeps fresh itself.
func (s *Store) withProofs(ctx context.Context, p proofSet, mine string, attempt func(proofs string) ([]string, error)) error {
	for range maxProofRounds {
		text, stale := p.text(time.Now(), mine)
		if len(stale) > 0 {
			if err := s.prove(ctx, p, stale); err != nil {
				return err
			}
			continue
		}
		need, err := attempt(text)
		if err != nil || len(need) == 0 {
			return err
		}
		if err := s.prove(ctx, p, need); err != nil {
			return err
		}
	}
	return fmt.Errorf("redisstore: %w: sessions kept changing under the call (%d rounds of proofs)", store.ErrUnavailable, maxProofRounds)
}

// decodeNeed reads a {-4, id...} reply: isNeed when it is one, and its ids
// or, when they are not valid, an error.
func decodeNeed(op string, v any) (ids []string, isNeed bool, err error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return nil, false, nil
	}
	if status, ok := arr[0].(int64); !ok || status != -4 {
		return nil, false, nil
	}
	r := newReplyReader(op, v)
	ids = r.ids(1)
	return ids, true, r.err
}

// settleConcurrency is how many names a close or refresh settles at once:
// their calls share the pipeliner's round trips.
const settleConcurrency = 64

// settleNames applies proofs to each name's attached grants, many names at
// once (their calls batched into pipelines), each once more when it asked
// for proofs of other sessions. With a session id (held), free is the
// names that hold none of that session's grants once settled; with a
// detachAt too (not 0), each of those is detached from the session at
// that time of its slot, the mark lasting hold at least (settle.lua).
func (s *Store) settleNames(ctx context.Context, names []string, p proofSet, held string, detachAt int64, hold time.Duration) (free []string, err error) {
	detach := ""
	if detachAt != 0 {
		detach = strconv.FormatInt(detachAt, 10)
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		slot = make(chan struct{}, settleConcurrency)
	)
	for _, name := range names {
		slot <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slot; wg.Done() }()
			mu.Lock()
			own := maps.Clone(p)
			mu.Unlock()
			k := s.keys(name)
			err := s.withProofs(ctx, own, "", func(proofs string) ([]string, error) {
				v, err := s.call(ctx, "settle", settleScript, []string{k.lease}, proofs, s.channel, name, s.lockDelayMS, s.sessionKeepMS(), held, s.idleMS,
					detach, hold.Milliseconds())
				if err != nil {
					return nil, err
				}
				need, holds, err := decodeSettle(v)
				if err == nil && need == nil && held != "" && !holds {
					mu.Lock()
					free = append(free, name)
					mu.Unlock()
				}
				return need, err
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%q: %w", name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return free, errors.Join(errs...)
}

// decodeSettle reads settle.lua's reply: the sessions it needs proofs of,
// or whether the name holds a grant of the session asked about.
func decodeSettle(v any) (need []string, held bool, err error) {
	if need, isNeed, err := decodeNeed("settle", v); isNeed || err != nil {
		return need, false, err
	}
	r := newReplyReader("settle", v)
	if r.int(0) != 0 {
		r.fail(0, "settle status")
	}
	held = r.flag(1)
	return nil, held, r.err
}
