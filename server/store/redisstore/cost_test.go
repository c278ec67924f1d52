package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/server/store"
)

// commands counts the commands Redis ran since the last call, those run
// inside scripts included, by name (INFO commandstats).
// storeOnOwnRedis is a store on a Redis of its own, and that Redis's command
// counts: other tests' commands would count on a shared one.
func storeOnOwnRedis(t *testing.T, opts Options) (*Store, commands) {
	t.Helper()
	srv := redistest.Start(t, false)
	s, err := NewFromURL(context.Background(), srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	stats := commands{redis.NewClient(&redis.Options{Addr: srv.Addr()})}
	t.Cleanup(func() { _ = stats.c.Close() })
	return s, stats
}

type commands struct {
	c *redis.Client
}

func (c commands) reset(t testing.TB) {
	t.Helper()
	if err := c.c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// since returns the commands run since reset, by name, and their total,
// leaving out the INFO and CONFIG calls of the count itself and the
// handshake of a new connection.
func (c commands) since(t testing.TB) (map[string]int, int) {
	t.Helper()
	info, err := c.c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if strings.HasPrefix(name, "config") || name == "info" || name == "hello" || strings.HasPrefix(name, "client") {
			// The count's own, and a new connection's handshake.
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		byName[name] = n
		total += n
	}
	c.reset(t)
	return byName, total
}

// TestIdleObservingIsCheap: observing many elections where nothing changes
// costs Redis one command per name and Watch (the read of its lease), plus a
// few per batch, once the names are marked; and keeping many parked waiters
// of a name queued costs a few commands per heartbeat, not one per waiter.
func TestIdleObservingIsCheap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, stats := storeOnOwnRedis(t, Options{})

	const elections, waiters = 5000, 2000
	names := make([]string, elections)
	for i := range names {
		names[i] = fmt.Sprintf("election/%04d", i)
		if i%2 == 0 {
			mustGrant(t, s, req(names[i], "leader", time.Minute, "leader-value"))
		}
	}
	stats.reset(t)
	if _, err := s.Watch(ctx, names, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	first, firstTotal := stats.since(t)
	start := time.Now()
	if _, err := s.Watch(ctx, names, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	again, againTotal := stats.since(t)
	t.Logf("Watch of %d names: first %d commands %v; again %d commands %v in %s",
		elections, firstTotal, first, againTotal, again, took)
	batches := (elections + watchBatch - 1) / watchBatch
	if max := elections + 2*batches; againTotal > max {
		t.Errorf("a Watch of %d marked names cost %d commands, want at most %d (one read a name, two a batch)", elections, againTotal, max)
	}

	mustGrant(t, s, req("busy", "holder", time.Minute, ""))
	ids := make([]string, waiters)
	for i := range ids {
		ids[i] = fmt.Sprintf("waiter-%04d", i)
		mustRefuse(t, s, store.AcquireRequest{Name: "busy", Holder: ids[i], TTL: time.Minute, Waiter: ids[i], WaiterTTL: time.Minute})
	}
	stats.reset(t)
	if err := s.RefreshWaiters(ctx, "busy", ids, time.Minute); err != nil {
		t.Fatal(err)
	}
	refresh, refreshTotal := stats.since(t)
	t.Logf("RefreshWaiters of %d waiters: %d commands %v", waiters, refreshTotal, refresh)
	batches = (waiters + refreshWaitersBatch - 1) / refreshWaitersBatch
	if max := 7 * batches; refreshTotal > max { // a script call of six commands a batch
		t.Errorf("RefreshWaiters of %d waiters cost %d commands, want at most %d (%d batches)", waiters, refreshTotal, max, batches)
	}
}

// TestExclusiveCycleCost: the uncontended exclusive lock, the fast path
// that semaphores share a state machine with, costs Redis 4 commands to
// acquire and 3 to release (the scripts' own EVALSHA left out), the first
// grant of a name one more (PEXPIREAT: later calls find the key's expiry
// covers them); it cost 5 and 4 before the lease key recorded its expiry
// ('ex'). A semaphore's grant beside others costs the same while none of
// them ran out, and a renewal one command less than a grant.
func TestExclusiveCycleCost(t *testing.T) {
	t.Parallel()
	s, stats := storeOnOwnRedis(t, Options{LockDelay: time.Second})
	inScripts := func() (map[string]int, int) {
		byName, total := stats.since(t)
		for _, script := range []string{"evalsha", "eval"} {
			total -= byName[script]
			delete(byName, script)
		}
		return byName, total
	}

	mustGrant(t, s, req("warm-up", "a", time.Minute, "")) // connects
	var lock, sem store.Lease
	tests := []struct {
		name string
		run  func(t *testing.T)
		want int
	}{
		{"first exclusive acquire of a name", func(t *testing.T) { lock = mustGrant(t, s, req("lock", "a", time.Minute, "")) }, 5},
		{"exclusive release", func(t *testing.T) { mustRelease(t, s, lock) }, 3},
		{"exclusive acquire", func(t *testing.T) { lock = mustGrant(t, s, req("lock", "a", time.Minute, "")) }, 4},
		{"renewal", func(t *testing.T) {
			var err error
			if lock, err = s.Renew(context.Background(), "lock", "a", lock.Token, time.Minute); err != nil {
				t.Fatal(err)
			}
		}, 3},
		{"exclusive release again", func(t *testing.T) { mustRelease(t, s, lock) }, 3},
		{"first grant of a semaphore", func(t *testing.T) {
			mustGrant(t, s, store.AcquireRequest{Name: "sem", Holder: "a", TTL: time.Minute, Capacity: 16})
		}, 5},
		{"a grant beside another", func(t *testing.T) {
			sem = mustGrant(t, s, store.AcquireRequest{Name: "sem", Holder: "b", TTL: time.Minute, Capacity: 16})
		}, 4},
		{"a release beside another", func(t *testing.T) { mustRelease(t, s, sem) }, 4},
	}
	stats.reset(t)
	for _, tc := range tests {
		tc.run(t)
		byName, got := inScripts()
		t.Logf("%s: %d commands %v", tc.name, got, byName)
		if got != tc.want {
			t.Errorf("%s cost %d commands %v, want %d", tc.name, got, byName, tc.want)
		}
	}
}

// TestHandoffCostDoesNotGrowWithTheQueue: the next waiter of a released
// lock, the head of its queue, is granted with the same commands whether 2
// or 2,000 wait, and reads no batch of the queue (one ZRANGE: the head).
func TestHandoffCostDoesNotGrowWithTheQueue(t *testing.T) {
	t.Parallel()
	s, stats := storeOnOwnRedis(t, Options{})
	handoff := func(name string, waiters int) (map[string]int, int) {
		holder := mustGrant(t, s, req(name, "holder", time.Minute, ""))
		for i := range waiters {
			id := fmt.Sprintf("waiter-%04d", i)
			mustRefuse(t, s, store.AcquireRequest{Name: name, Holder: id, TTL: time.Minute, Waiter: id, WaiterTTL: time.Minute})
		}
		mustRelease(t, s, holder)
		stats.reset(t)
		mustGrant(t, s, store.AcquireRequest{Name: name, Holder: "waiter-0000", TTL: time.Minute, Waiter: "waiter-0000", WaiterTTL: time.Minute})
		return stats.since(t)
	}
	short, shortTotal := handoff("short", 2)
	long, longTotal := handoff("long", 2000)
	t.Logf("the head's grant: %d commands %v with 2 waiters, %d %v with 2,000", shortTotal, short, longTotal, long)
	if longTotal != shortTotal {
		t.Errorf("the head's grant cost %d commands with 2,000 waiters, %d with 2", longTotal, shortTotal)
	}
	if long["zrange"] != 1 {
		t.Errorf("the head's grant ran ZRANGE %d times, want 1 (the head)", long["zrange"])
	}
}

// TestAnAttachedCycleCostsWhatAnOwnCycleCosts: a name taken and released
// again and again in one session (a default session's lock in a loop)
// asks the session's slot once, at its first attach; its second grant
// makes it hot (one PEXPIREAT); from then on each cycle runs the scripts a
// lease of its own runs, and no more commands. Its key then lives the
// session keep past a release, where a name used once in a session lives
// the retention, as a lease of its own's does.
//
// A session's TTL longer than an eighth of the session keep (here 10
// minutes against an hour) costs no more: the expiry its grants set is
// that much further out, and their releases leave it.
func TestAnAttachedCycleCostsWhatAnOwnCycleCosts(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{time.Minute, 10 * time.Minute} {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			testAnAttachedCycleCostsWhatAnOwnCycleCosts(t, ttl)
		})
	}
}

func testAnAttachedCycleCostsWhatAnOwnCycleCosts(t *testing.T, sessionTTL time.Duration) {
	const idle = 10 * time.Minute
	s, stats := storeOnOwnRedis(t, Options{IdleNameTTL: idle})
	s.detacher.delay = time.Hour // the cycles alone (TestAJobPerNameCycleCost)
	sess, err := s.CreateSession(context.Background(), "alice", sessionTTL)
	if err != nil {
		t.Fatal(err)
	}
	cycle := func(req store.AcquireRequest) (scripts, total int) {
		t.Helper()
		stats.reset(t)
		l := mustGrant(t, s, req)
		if ok, err := s.Release(context.Background(), req.Name, req.Holder, l.Token); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		byName, total := stats.since(t)
		t.Logf("%s: %d commands %v", req.Name, total, byName)
		return byName["evalsha"], total
	}
	own := store.AcquireRequest{Name: "own", Holder: "w", TTL: time.Minute}
	attached := inSession("attached", "w", sess)
	pttl := func(name string) time.Duration {
		t.Helper()
		return s.client.PTTL(context.Background(), s.keys(name).lease).Val()
	}
	cycle(own)
	firstScripts, _ := cycle(attached)
	if firstScripts != 3 {
		t.Fatalf("the first attached cycle ran %d scripts; want 3 (attach, acquire, release)", firstScripts)
	}
	if d := pttl(attached.Name); d > idle*5/4 {
		t.Errorf("a name used once in a session expires in %s after its release; want at most the retention and a quarter (%s)", d, idle*5/4)
	}
	_, ownCost := cycle(own)
	if scripts, total := cycle(attached); scripts != 2 || total != ownCost+1 {
		t.Fatalf("the second attached cycle ran %d scripts, %d commands; want 2 scripts and a lease of its own's %d commands and a PEXPIREAT", scripts, total, ownCost)
	}
	for i := range 3 {
		if scripts, total := cycle(attached); scripts != 2 || total != ownCost {
			t.Fatalf("attached cycle %d ran %d scripts, %d commands; want 2 scripts and a lease of its own's %d commands", i+3, scripts, total, ownCost)
		}
	}
	if d, keep := pttl(attached.Name), time.Duration(s.sessionKeepMS())*time.Millisecond; d < keep {
		t.Errorf("a hot name expires in %s after its release; want the session keep (%s) at least", d, keep)
	}

	// A session refused (closed here) is asked again, and refuses.
	if err := s.CloseSession(context.Background(), sess.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), attached); !errors.Is(err, store.ErrSessionClosed) {
		t.Fatalf("Acquire in the closed session: %v; want ErrSessionClosed", err)
	}
}

// TestAJobPerNameCycleCost: a session that locks a new name for each job
// pays, beside the cycle's 3 scripts (attach, acquire, release), one
// script a name to detach it from the session once released (settle.lua,
// 4 commands), and per session and sweep a check and a prune (session.lua)
// shared by the names released in the meantime. Its names then hold
// nothing of the released names.
func TestAJobPerNameCycleCost(t *testing.T) {
	t.Parallel()
	s, stats := storeOnOwnRedis(t, Options{})
	s.detacher.delay = time.Hour // swept by hand below
	ctx := context.Background()
	sess, err := s.CreateSession(ctx, "alice", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const jobs = 20
	stats.reset(t)
	for i := range jobs {
		req := inSession(fmt.Sprintf("job/%d", i), "w", sess)
		l := mustGrant(t, s, req)
		if ok, err := s.Release(ctx, req.Name, req.Holder, l.Token); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
	}
	byName, cycles := stats.since(t)
	if byName["evalsha"] != 3*jobs {
		t.Fatalf("%d job cycles ran %d scripts; want 3 each: %v", jobs, byName["evalsha"], byName)
	}
	s.detachDue(ctx, time.Now().Add(2*time.Hour))
	byName, detach := stats.since(t)
	t.Logf("%d job cycles: %d commands; their detach %d: %v", jobs, cycles, detach, byName)
	if byName["evalsha"] != jobs+2 {
		t.Errorf("the detach of %d names ran %d scripts; want one a name, a check and a prune", jobs, byName["evalsha"])
	}
	// settle: TIME, HGETALL, PTTL, HSET; check and prune: TIME, GET,
	// HMGET (prune: HSET, then HGET and HDEL a name).
	if want := jobs*(1+4) + 2*(1+3) + 1 + 2*jobs; detach != want {
		t.Errorf("the detach of %d names ran %d commands; want %d", jobs, detach, want)
	}
	if n := s.client.HLen(ctx, s.sessionKeys(sess.ID)[1]).Val(); n != 0 {
		t.Errorf("the session's names hold %d names after the detach; want none", n)
	}
}
