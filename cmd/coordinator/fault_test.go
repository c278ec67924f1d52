package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/linearize"
	"github.com/coordinator-dev/coordinator/internal/testkit/proctest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

// The fault suite: real coordinator processes under contention, checked at a
// fenced resource while a fault strikes, and each name's history of
// acquisitions and releases checked for linearizability as a lease with
// fencing (internal/testkit/linearize). COORDINATOR_FAULT_ROUNDS (default 1)
// repeats each fault for a longer run (make fault-soak).

const (
	faultTTL   = 2 * time.Second
	faultNames = 3
	// faultWorkers contend for faultNames names.
	faultWorkers = 6
)

// faultRounds is how many times each fault strikes in one test.
func faultRounds(t *testing.T) int {
	if s := os.Getenv("COORDINATOR_FAULT_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("COORDINATOR_FAULT_ROUNDS=%q: want a positive number", s)
		}
		return n
	}
	return 1
}

// coordinatorProcess is a coordinator binary on a fixed address, which a
// fault may kill and start again.
type coordinatorProcess struct {
	t    *testing.T
	addr string
	env  []string
	proc *proctest.Process // nil while killed
}

func startCoordinatorProcess(t *testing.T, env ...string) *coordinatorProcess {
	t.Helper()
	p := &coordinatorProcess{t: t, addr: proctest.FreeAddr(t), env: env}
	p.start()
	return p
}

func (p *coordinatorProcess) start() {
	p.t.Helper()
	cmd := exec.Command(buildBinary(p.t))
	cmd.Env = append([]string{
		"COORDINATOR_LISTEN=" + p.addr, "COORDINATOR_METRICS_LISTEN=", "COORDINATOR_LOG_LEVEL=error",
		"COORDINATOR_MAX_TTL=" + faultTTL.String(), "COORDINATOR_STATE_DIR=",
	}, p.env...)
	p.proc = proctest.Start(p.t, cmd)
}

// restart kills the process and starts it again, as a fault that returns
// when it healed.
func (p *coordinatorProcess) restart(int) time.Time {
	p.kill()
	p.start()
	return time.Now()
}

// kill stops the process at once, as a crash would (kill -9).
func (p *coordinatorProcess) kill() {
	if p.proc != nil {
		p.proc.Kill()
		p.proc = nil
	}
}

// contention runs workers that take the names in turn and act on a fenced
// resource while they believe their lease valid, until stop.
type contention struct {
	client coordinatorv1.CoordinatorClient
	// prefix starts the names' ("fault/" unless set): tests that run several
	// contentions at once give each its own.
	prefix string
	// capacity, above 1, makes the names semaphores: each worker asks for a
	// weight of its own, and acts on weighted instead of resources.
	capacity  int64
	resources [faultNames]storetest.Resource
	weighted  [faultNames]storetest.WeightedResource
	highest   [faultNames]atomic.Uint64
	grants    atomic.Int64
	lastGrant atomic.Int64 // unix nanoseconds
	// history records the workers' acquisitions and releases, for the
	// linearizability check (linearize.Check).
	history linearize.Recorder
	mu      sync.Mutex
	errs    []error
}

func (c *contention) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *contention) run(ctx context.Context, worker int) {
	holder := fmt.Sprintf("worker-%d", worker)
	// A semaphore's workers ask for 1 or 2, and one in six for all of it:
	// shared and exclusive grants mixed.
	weight := int64(1)
	if c.capacity > 1 {
		weight = 1 + int64(worker)%2
		if worker%6 == 5 {
			weight = c.capacity
		}
	}
	holds := 0
	for i := worker; ctx.Err() == nil; i++ {
		n := i % faultNames
		name := c.name(n)
		sent := time.Now()
		call := c.history.Acquire(name, holder, max(c.capacity, 1), weight, faultTTL)
		callCtx, cancel := context.WithTimeout(ctx, 2*faultTTL)
		resp, err := c.client.TryAcquire(callCtx, &coordinatorv1.TryAcquireRequest{
			Name: name, Holder: holder, Ttl: durationpb.New(faultTTL), Wait: durationpb.New(faultTTL),
			Capacity: uint32(max(c.capacity, 1)), Weight: uint32(weight),
		})
		cancel()
		switch {
		case err != nil:
			call.Failed()
		case !resp.GetAcquired():
			call.Refused()
		default:
			call.Granted(resp.GetLease().GetToken(), int64(resp.GetLease().GetWeight()), resp.GetLease().GetTtl().AsDuration())
		}
		if err != nil || !resp.GetAcquired() {
			// The coordinator or the store is down or in quarantine: retry,
			// as a client would.
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		token := resp.GetLease().GetToken()
		c.grants.Add(1)
		c.lastGrant.Store(time.Now().UnixNano())
		for {
			h := c.highest[n].Load()
			if token <= h || c.highest[n].CompareAndSwap(h, token) {
				break
			}
		}
		// Act for most of the lease, believing it valid until its end by our
		// own clock from when the request was sent: a crash strands holders
		// inside it.
		validUntil := sent.Add(faultTTL)
		if c.capacity > 1 {
			if err := c.weighted[n].Enter(holder, token, int64(resp.GetLease().GetWeight()), validUntil); err != nil {
				c.fail(err)
			}
		} else if err := c.resources[n].Enter(holder, token, validUntil); err != nil {
			c.fail(err)
		}
		sleepCtx(ctx, time.Until(validUntil)-faultTTL/4)
		c.resources[n].Leave(holder)
		c.weighted[n].Leave(holder)
		// A worker's first hold, and every third after, ends without a
		// release, as a holder that crashed would leave it: the lease must
		// end by its TTL (what the linearizability check's expiry rule
		// judges; a release, even one whose outcome is unknown, may have
		// ended a lease any time).
		abandon := holds%3 == 0
		if holds++; abandon {
			continue
		}
		release := c.history.Release(name, holder, token)
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		released, err := c.client.Release(relCtx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token})
		cancel()
		if err != nil {
			release.Failed()
		} else {
			release.Released(released.GetReleased())
		}
	}
}

// name is the nth name the workers contend for.
func (c *contention) name(n int) string {
	if c.prefix == "" {
		return fmt.Sprintf("fault/%d", n)
	}
	return fmt.Sprintf("%s%d", c.prefix, n)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// checkFloors checks that Describe's last_token is no lower than any token
// a worker was granted.
func (c *contention) checkFloors(t *testing.T) {
	t.Helper()
	for n := range faultNames {
		name := c.name(n)
		var d *coordinatorv1.DescribeResponse
		testwait.Until(t, 3*faultTTL, "Describe answers", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var err error
			d, err = c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
			return err == nil
		})
		if d.GetLastToken() < c.highest[n].Load() {
			t.Errorf("Describe(%s).last_token = %d, below token %d granted before", name, d.GetLastToken(), c.highest[n].Load())
		}
	}
}

// underContention runs the workers against addr, lets fault strike
// rounds times, and checks mutual exclusion, tokens, Describe floors, the
// recovery time after each fault healed, and that each name's history is
// linearizable as a lease with fencing.
func underContention(t *testing.T, addr string, recoveryBound time.Duration, fault func(round int) (healed time.Time)) {
	t.Helper()
	contend(t, addr, 1, faultWorkers, recoveryBound, fault)
}

// contend is underContention on names of capacity, with workers.
func contend(t *testing.T, addr string, capacity int64, workers int, recoveryBound time.Duration, fault func(round int) (healed time.Time)) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	c := &contention{client: coordinatorv1.NewCoordinatorClient(conn), capacity: capacity}
	for n := range c.weighted {
		c.weighted[n].Capacity = capacity
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { c.run(ctx, w) })
	}
	defer func() { cancel(); wg.Wait() }()

	for round := range faultRounds(t) {
		// Let holders get inside their leases, then strike.
		before := c.grants.Load()
		testwait.Until(t, 10*faultTTL, "granting before the fault", func() bool { return c.grants.Load() > before+faultNames })
		time.Sleep(faultTTL / 2)
		healed := fault(round)
		awaitGrantAfter(t, round, "a grant", &c.lastGrant, healed, recoveryBound)
	}
	cancel()
	wg.Wait()
	c.mu.Lock()
	for _, err := range c.errs {
		t.Error(err)
	}
	c.mu.Unlock()
	if capacity > 1 {
		most := make([]int, faultNames)
		for n := range c.weighted {
			most[n] = c.weighted[n].MostHolders()
		}
		t.Logf("most holders at once, by name: %v", most)
		if slices.Max(most) < 2 {
			t.Errorf("at most %v holders at once: the workers never shared a semaphore", most)
		}
	}
	c.checkFloors(t)
	linearize.Check(t, &c.history)
}

func TestFaults(t *testing.T) {
	// Grants resume within the max TTL (the longest a lost lease may live)
	// plus a second, under a loaded CI machine's scheduling noise.
	bound := faultTTL + time.Second + faultTTL/2
	t.Run("coordinator killed on the memory store", func(t *testing.T) {
		p := startCoordinatorProcess(t, "COORDINATOR_STATE_DIR="+t.TempDir())
		underContention(t, p.addr, bound, p.restart)
	})
	t.Run("Redis restarted without its data", func(t *testing.T) {
		rs := redistest.Start(t, false)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		underContention(t, p.addr, bound, func(int) time.Time {
			rs.Restart()
			return time.Now()
		})
	})
	t.Run("Sentinel failover with replica-acknowledged grants", func(t *testing.T) {
		primary := redistest.Start(t, false)
		replica := redistest.StartReplica(t, primary, false)
		replica.WaitInSync()
		sentinel := redistest.StartSentinel(t, primary, "coordinator")
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis",
			"COORDINATOR_REDIS_URL=redis+sentinel://"+sentinel+"/coordinator",
			"COORDINATOR_REDIS_NEW_STORE=true", "COORDINATOR_REDIS_MIN_REPLICAS=1")
		sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
		defer func() { _ = sc.Close() }()
		underContention(t, p.addr, bound, func(int) time.Time {
			primary.Kill()
			testwait.Until(t, 60*time.Second, "the Sentinel promoting the replica", func() bool {
				addr, err := sc.GetMasterAddrByName(context.Background(), "coordinator").Result()
				return err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == replica.Addr()
			})
			// With one replica required, the new primary grants once the old
			// one is back as its replica (the Sentinel makes it one): the
			// fault has healed then.
			primary.Restart()
			primary.WaitInSync()
			return time.Now()
		})
	})
	t.Run("Redis flushed while the coordinator was down", func(t *testing.T) {
		rs := redistest.Start(t, true)
		store := []string{"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + rs.URL()}
		p := startCoordinatorProcess(t, append(store, "COORDINATOR_REDIS_NEW_STORE=true")...)
		rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
		defer func() { _ = rdb.Close() }()
		underContention(t, p.addr, bound, func(int) time.Time {
			p.kill()
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			// Started as usual, not as a new store: it must notice the loss.
			p.env = store
			p.start()
			return time.Now()
		})
	})
}

// TestFaultsOnASemaphore: the same faults on names of capacity 4 shared by
// workers of mixed weights (a sixth of them exclusive): the weight held
// by valid leases, at the resource, never passes the capacity, and no token
// goes below an exclusive holder's.
func TestFaultsOnASemaphore(t *testing.T) {
	const capacity, workers = 4, 12
	bound := faultTTL + time.Second + faultTTL/2
	t.Run("coordinator killed on the memory store", func(t *testing.T) {
		p := startCoordinatorProcess(t, "COORDINATOR_STATE_DIR="+t.TempDir())
		contend(t, p.addr, capacity, workers, bound, p.restart)
	})
	t.Run("Redis restarted without its data", func(t *testing.T) {
		rs := redistest.Start(t, false)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		contend(t, p.addr, capacity, workers, bound, func(int) time.Time {
			rs.Restart()
			return time.Now()
		})
	})
}

// awaitGrantAfter waits for what (a grant whose time, in unix nanoseconds,
// last holds) after the fault of round healed, and fails t when it came
// more than bound after.
func awaitGrantAfter(t *testing.T, round int, what string, last *atomic.Int64, healed time.Time, bound time.Duration) {
	t.Helper()
	testwait.Until(t, bound+10*faultTTL, what+" after the fault", func() bool { return last.Load() > healed.UnixNano() })
	took := time.Unix(0, last.Load()).Sub(healed)
	t.Logf("round %d: %s %s after the fault healed (bound %s)", round, what, took.Round(time.Millisecond), bound)
	if took > bound {
		t.Errorf("round %d: %s came %s after the fault healed; want at most %s", round, what, took, bound)
	}
}
