package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/store"
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
	sdkOwn, err := client.New(viaRedis.addr, client.WithTTL(benchTTL), client.WithIdentity("bench-sdk-own"), client.WithoutDefaultSession())
	if err != nil {
		return err
	}
	defer func() { _ = sdkOwn.Close() }()
	sdkUnary, err := client.New(viaRedis.addr, client.WithTTL(benchTTL), client.WithIdentity("bench-sdk-unary"), client.WithUnaryCalls())
	if err != nil {
		return err
	}
	defer func() { _ = sdkUnary.Close() }()
	tp := clientTracing()
	defer func() { _ = tp.Shutdown(ctx) }()
	sdkTraced, err := client.New(viaTraced.addr, client.WithTTL(benchTTL), client.WithIdentity("bench-sdk-traced"), client.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	defer func() { _ = sdkTraced.Close() }()
	sdkTracedUnary, err := client.New(viaTraced.addr, client.WithTTL(benchTTL), client.WithIdentity("bench-sdk-traced-unary"),
		client.WithTracerProvider(tp), client.WithUnaryCalls())
	if err != nil {
		return err
	}
	defer func() { _ = sdkTracedUnary.Close() }()
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
		{key: "coordinator-redis-sdk", label: "coordinator redis: Go SDK, operation stream, default session (default)",
			cycle: sdkCycle(sdk, names("bench/sdk/", maxWorkers)), try: sdkTry(sdk, hot("bench/hot-sdk/"))},
		{key: "coordinator-redis-sdk-own", label: "coordinator redis: Go SDK, operation stream, leases of their own (WithoutDefaultSession)",
			cycle: sdkCycle(sdkOwn, names("bench/sdk-own/", maxWorkers)), try: sdkTry(sdkOwn, hot("bench/hot-sdk-own/"))},
		{key: "coordinator-redis-sdk-unary", label: "coordinator redis: Go SDK, WithUnaryCalls",
			cycle: sdkCycle(sdkUnary, names("bench/sdk-unary/", maxWorkers)), try: sdkTry(sdkUnary, hot("bench/hot-sdk-unary/"))},
		{key: "coordinator-redis-sdk-traced", label: "coordinator redis: Go SDK, operation stream, traced (every call sampled)",
			cycle: sdkCycle(sdkTraced, names("bench/sdk-traced/", maxWorkers)), try: sdkTry(sdkTraced, hot("bench/hot-sdk-traced/")),
			noteLabel: "spans exported/s", around: sink.counted},
		{key: "coordinator-redis-sdk-traced-unary", label: "coordinator redis: Go SDK, WithUnaryCalls, traced (every call sampled)",
			cycle: sdkCycle(sdkTracedUnary, names("bench/sdk-traced-unary/", maxWorkers)), try: sdkTry(sdkTracedUnary, hot("bench/hot-sdk-traced-unary/")),
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
	for _, k := range []string{"coordinator-redis-sdk", "coordinator-redis-sdk-own", "coordinator-redis-sdk-unary", "coordinator-redis-unary", "coordinator-redis-stream", "coordinator-memory-unary"} {
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

// contendedCPU formats the CPU per attempt of a contended measurement: the
// bench (client), the coordinators and Redis, and etcd when it ran.
func contendedCPU(use cpuUse, attempts int) string {
	if attempts == 0 || use.by == nil {
		return "-"
	}
	per := func(prefix string) time.Duration {
		var d time.Duration
		for name, t := range use.by {
			if strings.HasPrefix(name, prefix) {
				d += t
			}
		}
		return d / time.Duration(attempts)
	}
	out := fmt.Sprintf("%.0fµs + %.0fµs + %.0fµs", micros(per("bench")), micros(per("coordinator")), micros(per("redis")))
	if e := per("etcd"); e >= time.Microsecond {
		out += fmt.Sprintf(" + etcd %.0fµs", micros(e))
	}
	return out
}

// printTargets prints the Go SDK rows against issue 18's targets, each a
// ratio within this one run, from the median runs at the most workers (p99
// at one worker), so that a run's verdict is read off, not worked out by
// hand.
func printTargets(env benchEnv, byKey map[string]*method, grants map[string]float64) {
	first, last := env.levels[0], env.levels[len(env.levels)-1]
	lock, etcd := byKey["redislock"], byKey["etcd-mutex"]
	if lock.na != "" || etcd.na != "" {
		return
	}
	// CPU per cycle of the bench (the client), the coordinators and Redis;
	// not of the idle peers, which every measurement also counts.
	perCycle := func(m *method, groups ...string) float64 {
		r, ok := m.median(last)
		if !ok || r.ops == 0 {
			return 0
		}
		var d time.Duration
		for name, t := range r.cpu.by {
			for _, g := range groups {
				if strings.HasPrefix(name, g) {
					d += t
				}
			}
		}
		return float64(d) / float64(r.ops)
	}
	// present reports whether the run measured the methods of keys.
	present := func(keys ...string) bool {
		for _, k := range keys {
			if m := byKey[k]; m == nil || m.na != "" {
				return false
			}
		}
		return true
	}
	echoCycles := func() float64 { return byKey["grpc-echo"].rate(last) / 2 }
	// value is the target's ratio for m; ok is false when the run cannot
	// say (p99 at one worker when 1 is not a level). bound is the same
	// figure for a service that does no store work at all, measured in
	// this run (zero: not measured): what this machine allows any gRPC
	// service of two calls a cycle, whatever its store.
	targets := []struct {
		what  string
		limit float64
		most  bool // the ratio must be at most limit (else at least)
		value func(m *method) (v float64, ok bool)
		bound func() float64
	}{
		{"Redis CPU per cycle ÷ redislock's", 1.0, true, func(m *method) (float64, bool) {
			return perCycle(m, "redis") / perCycle(lock, "redis"), true
		}, nil},
		{"client + coordinator + Redis CPU per cycle ÷ redislock's client + Redis", 2.0, true, func(m *method) (float64, bool) {
			return perCycle(m, "bench", "coordinator", "redis") / perCycle(lock, "bench", "redis"), true
		}, nil},
		{"cycles/s ÷ etcd Mutex", 3.0, false, func(m *method) (float64, bool) { return m.rate(last) / etcd.rate(last), true },
			func() float64 {
				if !present("grpc-echo") {
					return 0
				}
				return echoCycles() / etcd.rate(last)
			}},
		{"cycles/s ÷ redislock", 0.5, false, func(m *method) (float64, bool) { return m.rate(last) / lock.rate(last), true },
			func() float64 {
				if !present("grpc-echo") {
					return 0
				}
				return echoCycles() / lock.rate(last)
			}},
		{"p99 at c=1, ms", 1.0, true, func(m *method) (float64, bool) {
			r, _ := m.median(first)
			return float64(r.p99) / float64(time.Millisecond), first == 1
		}, func() float64 {
			if !present("coordinator-memory-unary") || first != 1 {
				return 0
			}
			r, _ := byKey["coordinator-memory-unary"].median(first)
			return float64(r.p99) / float64(time.Millisecond)
		}},
		{"contended grants/s ÷ etcd", 40, false, func(m *method) (float64, bool) {
			return grants[m.key] / grants["etcd-mutex"], true
		}, func() float64 {
			if !present("coordinator-memory-unary") {
				return 0
			}
			return grants["coordinator-memory-unary"] / grants["etcd-mutex"]
		}},
	}
	header := []string{fmt.Sprintf("issue 18 targets (c=%d unless said)", last), "target"}
	var sdks []*method
	for _, k := range []string{"coordinator-redis-sdk", "coordinator-redis-sdk-own"} {
		if m := byKey[k]; m.na == "" {
			sdks = append(sdks, m)
			header = append(header, strings.TrimPrefix(m.label, "coordinator redis: Go SDK, operation stream, "))
		}
	}
	if len(sdks) == 0 {
		return
	}
	header = append(header, "no store work")
	t := table{header: header}
	for _, target := range targets {
		sign := "≥"
		if target.most {
			sign = "≤"
		}
		row := []string{target.what, fmt.Sprintf("%s %g", sign, target.limit)}
		for _, m := range sdks {
			v, ok := target.value(m)
			if !ok {
				row = append(row, "-")
				continue
			}
			mark := "missed"
			if v > 0 && !math.IsInf(v, 0) && (target.most && v <= target.limit || !target.most && v >= target.limit) {
				mark = "met"
			}
			row = append(row, fmt.Sprintf("%.2f %s", v, mark))
		}
		bound := "-"
		if target.bound != nil {
			if b := target.bound(); b > 0 && !math.IsInf(b, 0) {
				bound = fmt.Sprintf("%.2f", b)
			}
		}
		t.add(append(row, bound)...)
	}
	fmt.Println()
	t.print()
	fmt.Println("   from the median runs; CPU of the bench process (client), the coordinator and Redis only")
	fmt.Println("   no store work: the same figure, in this run, for a service of two gRPC calls a cycle that does no store work:")
	fmt.Println("   cycles/s from the gRPC echo's calls/s ÷ 2, p99 and contended grants/s from the memory store's raw unary calls")
}

// printLeases prints the uncontended table and its ratios.
func printLeases(env benchEnv, methods []*method, byKey map[string]*method, meter *cpuMeter) {
	first, last := env.levels[0], env.levels[len(env.levels)-1]
	header := []string{"method"}
	for _, n := range env.levels {
		header = append(header, fmt.Sprintf("c=%d /s", n))
	}
	header = append(header, fmt.Sprintf("p50 c=%d", first), fmt.Sprintf("p99 c=%d", first))
	if last != first {
		header = append(header, fmt.Sprintf("p50 c=%d", last), fmt.Sprintf("p99 c=%d", last))
	}
	cpuHeader := fmt.Sprintf("CPU/op c=%d: all = client + servers", last)
	header = append(header, cpuHeader, "notes")
	t := table{header: header}
	for _, m := range methods {
		row := []string{m.label}
		if m.na != "" {
			for range len(header) - 2 {
				row = append(row, "-")
			}
			t.add(append(row, m.na)...)
			continue
		}
		var notes, noted []string
		for _, n := range env.levels {
			r, _ := m.median(n)
			row = append(row, rate(r.perSecond()))
			if r.note != "" {
				noted = append(noted, fmt.Sprintf("c=%d %s", n, r.note))
			}
			errs := 0
			for _, run := range m.runs[n] {
				errs += run.errs
			}
			if errs > 0 {
				notes = append(notes, fmt.Sprintf("c=%d: %d errors (first: %v)", n, errs, r.firstErr))
			}
			all, client, servers := r.cpuPerOp()
			rec := record{Suite: "leases", Case: "uncontended", Method: m.key, Concurrency: n, PerSecond: r.perSecond(), Unit: "cycles/s",
				P50Micros: micros(r.p50), P99Micros: micros(r.p99), Errors: errs,
				CPUMicros: micros(all), ClientCPUMicros: micros(client), ServersCPUMicros: micros(servers)}
			if m.key == "grpc-echo" {
				rec.Unit = "calls/s"
			}
			extra := map[string]any{}
			if len(m.runs[n]) > 1 {
				var all []float64
				for _, run := range m.runs[n] {
					all = append(all, run.perSecond())
				}
				extra["rounds"] = all
			}
			if r.note != "" {
				extra[m.noteLabel] = r.note
			}
			if r.ops > 0 && len(r.redisCmds) > 0 {
				perOp := map[string]float64{}
				for cmd, c := range r.redisCmds {
					perOp[cmd] = float64(c) / float64(r.ops)
				}
				extra["redis_commands_per_op"] = perOp
			}
			if r.ops > 0 && len(r.cpu.by) > 0 {
				by := map[string]float64{}
				for name, d := range r.cpu.by {
					by[name] = micros(d / time.Duration(r.ops))
				}
				extra["cpu_us_by_process"] = by
			}
			if len(extra) > 0 {
				rec.Extra = extra
			}
			env.report.add(rec)
		}
		if len(noted) > 0 {
			notes = append([]string{m.noteLabel + ": " + strings.Join(noted, ", ")}, notes...)
		}
		latencyLevels := []int{first}
		if last != first {
			latencyLevels = append(latencyLevels, last)
		}
		for _, n := range latencyLevels {
			r, _ := m.median(n)
			row = append(row, dur(r.p50), dur(r.p99))
		}
		if r, _ := m.median(last); r.ops > 0 {
			all, client, servers := r.cpuPerOp()
			row = append(row, fmt.Sprintf("%s = %s + %s", dur(all), dur(client), dur(servers)))
		} else {
			row = append(row, "-")
		}
		t.add(append(row, strings.Join(notes, "; "))...)
	}
	echo := byKey["grpc-echo"]
	if echo.na == "" {
		// (The cells after the rates stay empty.)
		row := []string{"gRPC echo ÷ 2: ceiling of cycles/s"}
		for _, n := range env.levels {
			row = append(row, rate(echo.rate(n)/2))
		}
		t.add(row...)
	}
	t.print()
	fmt.Println("   a coordinator cycle is two calls (acquire, release): the echo's calls/s ÷ 2 is the most cycles/s any gRPC service can do here")
	fmt.Printf("   CPU/op: user+system time of %s (from /proc), per cycle (per call for the echo), all processes counted in every measurement\n",
		strings.Join(meter.names, ", "))

	// Where the CPU of a cycle goes, by process, at the most workers.
	fmt.Println()
	groups := []string{"bench", "coordinator", "redis", "etcd", "echo"}
	ct := table{header: append(append([]string{fmt.Sprintf("CPU per op at c=%d, by process", last)}, append(groups, "all")...), "Redis cmds/op")}
	for _, m := range methods {
		r, ok := m.median(last)
		if m.na != "" || !ok || r.ops == 0 {
			continue
		}
		by := map[string]time.Duration{}
		var all time.Duration
		for name, d := range r.cpu.by {
			g := name
			if strings.HasPrefix(name, "coordinator") {
				g = "coordinator"
			}
			by[g] += d
			all += d
		}
		row := []string{m.label}
		for _, g := range append(groups, "all") {
			d := by[g]
			if g == "all" {
				d = all
			}
			row = append(row, dur(d/time.Duration(r.ops)))
		}
		row = append(row, fmt.Sprintf("%.1f", r.redisPerOp()))
		ct.add(row...)
	}
	ct.print()
	fmt.Println("   Redis cmds/op: INFO commandstats, which counts a script and, each on its own, the commands it ran")

	// What the CPU goes to beside the work itself: counts, which stay put
	// when the machine's load moves CPU times.
	fmt.Println()
	at := table{header: append([]string{fmt.Sprintf("context switches / read+write calls per op at c=%d", last)}, append(groups, "all")...)}
	for _, m := range methods {
		r, ok := m.median(last)
		if m.na != "" || !ok || r.ops == 0 {
			continue
		}
		by := map[string]procActivity{}
		var all procActivity
		for name, a := range r.cpu.act {
			g := name
			if strings.HasPrefix(name, "coordinator") {
				g = "coordinator"
			}
			b := by[g]
			b.switches, b.syscalls = b.switches+a.switches, b.syscalls+a.syscalls
			by[g] = b
			all.switches, all.syscalls = all.switches+a.switches, all.syscalls+a.syscalls
		}
		by["all"] = all
		row := []string{m.label}
		for _, g := range append(groups, "all") {
			a := by[g]
			row = append(row, fmt.Sprintf("%.1f / %.1f", float64(a.switches)/float64(r.ops), float64(a.syscalls)/float64(r.ops)))
		}
		at.add(row...)
	}
	at.print()
	fmt.Println("   context switches of all of a process's threads (/proc/PID/task/*/status), read and write calls (/proc/PID/io syscr + syscw)")

	// How much travels together: operations per Stream message (what the
	// Redis-store coordinator received) and script calls per Redis read.
	fmt.Println()
	bt := table{header: []string{"batching, by concurrency"}}
	for _, n := range env.levels {
		bt.header = append(bt.header, fmt.Sprintf("ops/msg c=%d", n), fmt.Sprintf("results/msg c=%d", n), fmt.Sprintf("scripts/read c=%d", n), fmt.Sprintf("Ps c=%d", n))
	}
	for _, m := range methods {
		if m.na != "" || !strings.HasPrefix(m.label, "coordinator redis") {
			continue
		}
		row := []string{m.label}
		for _, n := range env.levels {
			r, ok := m.median(n)
			if !ok || r.ops == 0 {
				row = append(row, "-", "-", "-", "-")
				continue
			}
			perMsg, perResult, procs := "-", "-", "-"
			// The counts come from the Redis-store coordinator's metrics;
			// the traced rows' coordinator is another child.
			if !strings.Contains(m.key, "traced") {
				if r.procs > 0 {
					procs = fmt.Sprintf("%.0f", r.procs)
				}
				if r.streamMsgs > 0 {
					perMsg = fmt.Sprintf("%.1f", 2*float64(r.ops)/r.streamMsgs) // a cycle is two operations
				}
				if r.resultMsgs > 0 {
					perResult = fmt.Sprintf("%.1f", 2*float64(r.ops)/r.resultMsgs)
				}
			}
			row = append(row, perMsg, perResult, fmt.Sprintf("%.1f", r.scriptsPerRead()), procs)
		}
		bt.add(row...)
	}
	bt.print()
	fmt.Println("   ops/msg, results/msg: a cycle's two operations over the Stream messages the coordinator received and sent")
	fmt.Println("   (grpc_server_msg_received_total, grpc_server_msg_sent_total);")
	fmt.Println("   scripts/read: script calls over Redis read events (INFO stats total_reads_processed): calls pipelined together share one;")
	fmt.Println("   Ps: the coordinator's GOMAXPROCS at the measurement's end (go_sched_gomaxprocs_threads), sized to the CPU it uses unless -coordinator-gomaxprocs")

	// Ratios: what matters on a machine whose absolute figures wander.
	fmt.Println()
	rh := []string{"ratio of cycles/s"}
	for _, n := range env.levels {
		rh = append(rh, fmt.Sprintf("c=%d", n))
	}
	rt := table{header: rh}
	row := func(label string, num func(n int) float64, den func(n int) float64) {
		r := []string{label}
		for _, n := range env.levels {
			r = append(r, ratio(num(n), den(n)))
		}
		rt.add(r...)
	}
	redislockRate := byKey["redislock"].rate
	for _, m := range methods {
		if m.key == "redislock" || m.key == "grpc-echo" || m.na != "" {
			continue
		}
		row(m.label+" ÷ redislock", m.rate, redislockRate)
	}
	rt.rule()
	if m := byKey["coordinator-redis-semaphore"]; m.na == "" && byKey["coordinator-redis-unary"].na == "" {
		row(m.label+" ÷ the exclusive lock (raw gRPC unary)", m.rate, byKey["coordinator-redis-unary"].rate)
		rt.rule()
	}
	coordinatorRedis := []string{"coordinator-redis-sdk", "coordinator-redis-sdk-own", "coordinator-redis-sdk-unary", "coordinator-redis-unary", "coordinator-redis-stream"}
	for _, k := range coordinatorRedis {
		if m := byKey[k]; m.na == "" {
			row(m.label+" ÷ (echo ÷ 2)", m.rate, func(n int) float64 { return echo.rate(n) / 2 })
		}
	}
	rt.rule()
	for _, k := range coordinatorRedis {
		if m := byKey[k]; m.na == "" {
			row(m.label+" ÷ etcd", m.rate, byKey["etcd-mutex"].rate)
		}
	}
	rt.print()
}

// sdkCycle is the Go SDK: TryLock (one acquire: over the Client's operation
// stream by default, a unary TryAcquire WithUnaryCalls; the lease joins the
// Client's renewal scheduler, but a cycle ends long before its first
// renewal, due at TTL/3) and Release.
func sdkCycle(c *client.Client, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		lease, err := c.TryLock(ctx, names[worker])
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}
}

func sdkTry(c *client.Client, names []string) func(ctx context.Context, worker int) (bool, error) {
	return func(ctx context.Context, worker int) (bool, error) {
		lease, err := c.TryLock(ctx, names[worker])
		if errors.Is(err, client.ErrNotAcquired) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, lease.Release(ctx)
	}
}

// grpcCycle is the generated gRPC client, unary TryAcquire and Release.
func grpcCycle(c coordinatorv1.CoordinatorClient, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		granted, token, err := grpcAcquire(ctx, c, names[worker], holderName(worker))
		if err != nil {
			return err
		}
		if !granted {
			return errNotAcquired
		}
		return grpcRelease(ctx, c, names[worker], holderName(worker), token)
	}
}

// grpcTry is one contended attempt: TryAcquire without a wait, and Release
// when granted.
func grpcTry(c coordinatorv1.CoordinatorClient, names []string) func(ctx context.Context, worker int) (bool, error) {
	return func(ctx context.Context, worker int) (bool, error) {
		granted, token, err := grpcAcquire(ctx, c, names[worker], holderName(worker))
		if err != nil || !granted {
			return false, err
		}
		return true, grpcRelease(ctx, c, names[worker], holderName(worker), token)
	}
}

// semaphoreCycle is grpcCycle on names of semaphoreCapacity: a share of
// weight 1, then its release.
func semaphoreCycle(c coordinatorv1.CoordinatorClient, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		name, holder := names[worker], holderName(worker)
		resp, err := c.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: benchTTLpb, Capacity: semaphoreCapacity})
		if err != nil {
			return err
		}
		if !resp.GetAcquired() {
			return errNotAcquired
		}
		return grpcRelease(ctx, c, name, holder, resp.GetLease().GetToken())
	}
}

// semaphoreTry is one contended attempt of semaphoreCycle: refused is not
// an error.
func semaphoreTry(c coordinatorv1.CoordinatorClient, names []string) func(ctx context.Context, worker int) (bool, error) {
	cycle := semaphoreCycle(c, names)
	return func(ctx context.Context, worker int) (bool, error) {
		switch err := cycle(ctx, worker, 0); {
		case errors.Is(err, errNotAcquired):
			return false, nil
		case err != nil:
			return false, err
		}
		return true, nil
	}
}

func grpcAcquire(ctx context.Context, c coordinatorv1.CoordinatorClient, name, holder string) (bool, uint64, error) {
	resp, err := c.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: benchTTLpb})
	if err != nil {
		return false, 0, err
	}
	return resp.GetAcquired(), resp.GetLease().GetToken(), nil
}

func grpcRelease(ctx context.Context, c coordinatorv1.CoordinatorClient, name, holder string, token uint64) error {
	_, err := c.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token})
	return err
}

// directCycle calls the Redis store's Acquire and Release in this process:
// the coordinator's scripts on the same Redis, with no gRPC and no
// coordinator in between (one call at a time per worker, no pipelining).
func directCycle(st store.Store, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		name, holder := names[worker], holderName(worker)
		res, err := st.Acquire(ctx, store.AcquireRequest{Name: name, Holder: holder, TTL: benchTTL})
		if err != nil {
			return err
		}
		if !res.Acquired {
			return errNotAcquired
		}
		_, err = st.Release(ctx, name, holder, res.Lease.Token)
		return err
	}
}

// echoCall is one health Check on the echo child.
func echoCall(conn *grpc.ClientConn) func(ctx context.Context, worker, i int) error {
	health := healthpb.NewHealthClient(conn)
	req := &healthpb.HealthCheckRequest{}
	return func(ctx context.Context, _, _ int) error {
		_, err := health.Check(ctx, req)
		return err
	}
}

// describeRedis says which Redis the run used and how durable it is: the
// Redis peers and the coordinator's Redis store are only as durable as it.
func describeRedis(ctx context.Context, rdb *redis.Client) string {
	version := "?"
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	conf := func(key string) string {
		m, err := rdb.ConfigGet(ctx, key).Result()
		if err != nil {
			return "?"
		}
		return fmt.Sprintf("%q", m[key])
	}
	return fmt.Sprintf("Redis %s (appendonly %s, save %s)", version, conf("appendonly"), conf("save"))
}
