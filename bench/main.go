// Command bench measures the coordinator side by side with its peers in one
// run, so that figures from this noisy machine can be compared as ratios.
//
// It is a Go module of its own (bench/go.mod, with a replace directive to
// the repository), so that the peers it measures (etcd, bsm/redislock,
// go-redsync) never become dependencies of the SDK's users. Run it with
// `make bench` from the repository root, or `cd bench && go run . -suite …`
// with COORDINATOR_TEST_REDIS_URL set.
//
// The coordinator under test is a child process: ./cmd/coordinator built
// from the repository (in the repository's own module, as users build it)
// into a temporary directory, on free loopback ports, caps off. So are the
// gRPC echo server that sets the ceiling (this binary re-executed with
// -serve-echo) and the embedded etcd (re-executed with -serve-etcd). The
// bench process is the one client process of every comparison.
//
//	-suite leases      acquire+release, uncontended, at each -concurrency: the coordinator
//	                   (Go SDK over its operation stream, raw unary gRPC,
//	                   raw operation stream; Redis and memory stores), a gRPC echo (the
//	                   ceiling), bsm/redislock, go-redsync and etcd's concurrency.Mutex,
//	                   with CPU per cycle by process; then 8 names contended by 64 workers
//	-suite streams     leader changes to 2,000 observers
//	-suite handoff     release -> next waiter granted, resign -> next leader elected,
//	                   10 vs 2,000 waiters on one name; etcd Mutex and Election beside
//	-suite idle        Redis commands/s of an idle coordinator: 5,000 observed elections, 2,000 parked waiters
//	-suite housekeeper messages unlocked on 1,000 queues: 1, 3 and 10 instances vs the batch script direct
//	-suite housekeeper-idle housekeeper processes on 1,000 idle queues: cost per process and Redis, kill -9 takeover
//	-suite housekeeper-storage TTL, recovery, max elements and idle cost of the storage tasks vs Deckard's own, replayed
//	-suite clients     acquire+release through the Go, Python and TypeScript clients, one coordinator
//	-suite groups      group acquisitions of 2 and 8 names beside single names, CPU per name by process
//	                   (memory, Redis, a 3-primary Redis Cluster); 64 clients contending for pairs of 8 names
//	-suite soak        minutes of churn: Redis keys and memory, coordinator RSS and
//	                   goroutines stay flat (not in the default list: it runs for -soak-duration)
//
// It needs a Redis (COORDINATOR_TEST_REDIS_URL); `make bench` starts one.
// README.md says what each row measures and how the comparison is kept fair.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

const defaultSuites = "leases,streams,handoff,idle,sessions,housekeeper,housekeeper-idle,housekeeper-storage,clients,groups"

func main() {
	// Child modes: this binary re-executed as a server of the bench.
	serveEchoAddr := flag.String("serve-echo", "", "internal: serve the gRPC health service alone on `ADDR` until stdin closes (the bench's echo child)")
	serveEtcdSpec := flag.String("serve-etcd", "", "internal: serve an embedded etcd, `CLIENT_ADDR,PEER_ADDR,DATA_DIR`, until stdin closes (the bench's etcd child)")

	suites := flag.String("suite", defaultSuites, "comma-separated suites to run: leases, streams, handoff, idle, sessions, housekeeper, housekeeper-idle, housekeeper-storage, clients, groups, soak")
	duration := flag.Duration("duration", 2*time.Second, "how long each measurement runs")
	rounds := flag.Int("rounds", 1, "leases and groups suites: measurements of each method at each concurrency, interleaved; the median is reported")
	idleWindow := flag.Duration("idle-window", 10*time.Second, "how long the idle suite counts Redis commands")
	concurrency := flag.String("concurrency", "1,16,64", "comma-separated worker counts for the leases and groups suites")
	methods := flag.String("methods", "", "leases suite: comma-separated keys of the methods to measure (as -json names them, e.g. coordinator-redis-sdk,redislock,etcd-mutex); empty: all")
	soakDuration := flag.Duration("soak-duration", 3*time.Minute, "how long the soak churns")
	soakRetention := flag.Duration("soak-retention", 30*time.Second, "COORDINATOR_IDLE_NAME_TTL of the soak's coordinator")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the bench process (the clients, not the servers) over the whole run to this `FILE`")
	coordProfile := flag.String("coordinator-cpuprofile", "", "write a CPU profile of the leases suite's Redis-store coordinator child, over all of its measurements, to this `FILE` (the groups suite: one a row, of its coordinator, FILE with the row's key before the extension)")
	coordProcs := flag.Int("coordinator-gomaxprocs", 0, "run the coordinator children with GOMAXPROCS=`N` (0: unset, so that each sizes its own to the CPU it uses)")
	coordBin := flag.String("coordinator-bin", "", "run this coordinator binary instead of building ./cmd/coordinator of the repository (-coordinator-cpuprofile needs the build)")
	jsonOut := flag.String("json", "", "also write every measurement to this `FILE` as JSON")
	hkInstances := flag.String("hk-instances", "3,10", "housekeeper-idle suite: comma-separated instance counts")
	hkWarmup := flag.Duration("hk-warmup", 15*time.Second, "housekeeper-idle suite: time from the last instance's start to the measurement")
	hkWindow := flag.Duration("hk-window", 20*time.Second, "housekeeper-idle suite: how long the idle cost is measured")
	hkKills := flag.Int("hk-kills", 5, "housekeeper-idle suite: kill -9 runs per instance count (the first kills the leader)")
	hkBin := flag.String("housekeeper-bin", "", "housekeeper-idle suite: run this housekeeper binary instead of building ./cmd/housekeeper of the repository")
	hksMessages := flag.Int("hk-storage-messages", 20_000, "housekeeper-storage suite: messages of its TTL and recovery runs")
	hksLimit := flag.Duration("hk-storage-limit", time.Minute, "housekeeper-storage suite: the longest a side of a run may take before its time is extrapolated from its progress")
	hksWindow := flag.Duration("hk-storage-window", 20*time.Second, "housekeeper-storage suite: how long the idle run is measured")
	flag.Parse()

	switch {
	case *serveEchoAddr != "":
		os.Exit(serveEcho(*serveEchoAddr))
	case *serveEtcdSpec != "":
		os.Exit(serveEtcd(*serveEtcdSpec))
	}
	os.Exit(run(*suites, *concurrency, *cpuProfile, *jsonOut, benchEnv{
		duration: *duration, rounds: max(*rounds, 1), idleWindow: *idleWindow, methods: *methods,
		coordProfile: *coordProfile,
		coordProcs:   max(*coordProcs, 0),
		soak:         soakConfig{duration: *soakDuration, retention: *soakRetention, maxTTL: 5 * time.Second, sample: 10 * time.Second},
		builds:       &coordinatorBuilds{prebuilt: *coordBin},
		hkIdle:       hkIdleConfig{instances: parseCounts(*hkInstances), warmup: *hkWarmup, window: *hkWindow, kills: max(*hkKills, 1), bin: *hkBin},
		hkStorage:    hkStorageConfig{messages: max(*hksMessages, 1), limit: *hksLimit, window: *hksWindow},
	}))
}

func run(suites, concurrency, cpuProfile, jsonOut string, env benchEnv) int {
	env.redisURL = os.Getenv("COORDINATOR_TEST_REDIS_URL")
	if env.redisURL == "" {
		fmt.Fprintln(os.Stderr, "bench: COORDINATOR_TEST_REDIS_URL is not set; run `make bench`, which starts a throwaway Redis")
		return 2
	}
	for _, s := range strings.Split(concurrency, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: bad -concurrency %q\n", concurrency)
			return 2
		}
		env.levels = append(env.levels, n)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: cpu profile: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	env.report = &report{}
	stopOnSignals()
	defer env.builds.cleanup()

	start := time.Now()
	for _, suite := range strings.Split(suites, ",") {
		var err error
		switch suite = strings.TrimSpace(suite); suite {
		case "leases":
			err = leaseSuite(env)
		case "streams":
			err = streamSuite(env)
		case "handoff":
			err = handoffSuite(env)
		case "idle":
			err = idleSuite(env)
		case "sessions":
			err = sessionsSuite(env)
		case "housekeeper":
			err = housekeeperSuite(env)
		case "housekeeper-idle":
			if len(env.hkIdle.instances) == 0 {
				err = errors.New("bad -hk-instances")
			} else {
				err = housekeeperIdleSuite(env)
			}
		case "housekeeper-storage":
			err = housekeeperStorageSuite(env)
		case "soak":
			err = soakSuite(env, env.soak)
		case "clients":
			err = clientsSuite(env)
		case "groups":
			err = groupsSuite(env)
		default:
			err = fmt.Errorf("unknown suite %q", suite)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", suite, err)
			return 1
		}
	}
	fmt.Printf("\nbench: done in %s\n", time.Since(start).Round(time.Second))
	if jsonOut != "" {
		if err := env.report.write(jsonOut, env); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -json: %v\n", err)
			return 1
		}
	}
	return 0
}

type benchEnv struct {
	redisURL     string
	duration     time.Duration
	rounds       int
	levels       []int
	methods      string // -methods: the leases suite's methods to measure; "" for all
	idleWindow   time.Duration
	coordProfile string
	coordProcs   int // -coordinator-gomaxprocs; 0: unset
	soak         soakConfig
	builds       *coordinatorBuilds
	report       *report
	hkIdle       hkIdleConfig
	hkStorage    hkStorageConfig
}

// parseCounts reads a comma-separated list of positive counts; nil when
// one is not.
func parseCounts(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil
		}
		out = append(out, n)
	}
	return out
}
