package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

var handoffWaiters = []int{10, 2000}

// handoffSuite measures how long a released lock takes to reach the next
// waiter, and a resigned leadership the next candidate, with a short and a
// long queue on one name: a handoff should cost the same whatever the
// queue's length. etcd's Mutex.Lock and Election.Campaign, which queue the
// same way (each waiter watches the key before its own), run beside it.
// (Redis locks have no queue: their waiters poll, so they are not here.)
func handoffSuite(env benchEnv) error {
	fmt.Printf("\n== handoff: release (resign) sent -> the next waiter's grant (election) received, one name, every waiter queued, %s per measurement\n", env.duration)
	fmt.Println("   each waiter that is granted releases at once and queues again at the tail, so the queue keeps its length")
	rdb, err := peerRedis(env.redisURL, 1)
	if err != nil {
		return err
	}
	defer rdb.Close()
	t := table{header: []string{"method", "waiters", "handoffs", "handoffs/s", "p50", "p99", "scripts/handoff", "Redis cmds/handoff", "CPU/handoff: bench + server + Redis"}}
	add := func(key, label string, waiters int, lat []time.Duration, d time.Duration, cost *handoffCost) {
		p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
		scripts, cmds, cpu := cost.per(len(lat))
		t.add(label, fmt.Sprint(waiters), fmt.Sprint(len(lat)), rate(float64(len(lat))/d.Seconds()), dur(p50), dur(p99), scripts, cmds, cpu)
		env.report.add(record{Suite: "handoff", Case: fmt.Sprintf("%d waiters", waiters), Method: key, Concurrency: waiters,
			PerSecond: float64(len(lat)) / d.Seconds(), Unit: "handoffs/s", P50Micros: micros(p50), P99Micros: micros(p99)})
	}
	// -coordinator-cpuprofile: the Redis-store child is profiled during
	// its measured windows only, and the profiles merged at the end.
	profileDir, err := os.MkdirTemp("", "bench-profiles-")
	if err != nil {
		return err
	}
	defer removeOnExit(profileDir)()
	var profiles []string
	for _, kind := range []string{"redis", "memory"} {
		profiled := env.coordProfile != "" && kind == "redis"
		c, err := env.startCoordinatorWith(coordOpts{store: kind, profiled: profiled})
		if err != nil {
			return err
		}
		cost := newHandoffCost(rdb, c.cmd.Process.Pid, kind == "redis")
		if profiled {
			cost.profiled, cost.profileDir, cost.profiles = c, profileDir, &profiles
		}
		for _, waiters := range handoffWaiters {
			lat, err := coordinatorLockHandoff(c, waiters, env.duration, cost)
			if err != nil {
				c.stop()
				return fmt.Errorf("%s lock handoff, %d waiters: %w", kind, waiters, err)
			}
			add("coordinator-"+kind+"-lock", fmt.Sprintf("coordinator, %s store: lock (TryAcquire with wait, Release)", kind), waiters, lat, env.duration, cost)
		}
		for _, waiters := range handoffWaiters {
			lat, err := coordinatorLeaderHandoff(c, waiters, env.duration, cost)
			if err != nil {
				c.stop()
				return fmt.Errorf("%s leader handoff, %d waiters: %w", kind, waiters, err)
			}
			add("coordinator-"+kind+"-election", fmt.Sprintf("coordinator, %s store: election (Campaign with wait, Resign)", kind), waiters, lat, env.duration, cost)
		}
		c.stop()
		t.rule()
	}

	etcd, err := startEtcd()
	if err != nil {
		return err
	}
	defer etcd.stop()
	cost := newHandoffCost(nil, etcd.cmd.Process.Pid, false)
	for _, election := range []bool{false, true} {
		for _, waiters := range handoffWaiters {
			lat, err := etcdHandoff(etcd.endpoint, election, waiters, env.duration, cost)
			if err != nil {
				return fmt.Errorf("etcd handoff (election %v), %d waiters: %w", election, waiters, err)
			}
			if election {
				add("etcd-election", "etcd: concurrency.Election (Campaign, Resign)", waiters, lat, env.duration, cost)
			} else {
				add("etcd-mutex", "etcd: concurrency.Mutex (Lock, Unlock)", waiters, lat, env.duration, cost)
			}
		}
	}
	t.print()
	fmt.Println("   etcd's waiters watch the key before theirs from the revision they read it at; etcd syncs such watchers every 100ms,")
	fmt.Println("   so a waiter that queues again and is granted within 100ms waits for that sync: a short, busy queue turns ~10 times per 100ms.")
	fmt.Println("   per handoff, over the measured window: the scripts Redis ran (EVALSHA/EVAL) and all its commands (INFO commandstats,")
	fmt.Println("   which counts a script and each command it ran), and the CPU of the bench (the clients), the server (coordinator or etcd)")
	fmt.Println("   and Redis; a handoff includes the release, the grant and the releaser queueing again")
	if env.coordProfile != "" {
		if err := mergeProfiles(env.coordProfile, profiles); err != nil {
			return err
		}
		fmt.Printf("\ncoordinator CPU profile: %s (the Redis-store child during its %d measured windows above, merged; go tool pprof -top %s)\n",
			env.coordProfile, len(profiles), env.coordProfile)
	}
	return nil
}

// handoffCost measures what the handoffs of one window cost: the Redis
// scripts and commands, and the CPU of the bench, the server and Redis.
type handoffCost struct {
	rdb   *redis.Client // nil: Redis is not the server's store
	meter *cpuMeter

	before     cpuSample
	cmdsBefore map[string]int64
	use        cpuUse
	cmds       map[string]int64

	// profiled, when set, is CPU-profiled during each window, into a file
	// of profileDir added to profiles.
	profiled   *coordinator
	profileDir string
	profiles   *[]string
}

func newHandoffCost(rdb *redis.Client, server int, store bool) *handoffCost {
	c := &handoffCost{meter: &cpuMeter{}}
	c.meter.add("bench", os.Getpid())
	c.meter.add("server", server)
	if store {
		c.rdb = rdb
		c.meter.addRedis(context.Background(), rdb)
	}
	return c
}

func (c *handoffCost) start(ctx context.Context) error {
	c.cmds = nil
	if c.rdb != nil {
		c.cmdsBefore, _ = commandStats(ctx, c.rdb)
	}
	if c.profiled != nil {
		file := filepath.Join(c.profileDir, fmt.Sprintf("handoff-%d.prof", len(*c.profiles)))
		if err := c.profiled.startProfile(file); err != nil {
			return err
		}
		*c.profiles = append(*c.profiles, file)
	}
	c.before = c.meter.read()
	return nil
}

func (c *handoffCost) stop(ctx context.Context) error {
	c.use = c.meter.since(c.before)
	if c.profiled != nil {
		if err := c.profiled.stopProfile(); err != nil {
			return err
		}
	}
	if c.rdb == nil || c.cmdsBefore == nil {
		return nil
	}
	if after, err := commandStats(ctx, c.rdb); err == nil {
		c.cmds = commandsBetween(c.cmdsBefore, after)
	}
	return nil
}

// per formats the last window's scripts, Redis commands and CPU per
// handoff, n handoffs.
func (c *handoffCost) per(n int) (scripts, cmds, cpu string) {
	if n == 0 {
		return "–", "–", "–"
	}
	scripts, cmds = "–", "–"
	if c.cmds != nil {
		scripts = fmt.Sprintf("%.2f", float64(c.cmds["evalsha"]+c.cmds["eval"])/float64(n))
		cmds = fmt.Sprintf("%.1f", float64(commandsIn(c.cmds))/float64(n))
	}
	each := func(name string) string {
		d, ok := c.use.by[name]
		if !ok {
			return "–"
		}
		return fmt.Sprintf("%.0f", float64(d.Microseconds())/float64(n))
	}
	return scripts, cmds, fmt.Sprintf("%s + %s + %s µs", each("bench"), each("server"), each("redis"))
}

// acquireFunc blocks until worker w holds the name and returns how to give
// it up.
type acquireFunc func(ctx context.Context, w int) (release func(context.Context) error, err error)

// handoffBench lets a name go round waiters callers for d. setup (worker
// waiters) holds it first; queued says how many are waiting. It returns the
// time from each release being sent to the next grant being received.
func handoffBench(waiters int, d time.Duration, acquire acquireFunc, queued func(ctx context.Context) (int, error), cost *handoffCost) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	releaseFirst, err := acquire(ctx, waiters)
	if err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	var (
		released  atomic.Int64 // unix ns at which the last release was sent
		measuring atomic.Bool
		mu        sync.Mutex
		latencies []time.Duration
		firstErr  error
		wg        sync.WaitGroup
	)
	for w := range waiters {
		wg.Go(func() {
			for ctx.Err() == nil {
				release, err := acquire(ctx, w)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						cancel()
					}
					return
				}
				granted := time.Now()
				if measuring.Load() {
					mu.Lock()
					latencies = append(latencies, granted.Sub(time.Unix(0, released.Load())))
					mu.Unlock()
				}
				released.Store(time.Now().UnixNano())
				// Not cut off by ctx: a lease left held would stall the next
				// measurement's cleanup.
				_ = release(context.WithoutCancel(ctx))
			}
		})
	}
	setupDeadline := time.Now().Add(2 * time.Minute)
	for n, err := queued(ctx); n < waiters; n, err = queued(ctx) {
		if err != nil || time.Now().After(setupDeadline) || ctx.Err() != nil {
			cancel()
			wg.Wait()
			if firstErr != nil {
				err = firstErr
			}
			return nil, fmt.Errorf("setup: %d of %d waiters queued: %w", n, waiters, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Queued is not yet ready everywhere: an etcd waiter's key exists before
	// its watch is synced (etcd syncs watchers that start in the past every
	// 100ms, 512 at a time), and until then a release waits for the sync.
	// Every method gets the same settling time before the first release.
	time.Sleep(500*time.Millisecond + time.Duration(waiters)*2*time.Millisecond)
	if err := cost.start(ctx); err != nil {
		return nil, err
	}
	measuring.Store(true)
	released.Store(time.Now().UnixNano())
	if err := releaseFirst(ctx); err != nil {
		return nil, err
	}
	time.Sleep(d)
	measuring.Store(false)
	if err := cost.stop(ctx); err != nil {
		return nil, err
	}
	cancel()
	wg.Wait()
	return latencies, firstErr
}

// coordinatorLockHandoff queues waiters TryAcquire calls with a wait on one
// name, each on a connection shared by at most streamsPerConn of them.
func coordinatorLockHandoff(c *coordinator, waiters int, d time.Duration, cost *handoffCost) ([]time.Duration, error) {
	name := fmt.Sprintf("bench/handoff/lock/%d", waiters)
	ttl, wait := durationpb.New(time.Minute), durationpb.New(5*time.Minute)
	clients, err := c.clients(waiters + 1)
	if err != nil {
		return nil, err
	}
	acquire := func(ctx context.Context, w int) (func(context.Context) error, error) {
		holder := fmt.Sprintf("w%d", w)
		for {
			resp, err := clients[w].TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: ttl, Wait: wait})
			if err != nil {
				return nil, err
			}
			if resp.GetAcquired() {
				token := resp.GetLease().GetToken()
				return func(ctx context.Context) error {
					_, err := clients[w].Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token})
					return err
				}, nil
			}
		}
	}
	return handoffBench(waiters, d, acquire, describeWaiters(c, name), cost)
}

// coordinatorLeaderHandoff queues waiters Campaign calls with a wait on one
// election; each leader resigns at once.
func coordinatorLeaderHandoff(c *coordinator, waiters int, d time.Duration, cost *handoffCost) ([]time.Duration, error) {
	election := fmt.Sprintf("bench/handoff/election/%d", waiters)
	ttl, wait := durationpb.New(time.Minute), durationpb.New(5*time.Minute)
	clients, err := c.clients(waiters + 1)
	if err != nil {
		return nil, err
	}
	value := []byte("leader")
	acquire := func(ctx context.Context, w int) (func(context.Context) error, error) {
		candidate := fmt.Sprintf("c%d", w)
		for {
			resp, err := clients[w].Campaign(ctx, &coordinatorv1.CampaignRequest{Election: election, Candidate: candidate, Value: value, Ttl: ttl, Wait: wait})
			if err != nil {
				return nil, err
			}
			if resp.GetElected() {
				term := resp.GetLeader().GetTerm()
				return func(ctx context.Context) error {
					_, err := clients[w].Resign(ctx, &coordinatorv1.ResignRequest{Election: election, Candidate: candidate, Term: term})
					return err
				}, nil
			}
		}
	}
	return handoffBench(waiters, d, acquire, describeWaiters(c, election), cost)
}

func describeWaiters(c *coordinator, name string) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		desc, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
		return int(desc.GetWaiters()), err
	}
}

// etcdHandoff queues waiters on one etcd Mutex (or Election), each with a
// session (an etcd lease) of its own, and a client (a connection) for every
// streamsPerConn of them, as the coordinator's waiters have. (One client for
// all would also do, but it creates its watches one at a time: 2,000 waiters
// would take seconds to be ready.)
func etcdHandoff(endpoint string, election bool, waiters int, d time.Duration, cost *handoffCost) ([]time.Duration, error) {
	var clients []*clientv3.Client
	defer func() {
		for _, cli := range clients {
			_ = cli.Close()
		}
	}()
	for range (waiters + streamsPerConn) / streamsPerConn {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: quietZap()})
		if err != nil {
			return nil, err
		}
		clients = append(clients, cli)
	}
	cli := clients[0]
	sessions := make([]*concurrency.Session, waiters+1)
	defer func() {
		for _, s := range sessions {
			if s != nil {
				_ = s.Close()
			}
		}
	}()
	if err := closedLoopN(len(sessions), 32, func(i int) (err error) {
		sessions[i], err = concurrency.NewSession(clients[i/streamsPerConn], concurrency.WithTTL(60))
		return err
	}); err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("/bench/handoff/mutex/%d", waiters)
	if election {
		prefix = fmt.Sprintf("/bench/handoff/election/%d", waiters)
	}
	var acquire acquireFunc
	if election {
		elections := make([]*concurrency.Election, len(sessions))
		for i, s := range sessions {
			elections[i] = concurrency.NewElection(s, prefix)
		}
		acquire = func(ctx context.Context, w int) (func(context.Context) error, error) {
			if err := elections[w].Campaign(ctx, "leader"); err != nil {
				return nil, err
			}
			return elections[w].Resign, nil
		}
	} else {
		mutexes := make([]*concurrency.Mutex, len(sessions))
		for i, s := range sessions {
			mutexes[i] = concurrency.NewMutex(s, prefix)
		}
		acquire = func(ctx context.Context, w int) (func(context.Context) error, error) {
			if err := mutexes[w].Lock(ctx); err != nil {
				return nil, err
			}
			return mutexes[w].Unlock, nil
		}
	}
	queued := func(ctx context.Context) (int, error) {
		// Each waiter has a key under the prefix, and so has the holder.
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return int(resp.Count) - 1, nil
	}
	return handoffBench(waiters, d, acquire, queued, cost)
}
