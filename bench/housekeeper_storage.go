package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// hkStorageConfig configures the housekeeper-storage suite.
type hkStorageConfig struct {
	messages int           // messages of the TTL and recovery runs
	limit    time.Duration // the longest a side of a run may take before its time is extrapolated
	window   time.Duration // the idle run's measurement
}

const storageQueues = 1000

// housekeeperStorageSuite measures the storage tasks of housekeeper
// processes (default settings but the storage) beside Deckard's own
// housekeeping replayed by the bench (deckardReplay), on the same data, a
// FerretDB of the suite's own and a Deckard Redis of its own: TTL, recovery,
// max elements, and what an idle deployment costs.
func housekeeperStorageSuite(env benchEnv) error {
	cfg := env.hkStorage
	bin, err := buildHousekeeper()
	if err != nil {
		return err
	}
	deckard, err := startRedisServer()
	if err != nil {
		return err
	}
	defer deckard.stop()
	fdb, err := startFerretDB()
	if err != nil {
		return err
	}
	defer fdb.stop()
	coord, err := env.startCoordinatorWith(coordOpts{store: "redis", caps: true})
	if err != nil {
		return err
	}
	defer coord.stop()
	client, err := mongo.Connect(options.Client().ApplyURI(fdb.uri))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	s := &storageBench{cfg: cfg, bin: bin, deckard: deckard, fdb: fdb, coord: coord, client: client}

	fmt.Printf("\n== housekeeper storage tasks vs Deckard's own housekeeping (replayed), FerretDB v1 (SQLite), %d queues\n", storageQueues)
	fmt.Println("   FerretDB scans the collection for nearly every query: the number of queries is what costs.")
	for _, run := range []func() error{s.ttl, s.recovery, s.maxElements, s.takeover, s.idle} {
		if err := run(); err != nil {
			return err
		}
	}
	return nil
}

type storageBench struct {
	cfg     hkStorageConfig
	bin     string
	deckard *redisServer
	fdb     *ferretDB
	coord   *coordinator
	client  *mongo.Client
	runs    int
}

// fresh is a database and a Deckard prefix of their own for one run.
func (s *storageBench) fresh(what string) (*mongo.Database, string) {
	s.runs++
	name := fmt.Sprintf("bench_%s_%d_%d", what, s.runs, time.Now().UnixNano()%1e6)
	return s.client.Database(name), name
}

// start runs n housekeepers on db and prefix and waits until their view
// holds all of them.
func (s *storageBench) start(n int, db *mongo.Database, prefix string) ([]*hkProcess, error) {
	procs := make([]*hkProcess, 0, n)
	for i := range n {
		p, err := startHousekeeper(s.bin, fmt.Sprintf("hk-%d", i), s.coord.addr, s.deckard.url, prefix,
			"HOUSEKEEPER_STORAGE_URI="+s.fdb.uri, "HOUSEKEEPER_MONGO_DATABASE="+db.Name())
		if err != nil {
			stopAll(procs)
			return nil, err
		}
		procs = append(procs, p)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if v, ok := scrapeSum("http://"+procs[0].metrics+"/metrics", "housekeeper_view_members"); ok && int(v) == n {
			return procs, nil
		}
		if time.Now().After(deadline) {
			stopAll(procs)
			return nil, fmt.Errorf("no view of %d instances after 30s", n)
		}
	}
}

func stopAll(procs []*hkProcess) {
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
	}
}

func (s *storageBench) replay(db *mongo.Database, prefix string) *deckardReplay {
	return &deckardReplay{messages: db.Collection("queue"), configs: db.Collection("queue_configuration"), rdb: s.deckard.rdb, prefix: prefix}
}

// seed stores n messages over the first queues queues, Deckard's document
// shape, expiring at expiry(i), and puts each in its queue's active pool
// unless cacheless.
func (s *storageBench) seed(db *mongo.Database, prefix string, n, queues int, expiry func(i int) time.Time, cacheless bool) error {
	ctx := context.Background()
	now := time.Now()
	docs := make([]any, 0, 5000)
	flush := func() error {
		if len(docs) == 0 {
			return nil
		}
		_, err := db.Collection("queue").InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		docs = docs[:0]
		return err
	}
	pipe := s.deckard.rdb.Pipeline()
	for i := range n {
		queue := queueName(i % queues)
		id := fmt.Sprint("m", i)
		docs = append(docs, bson.M{"id": id, "queue": queue, "queue_prefix": queue, "expiry_date": expiry(i),
			"score": float64(i), "last_usage": now})
		if !cacheless {
			pipe.ZAdd(ctx, prefix+":queue:{"+queue+"}", redis.Z{Score: float64(i), Member: id})
		}
		if len(docs) == cap(docs) {
			if err := flush(); err != nil {
				return err
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	if !cacheless {
		return s.deckard.rdb.Set(ctx, prefix+":{recovery_storage_breakpoint}", "recovery_finished", 0).Err()
	}
	return nil
}

// until polls done every interval until it holds or limit passes; it
// returns how long it took and whether it finished.
func until(limit, interval time.Duration, done func() bool) (time.Duration, bool) {
	start := time.Now()
	for !done() {
		if time.Since(start) > limit {
			return time.Since(start), false
		}
		time.Sleep(interval)
	}
	return time.Since(start), true
}

// cached counts the members of prefix's active pools.
func (s *storageBench) cached(ctx context.Context, prefix string) int64 {
	cmds := make([]*redis.IntCmd, storageQueues)
	_, _ = s.deckard.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for q := range cmds {
			cmds[q] = p.ZCard(ctx, prefix+":queue:{"+queueName(q)+"}")
		}
		return nil
	})
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n
}

// side is one side's figure of a run: its time, or the time its progress
// extrapolates to when it did not finish within the limit.
func side(took time.Duration, finished bool, done, total int64) string {
	if finished {
		return took.Round(10 * time.Millisecond).String()
	}
	if done <= 0 {
		return fmt.Sprintf("> %s (nothing done)", took.Round(time.Second))
	}
	return fmt.Sprintf("~%s (extrapolated: %d of %d in %s)", (took * time.Duration(total) / time.Duration(done)).Round(time.Second), done, total, took.Round(time.Second))
}

func timeRatio(ours time.Duration, oursDone bool, theirs time.Duration, theirsDone bool, done, total int64) string {
	if !oursDone {
		return "n/a"
	}
	if !theirsDone && done > 0 {
		theirs = theirs * time.Duration(total) / time.Duration(done)
	}
	return fmt.Sprintf("%.2f×", ours.Seconds()/theirs.Seconds())
}

// ttl: cfg.messages messages, plus one per queue that does not expire,
// all expiring at one instant a few seconds ahead; the time from that
// instant until they are gone from storage and cache, 3 instances against
// one Deckard replica.
func (s *storageBench) ttl() error {
	n := s.cfg.messages
	fmt.Printf("\n  TTL: %d messages over %d queues expire at once (and %d do not); time until gone from storage and cache\n", n, storageQueues, storageQueues)
	measure := func(ours bool, replicas int) (time.Duration, bool, int64, error) {
		db, prefix := s.fresh("ttl")
		at := time.Now().Add(10 * time.Second)
		if err := s.seed(db, prefix, n+storageQueues, storageQueues, func(i int) time.Time {
			if i >= n {
				return at.Add(24 * time.Hour)
			}
			return at
		}, false); err != nil {
			return 0, false, 0, err
		}
		defer func() { _ = db.Drop(context.Background()) }()
		defer func() { _ = dropIdleQueues(s.deckard.rdb, prefix) }()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if ours {
			procs, err := s.start(3, db, prefix)
			if err != nil {
				return 0, false, 0, err
			}
			defer stopAll(procs)
		} else {
			for range replicas {
				d := s.replay(db, prefix)
				go d.run(ctx, d.ttl)
			}
		}
		time.Sleep(time.Until(at))
		var left int64
		took, ok := until(s.cfg.limit, 500*time.Millisecond, func() bool {
			left, _ = db.Collection("queue").CountDocuments(ctx, bson.M{"expiry_date": bson.M{"$lte": at}})
			return left == 0 && s.cached(ctx, prefix) == storageQueues
		})
		kept, _ := db.Collection("queue").CountDocuments(context.Background(), bson.M{"expiry_date": bson.M{"$gt": at}})
		if kept != storageQueues {
			return 0, false, 0, fmt.Errorf("TTL removed %d messages that had not expired", storageQueues-kept)
		}
		return took, ok, int64(n) - left, nil
	}
	ours, oursOK, oursDone, err := measure(true, 0)
	if err != nil {
		return err
	}
	theirs, theirsOK, theirsDone, err := measure(false, 1)
	if err != nil {
		return err
	}
	three, threeOK, threeDone, err := measure(false, 3)
	if err != nil {
		return err
	}
	fmt.Printf("    housekeeper, 3 instances   %s\n", side(ours, oursOK, oursDone, int64(n)))
	fmt.Printf("    Deckard, 1 replica         %s\n", side(theirs, theirsOK, theirsDone, int64(n)))
	fmt.Printf("    Deckard, 3 replicas        %s\n", side(three, threeOK, threeDone, int64(n)))
	fmt.Printf("    housekeeper ÷ Deckard      %s (1 replica; target <= 0.5×), %s (3 replicas); nothing unexpired removed\n",
		timeRatio(ours, oursOK, theirs, theirsOK, theirsDone, int64(n)), timeRatio(ours, oursOK, three, threeOK, threeDone, int64(n)))
	return nil
}

// recovery: cfg.messages messages stored, the cache flushed; the time
// until every message is back in exactly one set, 3 instances (and again
// with a kill -9 of the recovering instance midway) against one replica.
func (s *storageBench) recovery() error {
	n := s.cfg.messages
	fmt.Printf("\n  recovery: Deckard's Redis flushed, %d messages stored; time until every one is back, once\n", n)
	var killedAt int64
	measure := func(ours, kill bool, replicas int) (time.Duration, bool, error) {
		db, prefix := s.fresh("recovery")
		if err := s.seed(db, prefix, n, storageQueues, func(int) time.Time { return time.Now().Add(24 * time.Hour) }, true); err != nil {
			return 0, false, err
		}
		defer func() { _ = db.Drop(context.Background()) }()
		defer func() { _ = dropIdleQueues(s.deckard.rdb, prefix) }()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		finished := func() bool {
			v, _ := s.deckard.rdb.Get(context.Background(), prefix+":{recovery_storage_breakpoint}").Result()
			return v == "recovery_finished"
		}
		start := time.Now()
		var procs []*hkProcess
		if ours {
			var err error
			if procs, err = s.start(3, db, prefix); err != nil {
				return 0, false, err
			}
			defer func() { stopAll(procs) }()
		} else {
			for range replicas {
				d := s.replay(db, prefix)
				go d.run(ctx, func(ctx context.Context) { d.recovery(ctx) })
			}
		}
		if kill {
			// The recovering instance is the one whose count rises.
			for killed := false; !killed && !finished(); time.Sleep(20 * time.Millisecond) {
				for i, p := range procs {
					if v, _ := scrapeSum("http://"+p.metrics+"/metrics", "housekeeper_messages_recovered_total"); v > 0 && !finished() {
						killedAt = int64(v)
						p.signal(syscall.SIGKILL)
						procs = append(procs[:i:i], procs[i+1:]...)
						killed = true
						break
					}
				}
			}
		}
		_, ok := until(s.cfg.limit, 100*time.Millisecond, finished)
		took := time.Since(start)
		if ok {
			if got := s.cached(ctx, prefix); got != int64(n) {
				return 0, false, fmt.Errorf("after the recovery (housekeeper %v, killed %v, %d Deckard replicas) the cache holds %d messages, want %d", ours, kill, replicas, got, n)
			}
		}
		return took, ok, nil
	}
	ours, oursOK, err := measure(true, false, 0)
	if err != nil {
		return err
	}
	killed, killedOK, err := measure(true, true, 0)
	if err != nil {
		return err
	}
	theirs, theirsOK, err := measure(false, false, 1)
	if err != nil {
		return err
	}
	three, threeOK, err := measure(false, false, 3)
	if err != nil {
		return err
	}
	fmt.Printf("    housekeeper, 3 instances                    %s (from the instances' start)\n", side(ours, oursOK, 1, 1))
	how := fmt.Sprintf("killed once it had copied %d", killedAt)
	if killedAt == 0 {
		how = "no kill: the recovery finished in one batch"
	}
	fmt.Printf("    the same, recovering instance killed midway %s (%s)\n", side(killed, killedOK, 1, 1), how)
	fmt.Printf("    Deckard, 1 replica                          %s\n", side(theirs, theirsOK, 1, 1))
	fmt.Printf("    Deckard, 3 replicas                         %s\n", side(three, threeOK, 1, 1))
	fmt.Printf("    housekeeper ÷ Deckard                       %s, %s killed (target <= 1.0×); every message in the active pool once\n",
		timeRatio(ours, oursOK, theirs, theirsOK, 1, 1), timeRatio(killed, killedOK, theirs, theirsOK, 1, 1))
	return nil
}

// maxElements: 100 queues at their max_elements (50); 10 more messages
// arrive in each; the time until every one is back at exactly 50 in
// storage and cache, with 3 and 10 instances.
func (s *storageBench) maxElements() error {
	const queues, limit, excess = 100, 50, 10
	fmt.Printf("\n  max elements: %d queues at their max_elements (%d) get %d more each; time until all are at exactly %d\n", queues, limit, excess, limit)
	for _, n := range []int{3, 10} {
		db, prefix := s.fresh("max")
		ctx := context.Background()
		var confs []mongo.WriteModel
		for q := range queues {
			confs = append(confs, mongo.NewUpdateOneModel().SetFilter(bson.M{"_id": queueName(q)}).
				SetUpdate(bson.M{"$set": bson.M{"max_elements": limit}}).SetUpsert(true))
		}
		if _, err := db.Collection("queue_configuration").BulkWrite(ctx, confs); err != nil {
			return err
		}
		expiry := func(i int) time.Time { return time.Now().Add(time.Duration(i+1) * time.Minute) }
		if err := s.seed(db, prefix, queues*limit, queues, expiry, false); err != nil {
			return err
		}
		procs, err := s.start(n, db, prefix)
		if err != nil {
			return err
		}
		time.Sleep(3 * time.Second) // every owner has read the configurations and counted its queues
		var more []any
		pipe := s.deckard.rdb.Pipeline()
		for i := queues * limit; i < queues*(limit+excess); i++ {
			queue := queueName(i % queues)
			id := fmt.Sprint("m", i)
			more = append(more, bson.M{"id": id, "queue": queue, "queue_prefix": queue, "expiry_date": expiry(i), "score": 1, "last_usage": time.Now()})
			pipe.ZAdd(ctx, prefix+":queue:{"+queue+"}", redis.Z{Score: 1, Member: id})
		}
		arrived := time.Now()
		if _, err := db.Collection("queue").InsertMany(ctx, more); err != nil {
			return err
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		_, ok := until(s.cfg.limit, 50*time.Millisecond, func() bool {
			cur, err := db.Collection("queue").Aggregate(ctx, mongo.Pipeline{{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$queue"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}}})
			if err != nil {
				return false
			}
			var groups []struct {
				N int64 `bson:"n"`
			}
			if cur.All(ctx, &groups) != nil || len(groups) != queues {
				return false
			}
			for _, g := range groups {
				if g.N != limit {
					return false
				}
			}
			return s.cached(ctx, prefix) == queues*limit
		})
		took := time.Since(arrived)
		stopAll(procs)
		_ = db.Drop(ctx)
		_ = dropIdleQueues(s.deckard.rdb, prefix)
		fmt.Printf("    housekeeper, %2d instances   %s (target <= 2 s)\n", n, side(took, ok, 1, 1))
	}
	return nil
}

// takeover: 3 instances; 5 times, 1,000 messages (one a queue) expire at
// the instant the instance that owns TTL is killed with SIGKILL; the time
// from that instant until they are gone from storage. The owner is found
// by letting a message expire first and reading whose counter moved; the
// victim is started again after each run.
func (s *storageBench) takeover() error {
	const instances, runs = 3, 5
	fmt.Printf("\n  takeover: the instance that owns TTL killed (SIGKILL) as 1,000 messages expire; time until they are gone, %d runs\n", runs)
	db, prefix := s.fresh("takeover")
	ctx := context.Background()
	defer func() { _ = db.Drop(ctx) }()
	defer func() { _ = dropIdleQueues(s.deckard.rdb, prefix) }()
	if err := s.seed(db, prefix, storageQueues, storageQueues, func(int) time.Time { return time.Now().Add(24 * time.Hour) }, false); err != nil {
		return err
	}
	procs, err := s.start(instances, db, prefix)
	if err != nil {
		return err
	}
	defer func() { stopAll(procs) }()
	var took []time.Duration
	for run := range runs {
		// Which instance removes an expired message?
		removed := func(p *hkProcess) float64 {
			v, _ := scrapeSum("http://"+p.metrics+"/metrics", "deckard_ttl_messages_removed_total")
			return v
		}
		before := make([]float64, len(procs))
		for i, p := range procs {
			before[i] = removed(p)
		}
		if _, err := db.Collection("queue").InsertOne(ctx, bson.M{"id": fmt.Sprint("probe-", run), "queue": "probe", "queue_prefix": "probe",
			"expiry_date": time.Now(), "score": 1, "last_usage": time.Now()}); err != nil {
			return err
		}
		owner := -1
		if _, ok := until(30*time.Second, 50*time.Millisecond, func() bool {
			for i, p := range procs {
				if removed(p) > before[i] {
					owner = i
					return true
				}
			}
			return false
		}); !ok {
			return errors.New("takeover: no instance ran TTL within 30s")
		}
		at := time.Now().Add(2 * time.Second)
		var docs []any
		for q := range storageQueues {
			docs = append(docs, bson.M{"id": fmt.Sprint("exp-", run, "-", q), "queue": queueName(q), "queue_prefix": queueName(q),
				"expiry_date": at, "score": 1, "last_usage": time.Now()})
		}
		if _, err := db.Collection("queue").InsertMany(ctx, docs); err != nil {
			return err
		}
		time.Sleep(time.Until(at))
		procs[owner].signal(syscall.SIGKILL)
		d, ok := until(s.cfg.limit, 50*time.Millisecond, func() bool {
			n, _ := db.Collection("queue").CountDocuments(ctx, bson.M{"expiry_date": bson.M{"$lte": at}})
			return n == 0
		})
		if !ok {
			return fmt.Errorf("takeover: expired messages still stored %s after the kill", d)
		}
		took = append(took, d)
		p, err := startHousekeeper(s.bin, procs[owner].id, s.coord.addr, s.deckard.url, prefix,
			"HOUSEKEEPER_STORAGE_URI="+s.fdb.uri, "HOUSEKEEPER_MONGO_DATABASE="+db.Name())
		if err != nil {
			return err
		}
		procs[owner] = p
		time.Sleep(5 * time.Second) // it joins again, and the view settles
	}
	slices.Sort(took)
	fmt.Printf("    worst %s, median %s (target <= 2 s)\n", took[len(took)-1].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond))
	return nil
}

// idle: 1,000 queues of 5 messages, 100 with a max_elements they do not
// reach, nothing expiring; 10 instances against one Deckard replica: the
// storage queries a second, the processes' CPU and Deckard Redis' own.
func (s *storageBench) idle() error {
	const instances = 10
	fmt.Printf("\n  idle: %d queues (5 messages each, 100 with max_elements 100), nothing expiring, over %s\n", storageQueues, s.cfg.window)
	db, prefix := s.fresh("idle")
	ctx := context.Background()
	defer func() { _ = db.Drop(ctx) }()
	defer func() { _ = dropIdleQueues(s.deckard.rdb, prefix) }()
	var confs []mongo.WriteModel
	for q := range 100 {
		confs = append(confs, mongo.NewUpdateOneModel().SetFilter(bson.M{"_id": queueName(q)}).
			SetUpdate(bson.M{"$set": bson.M{"max_elements": 100}}).SetUpsert(true))
	}
	if _, err := db.Collection("queue_configuration").BulkWrite(ctx, confs); err != nil {
		return err
	}
	if err := s.seed(db, prefix, 5*storageQueues, storageQueues, func(int) time.Time { return time.Now().Add(24 * time.Hour) }, false); err != nil {
		return err
	}

	procs, err := s.start(instances, db, prefix)
	if err != nil {
		return err
	}
	time.Sleep(10 * time.Second) // the first metrics read, the first counts
	meter := &cpuMeter{}
	for _, p := range procs {
		meter.add("housekeeper", p.cmd.Process.Pid)
	}
	meter.add("coordinator", s.coord.cmd.Process.Pid)
	q0, r0 := s.fdb.queries(), redisCPUOrZero(s.deckard.rdb)
	c0 := meter.read()
	start := time.Now()
	time.Sleep(s.cfg.window)
	secs := time.Since(start).Seconds()
	used := meter.since(c0)
	oursQ := float64(s.fdb.queries()-q0)/secs + 1.0/60 // and its metrics read, outside the window
	oursRedis := (redisCPUOrZero(s.deckard.rdb) - r0).Seconds() / secs * 100
	stopAll(procs)
	// Both read the metrics once a minute: the housekeeper in one query,
	// Deckard in a distinct and then a find and a count per prefix, which
	// on this storage take minutes to run, so they are counted, not run.
	st := s.replay(db, prefix)
	var prefixes []string
	if err := st.messages.Distinct(ctx, "queue_prefix", bson.M{}).Decode(&prefixes); err != nil {
		return err
	}
	theirMetrics := float64(1+2*len(prefixes)) / 60

	rctx, cancel := context.WithCancel(ctx)
	q1 := s.fdb.queries()
	done := make(chan struct{})
	go func() {
		st.run(rctx, st.ttl, st.maxElements, func(ctx context.Context) { st.recovery(ctx) })
		close(done)
	}()
	start = time.Now()
	time.Sleep(s.cfg.window)
	theirQ := float64(s.fdb.queries()-q1)/time.Since(start).Seconds() + theirMetrics
	cancel()
	<-done

	fmt.Printf("    storage queries/s: housekeeper, %d instances %.1f (its metrics: 1 read a minute); Deckard, 1 replica %.1f (its metrics: %.1f/s)\n",
		instances, oursQ, theirQ, theirMetrics)
	fmt.Printf("    housekeeper ÷ Deckard: %.2f× (target <= 1.0×, stretch <= 0.2×); Deckard's metrics are counted as if they ran in no time:\n", oursQ/theirQ)
	fmt.Println("    on this storage a run of them takes minutes, and its next starts a minute after, so its sustained rate is lower")
	fmt.Printf("    CPU, housekeepers + coordinator %.1f %% of a core (target <= 20 %%); Deckard Redis %.2f %% (target <= 5 %%)\n",
		(used.by["housekeeper"]+used.by["coordinator"]).Seconds()/secs*100, oursRedis)
	return nil
}

func redisCPUOrZero(rdb *redis.Client) time.Duration {
	d, _ := redisCPU(context.Background(), rdb)
	return d
}

// ferretDB is a FerretDB child of the suite's own, with its metrics on a
// debug address so that its queries can be counted.
type ferretDB struct {
	cmd     *exec.Cmd
	uri     string
	metrics string
	done    func()
}

func startFerretDB() (*ferretDB, error) {
	bin := os.Getenv("COORDINATOR_TEST_FERRETDB")
	if bin == "" {
		root, err := repoRoot()
		if err != nil {
			return nil, err
		}
		out, err := exec.Command(filepath.Join(root, "scripts", "ferretdb.sh")).Output()
		if err != nil {
			return nil, fmt.Errorf("scripts/ferretdb.sh: %w", err)
		}
		bin = strings.TrimSpace(string(out))
	}
	dir, err := os.MkdirTemp("", "bench-ferretdb-")
	if err != nil {
		return nil, err
	}
	addr, debug := freeAddr(), freeAddr()
	cmd := exec.Command(bin, "--handler=sqlite", "--sqlite-url=file:"+dir+"/", "--state-dir="+dir,
		"--listen-addr="+addr, "--telemetry=disable", "--debug-addr="+debug, "--log-level=error")
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start FerretDB: %w", err)
	}
	f := &ferretDB{cmd: cmd, uri: "mongodb://" + addr + "/", metrics: "http://" + debug + "/debug/metrics"}
	f.done = onExit(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(f.metrics); err == nil { //nolint:noctx // a loopback child of ours
			_ = resp.Body.Close()
			return f, nil
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, errors.New("FerretDB does not answer after 30s")
		}
	}
}

// queries counts the storage queries FerretDB has served: finds and their
// getMores, aggregations, counts, distincts and deletes.
func (f *ferretDB) queries() int64 {
	var n float64
	for _, c := range []string{"find", "getMore", "aggregate", "count", "distinct", "delete"} {
		v, _ := scrapeSum(f.metrics, "ferretdb_client_requests_total", `command="`+c+`"`)
		n += v
	}
	return int64(n)
}

func (f *ferretDB) stop() {
	f.done()
	_ = f.cmd.Process.Kill()
	_ = f.cmd.Wait()
}
