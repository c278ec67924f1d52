package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testproxy"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// The fault suite with leases attached to sessions: each worker is a Client
// (the Go SDK) that takes faultNamesPerSession names in one session of
// faultTTL, acts on their fenced resources for longer than a TTL (so that
// only the session's renewals keep them), and gives them up, one by one or
// all at once by closing the session, while a fault strikes. The checks are
// the suite's: no two holders inside a resource with valid leases, tokens
// never going back, Describe's floors, and grants resuming after the fault.

const (
	// faultNamesPerSession of the faultNames each session holds.
	faultNamesPerSession = 2
	// sessionHold is how long a worker keeps its names: longer than the
	// TTL, so that the session's renewals are what keeps them.
	sessionHold = 2 * faultTTL
	// actEvery is how often a holder acts on its resources, checking its
	// leases' validity before each act.
	actEvery = 50 * time.Millisecond
)

// sessionContention is contention's state for workers whose leases live in
// sessions.
type sessionContention struct {
	*contention
	// group names the workers whose grants healed counts (the stalled
	// ones); -1: every worker.
	group      func(worker int) bool
	groupGrant atomic.Int64 // unix nanoseconds of the group's last grant
	// holding counts the workers (and those of the group) inside hold.
	holding, groupHolding atomic.Int64
	lost                  atomic.Int64 // sessions lost to a fault
	groupLost             atomic.Int64
}

// runSessions is one worker: a Client on addr taking its names in sessions
// until ctx ends.
func (c *sessionContention) runSessions(ctx context.Context, worker int, addr string) {
	cl, err := client.New(addr, client.WithTTL(faultTTL), client.WithCloseTimeout(time.Second))
	if err != nil {
		c.fail(err)
		return
	}
	defer func() { _ = cl.Close() }()
	names := make([]int, 0, faultNamesPerSession)
	for k := range faultNamesPerSession {
		names = append(names, (worker+k)%faultNames)
	}
	slices.Sort(names) // one order for every worker: no two wait for each other
	for round := 0; ctx.Err() == nil; round++ {
		c.sessionRound(ctx, cl, worker, round, names)
	}
}

// sessionRound takes names in a new session, holds them for sessionHold
// (or until lost) and gives them up: by closing the session on even rounds,
// on odd ones by releasing each lease (the session going on) and then
// closing it.
func (c *sessionContention) sessionRound(ctx context.Context, cl *client.Client, worker, round int, names []int) {
	sctx, cancel := context.WithTimeout(ctx, 2*faultTTL)
	s, err := cl.NewSession(sctx, client.WithTTL(faultTTL))
	cancel()
	if err != nil {
		// The coordinator or the store is down or in quarantine: retry,
		// as a client would.
		sleepCtx(ctx, 20*time.Millisecond)
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = s.Close(cctx)
		cancel()
	}()
	var leases []*client.Lease
	for _, n := range names {
		lctx, cancel := context.WithTimeout(ctx, 3*faultTTL)
		l, err := cl.Lock(lctx, c.name(n), client.WithSession(s))
		cancel()
		if err != nil {
			break // the session is lost or the fault is on: start again
		}
		leases = append(leases, l)
		c.granted(worker, n, l.Token())
	}
	if len(leases) < len(names) {
		return
	}
	c.holding.Add(1)
	if c.group(worker) {
		c.groupHolding.Add(1)
	}
	c.hold(ctx, names, leases)
	c.holding.Add(-1)
	if c.group(worker) {
		c.groupHolding.Add(-1)
	}
	if s.Err() != nil && ctx.Err() == nil {
		c.lost.Add(1)
		if c.group(worker) {
			c.groupLost.Add(1)
		}
	}
	if round%2 == 1 {
		for _, l := range leases {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_, _ = l.Release(rctx)
			cancel()
		}
	}
}

// granted records a grant of name n with token to worker.
func (c *sessionContention) granted(worker, n int, token uint64) {
	now := time.Now().UnixNano()
	c.grants.Add(1)
	c.lastGrant.Store(now)
	if c.group(worker) {
		c.groupGrant.Store(now)
	}
	for {
		h := c.highest[n].Load()
		if token <= h || c.highest[n].CompareAndSwap(h, token) {
			return
		}
	}
}

// hold acts on the names' resources every actEvery for sessionHold while
// the leases are valid by this process's clock (their Deadline, the
// session's), and leaves them.
func (c *sessionContention) hold(ctx context.Context, names []int, leases []*client.Lease) {
	until := time.Now().Add(sessionHold)
	defer func() {
		for i, n := range names {
			c.resources[n].Leave(leases[i].Holder())
		}
	}()
	for time.Now().Before(until) && ctx.Err() == nil {
		for i, n := range names {
			l := leases[i]
			valid := l.Deadline()
			if l.Err() != nil || !time.Now().Before(valid) {
				return // lost, or its validity ran out unrenewed: stop acting
			}
			if err := c.resources[n].Enter(l.Holder(), l.Token(), valid); err != nil {
				c.fail(fmt.Errorf("in session: %w", err))
			}
		}
		sleepCtx(ctx, actEvery)
	}
}

// contendInSessions runs faultWorkers session workers against addr (those
// for which viaProxy says so against proxyAddr instead), lets fault strike
// rounds times, and checks what contend checks. Grants must resume within
// recoveryBound of the fault healing; with viaProxy, a proxied worker's
// grant must come within groupBound (it waits in line behind the others).
func contendInSessions(t *testing.T, addr, proxyAddr string, viaProxy func(worker int) bool, recoveryBound, groupBound time.Duration,
	fault func(round int) (healed time.Time),
) {
	t.Helper()
	conn := dialAPI(t, addr)
	group := viaProxy
	if group == nil {
		group = func(int) bool { return false }
	}
	c := &sessionContention{contention: &contention{client: conn}, group: group}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range faultWorkers {
		target := addr
		if group(w) {
			target = proxyAddr
		}
		wg.Go(func() { c.runSessions(ctx, w, target) })
	}
	defer func() { cancel(); wg.Wait() }()

	for round := range faultRounds(t) {
		// Strike while a holder (one the fault cuts off, with viaProxy) is
		// inside its session's leases.
		before := c.grants.Load()
		testwait.Until(t, 20*faultTTL, "granting before the fault", func() bool { return c.grants.Load() > before+faultNames })
		holders := &c.holding
		if viaProxy != nil {
			holders = &c.groupHolding
		}
		testwait.Until(t, 20*faultTTL, "a holder inside its leases", func() bool { return holders.Load() > 0 })
		time.Sleep(faultTTL / 2)
		healed := fault(round)
		awaitGrantAfter(t, round, "a grant", &c.lastGrant, healed, recoveryBound)
		if viaProxy != nil {
			awaitGrantAfter(t, round, "a grant to a worker the fault cut off", &c.groupGrant, healed, groupBound)
		}
	}
	cancel()
	wg.Wait()
	t.Logf("%d grants in sessions, %d sessions lost to the faults", c.grants.Load(), c.lost.Load())
	if viaProxy != nil && c.groupLost.Load() == 0 {
		t.Error("no session of a cut-off worker was lost: the fault never struck a holder")
	}
	c.mu.Lock()
	for _, err := range c.errs {
		t.Error(err)
	}
	c.mu.Unlock()
	c.checkFloors(t)
}

func TestFaultsWithLeasesInSessions(t *testing.T) {
	// The holder the fault strikes keeps its names for the rest of its
	// sessionHold, or until its session's TTL ends it (then the lock delay);
	// then the next waiter is granted. Plus a second of a loaded machine's
	// scheduling noise.
	bound := sessionHold + faultTTL + time.Second
	t.Run("coordinator killed on the memory store", func(t *testing.T) {
		p := startCoordinatorProcess(t, "COORDINATOR_STATE_DIR="+t.TempDir())
		contendInSessions(t, p.addr, "", nil, bound, 0, p.restart)
	})
	t.Run("coordinator killed on Redis", func(t *testing.T) {
		rs := redistest.Start(t, false)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		p.env = []string{"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + rs.URL()}
		contendInSessions(t, p.addr, "", nil, bound, 0, p.restart)
	})
	t.Run("Redis restarted without its data", func(t *testing.T) {
		rs := redistest.Start(t, false)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		contendInSessions(t, p.addr, "", nil, bound, 0, func(int) time.Time {
			rs.Restart()
			return time.Now()
		})
	})
	t.Run("Redis restarted with its data", func(t *testing.T) {
		rs := redistest.Start(t, true)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		contendInSessions(t, p.addr, "", nil, bound, 0, func(int) time.Time {
			rs.Restart()
			return time.Now()
		})
	})
	t.Run("a stalled network between half the workers and the coordinator", func(t *testing.T) {
		rs := redistest.Start(t, false)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		stall := testproxy.New(t, p.addr)
		stalled := func(worker int) bool { return worker%2 == 1 }
		// The stalled workers' sessions expire, their names go to the
		// others; once the connections are cut (as a keepalive would),
		// they reconnect and wait in line again: behind every other
		// worker's hold at the most.
		groupBound := bound + faultWorkers*sessionHold
		contendInSessions(t, p.addr, stall.Addr(), stalled, bound, groupBound, func(int) time.Time {
			stall.Freeze()
			time.Sleep(2 * faultTTL) // the stalled workers' sessions expire meanwhile
			stall.Drop()
			return time.Now()
		})
	})
}

// dialAPI is the generated API on addr, closed at the end of t.
func dialAPI(t *testing.T, addr string) coordinatorv1.CoordinatorClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return coordinatorv1.NewCoordinatorClient(conn)
}
