package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	t := table{header: []string{"method", "waiters", "handoffs", "handoffs/s", "p50", "p99"}}
	add := func(key, label string, waiters int, lat []time.Duration, d time.Duration) {
		p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
		t.add(label, fmt.Sprint(waiters), fmt.Sprint(len(lat)), rate(float64(len(lat))/d.Seconds()), dur(p50), dur(p99))
		env.report.add(record{Suite: "handoff", Case: fmt.Sprintf("%d waiters", waiters), Method: key, Concurrency: waiters,
			PerSecond: float64(len(lat)) / d.Seconds(), Unit: "handoffs/s", P50Micros: micros(p50), P99Micros: micros(p99)})
	}
	for _, kind := range []string{"redis", "memory"} {
		c, err := env.startCoordinator(kind)
		if err != nil {
			return err
		}
		for _, waiters := range handoffWaiters {
			lat, err := coordinatorLockHandoff(c, waiters, env.duration)
			if err != nil {
				c.stop()
				return fmt.Errorf("%s lock handoff, %d waiters: %w", kind, waiters, err)
			}
			add("coordinator-"+kind+"-lock", fmt.Sprintf("coordinator, %s store: lock (TryAcquire with wait, Release)", kind), waiters, lat, env.duration)
		}
		for _, waiters := range handoffWaiters {
			lat, err := coordinatorLeaderHandoff(c, waiters, env.duration)
			if err != nil {
				c.stop()
				return fmt.Errorf("%s leader handoff, %d waiters: %w", kind, waiters, err)
			}
			add("coordinator-"+kind+"-election", fmt.Sprintf("coordinator, %s store: election (Campaign with wait, Resign)", kind), waiters, lat, env.duration)
		}
		c.stop()
		t.rule()
	}

	etcd, err := startEtcd()
	if err != nil {
		return err
	}
	defer etcd.stop()
	for _, election := range []bool{false, true} {
		for _, waiters := range handoffWaiters {
			lat, err := etcdHandoff(etcd.endpoint, election, waiters, env.duration)
			if err != nil {
				return fmt.Errorf("etcd handoff (election %v), %d waiters: %w", election, waiters, err)
			}
			if election {
				add("etcd-election", "etcd: concurrency.Election (Campaign, Resign)", waiters, lat, env.duration)
			} else {
				add("etcd-mutex", "etcd: concurrency.Mutex (Lock, Unlock)", waiters, lat, env.duration)
			}
		}
	}
	t.print()
	fmt.Println("   etcd's waiters watch the key before theirs from the revision they read it at; etcd syncs such watchers every 100ms,")
	fmt.Println("   so a waiter that queues again and is granted within 100ms waits for that sync: a short, busy queue turns ~10 times per 100ms.")
	return nil
}

// acquireFunc blocks until worker w holds the name and returns how to give
// it up.
type acquireFunc func(ctx context.Context, w int) (release func(context.Context) error, err error)

// handoffBench lets a name go round waiters callers for d. setup (worker
// waiters) holds it first; queued says how many are waiting. It returns the
// time from each release being sent to the next grant being received.
func handoffBench(waiters int, d time.Duration, acquire acquireFunc, queued func(ctx context.Context) (int, error)) ([]time.Duration, error) {
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
	measuring.Store(true)
	released.Store(time.Now().UnixNano())
	if err := releaseFirst(ctx); err != nil {
		return nil, err
	}
	time.Sleep(d)
	measuring.Store(false)
	cancel()
	wg.Wait()
	return latencies, firstErr
}

// coordinatorLockHandoff queues waiters TryAcquire calls with a wait on one
// name, each on a connection shared by at most streamsPerConn of them.
func coordinatorLockHandoff(c *coordinator, waiters int, d time.Duration) ([]time.Duration, error) {
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
	return handoffBench(waiters, d, acquire, describeWaiters(c, name))
}

// coordinatorLeaderHandoff queues waiters Campaign calls with a wait on one
// election; each leader resigns at once.
func coordinatorLeaderHandoff(c *coordinator, waiters int, d time.Duration) ([]time.Duration, error) {
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
	return handoffBench(waiters, d, acquire, describeWaiters(c, election))
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
func etcdHandoff(endpoint string, election bool, waiters int, d time.Duration) ([]time.Duration, error) {
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
	return handoffBench(waiters, d, acquire, queued)
}
