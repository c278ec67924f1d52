package main

// The groups suite (issue 37): what a group acquisition costs each process
// beside single-name cycles, uncontended, and how fast groups are granted
// when 64 clients contend for 8 names, with a check that none deadlocks.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// groupSizes are the names a cycle takes: 1 is the single-name cycle
// (acquire + release), the others a group (acquire_group + release_group).
var groupSizes = []int{1, 2, 8}

// groupsWait is the wait of every contended acquisition. With a hold of
// about nothing a grant comes within milliseconds, so a wait that runs
// out in a run of seconds is a stall, and a deadlock shows as one.
const groupsWait = 10 * time.Second

var groupsWaitPB = durationpb.New(groupsWait)

// clusterPrimaries is the size of the suite's Redis Cluster; the groups
// of 8 spread over one slot of each primary.
const clusterPrimaries = 3

// groupStore is one coordinator of the suite, the Stream its rows use, and
// the processes whose CPU its cycles cost.
type groupStore struct {
	key, label string
	coord      *coordinator
	path       groupPath       // how its rows talk to the coordinator; nil when it did not start
	calls      groupCalls      // what its rows call
	coordProc  string          // the coordinator's name in the CPU meter
	redisProc  string          // its Redis's (all nodes of a Cluster); "" for the memory store
	redisNodes []*redis.Client // its Redis, node by node, for INFO commandstats
	na         string          // why its rows are not measured
}

// commandStats sums INFO commandstats over the store's Redis nodes; nil
// for the memory store.
func (s *groupStore) commandStats(ctx context.Context) map[string]int64 {
	if len(s.redisNodes) == 0 {
		return nil
	}
	sum := map[string]int64{}
	for _, rdb := range s.redisNodes {
		stats, err := commandStats(ctx, rdb)
		if err != nil {
			return nil
		}
		for cmd, n := range stats {
			sum[cmd] += n
		}
	}
	return sum
}

// groupRow is one uncontended cycle of a store: size names at a time.
type groupRow struct {
	method
	store *groupStore
	size  int
}

// contendedRow is one contended case of a store: each client locks random
// pairs of the hot names (pairs) or one of them at a time.
type contendedRow struct {
	store *groupStore
	pairs bool
	try   tryFunc
	runs  []contendedRun
	na    string
	// stall describes the hot names as they stood once no grant had come
	// for stallAfter, if that happened.
	stall []string
}

// stallAfter is how long a contended run may go without a grant before
// the hot names are described, to show what a stall waits for.
const stallAfter = 3 * time.Second

// watchStall describes the hot names, once, when no grant comes for
// stallAfter; the returned func stops watching.
func (r *contendedRow) watchStall(granted *atomic.Int64, hot []string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		last, since := granted.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if n := granted.Load(); n != last {
				last, since = n, time.Now()
				continue
			}
			if time.Since(since) >= stallAfter {
				if r.stall == nil {
					r.stall = describeNames(r.store.coord.client, hot)
				}
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// describeNames says who holds and who waits for each name (Describe).
func describeNames(c coordinatorv1.CoordinatorClient, names []string) []string {
	out := make([]string, len(names))
	for i, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := c.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
		cancel()
		if err != nil {
			out[i] = fmt.Sprintf("%s: %v", name, err)
			continue
		}
		held := "free"
		if d.GetHeld() {
			l := d.GetLease()
			held = fmt.Sprintf("held by %s (token %d, %s left)", l.GetHolder(), l.GetToken(), time.Until(l.GetExpiresAt().AsTime()).Round(time.Millisecond))
		}
		out[i] = fmt.Sprintf("%s (slot %d): %s, %d waiters", name, slotOfName(name), held, d.GetWaiters())
	}
	return out
}

// contendedRun is one measured run of a contended row.
type contendedRun struct {
	waited
	cpu  cpuUse
	cmds map[string]int64 // Redis commands run, by command
	// refused counts the store attempts that found a name in the way,
	// retries while waiting included (coordinator_acquire_contended_total).
	refused float64
}

// median is the run with the median grants/s.
func (r *contendedRow) median() (contendedRun, bool) {
	if len(r.runs) == 0 {
		return contendedRun{}, false
	}
	runs := slices.Clone(r.runs)
	slices.SortFunc(runs, func(a, b contendedRun) int { return cmp.Compare(a.grantsPerSecond(), b.grantsPerSecond()) })
	return runs[len(runs)/2], true
}

// stalled says how any run of r shows a deadlock or a stall; "" when none
// does.
func (r *contendedRow) stalled() string {
	var why []string
	for i, run := range r.runs {
		if s := run.stalled(); s != "" {
			if len(r.runs) > 1 {
				s = fmt.Sprintf("round %d: %s", i+1, s)
			}
			why = append(why, s)
		}
	}
	return strings.Join(why, "; ")
}

func (r *contendedRow) label() string {
	if r.pairs {
		return fmt.Sprintf("%s: random pairs (%s)", r.store.label, r.store.calls.pairs)
	}
	return fmt.Sprintf("%s: one name at a time (%s)", r.store.label, r.store.calls.waiting)
}

func (r *contendedRow) key() string {
	if r.pairs {
		return r.store.key + "-pairs"
	}
	return r.store.key + "-single"
}

// groupsSuite measures group acquisitions against single-name cycles on the
// memory store, the Redis store on the bench's Redis and on a Redis Cluster
// of its own, all over raw Stream operations as the SDKs send them.
func groupsSuite(env benchEnv) error {
	ctx := context.Background()
	maxWorkers := max(slices.Max(env.levels), hotWorkers)

	rdb, err := peerRedis(env.redisURL, 4)
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	meter := &cpuMeter{}
	meter.add("bench", os.Getpid())
	meter.addRedis(ctx, rdb)

	standalone := &groupStore{key: "redis", label: "redis", calls: streamCalls, coordProc: "coordinator-redis", redisProc: "redis", redisNodes: []*redis.Client{rdb}}
	cluster := &groupStore{key: "redis-cluster", label: fmt.Sprintf("redis cluster (%d primaries)", clusterPrimaries), calls: streamCalls,
		coordProc: "coordinator-redis-cluster", redisProc: "redis-cluster"}
	memory := &groupStore{key: "memory", label: "memory", calls: streamCalls, coordProc: "coordinator-memory"}
	stores := []*groupStore{standalone, cluster, memory}

	// The slots the names lie in: one of each primary of the Cluster (the
	// middles of redis-cli's three equal ranges when there is no Cluster).
	slots := []uint16{16384 / 6, 16384 / 2, 16384 * 5 / 6}
	rc, err := startRedisCluster(ctx, clusterPrimaries)
	if err != nil {
		cluster.na = fmt.Sprintf("n/a: %v", err)
	} else {
		defer rc.stop()
		if slots, err = rc.primarySlots(ctx); err == nil {
			err = rc.checkSlot(ctx, "bench/groups/check")
		}
		if err != nil {
			return err
		}
		cluster.redisNodes = rc.rdbs
		for _, cmd := range rc.nodes {
			meter.add("redis-cluster", cmd.Process.Pid)
		}
	}

	for _, s := range stores {
		if s.na != "" {
			continue
		}
		e := env
		kind := "memory"
		if s.redisProc != "" {
			kind = "redis"
		}
		if s == cluster {
			e.redisURL = rc.url()
		}
		if s.coord, err = e.startCoordinatorWith(coordOpts{store: kind, metrics: true, profiled: env.coordProfile != ""}); err != nil {
			return err
		}
		defer s.coord.stop()
		meter.add(s.coordProc, s.coord.cmd.Process.Pid)
		streamConn, err := dial(s.coord.addr)
		if err != nil {
			return err
		}
		defer func() { _ = streamConn.Close() }()
		stream, err := openStream(coordinatorv1.NewCoordinatorClient(streamConn))
		if err != nil {
			return err
		}
		defer stream.close()
		s.path = streamPath{stream}
	}
	// The Go SDK on the standalone Redis store's coordinator: its own
	// connection and operation stream, its default session.
	sdkStore := &groupStore{key: "redis-sdk", label: "redis, Go SDK", calls: sdkCalls, coord: standalone.coord,
		coordProc: standalone.coordProc, redisProc: standalone.redisProc, redisNodes: standalone.redisNodes}
	sdk, err := client.New(standalone.coord.addr, client.WithTTL(benchTTL), client.WithIdentity("bench-groups-sdk"))
	if err != nil {
		return err
	}
	defer func() { _ = sdk.Close() }()
	sdkStore.path = sdkPath{sdk}
	stores = []*groupStore{standalone, sdkStore, cluster, memory}

	prof, err := newGroupProfiles(env.coordProfile)
	if err != nil {
		return err
	}
	defer prof.cleanup()

	// Each worker's names, the same on every store (each store its own
	// keys): member j of worker w's group lies in slot (w + j) % 3, so that
	// a group of 2 spans 2 slots and a group of 8 spans 3 on the Cluster,
	// and the workers spread over its primaries.
	run := time.Now().UnixNano()
	picker := newSlotNames(fmt.Sprintf("bench/groups/%d/", run), slots)
	namesOf := map[int][][]string{}
	for _, k := range groupSizes {
		namesOf[k] = make([][]string, maxWorkers)
		for w := range maxWorkers {
			for j := range k {
				namesOf[k][w] = append(namesOf[k][w], picker.in((w+j)%len(slots)))
			}
		}
	}
	hotPicker := newSlotNames(fmt.Sprintf("bench/groups/%d/hot/", run), slots)
	hotNamesList := make([]string, hotNames)
	for j := range hotNamesList {
		hotNamesList[j] = hotPicker.in(j % len(slots))
	}

	var rows []*groupRow
	for _, s := range stores {
		for _, k := range groupSizes {
			r := &groupRow{store: s, size: k, method: method{runs: map[int][]measured{}, na: s.na}}
			if k == 1 {
				r.key = s.key + "-single"
				r.label = fmt.Sprintf("%s: one name (%s)", s.label, s.calls.single)
				single := make([]string, maxWorkers)
				for w := range single {
					single[w] = namesOf[1][w][0]
				}
				if s.path != nil {
					r.cycle = s.path.single(single)
				}
			} else {
				r.key = fmt.Sprintf("%s-group%d", s.key, k)
				r.label = fmt.Sprintf("%s: group of %d (%s)", s.label, k, s.calls.group)
				if s == cluster {
					r.label = fmt.Sprintf("%s: group of %d over %d slots", s.label, k, min(k, len(slots)))
				}
				if s.path != nil {
					r.cycle = s.path.group(namesOf[k])
				}
			}
			rows = append(rows, r)
		}
	}

	fmt.Printf("\n== groups: uncontended cycles (each worker its own names), %s per measurement, %d round(s), median\n", env.duration, env.rounds)
	fmt.Printf("   raw Stream operations over one connection per coordinator, as the SDKs send them; %s (standalone, the bench's);\n", describeRedis(ctx, rdb))
	fmt.Printf("   the Cluster: %d redis-servers of the bench, slots %v; all on loopback, %d cores shared by all\n", clusterPrimaries, slots, runtime.NumCPU())
	warm := min(500*time.Millisecond, env.duration/4)
	for _, r := range rows {
		if r.na != "" {
			continue
		}
		if res := closedLoop(ctx, slices.Max(env.levels), warm, r.cycle); res.ops == 0 {
			r.na = fmt.Sprintf("n/a: %v", res.firstErr)
		}
	}
	for round := range env.rounds {
		for li, n := range env.levels {
			k := (round*len(env.levels) + li) % len(rows)
			for _, r := range append(slices.Clone(rows[k:]), rows[:k]...) {
				if r.na != "" {
					continue
				}
				before := meter.read()
				cmdsBefore := r.store.commandStats(ctx)
				var m measured
				if err := prof.around(r.store, r.key, n == slices.Max(env.levels), func() {
					m.result = closedLoop(ctx, n, env.duration, r.cycle)
				}); err != nil {
					return err
				}
				m.cpu = meter.since(before)
				if cmdsAfter := r.store.commandStats(ctx); cmdsBefore != nil && cmdsAfter != nil {
					m.redisCmds = commandsBetween(cmdsBefore, cmdsAfter)
				}
				r.runs[n] = append(r.runs[n], m)
			}
		}
	}
	printGroupCycles(env, rows)

	// Contended: hotWorkers clients on hotNames names, every acquisition
	// waiting its turn.
	var contendedRows []*contendedRow
	for _, s := range stores {
		for _, pairs := range []bool{true, false} {
			r := &contendedRow{store: s, pairs: pairs, na: s.na}
			if s.path != nil {
				if pairs {
					r.try = s.path.pairTry(hotNamesList)
				} else {
					r.try = s.path.singleTry(hotNamesList)
				}
			}
			contendedRows = append(contendedRows, r)
		}
	}
	fmt.Printf("\n== groups, contended: %d clients on %d names (on the Cluster over %d slots), %s per measurement, %d round(s), median: each client takes\n",
		hotWorkers, hotNames, len(slots), env.duration, env.rounds)
	fmt.Printf("   a random pair (in random order) or one random name, waiting up to %s, releases it at once, and starts again\n", groupsWait)
	for _, r := range contendedRows {
		if r.na != "" {
			continue
		}
		if w := waitLoop(ctx, hotWorkers, warm, r.try, nil); w.total() == 0 {
			r.na = fmt.Sprintf("n/a: %v", w.firstErr)
		}
	}
	for round := range env.rounds {
		k := round % len(contendedRows)
		for _, r := range append(slices.Clone(contendedRows[k:]), contendedRows[:k]...) {
			if r.na != "" {
				continue
			}
			var run contendedRun
			refusedBefore, _ := scrapeSum(r.store.coord.metricsURL, "coordinator_acquire_contended_total")
			before := meter.read()
			cmdsBefore := r.store.commandStats(ctx)
			var granted atomic.Int64
			stopWatch := r.watchStall(&granted, hotNamesList)
			if err := prof.around(r.store, "contended-"+r.key(), true, func() {
				run.waited = waitLoop(ctx, hotWorkers, env.duration, r.try, &granted)
			}); err != nil {
				stopWatch()
				return err
			}
			stopWatch()
			run.cpu = meter.since(before)
			refusedAfter, _ := scrapeSum(r.store.coord.metricsURL, "coordinator_acquire_contended_total")
			run.refused = refusedAfter - refusedBefore
			if cmdsAfter := r.store.commandStats(ctx); cmdsBefore != nil && cmdsAfter != nil {
				run.cmds = commandsBetween(cmdsBefore, cmdsAfter)
			}
			r.runs = append(r.runs, run)
		}
	}
	stalls := printContendedGroups(env, contendedRows)
	printGroupTargets(env, rows, contendedRows)
	if err := prof.write(slices.Max(env.levels)); err != nil {
		return err
	}
	if len(stalls) > 0 {
		return fmt.Errorf("contended groups made no progress (a deadlock or a stall): %s", strings.Join(stalls, "; "))
	}
	return nil
}

// groupPath is how a store's rows call its coordinator: raw Stream
// operations, or the Go SDK.
type groupPath interface {
	// single and group are uncontended cycles: worker w takes names[w],
	// one name or a group, and releases it.
	single(names []string) func(ctx context.Context, worker, i int) error
	group(names [][]string) func(ctx context.Context, worker, i int) error
	// pairTry and singleTry are contended attempts on the hot names, with
	// a wait: a random pair, listed in random order, or one random name.
	pairTry(hot []string) tryFunc
	singleTry(hot []string) tryFunc
}

// tryFunc is one attempt of a client that waits: granted (and released at
// once), or not granted when its wait ran out.
type tryFunc func(ctx context.Context, worker int, rng *rand.Rand) (bool, error)

// groupCalls says what a path's rows call, for their labels.
type groupCalls struct{ single, group, pairs, waiting string }

var streamCalls = groupCalls{single: "acquire + release", group: "acquire_group + release_group",
	pairs: "acquire_group, wait", waiting: "acquire, wait"}

// randomPair is two distinct indexes below n, in random order.
func randomPair(rng *rand.Rand, n int) (a, b int) {
	a, b = rng.IntN(n), rng.IntN(n-1)
	if b >= a {
		b++
	}
	return a, b
}

// streamPath is raw Stream operations over one stream shared by every
// worker, as an SDK's Client sends them.
type streamPath struct{ s *opStream }

func (p streamPath) single(names []string) func(ctx context.Context, worker, i int) error {
	return streamCycle(p.s, names)
}

func (p streamPath) group(names [][]string) func(ctx context.Context, worker, i int) error {
	members := make([][]*coordinatorv1.GroupMember, len(names))
	for w, ns := range names {
		for _, n := range ns {
			members[w] = append(members[w], &coordinatorv1.GroupMember{Name: n})
		}
	}
	return func(ctx context.Context, worker, _ int) error {
		holder := holderName(worker)
		granted, err := streamAcquireGroup(ctx, p.s, &coordinatorv1.AcquireGroupRequest{Members: members[worker], Holder: holder, Ttl: benchTTLpb})
		if err != nil {
			return err
		}
		if granted == nil {
			return errNotAcquired
		}
		return streamReleaseGroup(ctx, p.s, holder, granted)
	}
}

func (p streamPath) pairTry(hot []string) tryFunc {
	return func(ctx context.Context, worker int, rng *rand.Rand) (bool, error) {
		a, b := randomPair(rng, len(hot))
		holder := holderName(worker)
		granted, err := streamAcquireGroup(ctx, p.s, &coordinatorv1.AcquireGroupRequest{
			Members: []*coordinatorv1.GroupMember{{Name: hot[a]}, {Name: hot[b]}}, Holder: holder, Ttl: benchTTLpb, Wait: groupsWaitPB,
		})
		if err != nil || granted == nil {
			return false, err
		}
		return true, streamReleaseGroup(ctx, p.s, holder, granted)
	}
}

func (p streamPath) singleTry(hot []string) tryFunc {
	return func(ctx context.Context, worker int, rng *rand.Rand) (bool, error) {
		name, holder := hot[rng.IntN(len(hot))], holderName(worker)
		r, err := p.s.do(ctx, &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Acquire{
			Acquire: &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: benchTTLpb, Wait: groupsWaitPB},
		}})
		if err != nil {
			return false, err
		}
		a := r.GetAcquire()
		if a == nil {
			return false, errors.New("stream: an acquire answered with another result")
		}
		if !a.GetAcquired() {
			return false, nil
		}
		return true, streamRelease(ctx, p.s, name, holder, a.GetLease().GetToken())
	}
}

// streamAcquireGroup runs acquire_group; it returns the leases granted, one
// per member, or nil when the group was not granted.
func streamAcquireGroup(ctx context.Context, s *opStream, req *coordinatorv1.AcquireGroupRequest) ([]*coordinatorv1.GroupLease, error) {
	r, err := s.do(ctx, &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_AcquireGroup{AcquireGroup: req}})
	if err != nil {
		return nil, err
	}
	a := r.GetAcquireGroup()
	if a == nil {
		return nil, errors.New("stream: an acquire_group answered with another result")
	}
	if !a.GetAcquired() {
		return nil, nil
	}
	if len(a.GetLeases()) != len(req.GetMembers()) {
		return nil, fmt.Errorf("acquire_group: %d leases granted for %d members", len(a.GetLeases()), len(req.GetMembers()))
	}
	leases := make([]*coordinatorv1.GroupLease, len(a.GetLeases()))
	for i, l := range a.GetLeases() {
		leases[i] = &coordinatorv1.GroupLease{Name: l.GetName(), Token: l.GetToken()}
	}
	return leases, nil
}

func streamReleaseGroup(ctx context.Context, s *opStream, holder string, leases []*coordinatorv1.GroupLease) error {
	r, err := s.do(ctx, &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_ReleaseGroup{
		ReleaseGroup: &coordinatorv1.ReleaseGroupRequest{Holder: holder, Leases: leases},
	}})
	if err != nil {
		return err
	}
	if !r.GetReleaseGroup().GetReleased() {
		return errors.New("release_group: a group just granted was not released")
	}
	return nil
}

// waited is one measured run of clients that wait for their grants.
type waited struct {
	grants   []int // by client
	attempts int
	// ranOut counts acquisitions whose wait ran out without a grant.
	ranOut   int
	errs     int
	firstErr error
	elapsed  time.Duration
	// p50, p99 and longest are the times from asking to being granted.
	p50, p99, longest time.Duration
}

func (w waited) total() int {
	sum := 0
	for _, g := range w.grants {
		sum += g
	}
	return sum
}

func (w waited) grantsPerSecond() float64 { return float64(w.total()) / w.elapsed.Seconds() }

// waitLoop runs try from workers goroutines back to back for d, each with
// a random source of its own, counting grants in granted (when not nil) as
// they come. An attempt in flight at the end finishes; one whose answer
// never comes is cut off a while after its wait.
func waitLoop(ctx context.Context, workers int, d time.Duration, try tryFunc, granted *atomic.Int64) waited {
	var (
		mu    sync.Mutex
		res   = waited{grants: make([]int, workers)}
		waits []time.Duration
		wg    sync.WaitGroup
	)
	seed := uint64(time.Now().UnixNano())
	start := time.Now()
	end := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			var (
				local    waited
				grants   int
				localLat = make([]time.Duration, 0, 1024)
			)
			for time.Now().Before(end) {
				actx, cancel := context.WithTimeout(ctx, groupsWait+10*time.Second)
				t0 := time.Now()
				ok, err := try(actx, w, rng)
				took := time.Since(t0)
				cancel()
				local.attempts++
				switch {
				case err != nil:
					local.errs++
					if local.firstErr == nil {
						local.firstErr = err
					}
				case ok:
					grants++
					localLat = append(localLat, took)
					if granted != nil {
						granted.Add(1)
					}
				default:
					local.ranOut++
				}
			}
			mu.Lock()
			res.grants[w] = grants
			res.attempts += local.attempts
			res.ranOut += local.ranOut
			res.errs += local.errs
			if res.firstErr == nil {
				res.firstErr = local.firstErr
			}
			waits = append(waits, localLat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.p50, res.p99 = percentile(waits, 0.50), percentile(waits, 0.99)
	if len(waits) > 0 {
		res.longest = waits[len(waits)-1] // percentile sorted them
	}
	return res
}

// stalled says how a run shows a deadlock or a stall, or "" when every
// client was granted and no wait ran out.
func (w waited) stalled() string {
	var idle int
	for _, g := range w.grants {
		if g == 0 {
			idle++
		}
	}
	var why []string
	if idle > 0 {
		why = append(why, fmt.Sprintf("%d of %d clients were never granted", idle, len(w.grants)))
	}
	if w.ranOut > 0 {
		why = append(why, fmt.Sprintf("%d waits of %s ran out", w.ranOut, groupsWait))
	}
	if w.errs > 0 {
		why = append(why, fmt.Sprintf("%d errors (first: %v)", w.errs, w.firstErr))
	}
	return strings.Join(why, ", ")
}

// groupProfiles profiles each row's coordinator during the row's
// measurements (-coordinator-cpuprofile FILE), one profile a row: FILE with
// the row's key before its extension.
type groupProfiles struct {
	out    string
	dir    string
	remove func()
	files  map[string][]string // by row key
	keys   []string
}

func newGroupProfiles(out string) (*groupProfiles, error) {
	p := &groupProfiles{out: out, files: map[string][]string{}}
	if out == "" {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "bench-profiles-")
	if err != nil {
		return nil, err
	}
	p.dir, p.remove = dir, removeOnExit(dir)
	return p, nil
}

// around runs measure, profiling s's coordinator meanwhile when profiles
// are asked for and when is true.
func (p *groupProfiles) around(s *groupStore, key string, when bool, measure func()) error {
	if p.out == "" || !when {
		measure()
		return nil
	}
	file := filepath.Join(p.dir, fmt.Sprintf("%s-%d.prof", key, len(p.files[key])))
	if err := s.coord.startProfile(file); err != nil {
		return err
	}
	measure()
	if len(p.files[key]) == 0 {
		p.keys = append(p.keys, key)
	}
	p.files[key] = append(p.files[key], file)
	return s.coord.stopProfile()
}

// write merges each row's profiles into its file.
func (p *groupProfiles) write(level int) error {
	if p.out == "" {
		return nil
	}
	ext := filepath.Ext(p.out)
	var written []string
	for _, key := range p.keys {
		out := strings.TrimSuffix(p.out, ext) + "." + key + ext
		if err := mergeProfiles(out, p.files[key]); err != nil {
			return err
		}
		written = append(written, out)
	}
	fmt.Printf("\ncoordinator CPU profiles, each of a row's coordinator during its measurements at c=%d and contended:\n   %s\n",
		level, strings.Join(written, "\n   "))
	return nil
}

func (p *groupProfiles) cleanup() {
	if p.remove != nil {
		p.remove()
	}
}
