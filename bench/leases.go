package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/store/redisstore"
)

const benchTTL = 30 * time.Second

var benchTTLpb = durationpb.New(benchTTL)

// The contended case: hotWorkers workers on hotNames names.
const (
	hotNames   = 8
	hotWorkers = 64
)

var errNotAcquired = errors.New("not acquired")

func holderName(worker int) string { return fmt.Sprintf("w%d", worker) }

// names returns n names under prefix, one per worker: built before the
// measurement, so no method pays for formatting them.
func names(prefix string, n int) []string {
	out := make([]string, n)
	for w := range out {
		out[w] = fmt.Sprintf("%s%d", prefix, w)
	}
	return out
}

// semaphoreCapacity is the capacity of the semaphore row's names, each
// shared by that many workers: every acquire fits, so the row measures the
// semaphore's grant beside other holders against the exclusive lock's.
const semaphoreCapacity = 16

// shared returns the names of n workers that share names of
// semaphoreCapacity, semaphoreCapacity workers a name.
func shared(prefix string, n int) []string {
	out := make([]string, n)
	for w := range out {
		out[w] = fmt.Sprintf("%s%d", prefix, w/semaphoreCapacity)
	}
	return out
}

// hot returns the contended names of hotWorkers workers: worker w uses name
// w % hotNames.
func hot(prefix string) []string {
	out := make([]string, hotWorkers)
	for w := range out {
		out[w] = fmt.Sprintf("%s%d", prefix, w%hotNames)
	}
	return out
}

// method is one way to take and give back a lock.
type method struct {
	key   string // for -json and the ratio table
	label string
	cycle func(ctx context.Context, worker, i int) error
	try   func(ctx context.Context, worker int) (bool, error) // contended attempt; nil: not in the contended case
	// around wraps each measurement, for what it reads beside it.
	around func(measure func() result) (result, string)
	// noteLabel names what around notes.
	noteLabel string
	na        string // why it is not measured
	runs      map[int][]measured
}

type measured struct {
	result
	note string
	cpu  cpuUse
	// redisCmds counts the commands Redis ran (INFO commandstats: scripts
	// and, each on its own, the commands they ran), by command.
	redisCmds map[string]int64
	// redisReads counts the read events Redis processed (INFO stats
	// total_reads_processed): a pipeline of calls arriving together is one.
	redisReads int64
	// streamMsgs and resultMsgs count the operation stream messages the
	// Redis-store coordinator received and sent.
	streamMsgs, resultMsgs float64
	// procs is the Redis-store coordinator's GOMAXPROCS at the end of the
	// measurement (go_sched_gomaxprocs_threads), which it sizes to the CPU
	// it uses unless -coordinator-gomaxprocs fixes it.
	procs float64
}

// scriptsPerRead is how many script calls one Redis read carried.
func (m measured) scriptsPerRead() float64 {
	return float64(m.redisCmds["evalsha"]+m.redisCmds["eval"]) / float64(max(m.redisReads, 1))
}

func (m measured) redisPerOp() float64 {
	return float64(commandsIn(m.redisCmds)) / float64(max(m.ops, 1))
}

// cpuPerOp is the CPU time per operation: all processes, the client's and
// the servers'.
func (m measured) cpuPerOp() (all, client, servers time.Duration) {
	if m.ops == 0 {
		return 0, 0, 0
	}
	n := time.Duration(m.ops)
	return (m.cpu.client + m.cpu.servers) / n, m.cpu.client / n, m.cpu.servers / n
}

// median is the run with the median rate, so that its latencies go with it.
func (m *method) median(n int) (measured, bool) {
	runs := slices.Clone(m.runs[n])
	if len(runs) == 0 {
		return measured{}, false
	}
	slices.SortFunc(runs, func(a, b measured) int { return cmp.Compare(a.perSecond(), b.perSecond()) })
	return runs[len(runs)/2], true
}

func (m *method) rate(n int) float64 {
	r, ok := m.median(n)
	if !ok {
		return 0
	}
	return r.perSecond()
}

// leaseSuite measures uncontended acquire+release cycles (each worker its
// own name) through the coordinator and its peers, all in this one run on
// the same Redis, then a contended case.
func leaseSuite(env benchEnv) error {
	ctx := context.Background()
	maxWorkers := max(slices.Max(env.levels), hotWorkers)
	stamp := time.Now().UnixNano()

	// The servers, each a child process but for the in-process floor.
	viaRedis, err := env.startCoordinatorWith(coordOpts{store: "redis", metrics: true, profiled: env.coordProfile != ""})
	if err != nil {
		return err
	}
	defer viaRedis.stop()
	viaMemory, err := env.startCoordinator("memory")
	if err != nil {
		return err
	}
	defer viaMemory.stop()
	stateDir, err := os.MkdirTemp("", "bench-state-")
	if err != nil {
		return err
	}
	defer removeOnExit(stateDir)()
	viaDurable, err := env.startCoordinatorWith(coordOpts{store: "memory", stateDir: stateDir, metrics: true})
	if err != nil {
		return err
	}
	defer viaDurable.stop()
	sink, err := startTraceSink()
	if err != nil {
		return err
	}
	defer sink.stop()
	viaTraced, err := env.startCoordinatorWith(coordOpts{store: "redis", env: sink.tracedEnv()})
	if err != nil {
		return err
	}
	defer viaTraced.stop()
	echo, echoAddr, err := startEcho()
	if err != nil {
		return err
	}
	defer echo.stop()
	etcd, err := startEtcd()
	if err != nil {
		return err
	}
	defer etcd.stop()

	// The clients, all in this process.
	sdk, err := client.New(viaRedis.addr, client.WithTTL(benchTTL), client.WithIdentity("bench-sdk"))
	if err != nil {
		return err
	}
	defer func() { _ = sdk.Close() }()
	tp := clientTracing()
	defer func() { _ = tp.Shutdown(ctx) }()
	sdkTraced, err := client.New(viaTraced.addr, client.WithTTL(benchTTL), client.WithIdentity("bench-sdk-traced"), client.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	defer func() { _ = sdkTraced.Close() }()
	// Each client its own connection: the SDK's, the raw unary calls' (the
	// coordinator's own), the operation stream's, the echo's.
	streamConn, err := dial(viaRedis.addr)
	if err != nil {
		return err
	}
	defer func() { _ = streamConn.Close() }()
	stream, err := openStream(coordinatorv1.NewCoordinatorClient(streamConn))
	if err != nil {
		return err
	}
	defer stream.close()
	echoConn, err := dial(echoAddr)
	if err != nil {
		return err
	}
	defer func() { _ = echoConn.Close() }()
	direct, err := redisstore.NewFromURL(ctx, env.redisURL, redisstore.Options{
		KeyPrefix: fmt.Sprintf("bench-direct-%d", stamp), NoPipelining: true, NewStore: true,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer func() { _ = direct.Close() }() // the benchmark is over; nothing to report
	rdb, err := peerRedis(env.redisURL, maxWorkers)
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	locker := redislock.New(rdb)
	peerPrefix := fmt.Sprintf("bench-peers-%d:", stamp)
	redsyncLocks := redsyncMutexes(rdb, names(peerPrefix+"redsync:lock:", maxWorkers))
	redsyncHot := redsyncMutexes(rdb, hot(peerPrefix+"redsync:hot:"))
	etcdPeer, err := newEtcdPeer(etcd.endpoint)
	if err != nil {
		return err
	}
	defer etcdPeer.close()
	etcdLocks, err := etcdPeer.mutexes(names("/bench/lock/", maxWorkers))
	if err != nil {
		return err
	}
	etcdHot, err := etcdPeer.mutexes(hot("/bench/hot/"))
	if err != nil {
		return err
	}

	// CPU time of every process of the run, read around each measurement.
	meter := &cpuMeter{}
	meter.add("bench", os.Getpid())
	meter.add("coordinator-redis", viaRedis.cmd.Process.Pid)
	meter.add("coordinator-redis-traced", viaTraced.cmd.Process.Pid)
	meter.add("coordinator-memory", viaMemory.cmd.Process.Pid)
	meter.add("coordinator-memory-statedir", viaDurable.cmd.Process.Pid)
	meter.add("echo", echo.cmd.Process.Pid)
	meter.add("etcd", etcd.cmd.Process.Pid)
	meter.addRedis(ctx, rdb)

	methods := []*method{
		{key: "coordinator-redis-sdk", label: "coordinator redis: Go SDK, operation stream, default session",
			cycle: sdkCycle(sdk, names("bench/sdk/", maxWorkers)), try: sdkTry(sdk, hot("bench/hot-sdk/"))},
		{key: "coordinator-redis-sdk-traced", label: "coordinator redis: Go SDK, operation stream, traced (every call sampled)",
			cycle: sdkCycle(sdkTraced, names("bench/sdk-traced/", maxWorkers)), try: sdkTry(sdkTraced, hot("bench/hot-sdk-traced/")),
			noteLabel: "spans exported/s", around: sink.counted},
		{key: "coordinator-redis-unary", label: "coordinator redis: raw gRPC unary",
			cycle: grpcCycle(viaRedis.client, names("bench/unary/", maxWorkers)), try: grpcTry(viaRedis.client, hot("bench/hot-unary/"))},
		{key: "coordinator-redis-semaphore", label: fmt.Sprintf("coordinator redis: semaphore cap %d (%d workers a name), raw gRPC unary", semaphoreCapacity, semaphoreCapacity),
			cycle: semaphoreCycle(viaRedis.client, shared("bench/semaphore/", maxWorkers)),
			try:   semaphoreTry(viaRedis.client, slices.Repeat([]string{"bench/hot-semaphore"}, hotWorkers))},
		{key: "coordinator-redis-stream", label: "coordinator redis: raw gRPC operation stream",
			cycle: streamCycle(stream, names("bench/stream/", maxWorkers)), try: streamTry(stream, hot("bench/hot-stream/"))},
		{key: "coordinator-memory-unary", label: "coordinator memory: raw gRPC unary",
			cycle: grpcCycle(viaMemory.client, names("bench/unary/", maxWorkers)), try: grpcTry(viaMemory.client, hot("bench/hot-unary/"))},
		{key: "coordinator-memory-statedir-unary", label: "coordinator memory + state dir: raw gRPC unary",
			cycle:     grpcCycle(viaDurable.client, names("bench/unary/", maxWorkers)),
			noteLabel: "state-file writes (fsyncs)/s",
			around: func(measure func() result) (result, string) {
				before := viaDurable.stateWrites()
				r := measure()
				return r, fmt.Sprintf("%.0f", (viaDurable.stateWrites()-before)/r.elapsed.Seconds())
			}},
		{key: "redis-store-in-process", label: "coordinator's Redis scripts in-process, no gRPC",
			cycle: directCycle(direct, names("bench/direct/", maxWorkers))},
		{key: "redislock", label: "bsm/redislock Obtain+Release",
			cycle: redislockCycle(locker, names(peerPrefix+"redislock:lock:", maxWorkers)), try: redislockTry(locker, hot(peerPrefix+"redislock:hot:"))},
		{key: "redsync", label: "go-redsync Lock+Unlock, one pool",
			cycle: redsyncCycle(redsyncLocks), try: redsyncTry(redsyncHot)},
		{key: "etcd-mutex", label: "etcd concurrency.Mutex TryLock+Unlock",
			cycle: etcdCycle(etcdLocks), try: etcdTry(etcdHot)},
		{key: "grpc-echo", label: "gRPC echo (health Check), calls/s",
			cycle: echoCall(echoConn)},
	}
	byKey := map[string]*method{}
	for _, m := range methods {
		m.runs = map[int][]measured{}
		byKey[m.key] = m
	}
	if err := selectMethods(env.methods, methods, byKey); err != nil {
		return err
	}

	fmt.Printf("\n== leases: acquire+release cycles, uncontended (one name per worker), %s per measurement, %d round(s), median\n", env.duration, env.rounds)
	fmt.Printf("   one client process (this one); coordinator, echo and etcd are child processes; %s; etcd with fsync on; all on loopback, %d cores shared by all\n",
		describeRedis(ctx, rdb), runtime.NumCPU())
	// A short warm-up at the most workers: connections, scripts loaded,
	// sessions made; a method that cannot run at all is left out, saying why.
	warm := min(500*time.Millisecond, env.duration/4)
	for _, m := range methods {
		if m.na != "" {
			continue
		}
		if r := closedLoop(ctx, slices.Max(env.levels), warm, m.cycle); r.ops == 0 {
			m.na = fmt.Sprintf("n/a: %v", r.firstErr)
		}
	}
	// -coordinator-cpuprofile: the Redis-store child is profiled during each
	// of its own measurements only, and the profiles merged at the end.
	var profiles []string
	profileDir, err := os.MkdirTemp("", "bench-profiles-")
	if err != nil {
		return err
	}
	defer removeOnExit(profileDir)()
	profiled := func(m *method, what string, measure func()) error {
		if env.coordProfile == "" || !strings.HasPrefix(m.key, "coordinator-redis") {
			measure()
			return nil
		}
		file := filepath.Join(profileDir, fmt.Sprintf("%s-%s-%d.prof", m.key, what, len(profiles)))
		if err := viaRedis.startProfile(file); err != nil {
			return err
		}
		measure()
		profiles = append(profiles, file)
		return viaRedis.stopProfile()
	}
	for round := range env.rounds {
		for li, n := range env.levels {
			// Each level and round starts with another method, so no method
			// always runs first or last.
			k := (round*len(env.levels) + li) % len(methods)
			for _, m := range append(slices.Clone(methods[k:]), methods[:k]...) {
				if m.na != "" {
					continue
				}
				measure := func() result { return closedLoop(ctx, n, env.duration, m.cycle) }
				var run measured
				if err := profiled(m, fmt.Sprintf("c%d", n), func() {
					before := meter.read()
					cmdsBefore, _ := commandStats(ctx, rdb)
					readsBefore, _ := infoStat(ctx, rdb, "total_reads_processed")
					msgsBefore, _ := scrapeSum(viaRedis.metricsURL, "grpc_server_msg_received_total", `grpc_method="Stream"`)
					sentBefore, _ := scrapeSum(viaRedis.metricsURL, "grpc_server_msg_sent_total", `grpc_method="Stream"`)
					if m.around != nil {
						run.result, run.note = m.around(measure)
					} else {
						run.result = measure()
					}
					run.cpu = meter.since(before)
					msgsAfter, _ := scrapeSum(viaRedis.metricsURL, "grpc_server_msg_received_total", `grpc_method="Stream"`)
					run.streamMsgs = msgsAfter - msgsBefore
					sentAfter, _ := scrapeSum(viaRedis.metricsURL, "grpc_server_msg_sent_total", `grpc_method="Stream"`)
					run.resultMsgs = sentAfter - sentBefore
					run.procs, _ = scrapeSum(viaRedis.metricsURL, "go_sched_gomaxprocs_threads")
					if readsAfter, err := infoStat(ctx, rdb, "total_reads_processed"); err == nil {
						run.redisReads = readsAfter - readsBefore - 2 // the INFO calls of the count
					}
					if cmdsAfter, err := commandStats(ctx, rdb); err == nil && cmdsBefore != nil {
						run.redisCmds = commandsBetween(cmdsBefore, cmdsAfter)
					}
				}); err != nil {
					return err
				}
				m.runs[n] = append(m.runs[n], run)
			}
		}
	}
	printLeases(env, methods, byKey, meter)

	// Contended: hotWorkers workers on hotNames names, each retrying at
	// once when refused.
	fmt.Printf("\n== leases, contended: %d workers on %d names (worker w on name w%%%d), %s per measurement; a refused worker retries at once, without waiting\n",
		hotWorkers, hotNames, hotNames, env.duration)
	t := table{header: []string{"method", "grants/s", "attempts/s", "granted", "errors", "CPU/attempt: bench + coordinator + Redis", "Redis cmds/attempt"}}
	grants := map[string]float64{}
	for _, m := range methods {
		if m.try == nil || m.na != "" {
			continue
		}
		contendedLoop(ctx, hotWorkers, warm, m.try)
		var (
			c    contended
			use  cpuUse
			cmds int64
		)
		if err := profiled(m, "contended", func() {
			before := meter.read()
			cmdsBefore, _ := commandStats(ctx, rdb)
			c = contendedLoop(ctx, hotWorkers, env.duration, m.try)
			use = meter.since(before)
			if cmdsAfter, err := commandStats(ctx, rdb); err == nil && cmdsBefore != nil {
				cmds = commandsIn(commandsBetween(cmdsBefore, cmdsAfter))
			}
		}); err != nil {
			return err
		}
		grants[m.key] = c.grantsPerSecond()
		errs := "0"
		if c.errs > 0 {
			errs = fmt.Sprintf("%d (first: %v)", c.errs, c.firstErr)
		}
		t.add(m.label, rate(c.grantsPerSecond()), rate(c.attemptsPerSecond()), fmt.Sprintf("%.0f%%", 100*float64(c.grants)/float64(max(c.attempts, 1))), errs,
			contendedCPU(use, c.attempts), fmt.Sprintf("%.1f", float64(cmds)/float64(max(c.attempts, 1))))
		env.report.add(record{Suite: "leases", Case: "contended", Method: m.key, Concurrency: hotWorkers, PerSecond: c.grantsPerSecond(), Unit: "grants/s",
			Errors: c.errs, Extra: map[string]any{"attempts_per_second": c.attemptsPerSecond(), "names": hotNames}})
	}
	t.print()
	fmt.Println("   CPU/attempt: user+system time (/proc) of the bench process, the coordinators and Redis over the attempts, a grant's release")
	fmt.Println("   included (etcd's in its own column: + etcd); Redis cmds/attempt as in the CPU table (scripts and the commands they ran)")
	fmt.Println("   etcd's TryLock writes its key, then deletes it again when an older key exists: a refused attempt is two writes, and a")
	fmt.Println("   name is free only when no refused attempt's key is in flight, so busy retries starve its grants.")
	rt := table{header: []string{"ratio of grants/s", "value"}}
	for _, k := range []string{"coordinator-redis-sdk", "coordinator-redis-unary", "coordinator-redis-stream", "coordinator-memory-unary"} {
		if grants[k] > 0 {
			rt.add(byKey[k].label+" ÷ etcd", ratio(grants[k], grants["etcd-mutex"]))
		}
	}
	rt.add("coordinator redis: raw gRPC unary ÷ redislock", ratio(grants["coordinator-redis-unary"], grants["redislock"]))
	if grants["coordinator-redis-semaphore"] > 0 {
		rt.add(byKey["coordinator-redis-semaphore"].label+" (all on one name) ÷ raw gRPC unary", ratio(grants["coordinator-redis-semaphore"], grants["coordinator-redis-unary"]))
	}
	fmt.Println()
	rt.print()
	printTargets(env, byKey, grants)
	if env.coordProfile != "" {
		if err := mergeProfiles(env.coordProfile, profiles); err != nil {
			return err
		}
		fmt.Printf("\ncoordinator CPU profile: %s (the Redis-store child during its %d measurements above, merged; go tool pprof -top %s)\n",
			env.coordProfile, len(profiles), env.coordProfile)
	}
	return nil
}

// selectMethods leaves out the methods that -methods (keys, comma-separated)
// does not name; "" keeps them all.
func selectMethods(keys string, methods []*method, byKey map[string]*method) error {
	if keys == "" {
		return nil
	}
	keep := map[string]bool{}
	for _, k := range strings.Split(keys, ",") {
		k = strings.TrimSpace(k)
		if byKey[k] == nil {
			var all []string
			for _, m := range methods {
				all = append(all, m.key)
			}
			return fmt.Errorf("-methods: no method %q (there are %s)", k, strings.Join(all, ", "))
		}
		keep[k] = true
	}
	for _, m := range methods {
		if !keep[m.key] {
			m.na = "left out (-methods)"
		}
	}
	return nil
}
