package coordinatord_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/coordinator-dev/coordinator/coordinatord"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/server/servertest"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

// TestRandomGroups: many clients each lock, again and again, a random
// subset of a few names listed in random order, as one waiting group (a
// lone name, as often as not, as a single TryAcquire, waiting or not),
// hold them briefly and release them; some give up a wait midway. Half of
// them call the unary RPCs, half the operation stream. On the memory store
// and on Redis, standalone and a Cluster of three primaries, it checks:
//   - progress: grants keep coming (a stall of stallLimit fails, with every
//     name's Describe), and every client is granted randomCycles times;
//   - all or nothing: a grant is a lease of each member, and Describe of
//     each member then shows its holder with that token, alone;
//   - exclusion and tokens: a fenced resource per name that no two holders
//     are in at once with valid leases, and whose tokens only rise;
//   - clean give-ups: once the clients stop, cutting their waits, every
//     queue is empty at once (before the places could time out) and no
//     name stays held past the TTL.
func TestRandomGroups(t *testing.T) {
	deployments := []struct {
		name   string
		config func(t *testing.T) coordinatord.Config
	}{
		{"memory", func(t *testing.T) coordinatord.Config { return testConfig(t, coordinatord.StoreMemory) }},
		{"redis", func(t *testing.T) coordinatord.Config { return testConfig(t, coordinatord.StoreRedis) }},
		{"cluster", func(t *testing.T) coordinatord.Config {
			// A group's names lie in several slots: taken slot by slot.
			cfg := testConfig(t, coordinatord.StoreMemory)
			cfg.Store, cfg.RedisURL = coordinatord.StoreRedis, redistest.StartCluster(t, 3).URL()
			return cfg
		}},
	}
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) { runRandomGroups(t, start(t, d.config(t))) })
	}
}

const (
	randomClients = 16
	randomNames   = 6
	// randomRun is how long the clients contend at least; then each goes
	// on until granted randomCycles times.
	randomRun    = 3 * time.Second
	randomCycles = 3
	randomTTL    = 3 * time.Second
	// stallLimit is the longest time without a grant before the run is
	// declared deadlocked; randomWait outlasts it, so that groups that
	// wait for each other are not set free by their waits running out.
	stallLimit = 10 * time.Second
	randomWait = 2 * stallLimit
	// tryFor is how long a client that tries without waiting keeps trying:
	// waiters pass it, so it may be refused for as long as they come.
	tryFor = time.Second
)

// groupRun is the state the clients of one run share.
type groupRun struct {
	c         *coordinator
	names     []string
	resources map[string]*storetest.Resource
	grants    atomic.Int64
	groups    atomic.Int64 // grants of more than one name
	gaveUp    atomic.Int64 // waits given up midway
	// longestWait is the longest a cycle that waits in line waited for
	// its grant, in nanoseconds.
	longestWait atomic.Int64
	lastGrant   atomic.Int64 // unix nanoseconds

	mu   sync.Mutex
	errs []error
	// asking is what each client is asking for, and since when, for the
	// message of a stall.
	asking map[string]string
}

// ask records that holder asks for names, until done is called.
func (r *groupRun) ask(holder string, names []string) (done func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asking[holder] = fmt.Sprintf("%v since %s", names, time.Now().Format("15:04:05.000"))
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.asking, holder)
	}
}

func (r *groupRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// groupCalls are the calls a client makes, through the unary RPCs or its
// operation stream; Describe is always unary.
type groupCalls struct {
	coordinatorv1.CoordinatorClient
	acquireGroup func(context.Context, *coordinatorv1.AcquireGroupRequest) (*coordinatorv1.AcquireGroupResponse, error)
	releaseGroup func(context.Context, *coordinatorv1.ReleaseGroupRequest) (*coordinatorv1.ReleaseGroupResponse, error)
}

func unaryGroupCalls(client coordinatorv1.CoordinatorClient) groupCalls {
	return groupCalls{
		CoordinatorClient: client,
		acquireGroup: func(ctx context.Context, req *coordinatorv1.AcquireGroupRequest) (*coordinatorv1.AcquireGroupResponse, error) {
			return client.AcquireGroup(ctx, req)
		},
		releaseGroup: func(ctx context.Context, req *coordinatorv1.ReleaseGroupRequest) (*coordinatorv1.ReleaseGroupResponse, error) {
			return client.ReleaseGroup(ctx, req)
		},
	}
}

// streamGroupCalls makes the lease and group calls as operations of one
// operation stream, as an SDK does, a waiting acquisition cancelled with
// the stream's cancel when its context ends.
func streamGroupCalls(t *testing.T, client coordinatorv1.CoordinatorClient) groupCalls {
	sc := streamClient{CoordinatorClient: client, s: openTestStream(t, client)}
	return groupCalls{
		CoordinatorClient: sc,
		acquireGroup: func(ctx context.Context, req *coordinatorv1.AcquireGroupRequest) (*coordinatorv1.AcquireGroupResponse, error) {
			req = proto.CloneOf(req)
			req.Wait = waitBefore(ctx, req.GetWait())
			op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_AcquireGroup{AcquireGroup: req}}
			return streamCall(ctx, sc, op, req.GetWait().AsDuration() > 0, (*coordinatorv1.StreamResult).GetAcquireGroup)
		},
		releaseGroup: func(ctx context.Context, req *coordinatorv1.ReleaseGroupRequest) (*coordinatorv1.ReleaseGroupResponse, error) {
			op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_ReleaseGroup{ReleaseGroup: req}}
			return streamCall(ctx, sc, op, false, (*coordinatorv1.StreamResult).GetReleaseGroup)
		},
	}
}

func runRandomGroups(t *testing.T, c *coordinator) {
	r := &groupRun{c: c, resources: map[string]*storetest.Resource{}, asking: map[string]string{}}
	for i := range randomNames {
		name := fmt.Sprintf("random/%d", i)
		r.names = append(r.names, name)
		r.resources[name] = &storetest.Resource{}
	}
	r.lastGrant.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := time.Now().Add(randomRun)
	var wg sync.WaitGroup
	cycles := make([]atomic.Int64, randomClients)
	for id := range randomClients {
		calls := unaryGroupCalls(c.client)
		if id%2 == 1 {
			calls = streamGroupCalls(t, c.client)
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
			for cycle := 0; ctx.Err() == nil; cycle++ {
				if r.cycle(ctx, calls, rng, fmt.Sprintf("client-%d-%d", id, cycle)) {
					cycles[id].Add(1)
				}
			}
		})
	}
	stalled := r.watchProgress(ctx, stop, cycles)
	// Stopped in the middle of their waits, the clients leave the queues.
	cancel()
	wg.Wait()
	r.mu.Lock()
	for _, err := range r.errs {
		t.Error(err)
	}
	r.mu.Unlock()
	if stalled != "" {
		t.Fatal(stalled)
	}
	perClient := make([]int64, randomClients)
	for i := range cycles {
		perClient[i] = cycles[i].Load()
	}
	t.Logf("%d grants, %d of them groups, %d waits given up, the longest wait for a grant %s; grants per client %v",
		r.grants.Load(), r.groups.Load(), r.gaveUp.Load(), time.Duration(r.longestWait.Load()).Round(time.Millisecond), perClient)
	// Waiters are served in arrival order: no client waits in line for
	// long while others are granted.
	if longest := time.Duration(r.longestWait.Load()); longest > stallLimit {
		t.Errorf("a client waited %s in line for its grant: starved", longest.Round(time.Millisecond))
	}
	if r.groups.Load() < randomClients {
		t.Errorf("only %d grants of groups: the test did not exercise groups", r.groups.Load())
	}
	// The server's places time out after 3s by themselves: 2s tells a
	// group that left its queues from one that was forgotten in them.
	r.awaitNames(t, 2*time.Second, "every queue empty once the clients stopped", func(d *coordinatorv1.DescribeResponse) bool { return d.GetWaiters() == 0 })
	// A grant that raced a client's stop is held until its TTL, no longer.
	r.awaitNames(t, randomTTL+2*time.Second, "every name free within the TTL", func(d *coordinatorv1.DescribeResponse) bool { return !d.GetHeld() })
}

// awaitNames waits until cond holds of every name's Describe, failing t
// with them all after within.
func (r *groupRun) awaitNames(t *testing.T, within time.Duration, what string, cond func(*coordinatorv1.DescribeResponse) bool) {
	t.Helper()
	ctx := servertest.Timeout(t, within+10*time.Second)
	deadline := time.Now().Add(within)
	for {
		ok := true
		for _, n := range r.names {
			d, err := r.c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: n})
			if err != nil {
				t.Fatalf("Describe(%s): %v", n, err)
			}
			ok = ok && cond(d)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: still waiting for %s:\n%s", within, what, r.describeAll(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchProgress waits until stop, and until each client was granted
// randomCycles times; when no grant comes for stallLimit before, it
// returns why, with every name's Describe.
func (r *groupRun) watchProgress(ctx context.Context, stop time.Time, cycles []atomic.Int64) (stalled string) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if since := time.Since(time.Unix(0, r.lastGrant.Load())); since > stallLimit {
			return fmt.Sprintf("no grant for %s: a deadlock?\n%s", since.Round(time.Millisecond), r.describeAll(ctx))
		}
		if time.Now().After(stop) && r.everyClientGranted(cycles) {
			return ""
		}
	}
	return ""
}

func (r *groupRun) everyClientGranted(cycles []atomic.Int64) bool {
	for i := range cycles {
		if cycles[i].Load() < randomCycles {
			return false
		}
	}
	return true
}

func (r *groupRun) describeAll(ctx context.Context) string {
	var b strings.Builder
	for _, n := range r.names {
		d, err := r.c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: n})
		var hs []string
		for _, l := range d.GetHolders() {
			hs = append(hs, fmt.Sprintf("%s/%d", l.GetHolder(), l.GetToken()))
		}
		fmt.Fprintf(&b, "  %s: holders %v, %d waiters, last token %d, err %v\n", n, hs, d.GetWaiters(), d.GetLastToken(), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, holder := range slices.Sorted(maps.Keys(r.asking)) {
		fmt.Fprintf(&b, "  %s asks for %s\n", holder, r.asking[holder])
	}
	return b.String()
}

// cycle is one acquisition by holder: a random subset of the names, in
// random order, as a group or, for a lone name one time in two, a single
// TryAcquire (waiting or not); granted, it holds the names briefly and
// releases them. It reports whether it was granted.
func (r *groupRun) cycle(ctx context.Context, calls groupCalls, rng *rand.Rand, holder string) bool {
	names := slices.Clone(r.names)
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	names = names[:1+rng.IntN(4)]
	if len(names) == 1 && rng.IntN(2) == 0 {
		return r.single(ctx, calls, rng, holder, names[0])
	}
	start := time.Now()
	req := &coordinatorv1.AcquireGroupRequest{Holder: holder, Ttl: servertest.Dur(randomTTL), Wait: servertest.Dur(randomWait)}
	for _, n := range names {
		req.Members = append(req.Members, &coordinatorv1.GroupMember{Name: n})
	}
	defer r.ask(holder, names)()
	for ctx.Err() == nil {
		// One wait in eight is given up midway: the group must leave every
		// queue, and nothing of it stay held.
		callCtx, cancel := context.WithTimeout(ctx, 2*randomWait)
		if rng.IntN(8) == 0 {
			cancel()
			callCtx, cancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(10))*time.Millisecond)
		}
		sent := time.Now()
		resp, err := calls.acquireGroup(callCtx, req)
		// The server may end the call at the deadline before the client
		// does.
		cut := callCtx.Err() != nil || errCode(err) == codes.DeadlineExceeded
		cancel()
		switch {
		case err == nil && resp.GetAcquired():
			r.waited(start)
			r.hold(ctx, calls, rng, holder, names, resp.GetLeases(), sent)
			return true
		case cut:
			r.gaveUp.Add(1)
			return r.abandon(ctx, calls, rng, req)
		case err != nil:
			if ctx.Err() == nil {
				r.fail(fmt.Errorf("%s: AcquireGroup of %v: %w", holder, names, err))
			}
			return false
		}
		// The wait ran out: ask again as the same holder, as a client does.
	}
	return false
}

// waited records a cycle's wait for its grant, from start.
func (r *groupRun) waited(start time.Time) {
	d := int64(time.Since(start))
	for {
		top := r.longestWait.Load()
		if d <= top || r.longestWait.CompareAndSwap(top, d) {
			return
		}
	}
}

// abandon ends an acquisition given up midway, whose outcome the caller
// may not know (the grant may have raced the cut): asked again at once as
// the same holder, a group granted meanwhile comes back whole and is held
// and released as any grant; otherwise nothing of it may be held.
func (r *groupRun) abandon(ctx context.Context, calls groupCalls, rng *rand.Rand, req *coordinatorv1.AcquireGroupRequest) bool {
	req = proto.CloneOf(req)
	req.Wait = nil
	callCtx, cancel := context.WithTimeout(ctx, 2*randomWait)
	defer cancel()
	sent := time.Now()
	resp, err := calls.acquireGroup(callCtx, req)
	if err != nil {
		if ctx.Err() == nil {
			r.fail(fmt.Errorf("%s: AcquireGroup after giving up: %w", req.GetHolder(), err))
		}
		return false
	}
	names := make([]string, len(req.GetMembers()))
	for i, m := range req.GetMembers() {
		names[i] = m.GetName()
	}
	if resp.GetAcquired() {
		r.hold(ctx, calls, rng, req.GetHolder(), names, resp.GetLeases(), sent)
		return true
	}
	return false
}

// single is a single TryAcquire of name, waiting or not, until granted;
// tries that do not wait, which waiters pass, give up after tryFor.
func (r *groupRun) single(ctx context.Context, calls groupCalls, rng *rand.Rand, holder, name string) bool {
	wait := time.Duration(0)
	if rng.IntN(2) == 0 {
		wait = randomWait
	}
	defer r.ask(holder, []string{name})()
	start := time.Now()
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(ctx, 2*randomWait)
		sent := time.Now()
		resp, err := calls.TryAcquire(callCtx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: servertest.Dur(randomTTL), Wait: servertest.Dur(wait)})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.fail(fmt.Errorf("%s: TryAcquire of %s: %w", holder, name, err))
			}
			return false
		}
		if resp.GetAcquired() {
			if wait > 0 { // tries that do not wait get no place in line
				r.waited(start)
			}
			r.hold(ctx, calls, rng, holder, []string{name}, []*coordinatorv1.Lease{resp.GetLease()}, sent)
			return true
		}
		if wait == 0 {
			if time.Since(start) > tryFor {
				return false
			}
			time.Sleep(time.Duration(1+rng.IntN(5)) * time.Millisecond) // a try refused: try again soon
		}
	}
	return false
}

// hold checks a grant of names to holder, acts on each name's resource
// for a moment inside the leases (valid until sent plus the TTL, less a
// margin for the clocks), and releases them.
func (r *groupRun) hold(ctx context.Context, calls groupCalls, rng *rand.Rand, holder string, names []string, leases []*coordinatorv1.Lease, sent time.Time) {
	r.grants.Add(1)
	if len(names) > 1 {
		r.groups.Add(1)
	}
	r.lastGrant.Store(time.Now().UnixNano())
	if len(leases) != len(names) {
		r.fail(fmt.Errorf("%s: granted %d leases for %v: part of a group", holder, len(leases), names))
		return
	}
	for i, l := range leases {
		if l.GetName() != names[i] || l.GetHolder() != holder || l.GetToken() == 0 {
			r.fail(fmt.Errorf("%s: lease %d of %v is %v", holder, i, names, l))
			return
		}
	}
	validUntil := sent.Add(randomTTL - 500*time.Millisecond)
	for _, l := range leases {
		if err := r.resources[l.GetName()].Enter(holder, l.GetToken(), validUntil); err != nil {
			r.fail(err)
		}
	}
	for _, l := range leases {
		d, err := calls.Describe(ctx, &coordinatorv1.DescribeRequest{Name: l.GetName()})
		if err != nil {
			if ctx.Err() == nil {
				r.fail(fmt.Errorf("Describe(%s): %w", l.GetName(), err))
			}
			continue
		}
		if hs := d.GetHolders(); len(hs) != 1 || hs[0].GetHolder() != holder || hs[0].GetToken() != l.GetToken() {
			r.fail(fmt.Errorf("%s granted %v: Describe(%s) shows holders %v; want it alone with token %d", holder, names, l.GetName(), hs, l.GetToken()))
		}
	}
	time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	for _, l := range leases {
		r.resources[l.GetName()].Leave(holder)
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*randomWait)
	defer cancel()
	if len(leases) == 1 && rng.IntN(2) == 0 {
		if _, err := calls.Release(callCtx, &coordinatorv1.ReleaseRequest{Name: leases[0].GetName(), Holder: holder, Token: leases[0].GetToken()}); err != nil {
			r.fail(fmt.Errorf("%s: Release: %w", holder, err))
		}
		return
	}
	req := &coordinatorv1.ReleaseGroupRequest{Holder: holder}
	for _, l := range leases {
		req.Leases = append(req.Leases, &coordinatorv1.GroupLease{Name: l.GetName(), Token: l.GetToken()})
	}
	if resp, err := calls.releaseGroup(callCtx, req); err != nil || !resp.GetReleased() {
		r.fail(fmt.Errorf("%s: ReleaseGroup of %v = %v, %w; want released", holder, names, resp, err))
	}
}
