package housekeeper_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/coordinator-dev/coordinator/housekeeper"
	hkt "github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/housekeeper/storage"
	"github.com/coordinator-dev/coordinator/internal/testkit/mongotest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// withStorage is fast with the storage tasks on db, looking for work often.
func withStorage(db *mongo.Database) housekeeper.Config {
	cfg := fast
	cfg.Storage = housekeeper.StorageConfig{
		Storage:         storage.New(db, "", "", nil),
		Interval:        50 * time.Millisecond,
		MetricsInterval: 100 * time.Millisecond,
		ConfigInterval:  50 * time.Millisecond,
		RecheckInterval: time.Hour,
	}
	return cfg
}

// finishedRecovery marks d's cache as recovered, as a Deckard cache that
// never lost its data is, so that TTL and max elements run at once.
func finishedRecovery(t *testing.T, rdb *redis.Client, d hkt.Deckard) {
	t.Helper()
	if err := rdb.Set(t.Context(), d.Prefix+":{recovery_storage_breakpoint}", "recovery_finished", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestTTLRemovesExpiredMessagesFromStorageAndCacheOnce(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	db := mongotest.Database(t)
	finishedRecovery(t, rdb, d)
	ctx := context.Background()
	now := time.Now()
	var msgs []hkt.Stored
	for i := range 30 {
		expiry := now.Add(-time.Minute)
		if i%3 == 0 {
			expiry = now.Add(time.Hour)
		}
		msgs = append(msgs, hkt.Stored{Queue: fmt.Sprint("q", i%4, "::s"), ID: fmt.Sprint("m", i), Expiry: expiry})
	}
	hkt.Store(t, db, msgs...)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for i, m := range msgs {
			switch i % 3 {
			case 1:
				d.Put(ctx, p, m.Queue, hkt.Active, m.ID, 1)
			case 2:
				d.Put(ctx, p, m.Queue, hkt.LockAck, m.ID, float64(now.Add(time.Hour).UnixMilli()))
				d.Put(ctx, p, m.Queue, hkt.LockAckScore, m.ID, 7)
			default:
				d.Put(ctx, p, m.Queue, hkt.Tmp, m.ID, float64(now.Add(time.Hour).UnixMilli()))
			}
		}
	})
	group := hkt.NewGroup()
	cfg := withStorage(db)
	cfg.Storage.TTLBatch = 4 // several steps
	var runners []*runner
	for i := range 3 {
		runners = append(runners, startRunner(t, rdb, d, group.Join(fmt.Sprint("i", i)), cfg))
	}
	sum := func(name string) (n float64) {
		for _, r := range runners {
			n += metric(t, r.reg, name)
		}
		return n
	}
	testwait.Until(t, 20*time.Second, "20 expired messages removed", func() bool {
		return sum("deckard_ttl_messages_removed_total") == 20
	})
	// Each removed message was in one set; a locked one with a saved score
	// counts twice, as Deckard counts it.
	testwait.Until(t, 10*time.Second, "their cache entries removed", func() bool {
		return sum("deckard_ttl_messages_cache_removed_total") == 10+2*10
	})
	for q := range 4 {
		queue := fmt.Sprint("q", q, "::s")
		stored := hkt.StoredIDs(t, db, queue)
		snap := d.Snapshot(t, rdb, queue)
		for i, m := range msgs {
			if m.Queue != queue {
				continue
			}
			inCache := false
			for _, s := range hkt.Sets {
				if _, ok := snap[s][m.ID]; ok {
					inCache = true
				}
			}
			if keep := i%3 == 0; stored[m.ID] != keep || inCache != keep {
				t.Errorf("%s/%s: stored %v, cached %v; want both %v", queue, m.ID, stored[m.ID], inCache, keep)
			}
		}
	}
	// Deckard labels a queue by its prefix, the part before "::".
	var q0 float64
	for _, r := range runners {
		q0 += metric(t, r.reg, "deckard_ttl_messages_removed_total", "queue", "q0")
	}
	if q0 != 5 {
		t.Errorf("deckard_ttl_messages_removed_total{queue=\"q0\"} = %v, want 5", q0)
	}
}

func TestMaxElementsTrimsEachQueueToExactlyItsMaximum(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	db := mongotest.Database(t)
	finishedRecovery(t, rdb, d)
	ctx := context.Background()
	now := time.Now()
	limits := map[string]int64{"a": 3, "b": 10, "c": 1}
	var msgs []hkt.Stored
	for queue := range limits {
		hkt.SetMaxElements(t, db, queue, limits[queue])
		for i := range 8 {
			msgs = append(msgs, hkt.Stored{Queue: queue, ID: fmt.Sprint(i), Expiry: now.Add(time.Duration(i+1) * time.Hour)})
		}
	}
	hkt.Store(t, db, msgs...)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for _, m := range msgs {
			d.Put(ctx, p, m.Queue, hkt.Active, m.ID, 1)
		}
	})
	group := hkt.NewGroup()
	for i := range 3 {
		startRunner(t, rdb, d, group.Join(fmt.Sprint("i", i)), withStorage(db))
	}
	for queue, max := range limits {
		want := min(max, 8)
		testwait.Until(t, 20*time.Second, fmt.Sprintf("queue %s at %d", queue, want), func() bool {
			stored, cached := len(hkt.StoredIDs(t, db, queue)), len(d.Snapshot(t, rdb, queue)[hkt.Active])
			return int64(stored) == want && int64(cached) == want
		})
		stored := hkt.StoredIDs(t, db, queue)
		for i := 8 - int(want); i < 8; i++ {
			if !stored[fmt.Sprint(i)] {
				t.Errorf("queue %s lost %d, one of its %d latest expiring", queue, i, want)
			}
		}
	}
}

func TestRecoveryPutsEveryStoredMessageBackOnceAndLeavesInFlightOnesAlone(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	db := mongotest.Database(t)
	ctx := context.Background()
	now := time.Now()
	var msgs []hkt.Stored
	for i := range 25 {
		msgs = append(msgs, hkt.Stored{Queue: fmt.Sprint("q", i%3), ID: fmt.Sprint("m", i), Score: float64(i * 10), Expiry: now.Add(time.Hour)})
	}
	msgs[0].Score = -5      // clamped to 0
	msgs[1].Score = 1 << 60 // clamped to 2^53
	hkt.Store(t, db, msgs...)
	// A flushed cache into which Deckard has since pulled one message and
	// locked another: recovery must not put those back.
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		d.Put(ctx, p, msgs[3].Queue, hkt.Tmp, msgs[3].ID, float64(now.Add(time.Hour).UnixMilli()))
		d.Put(ctx, p, msgs[4].Queue, hkt.LockNack, msgs[4].ID, float64(now.Add(time.Hour).UnixMilli()))
	})
	cfg := withStorage(db)
	cfg.Storage.RecoveryBatch = 4
	group := hkt.NewGroup()
	var runners []*runner
	for i := range 2 {
		runners = append(runners, startRunner(t, rdb, d, group.Join(fmt.Sprint("i", i)), cfg))
	}
	testwait.Until(t, 20*time.Second, "recovery finished", func() bool {
		v, _ := rdb.Get(ctx, d.Prefix+":{recovery_storage_breakpoint}").Result()
		return v == "recovery_finished"
	})
	if v, _ := rdb.Get(ctx, d.Prefix+":{recovery}").Result(); v != "false" {
		t.Errorf("{recovery} = %q after the recovery, want false", v)
	}
	for _, m := range msgs {
		snap := d.Snapshot(t, rdb, m.Queue)
		var in []hkt.Set
		for _, s := range hkt.Sets {
			if _, ok := snap[s][m.ID]; ok {
				in = append(in, s)
			}
		}
		if len(in) != 1 {
			t.Errorf("%s/%s is in %v, want exactly one set", m.Queue, m.ID, in)
		}
	}
	for i, score := range []float64{0, 9007199254740992, 20} { // m0 and m1 clamped
		if got, ok := d.Snapshot(t, rdb, msgs[i].Queue)[hkt.Active][msgs[i].ID]; !ok || got != score {
			t.Errorf("%s recovered with score %v, want %v", msgs[i].ID, got, score)
		}
	}
	var recovered float64
	for _, r := range runners {
		recovered += metric(t, r.reg, "housekeeper_messages_recovered_total")
	}
	if recovered != 23 {
		t.Errorf("recovered %v messages, want 23 (25 stored, 2 in flight or locked)", recovered)
	}
}

// An instance deposed mid-recovery can neither insert into a queue its
// successor has recovered into nor move the breakpoint its successor moved.
func TestADeposedRecoveryCannotActAfterItsSuccessor(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	q, err := housekeeper.NewQueues(rdb, d.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	const old, successor = 5, 6
	if err := q.AdvanceRecovery(ctx, old, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := q.AdvanceRecovery(ctx, successor, "", "000000000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.InsertRecovered(ctx, map[string][]housekeeper.Recovered{"q": {{ID: "a", Score: 1}}}, successor, until); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
		want error
	}{
		{"move the breakpoint", func() error { return q.AdvanceRecovery(ctx, old, "", "000000000000000000000009") }, housekeeper.ErrFenced},
		{"move it from a stale read", func() error {
			return q.AdvanceRecovery(ctx, successor, "", "000000000000000000000009")
		}, housekeeper.ErrRecoveryMoved},
		{"insert into a recovered queue", func() error {
			_, err := q.InsertRecovered(ctx, map[string][]housekeeper.Recovered{"q": {{ID: "b", Score: 1}}}, old, until)
			return err
		}, housekeeper.ErrFenced},
		{"insert after its lease ended", func() error {
			_, err := q.InsertRecovered(ctx, map[string][]housekeeper.Recovered{"other": {{ID: "c", Score: 1}}}, successor, time.Now().Add(-time.Second))
			return err
		}, housekeeper.ErrLeaseEnded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errorsIs(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	snap := d.Snapshot(t, rdb, "q")
	if _, ok := snap[hkt.Active]["b"]; ok {
		t.Error("the deposed instance's insert landed")
	}
	if v, _ := rdb.Get(ctx, d.Prefix+":{recovery_storage_breakpoint}").Result(); v != "000000000000000000000001" {
		t.Errorf("breakpoint %q, want the successor's", v)
	}
}

func TestQueueMetricsComeFromOneInstance(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	db := mongotest.Database(t)
	finishedRecovery(t, rdb, d)
	now := time.Now()
	hkt.Store(t, db,
		hkt.Stored{Queue: "p::a", ID: "1", Expiry: now.Add(time.Hour), LastUsage: now.Add(-time.Hour)},
		hkt.Stored{Queue: "p::b", ID: "1", Expiry: now.Add(time.Hour), LastUsage: now},
		hkt.Stored{Queue: "r", ID: "1", Expiry: now.Add(time.Hour)},
	)
	group := hkt.NewGroup()
	var runners []*runner
	for i := range 3 {
		runners = append(runners, startRunner(t, rdb, d, group.Join(fmt.Sprint("i", i)), withStorage(db)))
	}
	testwait.Until(t, 20*time.Second, "one instance reports the totals", func() bool {
		reporting := 0
		for _, r := range runners {
			if metric(t, r.reg, "deckard_total_messages", "queue", "p") == 2 && metric(t, r.reg, "deckard_total_messages", "queue", "r") == 1 {
				reporting++
			} else if metric(t, r.reg, "deckard_total_messages") != 0 {
				return false
			}
		}
		return reporting == 1
	})
	var ages []float64
	for _, r := range runners {
		if age := metric(t, r.reg, "deckard_oldest_message", "queue", "p"); age != 0 {
			ages = append(ages, age)
		}
	}
	if len(ages) != 1 || ages[0] < float64(time.Hour.Milliseconds()) {
		t.Errorf("deckard_oldest_message{queue=p} reported as %v ms, want once, at least an hour", ages)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// A storage that stopped answering holds neither the Redis tasks nor a
// shutdown up: Run returns within the steps' grace once ctx ends.
func TestAStorageThatDoesNotAnswerDoesNotHoldAShutdownUp(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	finishedRecovery(t, rdb, d)
	lis, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + lis.Addr().String() + "/").SetServerSelectionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	}()
	cfg := fast
	cfg.Storage = housekeeper.StorageConfig{Storage: storage.New(client.Database("deckard"), "", "", nil), Interval: 50 * time.Millisecond}
	cfg.Logger = discardLogger
	ctx := context.Background()
	now := hkt.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) { d.Put(ctx, p, "q", hkt.Tmp, "abandoned", float64(now-10)) })
	r := newRunner(t, rdb, d, alone(), cfg)
	r.start(ctx)
	testwait.Until(t, 10*time.Second, "the timeout task moves its message", func() bool { return r.moved(t) == 1 })
	began := time.Now()
	r.stop(t)
	if took := time.Since(began); took > 8*time.Second {
		t.Fatalf("Run returned %v after its context ended, want within the 5 s grace", took)
	}
}

// While the storage is down the Redis tasks go on; once it is back, the
// storage tasks finish their work.
func TestTheStorageTasksResumeWhenTheStorageComesBack(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	finishedRecovery(t, rdb, d)
	srv := mongotest.Start(t)
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()).SetServerSelectionTimeout(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_ = client.Disconnect(ctx)
	}()
	db := client.Database("deckard")
	cfg := withStorage(db)
	cfg.Logger = discardLogger
	r := startRunner(t, rdb, d, alone(), cfg)
	ctx := context.Background()

	srv.Kill()
	now := hkt.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) { d.Put(ctx, p, "q", hkt.Tmp, "abandoned", float64(now-10)) })
	testwait.Until(t, 10*time.Second, "the timeout task works while the storage is down", func() bool { return r.moved(t) == 1 })

	srv.Restart()
	hkt.Store(t, db, hkt.Stored{Queue: "q", ID: "expired", Expiry: time.Now().Add(-time.Minute)})
	d.Seed(t, rdb, func(p redis.Pipeliner) { d.Put(ctx, p, "q", hkt.Active, "expired", 1) })
	testwait.Until(t, 30*time.Second, "the expired message gone from storage and cache", func() bool {
		_, cached := d.Snapshot(t, rdb, "q")[hkt.Active]["expired"]
		return !cached && len(hkt.StoredIDs(t, db, "q")) == 0
	})
}
