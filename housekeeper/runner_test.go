package housekeeper_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/housekeeper"
	hkt "github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/redisurl"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// runner is a Runner under test with its own metrics registry.
type runner struct {
	*housekeeper.Runner
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// fast reads and finds sets often, so that tests take milliseconds.
var fast = housekeeper.Config{DiscoveryInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond}

// alone is the membership of an instance that is the only one.
func alone() housekeeper.Membership { return hkt.NewGroup().Join("solo") }

// startRunner starts a Runner on d's queues in rdb; it is stopped (and
// waited for) when t ends, unless stopped before.
func startRunner(t *testing.T, rdb redis.UniversalClient, d hkt.Deckard, member housekeeper.Membership, cfg housekeeper.Config) *runner {
	t.Helper()
	r := newRunner(t, rdb, d, member, cfg)
	r.start(context.Background())
	t.Cleanup(func() { r.stop(t) })
	return r
}

func newRunner(t *testing.T, rdb redis.UniversalClient, d hkt.Deckard, member housekeeper.Membership, cfg housekeeper.Config) *runner {
	t.Helper()
	cfg.Prefix = d.Prefix
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	hk, err := housekeeper.New(rdb, member, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &runner{Runner: hk, reg: reg}
}

func (r *runner) start(ctx context.Context) {
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan error, 1)
	go func() { r.done <- r.Run(ctx) }()
}

func (r *runner) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancellation")
	}
	r.cancel = nil
}

func (r *runner) moved(t *testing.T) float64 {
	return metric(t, r.reg, "housekeeper_messages_unlocked_total") + metric(t, r.reg, "housekeeper_messages_timed_out_total")
}

func TestRunnerMovesEveryDueMessageAndNothingElse(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	ctx := context.Background()
	now := hkt.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		d.Put(ctx, p, "orders", hkt.Active, "ready", 10)
		d.Put(ctx, p, "orders", hkt.LockAck, "acked-saved", float64(now-10))
		d.Put(ctx, p, "orders", hkt.LockAckScore, "acked-saved", -3.5)
		d.Put(ctx, p, "orders", hkt.LockAck, "acked", float64(now-10))
		d.Put(ctx, p, "orders", hkt.LockAck, "acked-later", float64(now+3_600_000))
		d.Put(ctx, p, "orders", hkt.LockAckScore, "acked-later", 5)
		d.Put(ctx, p, "orders", hkt.LockNack, "nacked-saved", float64(now-10))
		d.Put(ctx, p, "orders", hkt.LockNackScore, "nacked-saved", 0.125)
		d.Put(ctx, p, "orders", hkt.LockNack, "nacked", float64(now-10))
		d.Put(ctx, p, "orders", hkt.LockNack, "nacked-later", float64(now+3_600_000))
		d.Put(ctx, p, "orders", hkt.Tmp, "abandoned", float64(now-10))
		d.Put(ctx, p, "orders", hkt.Tmp, "working", float64(now+3_600_000))
	})
	r := startRunner(t, rdb, d, alone(), fast)
	testwait.Until(t, 10*time.Second, "5 messages moved", func() bool { return r.moved(t) == 5 })
	r.stop(t)
	after := hkt.NowMs(t, rdb)

	snap := d.Snapshot(t, rdb, "orders")
	acked := snap[hkt.Active]["acked"]
	if acked < float64(now) || acked > float64(after) {
		t.Errorf("acked without a saved score got %v, want Redis now in [%d, %d]", acked, now, after)
	}
	delete(snap[hkt.Active], "acked")
	want := hkt.Snapshot{
		hkt.Active:        {"ready": 10, "acked-saved": -3.5, "nacked-saved": 0.125, "nacked": 0, "abandoned": 0},
		hkt.Tmp:           {"working": float64(now + 3_600_000)},
		hkt.LockAck:       {"acked-later": float64(now + 3_600_000)},
		hkt.LockAckScore:  {"acked-later": 5},
		hkt.LockNack:      {"nacked-later": float64(now + 3_600_000)},
		hkt.LockNackScore: {},
	}
	if fmt.Sprint(snap) != fmt.Sprint(want) {
		t.Errorf("queue after one cycle:\n got %v\nwant %v", snap, want)
	}
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"housekeeper_messages_unlocked_total", []string{"queue", "orders", "lock_type", "ack"}, 2},
		{"housekeeper_messages_unlocked_total", []string{"queue", "orders", "lock_type", "nack"}, 2},
		{"housekeeper_messages_timed_out_total", []string{"queue", "orders"}, 1},
		{"housekeeper_batch_duration_seconds", []string{"task", "unlock"}, 2},
		{"housekeeper_batch_duration_seconds", []string{"task", "timeout"}, 1},
		{"housekeeper_batches_fenced_total", nil, 0},
	} {
		if got := metric(t, r.reg, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
}

func TestRunnerRepeatsBatchesUntilNothingIsDue(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	ctx := context.Background()
	now := hkt.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for i := range 2500 {
			d.Put(ctx, p, "big", hkt.LockNack, fmt.Sprint(i), float64(now-int64(i)-1))
		}
	})
	cfg := fast
	cfg.BatchSize = 1000
	r := startRunner(t, rdb, d, alone(), cfg)
	testwait.Until(t, 10*time.Second, "2500 messages moved", func() bool { return r.moved(t) == 2500 })
	r.stop(t)
	if n := metric(t, r.reg, "housekeeper_batch_duration_seconds", "task", "unlock"); n != 3 {
		t.Errorf("%v unlock batches, want 3 (1000 + 1000 + 500)", n)
	}
	if snap := d.Snapshot(t, rdb, "big"); len(snap[hkt.Active]) != 2500 || len(snap[hkt.LockNack]) != 0 {
		t.Errorf("active %d, lock_nack %d; want 2500 and 0", len(snap[hkt.Active]), len(snap[hkt.LockNack]))
	}
}

func TestRunnerFindsQueuesByTheirHashTag(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	ctx := context.Background()
	now := hkt.NowMs(t, rdb)
	// Each name is a legal queue that a parser splitting on ':' would take
	// for (a set of) another queue, or holds SCAN MATCH's special characters.
	queues := []string{"a::b:tmp", "a::b", "x:lock_nack", "x", "q:lock_ack:score", "q:lock_ack", "q", "we*ird[1]?", ":", "tmp"}
	wantKeys := make(map[string]bool)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for _, q := range queues {
			d.Put(ctx, p, q, hkt.LockAck, q+"/ack", float64(now-1))
			d.Put(ctx, p, q, hkt.LockAckScore, q+"/ack", 1.5)
			d.Put(ctx, p, q, hkt.LockNack, q+"/nack", float64(now-1))
			d.Put(ctx, p, q, hkt.Tmp, q+"/tmp", float64(now-1))
			wantKeys[d.Key(q, hkt.Active)] = true
			wantKeys[d.Prefix+":housekeeper:{"+q+"}:fence:unlock"] = true
			wantKeys[d.Prefix+":housekeeper:{"+q+"}:fence:timeout"] = true
		}
	})
	r := startRunner(t, rdb, d, alone(), fast)
	testwait.Until(t, 10*time.Second, "every message moved", func() bool { return r.moved(t) == float64(3*len(queues)) })
	r.stop(t)

	for _, q := range queues {
		snap := d.Snapshot(t, rdb, q)
		want := map[string]float64{q + "/ack": 1.5, q + "/nack": 0, q + "/tmp": 0}
		if fmt.Sprint(snap[hkt.Active]) != fmt.Sprint(want) {
			t.Errorf("queue %q: active %v, want %v", q, snap[hkt.Active], want)
		}
	}
	// Nothing but the active pools and the fences is left: no key was
	// written under a misread queue name.
	got := allKeys(t, rdb, d)
	// The index of the sets found, and its counter, are the housekeeper's
	// own; whether the index still lists the sets just emptied depends on
	// when the last discovery ran.
	delete(got, d.Prefix+":housekeeper:sets")
	delete(got, d.Prefix+":housekeeper:sets:seq")
	if !maps.Equal(got, wantKeys) {
		t.Errorf("keys after the run:\n got %v\nwant %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(wantKeys)))
	}
}

func TestRunnerLeavesKeysThatAreNotQueueSetsAlone(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	ctx := context.Background()
	now := hkt.NowMs(t, rdb)
	p := d.Prefix
	due := redis.Z{Score: float64(now - 1), Member: "m"}
	foreign := map[string]func() error{
		p + ":{recovery}":                      func() error { return rdb.Set(ctx, p+":{recovery}", "state", 0).Err() },
		p + ":{recovery}:tmp":                  func() error { return rdb.ZAdd(ctx, p+":{recovery}:tmp", due).Err() },
		p + ":queue:orders:tmp":                func() error { return rdb.ZAdd(ctx, p+":queue:orders:tmp", due).Err() },
		p + ":queue:{orders}x:tmp":             func() error { return rdb.ZAdd(ctx, p+":queue:{orders}x:tmp", due).Err() },
		p + ":queue:{orders}:tmp:archive":      func() error { return rdb.ZAdd(ctx, p+":queue:{orders}:tmp:archive", due).Err() },
		p + ":queue:{orders}:lock_xack":        func() error { return rdb.ZAdd(ctx, p+":queue:{orders}:lock_xack", due).Err() },
		p + ":queue:{}:tmp":                    func() error { return rdb.ZAdd(ctx, p+":queue:{}:tmp", due).Err() },
		p + "-other:queue:{orders}:tmp":        func() error { return rdb.ZAdd(ctx, p+"-other:queue:{orders}:tmp", due).Err() },
		p + ":housekeeper:{gone}:fence:unlock": func() error { return rdb.Set(ctx, p+":housekeeper:{gone}:fence:unlock", "7", 0).Err() },
		// A key of the right name and the wrong type: its batches fail,
		// and the other queues are still worked.
		p + ":queue:{broken}:tmp": func() error { return rdb.Set(ctx, p+":queue:{broken}:tmp", "x", 0).Err() },
	}
	for key, write := range foreign {
		if err := write(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Del(ctx, key) })
	}
	dump := func() map[string]string {
		out := make(map[string]string)
		for key := range foreign {
			v, err := rdb.Dump(ctx, key).Result()
			if err != nil {
				t.Fatalf("DUMP %s: %v", key, err)
			}
			out[key] = v
		}
		return out
	}
	before := dump()
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		d.Put(ctx, p, "orders", hkt.Tmp, "m", float64(now-1))
		d.Put(ctx, p, "orders", hkt.LockAck, "n", float64(now-1))
	})
	cfg := fast
	cfg.Logger = discardLogger // the broken queue's failures are expected
	r := startRunner(t, rdb, d, alone(), cfg)
	testwait.Until(t, 10*time.Second, "orders worked", func() bool { return r.moved(t) == 2 })
	r.stop(t)
	if after := dump(); !maps.Equal(before, after) {
		for key := range before {
			if before[key] != after[key] {
				t.Errorf("%s was changed", key)
			}
		}
	}
	if active := d.Snapshot(t, rdb, "orders")[hkt.Active]; len(active) != 2 {
		t.Errorf("orders' active pool %v, want m and n", active)
	}
}

// scriptHook runs before and/or after the first script call whose keys
// include key.
type scriptHook struct {
	key           string
	once          sync.Once
	before, after func()
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" && cmd.Name() != "eval" || !slices.Contains(cmd.Args(), any(h.key)) {
			return next(ctx, cmd)
		}
		first := false
		h.once.Do(func() { first = true })
		if first && h.before != nil {
			h.before()
		}
		err := next(ctx, cmd)
		if first && h.after != nil {
			h.after()
		}
		return err
	}
}

func seedDue(t *testing.T, rdb *redis.Client, d hkt.Deckard, queue string, set hkt.Set, n int) {
	t.Helper()
	ctx := context.Background()
	now := hkt.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for i := range n {
			d.Put(ctx, p, queue, set, fmt.Sprint(i), float64(now-1))
		}
	})
}

func TestRunnerStopsAtTheNextBatchOnceItsMembershipIsLost(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	seedDue(t, rdb, d, "q", hkt.LockAck, 2500)
	group := hkt.NewGroup()
	member := group.Join("first")
	// The membership ends while the first batch runs.
	rdb.AddHook(&scriptHook{key: d.Key("q", hkt.LockAck), after: member.Leave})
	cfg := fast
	cfg.BatchSize = 1000
	r := startRunner(t, rdb, d, member, cfg)
	testwait.Until(t, 10*time.Second, "the first batch", func() bool { return r.moved(t) > 0 })
	time.Sleep(20 * cfg.ProbeInterval) // time enough for more batches, were any started
	if snap := d.Snapshot(t, rdb, "q"); len(snap[hkt.Active]) != 1000 || len(snap[hkt.LockAck]) != 1500 {
		t.Fatalf("active %d, lock_ack %d; want 1000 and 1500: work must stop at the first batch boundary",
			len(snap[hkt.Active]), len(snap[hkt.LockAck]))
	}
	// Another instance joins the (now empty) view and takes the rest.
	next := startRunner(t, rdb, d, group.Join("second"), cfg)
	testwait.Until(t, 10*time.Second, "the rest moved", func() bool { return next.moved(t) == 1500 })
}

// ownedBy returns a queue name whose task is owned by member in view.
func ownedBy(t *testing.T, view housekeeper.View, task, member string) string {
	t.Helper()
	for i := range 1000 {
		if q := fmt.Sprint("q-", i); housekeeper.OwnerOf(view, task, q) == member {
			return q
		}
	}
	t.Fatalf("no queue of %d is owned by %s", 1000, member)
	return ""
}

func TestRunnersWorkOnlyWhatTheyOwnAndTakeOverWhenAMemberLeaves(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	group := hkt.NewGroup()
	mine, theirs := group.Join("mine"), group.Join("theirs")
	view := group.View()
	myQueue := ownedBy(t, view, "timeout", "mine")
	seedDue(t, rdb, d, myQueue, hkt.Tmp, 10)
	seedDue(t, rdb, d, ownedBy(t, view, "timeout", "theirs"), hkt.Tmp, 10)
	// A message due only in an hour keeps mine's set, which is read every
	// round.
	later := float64(hkt.NowMs(t, rdb) + 3_600_000)
	d.Seed(t, rdb, func(p redis.Pipeliner) { d.Put(context.Background(), p, myQueue, hkt.Tmp, "later", later) })
	r := startRunner(t, rdb, d, mine, fast) // "theirs" is a member that does not run
	testwait.Until(t, 10*time.Second, "mine moved", func() bool { return r.moved(t) == 10 })
	// Rounds enough to have worked theirs too, were it worked here.
	reads := metric(t, r.reg, "housekeeper_set_reads_total")
	testwait.Until(t, 10*time.Second, "20 rounds of reads", func() bool {
		return metric(t, r.reg, "housekeeper_set_reads_total") >= reads+20
	})
	if got := r.moved(t); got != 10 {
		t.Fatalf("%v moved, want mine's 10: a queue owned by another member was worked", got)
	}
	theirs.Leave() // as the leader does once its membership lease expires
	testwait.Until(t, 10*time.Second, "theirs taken over", func() bool { return r.moved(t) == 20 })
}

func TestAnInstanceStillOnAnOldViewIsFencedOffOnceTheNewOwnerWorked(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	group := hkt.NewGroup()
	stale, successor := group.Join("stale"), group.Join("successor")
	q := ownedBy(t, group.View(), "timeout", "stale")
	// stale is cut off: it keeps the view in which it owns q, while the
	// group moves on to one without it.
	stale.Freeze()
	stale.Evict()
	seedDue(t, rdb, d, q, hkt.Tmp, 5)
	next := startRunner(t, rdb, d, successor, fast)
	testwait.Until(t, 10*time.Second, "the successor moved q's messages", func() bool { return next.moved(t) == 5 })
	next.stop(t)

	seedDue(t, rdb, d, q+"-later", hkt.Tmp, 1) // another queue, to see that stale works at all
	seedDue(t, rdb, d, q, hkt.Tmp, 5)
	cfg := fast
	cfg.Logger = discardLogger
	old := startRunner(t, rdb, d, stale, cfg)
	testwait.Until(t, 10*time.Second, "a fenced batch", func() bool {
		return metric(t, old.reg, "housekeeper_batches_fenced_total", "task", "timeout") >= 1
	})
	// It reads q again, round after round, but does not retry under the
	// same view.
	reads := metric(t, old.reg, "housekeeper_set_reads_total")
	testwait.Until(t, 10*time.Second, "q read 10 times more", func() bool {
		return metric(t, old.reg, "housekeeper_set_reads_total") >= reads+10
	})
	if n := metric(t, old.reg, "housekeeper_batches_fenced_total", "task", "timeout"); n != 1 {
		t.Errorf("%v fenced batches, want 1: a fenced set waits for a newer view", n)
	}
	if n := len(d.Snapshot(t, rdb, q)[hkt.Tmp]); n != 5 || metric(t, old.reg, "housekeeper_messages_timed_out_total", "queue", q) != 0 {
		t.Errorf("%d of q's messages left in tmp, want 5: the stale instance moved some", n)
	}
}

func TestRunnerShutdownFinishesTheBatchInFlight(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	seedDue(t, rdb, d, "q", hkt.LockAck, 2500)
	r := newRunner(t, rdb, d, alone(), housekeeper.Config{BatchSize: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Shutdown is asked for as the first batch of q is sent.
	rdb.AddHook(&scriptHook{key: d.Key("q", hkt.LockAck), before: cancel})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if snap := d.Snapshot(t, rdb, "q"); len(snap[hkt.Active]) != 1000 || len(snap[hkt.LockAck]) != 1500 {
		t.Errorf("active %d, lock_ack %d; want 1000 and 1500: the batch in flight completes, no other starts", len(snap[hkt.Active]), len(snap[hkt.LockAck]))
	}
	if got := metric(t, r.reg, "housekeeper_messages_unlocked_total"); got != 1000 {
		t.Errorf("unlocked counter %v, want 1000", got)
	}
}

// A set's head is read once and worked when it falls due: no reading in
// between.
func TestASetIsWorkedWhenItsHeadFallsDueWithoutBeingReadMeanwhile(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	now := hkt.NowMs(t, rdb)
	due := now + 1500
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		d.Put(context.Background(), p, "q", hkt.LockNack, "soon", float64(due))
		d.Put(context.Background(), p, "q", hkt.LockNack, "later", float64(now+3_600_000))
	})
	cfg := housekeeper.Config{DiscoveryInterval: 50 * time.Millisecond, ProbeInterval: time.Minute}
	r := startRunner(t, rdb, d, alone(), cfg)
	testwait.Until(t, 20*time.Second, "soon moved", func() bool { return r.moved(t) == 1 })
	if at := hkt.NowMs(t, rdb); at < due {
		t.Fatalf("moved at %d, before it fell due at %d", at, due)
	}
	// One read at the start, one after the batch; none while waiting.
	if n := metric(t, r.reg, "housekeeper_set_reads_total"); n > 2 {
		t.Errorf("%v reads of the set, want at most 2", n)
	}
	if snap := d.Snapshot(t, rdb, "q"); len(snap[hkt.LockNack]) != 1 {
		t.Errorf("lock_nack %v, want later alone", snap[hkt.LockNack])
	}
}

// However long a set's head stays, the set is read every ProbeInterval: a
// message that falls due before that head (a lock shorter than every lock
// already in its set, say) is moved within about ProbeInterval of falling
// due, not when the head does.
func TestAMessageDueBeforeItsSetsHeadIsMovedWithinAboutAProbeInterval(t *testing.T) {
	tests := []struct {
		name string
		set  hkt.Set
		in   time.Duration // from its addition to its due time
	}{
		{"nacked with a lock that ends at once", hkt.LockNack, 0},
		{"acked with a 100ms lock", hkt.LockAck, 100 * time.Millisecond},
		{"pulled with a 100ms deadline", hkt.Tmp, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := redistest.Client(t)
			d := newDeckard(t, rdb)
			ctx := context.Background()
			now := hkt.NowMs(t, rdb)
			d.Seed(t, rdb, func(p redis.Pipeliner) { d.Put(ctx, p, "q", tt.set, "later", float64(now+10*60_000)) })
			cfg := housekeeper.Config{DiscoveryInterval: 50 * time.Millisecond, ProbeInterval: 100 * time.Millisecond}
			r := startRunner(t, rdb, d, alone(), cfg)
			testwait.Until(t, 30*time.Second, "the set's head read 8 times, unchanged", func() bool {
				return metric(t, r.reg, "housekeeper_set_reads_total") >= 8
			})
			due := hkt.NowMs(t, rdb) + tt.in.Milliseconds()
			d.Seed(t, rdb, func(p redis.Pipeliner) { d.Put(ctx, p, "q", tt.set, "sooner", float64(due)) })
			// Well above ProbeInterval, for a loaded machine; far below the
			// 10 minutes until the head falls due.
			const bound = 3 * time.Second
			testwait.Until(t, tt.in+bound, "sooner moved", func() bool { return r.moved(t) == 1 })
			r.stop(t)
			snap := d.Snapshot(t, rdb, "q")
			if _, ok := snap[hkt.Active]["sooner"]; !ok || len(snap[hkt.Active]) != 1 {
				t.Errorf("active pool %v, want sooner alone", snap[hkt.Active])
			}
			if _, ok := snap[tt.set]["later"]; !ok || len(snap[tt.set]) != 1 {
				t.Errorf("%s %v, want later alone", tt.set, snap[tt.set])
			}
		})
	}
}

// countProbes counts the pipelines that read sets' heads (ZRANGE).
type countProbes struct{ n atomic.Int64 }

func (h *countProbes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countProbes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *countProbes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "zrange" }) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// An idle instance reads the head of every set it owns each ProbeInterval,
// all of them in one pipeline: its cost is (its sets / ProbeInterval)
// pipelined ZRANGEs a second, and it wakes once an interval, not once a set.
// Its schedule runs on a fake clock, moved on one ProbeInterval a round.
func TestAnIdleInstanceReadsEverySetInOnePipelineEachProbeInterval(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	ctx := context.Background()
	now := hkt.NowMs(t, rdb)
	const sets = 20
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for i := range sets {
			d.Put(ctx, p, fmt.Sprint("q", i), hkt.Tmp, "later", float64(now+3_600_000))
		}
	})
	probes := &countProbes{}
	rdb.AddHook(probes)
	clock := clockwork.NewFakeClock()
	cfg := housekeeper.WithClock(housekeeper.Config{DiscoveryInterval: 50 * time.Millisecond, ProbeInterval: 100 * time.Millisecond}, clock)
	r := startRunner(t, rdb, d, alone(), cfg)
	reads := func() float64 { return metric(t, r.reg, "housekeeper_set_reads_total") }
	testwait.Until(t, 10*time.Second, "every set read", func() bool { return reads() >= sets })
	const rounds = 20
	readsBefore, probesBefore := reads(), probes.n.Load()
	// A quarter of the interval at a time: a round more often than each
	// ProbeInterval would read the sets more often than the rounds.
	for round := 1; round <= rounds; round++ {
		for range 4 {
			clock.Advance(cfg.ProbeInterval / 4)
		}
		testwait.Until(t, 10*time.Second, fmt.Sprintf("round %d's reads", round), func() bool {
			return reads() >= readsBefore+float64(round*sets)
		})
	}
	read, pipelines := reads()-readsBefore, probes.n.Load()-probesBefore
	if read != rounds*sets || pipelines != rounds {
		t.Errorf("%d rounds made %v reads of %d sets in %d pipelines, want each set read once a round, in one pipeline", rounds, read, sets, pipelines)
	}
}

func TestRunnersShareTheWorkAndMoveEachDueMessageExactlyOnce(t *testing.T) {
	const (
		queues                       = 300
		ackDue, nackDue, tmpDue      = 30, 20, 20
		ackLater, nackLater, tmpLate = 5, 5, 5
		active                       = 5
	)
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	now := hkt.NowMs(t, rdb)
	past := func() float64 { return float64(now - 1 - rng.Int64N(3_600_000)) }
	future := func() float64 { return float64(now + 3_600_000 + rng.Int64N(3_600_000)) }
	saved := func() float64 { return float64(rng.Int64N(2_000_000)-1_000_000) / 8 }

	names := make([]string, queues)
	want := make(map[string]hkt.Snapshot, queues) // final state, but for ack defaults
	ackNow := make(map[string][]string)           // ids whose score must be Redis now
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for i := range names {
			q := fmt.Sprintf("q:%03d", i)
			if i%10 == 0 {
				q += ":lock_ack" // look-alike names among them
			}
			names[i] = q
			w := hkt.Snapshot{}
			for _, s := range hkt.Sets {
				w[s] = map[string]float64{}
			}
			put := func(s hkt.Set, id string, score float64) { d.Put(ctx, p, q, s, id, score) }
			for j := range active {
				id, score := fmt.Sprint("active-", j), float64(j)
				put(hkt.Active, id, score)
				w[hkt.Active][id] = score
			}
			for j := range ackDue {
				id := fmt.Sprint("ack-", j)
				put(hkt.LockAck, id, past())
				if j%2 == 0 {
					s := saved()
					put(hkt.LockAckScore, id, s)
					w[hkt.Active][id] = s
				} else {
					ackNow[q] = append(ackNow[q], id)
				}
			}
			for j := range nackDue {
				id := fmt.Sprint("nack-", j)
				put(hkt.LockNack, id, past())
				w[hkt.Active][id] = 0
				if j%3 == 0 {
					s := saved()
					put(hkt.LockNackScore, id, s)
					w[hkt.Active][id] = s
				}
			}
			for j := range tmpDue {
				id := fmt.Sprint("tmp-", j)
				put(hkt.Tmp, id, past())
				w[hkt.Active][id] = 0
			}
			for j := range ackLater {
				id, at, s := fmt.Sprint("ack-later-", j), future(), saved()
				put(hkt.LockAck, id, at)
				put(hkt.LockAckScore, id, s)
				w[hkt.LockAck][id], w[hkt.LockAckScore][id] = at, s
			}
			for j := range nackLater {
				id, at, s := fmt.Sprint("nack-later-", j), future(), saved()
				put(hkt.LockNack, id, at)
				put(hkt.LockNackScore, id, s)
				w[hkt.LockNack][id], w[hkt.LockNackScore][id] = at, s
			}
			for j := range tmpLate {
				id, at := fmt.Sprint("tmp-later-", j), future()
				put(hkt.Tmp, id, at)
				w[hkt.Tmp][id] = at
			}
			want[q] = w
		}
	})

	group := hkt.NewGroup()
	cfg := fast
	cfg.BatchSize, cfg.Parallelism = 8, 3
	runners := make([]*runner, 3)
	for i := range runners {
		runners[i] = startRunner(t, redistest.Client(t), d, group.Join(fmt.Sprint("hk-", i)), cfg)
	}
	total := func(name string, labels ...string) (sum float64) {
		for _, r := range runners {
			sum += metric(t, r.reg, name, labels...)
		}
		return sum
	}
	const due = queues * (ackDue + nackDue + tmpDue)
	testwait.Until(t, 60*time.Second, "every due message moved", func() bool {
		return total("housekeeper_messages_unlocked_total")+total("housekeeper_messages_timed_out_total") >= due
	})
	// A few more reads of every set, in which nothing else may move.
	reads := total("housekeeper_set_reads_total")
	testwait.Until(t, 60*time.Second, "every set read twice more", func() bool {
		return total("housekeeper_set_reads_total") >= reads+2*queues*3
	})
	for _, r := range runners {
		r.cancel()
	}
	for _, r := range runners {
		r.stop(t)
	}
	after := hkt.NowMs(t, rdb)

	for _, q := range names {
		got := d.Snapshot(t, rdb, q)
		for _, id := range ackNow[q] {
			s, ok := got[hkt.Active][id]
			if !ok || s < float64(now) || s > float64(after) {
				t.Errorf("queue %q: %s has score %v (present %v), want Redis now in [%d, %d]", q, id, s, ok, now, after)
			}
			delete(got[hkt.Active], id)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[q]) {
			t.Errorf("queue %q:\n got %v\nwant %v", q, got, want[q])
		}
	}
	// Counters count each move once: no message was moved twice.
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"housekeeper_messages_unlocked_total", []string{"lock_type", "ack"}, queues * ackDue},
		{"housekeeper_messages_unlocked_total", []string{"lock_type", "nack"}, queues * nackDue},
		{"housekeeper_messages_timed_out_total", nil, queues * tmpDue},
		{"housekeeper_batches_fenced_total", nil, 0},
	} {
		if got := total(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v summed over runners = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Each queue's task was worked by the one instance the view names.
	view := group.View()
	for _, q := range names {
		for _, c := range []struct {
			task   string
			metric string
		}{{"unlock", "housekeeper_messages_unlocked_total"}, {"timeout", "housekeeper_messages_timed_out_total"}} {
			var workers []string
			for i, r := range runners {
				if metric(t, r.reg, c.metric, "queue", q) > 0 {
					workers = append(workers, fmt.Sprint("hk-", i))
				}
			}
			if owner := housekeeper.OwnerOf(view, c.task, q); !slices.Equal(workers, []string{owner}) {
				t.Errorf("%s of %q worked by %v, want its owner %s alone", c.task, q, workers, owner)
			}
		}
	}
	for i, r := range runners {
		t.Logf("runner %d moved %v messages", i, r.moved(t))
	}
}

func TestQueueGaugesAreReportedOnlyByTheLeader(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	seedDue(t, rdb, d, "a::b:tmp", hkt.Active, 3)
	seedDue(t, rdb, d, "a::b:tmp", hkt.LockNack, 2)
	seedDue(t, rdb, d, "c", hkt.Tmp, 4)
	r := newRunner(t, rdb, d, alone(), housekeeper.Config{})
	tests := []struct {
		leader bool
		queue  string
		set    string
		want   float64
	}{
		{false, "a::b:tmp", "active", 0},
		{true, "a::b:tmp", "active", 3},
		{true, "a::b:tmp", "lock_nack", 2},
		{true, "a::b:tmp", "tmp", 0},
		{true, "c", "tmp", 4},
		{true, "c", "active", 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("leader=%v/%s/%s", tt.leader, tt.queue, tt.set), func(t *testing.T) {
			r.SetLeader(tt.leader)
			if got := metric(t, r.reg, "housekeeper_queue_messages", "prefix", d.Prefix, "queue", tt.queue, "set", tt.set); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			var leader float64
			if tt.leader {
				leader = 1
			}
			if got := metric(t, r.reg, "housekeeper_leader", "prefix", d.Prefix); got != leader {
				t.Errorf("housekeeper_leader = %v, want %v", got, leader)
			}
		})
	}
	r.SetLeader(true)
	if got := metric(t, r.reg, "housekeeper_queue_messages"); got != 9 {
		t.Errorf("all gauges sum to %v, want 9", got)
	}
}

// Two Runners on two prefixes in one process, registered on one registry,
// each report their own queues: the same queue name on both prefixes is two
// series.
func TestRunnersOnTwoPrefixesKeepTheirMetricsApart(t *testing.T) {
	rdb := redistest.Client(t)
	a, b := newDeckard(t, rdb), newDeckard(t, rdb)
	seedDue(t, rdb, a, "orders", hkt.Tmp, 2)
	seedDue(t, rdb, b, "orders", hkt.Tmp, 5)
	reg := prometheus.NewRegistry()
	runners := make(map[string]*housekeeper.Runner)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, d := range []hkt.Deckard{a, b} {
		cfg := fast
		cfg.Prefix, cfg.Registerer, cfg.Logger = d.Prefix, reg, testLogger(t)
		r, err := housekeeper.New(rdb, alone(), cfg)
		if err != nil {
			t.Fatalf("Runner on %s: %v", d.Prefix, err)
		}
		runners[d.Prefix] = r
		wg.Go(func() { _ = r.Run(ctx) })
	}
	testwait.Until(t, 10*time.Second, "both prefixes worked", func() bool {
		return metric(t, reg, "housekeeper_messages_timed_out_total") == 7
	})
	for _, c := range []struct {
		prefix string
		want   float64
	}{{a.Prefix, 2}, {b.Prefix, 5}} {
		if got := metric(t, reg, "housekeeper_messages_timed_out_total", "prefix", c.prefix, "queue", "orders"); got != c.want {
			t.Errorf("housekeeper_messages_timed_out_total{prefix=%s,queue=orders} = %v, want %v", c.prefix, got, c.want)
		}
	}

	// The moved messages are in the active pools now: a's 2, b's 5.
	tests := []struct {
		name             string
		leadA, leadB     bool
		activeA, activeB float64 // housekeeper_queue_messages{queue=orders,set=active}
	}{
		{"neither leads", false, false, 0, 0},
		{"a leads", true, false, 2, 0},
		{"b leads", false, true, 0, 5},
		{"both lead", true, true, 2, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runners[a.Prefix].SetLeader(tt.leadA)
			runners[b.Prefix].SetLeader(tt.leadB)
			for _, c := range []struct {
				prefix string
				lead   bool
				active float64
			}{{a.Prefix, tt.leadA, tt.activeA}, {b.Prefix, tt.leadB, tt.activeB}} {
				if got := metric(t, reg, "housekeeper_queue_messages", "prefix", c.prefix, "queue", "orders", "set", "active"); got != c.active {
					t.Errorf("housekeeper_queue_messages{prefix=%s,queue=orders,set=active} = %v, want %v", c.prefix, got, c.active)
				}
				var leader float64
				if c.lead {
					leader = 1
				}
				if got := metric(t, reg, "housekeeper_leader", "prefix", c.prefix); got != leader {
					t.Errorf("housekeeper_leader{prefix=%s} = %v, want %v", c.prefix, got, leader)
				}
			}
		})
	}
}

// Runners of one prefix in one process (a benchmark runs several) share
// their series; the queue gauges are reported while either of them leads,
// whatever the order in which they step up and down.
func TestRunnersOfOnePrefixShareTheirMetrics(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	seedDue(t, rdb, d, "orders", hkt.Active, 4)
	reg := prometheus.NewRegistry()
	var rs [2]*housekeeper.Runner
	for i := range rs {
		r, err := housekeeper.New(rdb, alone(), housekeeper.Config{Prefix: d.Prefix, Registerer: reg})
		if err != nil {
			t.Fatalf("Runner %d on one registry: %v", i, err)
		}
		rs[i] = r
	}
	reported := func() bool {
		return metric(t, reg, "housekeeper_queue_messages", "queue", "orders", "set", "active") == 4 &&
			metric(t, reg, "housekeeper_leader") == 1
	}
	steps := []struct {
		runner int
		leader bool
		want   bool
	}{
		{0, false, false}, // never led: stepping down changes nothing
		{0, true, true},
		{1, true, true}, // the successor is elected before the old leader steps down
		{0, false, true},
		{0, false, true}, // twice
		{1, false, false},
	}
	for i, s := range steps {
		rs[s.runner].SetLeader(s.leader)
		if got := reported(); got != s.want {
			t.Fatalf("step %d, runner %d SetLeader(%v): gauges reported %v, want %v", i, s.runner, s.leader, got, s.want)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	rdb := redistest.Client(t)
	tests := []struct {
		name   string
		member housekeeper.Membership
		cfg    housekeeper.Config
	}{
		{"no membership", nil, housekeeper.Config{}},
		{"prefix with braces", alone(), housekeeper.Config{Prefix: "dv{1}"}},
		{"negative batch size", alone(), housekeeper.Config{BatchSize: -1}},
		{"negative parallelism", alone(), housekeeper.Config{Parallelism: -1}},
		{"negative discovery interval", alone(), housekeeper.Config{DiscoveryInterval: -time.Second}},
		{"negative probe interval", alone(), housekeeper.Config{ProbeInterval: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := housekeeper.New(rdb, tt.member, tt.cfg); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

// countDiscoveries counts the two ways to find the sets: SCAN commands
// and reads of the index (ZRANGEBYSCORE).
type countDiscoveries struct{ scans, indexReads atomic.Int64 }

func (h *countDiscoveries) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countDiscoveries) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *countDiscoveries) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "scan":
			h.scans.Add(1)
		case "zrangebyscore":
			h.indexReads.Add(1)
		}
		return next(ctx, cmd)
	}
}

// Instances take turns to SCAN, one a DiscoveryInterval, and the others
// learn of the sets from the index: a queue created while they run is
// found and worked by its owner, whoever scanned.
func TestInstancesTakeTurnsToScanAndShareWhatTheyFind(t *testing.T) {
	// A Redis of its own: a discovery is one SCAN call only while the whole
	// keyspace holds fewer keys than its COUNT, which the shared test Redis,
	// filled by the tests of other packages running beside this one, often
	// does not.
	srv := redistest.Start(t, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	d := newDeckard(t, rdb)
	found := &countDiscoveries{}
	rdb.AddHook(found)
	group := hkt.NewGroup()
	cfg := fast
	cfg.DiscoveryInterval = 100 * time.Millisecond
	var runners []*runner
	for i := range 3 {
		runners = append(runners, startRunner(t, rdb, d, group.Join(fmt.Sprint("hk-", i)), cfg))
	}
	moved := func() (n float64) {
		for _, r := range runners {
			n += r.moved(t)
		}
		return n
	}
	const queues = 30
	for round := range 3 {
		for q := range queues {
			seedDue(t, rdb, d, fmt.Sprintf("r%d-q%d", round, q), hkt.Tmp, 1)
		}
		testwait.Until(t, 10*time.Second, "every new queue worked", func() bool { return moved() == float64((round+1)*queues) })
	}
	// Each instance finds the sets once an interval: the one on duty by
	// SCAN (a single call here), the two others from the index; were every
	// instance to scan, every discovery would be a SCAN.
	const discoveries = 60
	scans, reads := found.scans.Load(), found.indexReads.Load()
	testwait.Until(t, 30*time.Second, fmt.Sprint(discoveries, " discoveries more"), func() bool {
		return found.scans.Load()-scans+found.indexReads.Load()-reads >= discoveries
	})
	scans, reads = found.scans.Load()-scans, found.indexReads.Load()-reads
	// A third of them SCANs; at most two thirds leaves room for chance.
	if 3*scans > 2*(scans+reads) {
		t.Errorf("%d SCANs and %d reads of the index by 3 instances, want about one SCAN in three discoveries", scans, reads)
	}
}

// On a Redis Cluster the queues' sets spread over the masters: discovery
// scans every master, the heads are read across slots, the index lives on
// its own slot, and each batch stays in its queue's slot.
func TestRunnersWorkQueuesOnARedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb, err := redisurl.NewClient(cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rdb.Close() }()
	d := hkt.Deckard{Prefix: fmt.Sprintf("hk-cluster-%d", time.Now().UnixNano())}
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	const queues = 40
	for q := range queues {
		queue := fmt.Sprint("q", q)
		for _, s := range []hkt.Set{hkt.Tmp, hkt.LockAck, hkt.LockNack} {
			if err := rdb.ZAdd(ctx, d.Key(queue, s), redis.Z{Score: float64(now.UnixMilli() - 1), Member: string(s)}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	group := hkt.NewGroup()
	var runners []*runner
	for i := range 2 {
		runners = append(runners, startRunner(t, rdb, d, group.Join(fmt.Sprint("hk-", i)), fast))
	}
	testwait.Until(t, 20*time.Second, "every message moved", func() bool {
		return runners[0].moved(t)+runners[1].moved(t) == 3*queues
	})
	for q := range queues {
		if n, err := rdb.ZCard(ctx, d.Key(fmt.Sprint("q", q), hkt.Active)).Result(); err != nil || n != 3 {
			t.Fatalf("q%d's active pool holds %d (%v), want 3", q, n, err)
		}
	}
}
