package memstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/coordinator-dev/coordinator/internal/statefile"
	"github.com/coordinator-dev/coordinator/server/store"
)

// stateName is the state file's name in the state directory.
const stateName = "memstore.json"

const (
	// writeInterval is how often, at most, the bounds are written while
	// grants go on: the cost of persistence is one write (one fsync) per
	// interval, whatever the load.
	writeInterval = time.Second
	// endLead is how far past the longest recent lease the lease bound is
	// written, so that grants until the next write need no wait. It is also
	// what a crash adds to the wait after a restart, beyond the leases
	// themselves.
	endLead = writeInterval + writeInterval/2
	// tokenLead is how far the token bound is written above the highest
	// token and the clock: ten seconds of clock-derived tokens, far more
	// than one interval issues. A restart after a crash resumes above it.
	tokenLead = uint64(10 * time.Second / time.Microsecond)
)

// state is the state file: two write-ahead bounds.
type state struct {
	// LeasesEndBy (Unix ms, wall clock) is a time no lease granted or
	// renewed lives past, its lock delay included; 0 for none.
	LeasesEndBy int64 `json:"leases_end_by_unix_ms"`
	// TokensAtMost is at least every token issued.
	TokensAtMost uint64 `json:"tokens_at_most"`
	// HeldUntil, written by Close, is when each lease still held then ends
	// (Unix ms, wall clock, its lock delay included): after a clean stop
	// only those names wait, instead of the whole store.
	HeldUntil map[string]int64 `json:"held_until_unix_ms,omitempty"`
}

// bounds is the write-ahead bookkeeping of a persistent store; guarded by
// Store.mu.
type bounds struct {
	dir *statefile.Dir
	// durableEnd and durableK are the bounds on disk.
	durableEnd time.Time
	durableK   uint64
	// spanCur and spanPrev are the longest lease (TTL plus lock delay)
	// granted or renewed since the last write and in the interval before:
	// the next lease bound covers them from the time of the write.
	spanCur, spanPrev time.Duration
	// dirty: a lease was granted or renewed since the last write.
	dirty bool
	// demanded: a grant waits for a write.
	demanded bool
	// writing: a write is under way.
	writing bool
	// err is the last write's failure, nil after a success.
	err error
	// written is closed, and replaced, after each write.
	written chan struct{}
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	syncs   int64
	closed  bool
}

// errClosed refuses a grant that needs a bound raised after Close.
var errClosed = fmt.Errorf("memstore: closed: %w", store.ErrUnavailable)

// Open returns a store that keeps its write-ahead bounds in dir (created if
// needed, and locked: a second Open of dir fails until the first is
// closed). An empty dir is New: no persistence.
//
// After a crash it refuses grants, with a *store.QuarantineError, until
// every lease it may have granted has ended, and resumes tokens above every
// token it may have issued. After Close, only the names still held at Close
// wait, each until its lease would have ended; after a first start nothing
// waits.
func Open(dir string, opts ...Option) (*Store, error) {
	s := New(opts...)
	if dir == "" {
		return s, nil
	}
	d, err := statefile.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	prev, err := readState(d)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	now := s.clock.Now()
	b := &bounds{dir: d, durableK: prev.TokensAtMost, written: make(chan struct{}),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if prev.LeasesEndBy != 0 {
		b.durableEnd = time.UnixMilli(prev.LeasesEndBy)
	}
	if wait := b.durableEnd.Sub(now.Round(0)); wait > 0 {
		// The wall clock may have stepped since: back makes the wait
		// longer, which is safe; forward makes it shorter, which no
		// file can prevent.
		s.quarantineEnd = now.Add(wait)
	}
	// After a clean stop, the names still held then stay ungranted until
	// their leases end, as in a lock delay; every other name is free.
	for name, ms := range prev.HeldUntil {
		wait := time.UnixMilli(ms).Sub(now.Round(0))
		if wait <= 0 {
			continue
		}
		until := now.Add(wait)
		s.names[name] = &entry{delayedUntil: until, usedUntil: until}
		// A crash from here on must wait for them too.
		b.durableEnd = later(b.durableEnd, now.Round(0).Add(wait))
	}
	s.highest = prev.TokensAtMost
	s.bounds = b
	ticker := s.clock.NewTicker(writeInterval)
	go s.writeLoop(ticker)
	return s, nil
}

func readState(d *statefile.Dir) (state, error) {
	var st state
	b, err := d.Read(stateName)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil // a first start: nothing was granted
	}
	if err != nil {
		return st, fmt.Errorf("memstore: read state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("memstore: state file %s/%s is unreadable (%w); remove it only once every lease "+
			"this store granted has expired, and with it the guarantee that tokens stay above earlier ones", d.Path(), stateName, err)
	}
	return st, nil
}

// reserve reports whether the durable bounds cover a lease granted or
// renewed at now for span (TTL plus lock delay) with token (0 for a
// renewal). When they do not, it asks for a write and returns a channel
// closed after the next one: the caller waits, then tries again. Called with
// s.mu held.
func (s *Store) reserve(now time.Time, span time.Duration, token uint64) (<-chan struct{}, error) {
	b := s.bounds
	if b == nil {
		return nil, nil
	}
	if !now.Round(0).Add(span).After(b.durableEnd) && token <= b.durableK {
		b.spanCur = max(b.spanCur, span)
		b.dirty = true
		return nil, nil
	}
	switch {
	case b.closed:
		return nil, errClosed
	case b.err != nil:
		return nil, fmt.Errorf("memstore: cannot write the state file: %w: %w", store.ErrUnavailable, b.err)
	}
	b.spanCur = max(b.spanCur, span)
	b.demanded = true
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return b.written, nil
}

// next returns the bounds to write at now, and starts a new interval. The
// bounds never go down: a grant checked against the durable ones while this
// write runs stays covered.
func (b *bounds) next(now time.Time, highest uint64) state {
	end := later(b.durableEnd, now.Round(0).Add(max(b.spanCur, b.spanPrev)+endLead))
	k := max(b.durableK, max(highest, clockToken(now))+tokenLead)
	b.spanPrev, b.spanCur = b.spanCur, 0
	b.dirty, b.demanded = false, false
	return state{LeasesEndBy: end.UnixMilli(), TokensAtMost: k}
}

// writeLoop raises the bounds at most once per writeInterval while leases
// are granted, and at once for a grant that waits.
func (s *Store) writeLoop(ticker interface {
	Chan() <-chan time.Time
	Stop()
}) {
	b := s.bounds
	defer close(b.done)
	defer ticker.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-ticker.Chan():
		case <-b.wake:
		}
		s.writeBounds()
	}
}

func (s *Store) writeBounds() {
	b := s.bounds
	s.mu.Lock()
	if !b.dirty && !b.demanded && b.err == nil {
		s.mu.Unlock()
		return
	}
	st := b.next(s.clock.Now(), s.highest)
	b.writing = true
	s.mu.Unlock()

	err := write(b.dir, st)

	s.mu.Lock()
	defer s.mu.Unlock()
	b.syncs++
	b.err = err
	b.writing = false
	if err == nil {
		b.durableEnd, b.durableK = time.UnixMilli(st.LeasesEndBy), st.TokensAtMost
	} else {
		// The intervals' leases are not covered yet: keep them for the
		// retry at the next tick.
		b.dirty = true
	}
	close(b.written)
	b.written = make(chan struct{})
}

func write(d *statefile.Dir, st state) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("memstore: encode state: %w", err)
	}
	if err := d.Write(stateName, data); err != nil {
		return fmt.Errorf("memstore: write state: %w", err)
	}
	return nil
}

// closeBounds stops the writer and writes which leases are still held and
// when each ends, so that after a restart only those names wait (and
// nothing does when none is held). Grants fail from then on.
func (s *Store) closeBounds() error {
	b := s.bounds
	if b == nil {
		return nil
	}
	s.mu.Lock()
	if b.closed {
		s.mu.Unlock()
		return nil
	}
	b.closed = true
	s.mu.Unlock()
	close(b.stop)
	<-b.done

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	st := state{TokensAtMost: max(b.durableK, s.highest)}
	for name, e := range s.names {
		e.sweep(now, s.lockDelay)
		until := later(e.delayedUntil, e.lastEnd(s.lockDelay))
		if until.After(now) {
			if st.HeldUntil == nil {
				st.HeldUntil = map[string]int64{}
			}
			st.HeldUntil[name] = now.Round(0).Add(until.Sub(now)).UnixMilli() + 1 // rounded up
		}
	}
	err := write(b.dir, st)
	b.syncs++
	if err == nil {
		b.durableK = st.TokensAtMost
	}
	close(b.written)
	b.written = make(chan struct{})
	return errors.Join(err, b.dir.Close())
}

// Syncs reports how many times the state file was written (each write is
// one fsync); 0 without persistence.
func (s *Store) Syncs() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bounds == nil {
		return 0
	}
	return s.bounds.syncs
}

// QuarantineEnd is when grants resume after a restart that found leases
// possibly still live; zero when Open found none.
func (s *Store) QuarantineEnd() time.Time {
	return s.quarantineEnd.Round(0)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
