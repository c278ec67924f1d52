package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/linearize"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

// A Redis Cluster in motion: three primaries with a replica each, under
// locks, semaphores, session-attached leases and elections at once, while
// the slots of live names and sessions move between primaries (a few keys
// a MIGRATE, so that calls meet half-moved slots) and primaries fail over
// to their replicas, planned (CLUSTER FAILOVER) and not (kill -9). The
// suite's checks hold throughout, every error a worker or probe sees is
// Unavailable (retryable), and after each move and failover a name of the
// slots concerned is granted again within the recovery bound.

const (
	// motionMoves and motionFailovers are each round's slot moves and
	// failovers (COORDINATOR_FAULT_ROUNDS repeats them).
	motionMoves     = 20
	motionFailovers = 5
	motionPrefix    = "coordinator:" // the Redis store's default key prefix
	// sessionPrefix starts the names the session workers take.
	sessionPrefix = "motion-session/"
)

func TestFaultsOnAClusterInMotion(t *testing.T) {
	bound := faultTTL + time.Second + faultTTL/2
	cluster := redistest.StartClusterWithReplicas(t, 3, 1)
	p := startCoordinatorProcess(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL="+cluster.URL(),
		"COORDINATOR_REDIS_NEW_STORE=true")
	api := dialAPI(t, p.addr)

	locks := &contention{client: api, prefix: "motion-lock/"}
	shares := &contention{client: api, prefix: "motion-share/", capacity: 4}
	for n := range shares.weighted {
		shares.weighted[n].Capacity = 4
	}
	sessions := &sessionContention{contention: &contention{client: api, prefix: sessionPrefix}, group: func(int) bool { return false }}
	elections := &electionContention{client: api}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range faultWorkers {
		wg.Go(func() { locks.run(ctx, w) })
		wg.Go(func() { shares.run(ctx, w) })
		wg.Go(func() { sessions.runSessions(ctx, w, p.addr) })
		wg.Go(func() { elections.run(ctx, w) })
	}
	defer func() { cancel(); wg.Wait() }()
	loads := []*atomic.Int64{&locks.grants, &shares.grants, &sessions.grants, &elections.grants}
	testwait.Until(t, 20*faultTTL, "every load granting", func() bool {
		for _, g := range loads {
			if g.Load() < faultNames {
				return false
			}
		}
		return true
	})

	m := &mover{t: t, cluster: cluster, api: api, bound: bound, codes: &elections.codes}
	for round := range faultRounds(t) {
		for i := range motionMoves {
			m.moveLiveSlot(round, i%2 == 1)
		}
		for i := range motionFailovers {
			m.failOver(round, i%2 == 0)
		}
	}
	cancel()
	wg.Wait()
	t.Logf("longest wait for a grant after a move or failover: %s", m.worst.Round(time.Millisecond))
	t.Logf("%d slot moves (%d keys), %d failovers (%d planned); grants: %d locks, %d shares, %d in sessions (%d sessions lost), %d terms",
		m.moves, m.keys, m.failovers, m.planned, locks.grants.Load(), shares.grants.Load(), sessions.grants.Load(),
		sessions.lost.Load(), elections.grants.Load())
	for _, c := range []*contention{locks, shares, sessions.contention} {
		c.mu.Lock()
		for _, err := range c.errs {
			t.Error(err)
		}
		c.mu.Unlock()
		c.checkFloors(t)
	}
	elections.check(t)
	linearize.Check(t, &locks.history)
	linearize.Check(t, &shares.history)
}

// mover moves slots and fails primaries over, checking that grants resume
// after each.
type mover struct {
	t         *testing.T
	cluster   *redistest.Cluster
	api       coordinatorv1.CoordinatorClient
	bound     time.Duration
	codes     *codeCount
	next      int // which live slot moves next
	moves     int
	keys      int
	failovers int
	planned   int
	worst     time.Duration // the longest wait for a grant after a move
}

// liveSlots are the slots holding the keys of the workers' names
// (sessions' keys, with ofSessions), in the order found, and the name
// whose lease lies in each.
func (m *mover) liveSlots(ofSessions bool) (slots []int, names map[int]string) {
	names = make(map[int]string)
	seen := make(map[int]bool)
	for _, shard := range m.cluster.Shards() {
		c := redis.NewClient(&redis.Options{Addr: shard.Primary.Addr()})
		keys, err := c.Keys(context.Background(), motionPrefix+"{*").Result()
		if err != nil {
			m.t.Fatalf("KEYS on %s: %v", shard.Primary.Addr(), err)
		}
		for _, k := range keys {
			name, isLease := strings.CutSuffix(strings.TrimPrefix(k, motionPrefix+"{"), "}:lease")
			isSession := strings.HasSuffix(k, ":session")
			if (ofSessions && !isSession) || (!ofSessions && (!isLease || !strings.HasPrefix(name, "motion-") || strings.HasPrefix(name, "motion-probe/"))) {
				continue
			}
			slot64, err := c.ClusterKeySlot(context.Background(), k).Result()
			if err != nil {
				m.t.Fatalf("CLUSTER KEYSLOT on %s: %v", shard.Primary.Addr(), err)
			}
			slot := int(slot64)
			if !seen[slot] {
				seen[slot] = true
				slots = append(slots, slot)
			}
			if isLease {
				names[slot] = name
			}
		}
		_ = c.Close()
	}
	return slots, names
}

// moveLiveSlot moves the slot of a live name (a session, with ofSessions)
// to the next primary, and waits for a grant of that name (of any session)
// after the move.
func (m *mover) moveLiveSlot(round int, ofSessions bool) {
	m.t.Helper()
	slots, names := m.liveSlots(ofSessions)
	if len(slots) == 0 {
		m.t.Fatalf("no live slots (sessions: %v) to move", ofSessions)
	}
	slot := slots[m.next%len(slots)]
	m.next++
	shards := m.cluster.Shards()
	from := m.cluster.ShardOf(slot).Primary
	to := shards[0].Primary
	for i, s := range shards {
		if s.Primary == from {
			to = shards[(i+1)%len(shards)].Primary
		}
	}
	before := m.lastToken(names[slot])
	m.keys += m.cluster.MoveSlot(slot, to)
	m.moves++
	moved := time.Now()
	if name := names[slot]; name != "" {
		bound := m.bound
		if strings.HasPrefix(name, sessionPrefix) {
			// A session worker keeps its names for sessionHold.
			bound += sessionHold
		}
		m.awaitGrant(round, fmt.Sprintf("a grant of %s, moved with slot %d", name, slot), moved, bound, func() bool {
			return m.lastToken(name) > before
		})
	} else {
		m.awaitGrant(round, fmt.Sprintf("a grant after session slot %d moved", slot), moved, m.bound, m.probe(slot, moved))
	}
}

// failOver fails the shard of the next live slot over to its replica.
func (m *mover) failOver(round int, planned bool) {
	m.t.Helper()
	slots, _ := m.liveSlots(false)
	slot := slots[m.next%len(slots)]
	m.next++
	shard := m.cluster.ShardOf(slot)
	m.cluster.FailOver(shard, planned)
	m.failovers++
	if planned {
		m.planned++
	}
	healed := time.Now()
	// Any name of the shard's slots: its own lock, taken by a probe.
	m.awaitGrant(round, fmt.Sprintf("a grant on %s's slots after its failover (planned: %v)", shard.Replica.Addr(), planned),
		healed, m.bound, m.probe(slot, healed))
}

// probe is a check that takes and releases a name of its own whose keys
// lie on the primary serving slot.
func (m *mover) probe(slot int, since time.Time) func() bool {
	primary := m.cluster.ShardOf(slot).Primary
	var name string
	for i := 0; name == ""; i++ {
		candidate := fmt.Sprintf("motion-probe/%d", i)
		if m.cluster.ShardOf(m.cluster.SlotOfKey(motionPrefix+"{"+candidate+"}:lease")).Primary == primary {
			name = candidate
		}
	}
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), faultTTL)
		defer cancel()
		resp, err := m.api.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: "prober", Ttl: durationpb.New(faultTTL)})
		m.codes.add(err)
		if err != nil || !resp.GetAcquired() {
			return false
		}
		_, err = m.api.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: "prober", Token: resp.GetLease().GetToken()})
		m.codes.add(err)
		return time.Now().After(since)
	}
}

func (m *mover) lastToken(name string) uint64 {
	if name == "" {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultTTL)
	defer cancel()
	d, err := m.api.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
	m.codes.add(err)
	return d.GetLastToken()
}

// awaitGrant waits until granted, and fails the test when that came more
// than bound after since.
func (m *mover) awaitGrant(round int, what string, since time.Time, bound time.Duration, granted func() bool) {
	m.t.Helper()
	testwait.Until(m.t, bound+10*faultTTL, what, func() bool {
		if granted() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
		return false
	})
	took := time.Since(since)
	m.worst = max(m.worst, took)
	if took > bound {
		m.t.Errorf("round %d: %s came %s after; want at most %s", round, what, took.Round(time.Millisecond), bound)
	}
}

// electionContention runs candidates for faultNames elections: each leader
// acts on its election's fenced resource, term as token, for most of its
// term, then resigns.
type electionContention struct {
	client    coordinatorv1.CoordinatorClient
	resources [faultNames]storetest.Resource
	grants    atomic.Int64
	codes     codeCount
	mu        sync.Mutex
	errs      []error
}

func (e *electionContention) run(ctx context.Context, worker int) {
	candidate := fmt.Sprintf("candidate-%d", worker)
	for i := worker; ctx.Err() == nil; i++ {
		n := i % faultNames
		election := fmt.Sprintf("motion-election/%d", n)
		sent := time.Now()
		callCtx, cancel := context.WithTimeout(ctx, 2*faultTTL)
		resp, err := e.client.Campaign(callCtx, &coordinatorv1.CampaignRequest{
			Election: election, Candidate: candidate, Ttl: durationpb.New(faultTTL), Wait: durationpb.New(faultTTL),
		})
		cancel()
		if ctx.Err() == nil {
			e.codes.add(err)
		}
		if err != nil || !resp.GetElected() {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		term := resp.GetLeader().GetTerm()
		e.grants.Add(1)
		validUntil := sent.Add(faultTTL)
		if err := e.resources[n].Enter(candidate, term, validUntil); err != nil {
			e.mu.Lock()
			e.errs = append(e.errs, fmt.Errorf("%s: %w", election, err))
			e.mu.Unlock()
		}
		sleepCtx(ctx, time.Until(validUntil)-faultTTL/4)
		e.resources[n].Leave(candidate)
		resignCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, err = e.client.Resign(resignCtx, &coordinatorv1.ResignRequest{Election: election, Candidate: candidate, Term: term})
		cancel()
		e.codes.add(err)
	}
}

func (e *electionContention) check(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, err := range e.errs {
		t.Error(err)
	}
	e.codes.check(t)
}

// codeCount counts the gRPC codes of the errors calls met.
type codeCount struct {
	mu    sync.Mutex
	codes map[codes.Code]int
	other []error
}

func (c *codeCount) add(err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.codes == nil {
		c.codes = make(map[codes.Code]int)
	}
	code := status.Code(err)
	c.codes[code]++
	// Unavailable is the store's retryable answer; DeadlineExceeded is the
	// caller's own deadline, a wait that ran out of time.
	if code != codes.Unavailable && code != codes.DeadlineExceeded {
		c.other = append(c.other, err)
	}
}

// check fails t for every error that was neither Unavailable nor the
// caller's deadline.
func (c *codeCount) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("errors by code: %v", c.codes)
	for _, err := range c.other {
		t.Errorf("an error other than Unavailable: %v", err)
	}
}
