package redisstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store"
)

func mustAcquire(t testing.TB, s *Store, req store.AcquireRequest) store.AcquireResult {
	t.Helper()
	res, err := s.Acquire(testCtx(t), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return res
}

func mustGrant(t testing.TB, s *Store, req store.AcquireRequest) store.Lease {
	t.Helper()
	res := mustAcquire(t, s, req)
	if !res.Acquired {
		t.Fatalf("Acquire(%q by %q): refused, held by %+v", req.Name, req.Holder, res.Lease)
	}
	return res.Lease
}

func mustRefuse(t testing.TB, s *Store, req store.AcquireRequest) store.AcquireResult {
	t.Helper()
	res := mustAcquire(t, s, req)
	if res.Acquired {
		t.Fatalf("Acquire(%q by %q): granted %+v, want refused", req.Name, req.Holder, res.Lease)
	}
	return res
}

func mustDescribe(t testing.TB, s *Store, name string) store.Description {
	t.Helper()
	d, err := s.Describe(testCtx(t), name)
	if err != nil {
		t.Fatalf("Describe(%q): %v", name, err)
	}
	return d
}

func mustRelease(t testing.TB, s *Store, l store.Lease) {
	t.Helper()
	ok, err := s.Release(testCtx(t), l.Name, l.Holder, l.Token)
	if err != nil || !ok {
		t.Fatalf("Release(%q, %q, %d) = %v, %v; want true", l.Name, l.Holder, l.Token, ok, err)
	}
}

func req(name, holder string, ttl time.Duration, value string) store.AcquireRequest {
	return store.AcquireRequest{Name: name, Holder: holder, TTL: ttl, Value: []byte(value)}
}

// clockSkew is how far Redis' clock may be from the test's, plus the
// millisecond rounding of its times.
const clockSkew = 50 * time.Millisecond

// expiresWithin checks that a lease of ttl granted by a call made between
// before and after expires within that window, as Redis' clock tells it.
// Bracketing the call keeps the check exact on a busy machine, where the
// call itself may take long.
func expiresWithin(t testing.TB, l store.Lease, ttl time.Duration, before, after time.Time) {
	t.Helper()
	lo, hi := before.Add(ttl-clockSkew), after.Add(ttl+clockSkew)
	if l.ExpiresAt.Before(lo) || l.ExpiresAt.After(hi) {
		t.Errorf("ExpiresAt = %s, want within [%s, %s]", l.ExpiresAt, lo, hi)
	}
}

func sameLease(t testing.TB, got, want store.Lease) {
	t.Helper()
	if got.Name != want.Name || got.Holder != want.Holder || got.Token != want.Token ||
		!bytes.Equal(got.Value, want.Value) || got.TTL != want.TTL || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		(want.Weight != 0 && got.Weight != want.Weight) {
		t.Errorf("lease = %+v, want %+v", got, want)
	}
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, s *Store)
	}{
		{"grants a free name with a fresh token and Redis-clock expiry", func(t *testing.T, s *Store) {
			before := time.Now()
			res := mustAcquire(t, s, req("job", "a", 2*time.Second, "v1"))
			after := time.Now()
			if !res.Acquired || !res.RetryAt.IsZero() {
				t.Fatalf("result = %+v; want acquired, without RetryAt", res)
			}
			l := res.Lease
			if l.Name != "job" || l.Holder != "a" || string(l.Value) != "v1" || l.TTL != 2*time.Second || l.Token == 0 {
				t.Errorf("lease = %+v", l)
			}
			expiresWithin(t, l, 2*time.Second, before, after)
			d := mustDescribe(t, s, "job")
			if !d.Held || d.LastToken != l.Token {
				t.Errorf("Describe = %+v, want held with last token %d", d, l.Token)
			}
			sameLease(t, d.Lease, l)
		}},
		{"refuses another holder and reports the current lease", func(t *testing.T, s *Store) {
			l := mustGrant(t, s, req("job", "a", 2*time.Second, "v1"))
			res := mustRefuse(t, s, req("job", "b", time.Second, "v2"))
			sameLease(t, res.Lease, l)
			if !res.RetryAt.Equal(l.ExpiresAt) {
				t.Errorf("RetryAt = %s, want the lease's expiry %s", res.RetryAt, l.ExpiresAt)
			}
		}},
		{"re-acquire by the holder keeps the token and replaces ttl and value", func(t *testing.T, s *Store) {
			l := mustGrant(t, s, req("job", "a", time.Second, "v1"))
			before := time.Now()
			res := mustAcquire(t, s, req("job", "a", 3*time.Second, "v1"))
			after := time.Now()
			if !res.Acquired || res.Lease.Token != l.Token || res.Lease.TTL != 3*time.Second {
				t.Errorf("same value: result = %+v, want acquired, token %d, ttl 3s", res, l.Token)
			}
			expiresWithin(t, res.Lease, 3*time.Second, before, after)
			res = mustAcquire(t, s, req("job", "a", time.Second, "v2"))
			if !res.Acquired || res.Lease.Token != l.Token || string(res.Lease.Value) != "v2" {
				t.Errorf("new value: result = %+v, want acquired, token %d, value v2", res, l.Token)
			}
			if d := mustDescribe(t, s, "job"); string(d.Lease.Value) != "v2" || d.Lease.TTL != time.Second || d.LastToken != l.Token {
				t.Errorf("Describe = %+v", d)
			}
		}},
		{"grants another holder once the lease expired", func(t *testing.T, s *Store) {
			l := mustGrant(t, s, req("job", "a", 50*time.Millisecond, ""))
			testwait.Until(t, 5*time.Second, "Describe to say the lease expired", func() bool { return !mustDescribe(t, s, "job").Held })
			l2 := mustGrant(t, s, req("job", "b", time.Second, ""))
			if l2.Token <= l.Token {
				t.Errorf("token after expiry %d <= %d", l2.Token, l.Token)
			}
		}},
		{"keeps binary values and reports an empty value as nil", func(t *testing.T, s *Store) {
			bin := []byte{0, 1, 2, 0xff, '{', '}'}
			l := mustGrant(t, s, store.AcquireRequest{Name: "bin", Holder: "a", TTL: time.Second, Value: bin})
			if !bytes.Equal(l.Value, bin) || !bytes.Equal(mustDescribe(t, s, "bin").Lease.Value, bin) {
				t.Errorf("value = %q, want %q", l.Value, bin)
			}
			if l := mustGrant(t, s, req("empty", "a", time.Second, "")); l.Value != nil {
				t.Errorf("empty value = %#v, want nil", l.Value)
			}
		}},
		{"rejects a ttl that is not positive", func(t *testing.T, s *Store) {
			if _, err := s.Acquire(testCtx(t), req("job", "a", 0, "")); err == nil {
				t.Error("Acquire with ttl 0: no error")
			}
			if _, err := s.Renew(testCtx(t), "job", "a", 1, -time.Second); err == nil {
				t.Error("Renew with ttl -1s: no error")
			}
		}},
		{"describes a name never granted as free, its last token the clock in µs less one", func(t *testing.T, s *Store) {
			before := uint64(time.Now().Add(-clockSkew).UnixMicro())
			d := mustDescribe(t, s, "never")
			after := uint64(time.Now().Add(clockSkew).UnixMicro())
			if d.Held || d.LastToken < before || d.LastToken > after {
				t.Errorf("Describe = %+v, want a last token within [%d, %d]", d, before, after)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore(t, nil, Options{}))
		})
	}
}

func TestRenewIsCompareAndSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		holder  string
		token   func(l store.Lease) uint64
		ttl     time.Duration
		expired bool
		wantErr error
	}{
		{name: "holder and token extend the lease", holder: "a", ttl: 5 * time.Second},
		{name: "holder and token may shorten the lease", holder: "a", ttl: 800 * time.Millisecond},
		{name: "another holder is refused", holder: "b", ttl: time.Second, wantErr: store.ErrLeaseNotHeld},
		{name: "an older token is refused", holder: "a", token: func(l store.Lease) uint64 { return l.Token - 1 },
			ttl: time.Second, wantErr: store.ErrLeaseNotHeld},
		{name: "a newer token is refused", holder: "a", token: func(l store.Lease) uint64 { return l.Token + 1 },
			ttl: time.Second, wantErr: store.ErrLeaseNotHeld},
		{name: "an expired lease is refused", holder: "a", ttl: time.Second, expired: true, wantErr: store.ErrLeaseNotHeld},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, nil, Options{})
			leaseTTL := time.Second
			if tc.expired {
				leaseTTL = 30 * time.Millisecond
			}
			l := mustGrant(t, s, req("job", "a", leaseTTL, "v"))
			if tc.expired {
				testwait.Until(t, 5*time.Second, "the lease to expire", func() bool { return !mustDescribe(t, s, "job").Held })
			}
			token := l.Token
			if tc.token != nil {
				token = tc.token(l)
			}
			before := time.Now()
			got, err := s.Renew(testCtx(t), "job", tc.holder, token, tc.ttl)
			after := time.Now()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Renew error = %v, want %v", err, tc.wantErr)
			}
			d := mustDescribe(t, s, "job")
			if tc.wantErr != nil {
				if !tc.expired {
					sameLease(t, d.Lease, l)
				}
				return
			}
			want := l
			want.TTL = tc.ttl
			want.ExpiresAt = got.ExpiresAt
			sameLease(t, got, want)
			expiresWithin(t, got, tc.ttl, before, after)
			sameLease(t, d.Lease, got)
		})
	}
}

func TestReleaseIsCompareAndSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		holder string
		delta  int
		want   bool
	}{
		{"holder and token release", "a", 0, true},
		{"another holder does not release", "b", 0, false},
		{"an older token does not release", "a", -1, false},
		{"a newer token does not release", "a", 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, nil, Options{})
			l := mustGrant(t, s, req("job", "a", time.Second, ""))
			ok, err := s.Release(testCtx(t), "job", tc.holder, uint64(int64(l.Token)+int64(tc.delta)))
			if err != nil || ok != tc.want {
				t.Fatalf("Release = %v, %v; want %v", ok, err, tc.want)
			}
			d := mustDescribe(t, s, "job")
			if d.Held == tc.want || d.LastToken != l.Token {
				t.Errorf("Describe after release = %+v", d)
			}
			if tc.want {
				if ok, err := s.Release(testCtx(t), "job", "a", l.Token); ok || err != nil {
					t.Errorf("second Release = %v, %v; want false", ok, err)
				}
			}
		})
	}
}

func TestTokensStrictlyIncrease(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	var last uint64
	next := func(how string, l store.Lease) {
		t.Helper()
		if l.Token <= last {
			t.Fatalf("token after %s = %d, not above %d", how, l.Token, last)
		}
		last = l.Token
	}
	next("first grant", mustGrant(t, s, req("job", "a", time.Second, "")))
	// The first token is seeded from Redis' clock in microseconds.
	if now := uint64(time.Now().UnixMicro()); last < now-uint64(time.Minute/time.Microsecond) || last > now+uint64(time.Minute/time.Microsecond) {
		t.Errorf("first token %d is not the clock in microseconds (%d)", last, now)
	}
	mustRelease(t, s, store.Lease{Name: "job", Holder: "a", Token: last})
	l := mustGrant(t, s, req("job", "b", 40*time.Millisecond, ""))
	next("release", l)
	testwait.Until(t, 5*time.Second, "the lease to expire", func() bool { return !mustDescribe(t, s, "job").Held })
	l = mustGrant(t, s, req("job", "c", time.Second, ""))
	next("expiry", l)
	if d := mustDescribe(t, s, "job"); d.LastToken != last {
		t.Errorf("LastToken = %d, want %d", d.LastToken, last)
	}
	// Another name has its own counter.
	if other := mustGrant(t, s, req("other", "a", time.Second, "")); other.Token == 0 {
		t.Error("zero token")
	}
}

// scratchClient connects to a database of this package's own, which the
// caller may flush; such tests must not run in parallel.
func scratchClient(t *testing.T) *redis.Client {
	t.Helper()
	db := 15
	if v := os.Getenv("COORDINATOR_TEST_REDIS_SCRATCH_DB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("COORDINATOR_TEST_REDIS_SCRATCH_DB=%q: %v", v, err)
		}
		db = n
	}
	main := testRedisOptions(t).DB
	if db == main {
		t.Fatalf("scratch database %d is the main test database: set COORDINATOR_TEST_REDIS_SCRATCH_DB", db)
	}
	return newClient(t, func(o *redis.Options) { o.DB = db })
}

// TestTokenAboveAfterFlush flushes the scratch database, as FLUSHALL or a
// restart without persistence would, between two grants: the fence counter
// is gone and is seeded from the clock again, above the earlier token.
func TestTokenAboveAfterFlush(t *testing.T) {
	c := scratchClient(t)
	var losses atomic.Int32
	s := newStore(t, c, Options{OnDataLoss: func(time.Duration) { losses.Add(1) }})
	ctx := testCtx(t)
	l1 := mustGrant(t, s, req("job", "a", time.Minute, ""))
	for range 5 { // advance the counter past its seed
		mustRelease(t, s, l1)
		l1 = mustGrant(t, s, req("job", "a", time.Minute, ""))
	}
	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := mustDescribe(t, s, "job"); d.LastToken < l1.Token {
		t.Errorf("last token after flush %d < token before %d: not a floor", d.LastToken, l1.Token)
	}
	l2 := mustGrant(t, s, req("job", "b", time.Minute, ""))
	if l2.Token <= l1.Token {
		t.Errorf("token after flush %d <= token before %d", l2.Token, l1.Token)
	}
	if n := losses.Load(); n != 1 {
		t.Errorf("OnDataLoss called %d times, want 1", n)
	}
}

// TestFlushQuarantines: after FLUSHDB, grants wait for the quarantine.
func TestFlushQuarantines(t *testing.T) {
	c := scratchClient(t)
	var losses atomic.Int32
	s := newStore(t, c, Options{Quarantine: 300 * time.Millisecond, OnDataLoss: func(time.Duration) { losses.Add(1) }})
	mustGrant(t, s, req("job", "a", time.Minute, ""))
	if err := c.FlushDB(testCtx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(testCtx(t), req("job", "b", time.Minute, ""))
	if q := asQuarantine(err); q == nil || q.RetryAfter <= 0 || q.RetryAfter > 300*time.Millisecond {
		t.Fatalf("Acquire after flush: %v, want a QuarantineError within 300ms", err)
	}
	if n := losses.Load(); n != 1 {
		t.Errorf("OnDataLoss called %d times, want 1", n)
	}
}

func TestDataLoss(t *testing.T) {
	t.Parallel()
	// quarantine outlasts the few calls a test makes while it must hold,
	// even on a busy machine.
	const quarantine = time.Second
	tests := []struct {
		name string
		run  func(t *testing.T, s *Store, losses *atomic.Int32, lose func())
	}{
		{"a missing marker refuses grants until the quarantine passed", func(t *testing.T, s *Store, losses *atomic.Int32, lose func()) {
			held := mustGrant(t, s, req("held", "a", time.Minute, ""))
			lose()
			called := time.Now()
			_, err := s.Acquire(testCtx(t), req("job", "b", time.Second, ""))
			// The quarantine began during the call: it ends RetryAfter
			// after a moment between the call and its return.
			q := asQuarantine(err)
			if q == nil || q.RetryAfter <= 0 || q.RetryAfter > quarantine {
				t.Fatalf("first Acquire after loss: %v, want a QuarantineError within %s", err, quarantine)
			}
			if n := losses.Load(); n != 1 {
				t.Errorf("OnDataLoss called %d times, want 1", n)
			}
			// Still quarantined, even for a holder re-acquiring: not a new detection.
			for _, r := range []store.AcquireRequest{req("job", "c", time.Second, ""), req("held", "a", time.Minute, "")} {
				_, err = s.Acquire(testCtx(t), r)
				if q2 := asQuarantine(err); q2 == nil || q2.RetryAfter > q.RetryAfter {
					t.Fatalf("Acquire during quarantine: %v, want a QuarantineError of at most %s", err, q.RetryAfter)
				}
			}
			if n := losses.Load(); n != 1 {
				t.Errorf("OnDataLoss called %d times during the quarantine, want 1", n)
			}
			l := grantedNotBefore(t, s, req("job", "c", time.Second, ""), called.Add(q.RetryAfter-clockSkew))
			if l.Token == 0 {
				t.Error("zero token")
			}
			if again := mustGrant(t, s, req("held", "a", time.Minute, "")); again.Token != held.Token {
				t.Errorf("holder's token changed from %d to %d", held.Token, again.Token)
			}
			if n := losses.Load(); n != 1 {
				t.Errorf("OnDataLoss called %d times in all, want 1", n)
			}
		}},
		{"quarantine 0 grants at once and still reports the loss", func(t *testing.T, s *Store, losses *atomic.Int32, lose func()) {
			s.quarantine, s.quarantineMS = 0, 0
			s.scripts = newStoreScripts(s.quarantineMS, s.lockDelayMS, s.idleMS, s.sessionKeepMS(), s.channel)
			mustGrant(t, s, req("job", "a", time.Second, ""))
			lose()
			mustGrant(t, s, req("other", "a", time.Second, ""))
			mustGrant(t, s, req("third", "a", time.Second, ""))
			if n := losses.Load(); n != 1 {
				t.Errorf("OnDataLoss called %d times, want 1", n)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var losses atomic.Int32
			var got atomic.Int64
			s := newStore(t, nil, Options{Quarantine: quarantine, OnDataLoss: func(q time.Duration) {
				losses.Add(1)
				got.Store(int64(q))
			}})
			lose := func() {
				if err := s.client.Del(context.Background(), s.keys("job").marker).Err(); err != nil {
					t.Fatal(err)
				}
			}
			tc.run(t, s, &losses, lose)
			if q := time.Duration(got.Load()); q != s.quarantine {
				t.Errorf("OnDataLoss got quarantine %s, want %s", q, s.quarantine)
			}
		})
	}
}

func TestContendedNameHasOneHolderAtATime(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	const workers, grantsEach = 6, 15
	var holding atomic.Int32
	var last atomic.Uint64
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			holder := "h" + strconv.Itoa(w)
			for granted := 0; granted < grantsEach; {
				res, err := s.Acquire(context.Background(), store.AcquireRequest{
					Name: "job", Holder: holder, TTL: time.Minute, Waiter: holder, WaiterTTL: 10 * time.Second,
				})
				if err != nil {
					errs <- err
					return
				}
				if !res.Acquired {
					time.Sleep(time.Millisecond)
					continue
				}
				if n := holding.Add(1); n != 1 {
					errs <- errors.New("two holders at once")
					return
				}
				if prev := last.Swap(res.Lease.Token); res.Lease.Token <= prev {
					errs <- errors.New("token did not increase: " + strconv.FormatUint(res.Lease.Token, 10) + " after " + strconv.FormatUint(prev, 10))
					return
				}
				holding.Add(-1)
				if ok, err := s.Release(context.Background(), "job", holder, res.Lease.Token); err != nil || !ok {
					errs <- errors.New("release failed")
					return
				}
				granted++
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if d := mustDescribe(t, s, "job"); d.Held || d.LastToken != last.Load() {
		t.Errorf("Describe = %+v, want free with last token %d", d, last.Load())
	}
}

// A TryLock refused by a busy exclusive lock takes acquire.lua's short
// path (0b), which passes the holder's record on as strings: its answer
// must be the one the full path gives, here a waiter's refusal, which names
// the holder the same way.
func TestARefusedTryLockNamesTheHolderAsTheFullPathDoes(t *testing.T) {
	s := newStore(t, nil, Options{})
	sess, err := s.CreateSession(testCtx(t), "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		held  store.AcquireRequest
		asker store.AcquireRequest // without a waiter: the short path
	}{
		{"a lease of its own, a value with colons and bytes", req("own", "a", time.Minute, "v:1:\x00\xff:"),
			store.AcquireRequest{Name: "own", Holder: "b", TTL: time.Minute}},
		{"an empty value", req("empty", "a", 30*time.Second, ""),
			store.AcquireRequest{Name: "empty", Holder: "b", TTL: time.Minute}},
		{"held in a session", inSession("attached", "a", sess),
			store.AcquireRequest{Name: "attached", Holder: "b", TTL: time.Minute}},
		{"asked in a session", req("asked", "a", time.Minute, "v"),
			inSession("asked", "b", sess)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held := mustGrant(t, s, tt.held)
			short := mustRefuse(t, s, tt.asker)
			if tt.asker.Session == "" {
				// The short path answered, not the full one: its numbers
				// are the record's strings.
				k := s.keys(tt.asker.Name)
				v, err := s.scripts.acquire.Run(testCtx(t), s.client, []string{k.lease, k.queue, k.waiters, k.marker},
					s.acquireArgs(tt.asker, 1, 1).argv()...).Slice()
				if err != nil || len(v) != 10 {
					t.Fatalf("acquire.lua = %v, %v; want a refusal of 10 elements", v, err)
				}
				if _, ok := v[5].(string); !ok {
					t.Fatalf("refusal's ttl is %T; want the short path's string", v[5])
				}
			}
			waiting := tt.asker
			waiting.Waiter, waiting.WaiterTTL = "w1", time.Minute
			full := mustRefuse(t, s, waiting)
			if err := s.Dequeue(testCtx(t), waiting.Name, waiting.Waiter); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(short, full) {
				t.Fatalf("short path's refusal %+v;\nwant the full path's %+v", short, full)
			}
			if l := short.Lease; l.Holder != held.Holder || l.Token != held.Token || !bytes.Equal(l.Value, held.Value) ||
				!l.ExpiresAt.Equal(held.ExpiresAt) || l.Session != held.Session || l.Weight != 1 || !short.RetryAt.Equal(held.ExpiresAt) {
				t.Fatalf("refusal %+v; want it to name the grant %+v, retry at its expiry", short, held)
			}
		})
	}
}
