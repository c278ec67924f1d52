package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/linearize"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

// The fault suite with groups: each worker asks for a random subset of
// groupFaultNames names, in random order, as one waiting group, acts on
// every member's fenced resource while it believes the leases valid, and
// releases them; a fault strikes while groups wait and hold (a
// coordinator killed mid-acquisition, Redis restarted or stalled). Beyond
// the suite's checks (no two holders inside a resource with valid leases,
// tokens never going back, Describe's floors, grants resuming after the
// fault), a grant must be of every member (never part of a group), and
// whatever a holder that gave up may still hold (what a killed coordinator
// took for a group that waited, a grant whose answer the fault cut) must
// end within the TTL of the holder giving up or the fault healing.

const (
	groupFaultNames   = 4
	groupFaultWorkers = 6
	// strayMargin is how long past its bound a lease of a holder that gave
	// up may be seen: the store's expiry is to the millisecond, the
	// observer's Describe takes a moment.
	strayMargin = time.Second
)

// groupContention is the state of the workers of one run.
type groupContention struct {
	client    coordinatorv1.CoordinatorClient
	names     []string
	resources map[string]*storetest.Resource
	highest   map[string]*atomic.Uint64
	grants    atomic.Int64
	lastGrant atomic.Int64 // unix nanoseconds
	// waiting counts the workers in an AcquireGroup call, holding those
	// inside their leases: a fault strikes when both are busy.
	waiting, holding atomic.Int64
	// history records each member's acquisition and release as one of its
	// name, for the linearizability check.
	history linearize.Recorder

	mu sync.Mutex
	// gaveUp is when each holder that may still hold something gave up
	// (its acquisition failed or was refused, or it released): its leases
	// must end within the TTL after that or after the fault healed.
	gaveUp map[string]time.Time
	// faulty is true while a fault strikes, and healed when it last
	// healed.
	faulty bool
	healed time.Time
	errs   []error
}

func (g *groupContention) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.errs = append(g.errs, err)
}

func (g *groupContention) giveUp(holder string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gaveUp[holder] = time.Now()
}

// run is one worker, until ctx ends.
func (g *groupContention) run(ctx context.Context, worker int) {
	rng := rand.New(rand.NewPCG(uint64(worker), uint64(time.Now().UnixNano())))
	for cycle := 0; ctx.Err() == nil; cycle++ {
		holder := fmt.Sprintf("group-worker-%d-%d", worker, cycle)
		names := slices.Clone(g.names)
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		names = names[:2+rng.IntN(2)]
		// One wait in three is short: it runs out while others hold, and
		// what the group held meanwhile must be given back.
		wait := faultTTL
		if rng.IntN(3) == 0 {
			wait = faultTTL / 4
		}
		req := &coordinatorv1.AcquireGroupRequest{Holder: holder, Ttl: durationpb.New(faultTTL), Wait: durationpb.New(wait)}
		for _, n := range names {
			req.Members = append(req.Members, &coordinatorv1.GroupMember{Name: n})
		}
		sent := time.Now()
		calls := make([]*linearize.Call, len(names))
		for i, n := range names {
			calls[i] = g.history.Acquire(n, holder, 1, 1, faultTTL)
		}
		callCtx, cancel := context.WithTimeout(ctx, 2*faultTTL)
		g.waiting.Add(1)
		resp, err := g.client.AcquireGroup(callCtx, req)
		g.waiting.Add(-1)
		cancel()
		recordGroupGrant(calls, names, resp, err)
		if err != nil || !resp.GetAcquired() {
			// The coordinator or the store is down, stalled or in
			// quarantine, or the wait ran out: start again as a new
			// holder, which leaves whatever the old one may hold to its
			// TTL.
			g.giveUp(holder)
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		g.hold(ctx, holder, names, resp.GetLeases(), sent)
	}
}

// recordGroupGrant finishes the members' calls as the group's answer
// says: a member the answer does not grant as asked (what hold fails) is
// left unknown.
func recordGroupGrant(calls []*linearize.Call, names []string, resp *coordinatorv1.AcquireGroupResponse, err error) {
	for i, call := range calls {
		leases := resp.GetLeases()
		switch {
		case err != nil:
			call.Failed()
		case !resp.GetAcquired():
			call.Refused()
		case i < len(leases) && leases[i].GetName() == names[i]:
			call.Granted(leases[i].GetToken(), int64(leases[i].GetWeight()), leases[i].GetTtl().AsDuration())
		}
	}
}

// hold acts on the members' resources for most of the leases, believing
// them valid until sent plus the TTL by this process's clock, and
// releases them.
func (g *groupContention) hold(ctx context.Context, holder string, names []string, leases []*coordinatorv1.Lease, sent time.Time) {
	defer g.giveUp(holder)
	if len(leases) != len(names) {
		g.fail(fmt.Errorf("%s was granted %d leases for %v: part of a group", holder, len(leases), names))
		return
	}
	for i, l := range leases {
		if l.GetName() != names[i] || l.GetHolder() != holder {
			g.fail(fmt.Errorf("%s: lease %d of %v is %v", holder, i, names, l))
			return
		}
	}
	g.grants.Add(1)
	g.lastGrant.Store(time.Now().UnixNano())
	validUntil := sent.Add(faultTTL)
	g.holding.Add(1)
	for _, l := range leases {
		h := g.highest[l.GetName()]
		for {
			top := h.Load()
			if l.GetToken() <= top || h.CompareAndSwap(top, l.GetToken()) {
				break
			}
		}
		if err := g.resources[l.GetName()].Enter(holder, l.GetToken(), validUntil); err != nil {
			g.fail(fmt.Errorf("in a group: %w", err))
		}
	}
	sleepCtx(ctx, time.Until(validUntil)-faultTTL/4)
	for _, l := range leases {
		g.resources[l.GetName()].Leave(holder)
	}
	g.holding.Add(-1)
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	req := &coordinatorv1.ReleaseGroupRequest{Holder: holder}
	releases := make([]*linearize.Call, len(leases))
	for i, l := range leases {
		req.Leases = append(req.Leases, &coordinatorv1.GroupLease{Name: l.GetName(), Token: l.GetToken()})
		releases[i] = g.history.Release(l.GetName(), holder, l.GetToken())
	}
	resp, err := g.client.ReleaseGroup(relCtx, req)
	for _, release := range releases {
		if err != nil {
			release.Failed()
		} else {
			release.Released(resp.GetReleased())
		}
	}
}

// watchStrays describes every name every 50 ms until ctx ends, and fails
// when a holder that gave up still holds a name later than the TTL after
// it gave up or the last fault healed, whichever came last.
func (g *groupContention) watchStrays(ctx context.Context) {
	for ctx.Err() == nil {
		for _, n := range g.names {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			d, err := g.client.Describe(dctx, &coordinatorv1.DescribeRequest{Name: n})
			cancel()
			if err != nil {
				continue // the fault is on
			}
			now := time.Now()
			g.mu.Lock()
			for _, l := range d.GetHolders() {
				gaveUp, ok := g.gaveUp[l.GetHolder()]
				if !ok || g.faulty {
					continue
				}
				if bound := later(gaveUp, g.healed).Add(faultTTL + strayMargin); now.After(bound) {
					g.errs = append(g.errs, fmt.Errorf("%s holds %s (token %d) %s after it gave up (the last fault healed %s before): past the TTL",
						l.GetHolder(), n, l.GetToken(), now.Sub(gaveUp).Round(time.Millisecond), now.Sub(g.healed).Round(time.Millisecond)))
					delete(g.gaveUp, l.GetHolder()) // once is enough
				}
			}
			g.mu.Unlock()
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// contendInGroups runs the group workers against addr, lets fault strike
// rounds times while groups wait and hold, and checks what the suite
// checks, and the groups' rules.
func contendInGroups(t *testing.T, addr string, recoveryBound time.Duration, fault func(round int) (healed time.Time)) {
	t.Helper()
	g := &groupContention{
		client: dialAPI(t, addr), resources: map[string]*storetest.Resource{}, highest: map[string]*atomic.Uint64{},
		gaveUp: map[string]time.Time{}, healed: time.Now(),
	}
	for n := range groupFaultNames {
		name := fmt.Sprintf("group-fault/%d", n)
		g.names = append(g.names, name)
		g.resources[name] = &storetest.Resource{}
		g.highest[name] = &atomic.Uint64{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range groupFaultWorkers {
		wg.Go(func() { g.run(ctx, w) })
	}
	wg.Go(func() { g.watchStrays(ctx) })
	defer func() { cancel(); wg.Wait() }()

	for round := range faultRounds(t) {
		before := g.grants.Load()
		testwait.Until(t, 20*faultTTL, "group grants before the fault", func() bool { return g.grants.Load() > before+groupFaultNames })
		testwait.Until(t, 20*faultTTL, "groups holding and waiting", func() bool { return g.holding.Load() > 0 && g.waiting.Load() > 0 })
		time.Sleep(faultTTL / 2)
		g.mu.Lock()
		g.faulty = true
		g.mu.Unlock()
		healed := fault(round)
		g.mu.Lock()
		g.faulty, g.healed = false, healed
		g.mu.Unlock()
		awaitGrantAfter(t, round, "a group's grant", &g.lastGrant, healed, recoveryBound)
	}
	// Past the last fault's bound, so that the observer judged every
	// holder it cut off.
	sleepCtx(ctx, time.Until(g.healed.Add(faultTTL+2*strayMargin)))
	cancel()
	wg.Wait()
	g.mu.Lock()
	for _, err := range g.errs {
		t.Error(err)
	}
	g.mu.Unlock()
	t.Logf("%d group grants", g.grants.Load())
	g.checkFloors(t)
	linearize.Check(t, &g.history)
}

// checkFloors checks that Describe's last_token of each name is no lower
// than any token a worker was granted.
func (g *groupContention) checkFloors(t *testing.T) {
	t.Helper()
	var below []string
	for _, name := range g.names {
		var d *coordinatorv1.DescribeResponse
		testwait.Until(t, 3*faultTTL, "Describe answers", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var err error
			d, err = g.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
			return err == nil
		})
		if top := g.highest[name].Load(); d.GetLastToken() < top {
			below = append(below, fmt.Sprintf("%s: last_token %d below token %d granted before", name, d.GetLastToken(), top))
		}
	}
	if len(below) > 0 {
		t.Error(strings.Join(below, "; "))
	}
}

// TestFaultsWithGroups strikes groups with the suite's faults: a
// coordinator killed mid-acquisition (on a Cluster, while it holds the
// members of lower slots for groups that wait in higher ones), and Redis
// restarted without its data or stalled.
func TestFaultsWithGroups(t *testing.T) {
	// As TestFaults: the longest a lost lease may live, plus a loaded
	// machine's noise; a group waits for the last of its members.
	bound := faultTTL + time.Second + faultTTL/2
	t.Run("coordinator killed mid-acquisition on the memory store", func(t *testing.T) {
		p := startCoordinatorProcess(t, "COORDINATOR_STATE_DIR="+t.TempDir())
		contendInGroups(t, p.addr, bound, p.restart)
	})
	t.Run("coordinator killed mid-acquisition on Redis", func(t *testing.T) {
		rs := redistest.Start(t, false)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		p.env = []string{"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + rs.URL()}
		contendInGroups(t, p.addr, bound, p.restart)
	})
	t.Run("coordinator killed mid-acquisition on a Redis Cluster", func(t *testing.T) {
		url := redistest.StartCluster(t, 3).URL()
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+url, "COORDINATOR_REDIS_NEW_STORE=true")
		p.env = []string{"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + url}
		contendInGroups(t, p.addr, bound, p.restart)
	})
	t.Run("Redis restarted without its data", func(t *testing.T) {
		rs := redistest.Start(t, false)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		contendInGroups(t, p.addr, bound, func(int) time.Time {
			rs.Restart()
			return time.Now()
		})
	})
	t.Run("Redis stalled", func(t *testing.T) {
		rs := redistest.Start(t, false)
		p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true")
		contendInGroups(t, p.addr, bound, func(int) time.Time {
			// Longer than the store's call timeout: calls fail as
			// unavailable, and what Redis queued meanwhile runs when it
			// wakes, grants among it: their leases run from then.
			const stall = 3 * time.Second
			rs.Pause(stall)
			time.Sleep(stall)
			return time.Now()
		})
	})
}
