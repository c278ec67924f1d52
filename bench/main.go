// Command bench measures the coordinator side by side in one run, so that
// figures from this noisy machine can be compared as ratios.
//
//	go run ./bench -suite leases      acquire+release: gRPC+Redis vs the Redis scripts direct vs gRPC+memory
//	go run ./bench -suite streams     observers and KeepAlive
//	go run ./bench -suite handoff     release to next waiter granted, 10 vs 2,000 waiters on one name
//	go run ./bench -suite idle        Redis commands/s of an idle coordinator: 5,000 observed elections, 2,000 parked waiters
//	go run ./bench -suite housekeeper messages unlocked: 1 and 3 instances vs the batch script direct
//	go run ./bench -suite soak        minutes of churn: Redis keys and memory, coordinator RSS and goroutines stay flat
//
// It needs a Redis (COORDINATOR_TEST_REDIS_URL); `make bench` starts one.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/coordinatord"
	"github.com/coordinator-dev/coordinator/internal/limits"
)

func main() {
	suites := flag.String("suite", "leases,streams,handoff,idle,housekeeper,soak", "comma-separated suites to run: leases, streams, handoff, idle, housekeeper, soak")
	duration := flag.Duration("duration", 2*time.Second, "how long each measurement runs")
	idleWindow := flag.Duration("idle-window", 10*time.Second, "how long the idle suite counts Redis commands")
	concurrency := flag.String("concurrency", "1,16,64", "comma-separated worker counts for the leases suite")
	soakDuration := flag.Duration("soak-duration", 3*time.Minute, "how long the soak churns")
	soakRetention := flag.Duration("soak-retention", 30*time.Second, "COORDINATOR_IDLE_NAME_TTL of the soak's coordinator")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: cpu profile: %v\n", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}

	redisURL := os.Getenv("COORDINATOR_TEST_REDIS_URL")
	if redisURL == "" {
		fmt.Fprintln(os.Stderr, "bench: COORDINATOR_TEST_REDIS_URL is not set; run `make bench`, which starts a throwaway Redis")
		os.Exit(2)
	}
	var levels []int
	for _, s := range strings.Split(*concurrency, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: bad -concurrency %q\n", *concurrency)
			os.Exit(2)
		}
		levels = append(levels, n)
	}
	env := benchEnv{redisURL: redisURL, duration: *duration, idleWindow: *idleWindow}
	for _, suite := range strings.Split(*suites, ",") {
		var err error
		switch strings.TrimSpace(suite) {
		case "leases":
			err = leaseSuite(env, levels)
		case "streams":
			err = streamSuite(env)
		case "handoff":
			err = handoffSuite(env)
		case "idle":
			err = idleSuite(env)
		case "housekeeper":
			err = housekeeperSuite(env)
		case "soak":
			err = soakSuite(env, soakConfig{duration: *soakDuration, retention: *soakRetention, maxTTL: 5 * time.Second, sample: 10 * time.Second})
		default:
			err = fmt.Errorf("unknown suite %q", suite)
		}
		if err != nil {
			pprof.StopCPUProfile()
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
	}
}

type benchEnv struct {
	redisURL   string
	duration   time.Duration
	idleWindow time.Duration
}

// coordinator is an in-process coordinator on a loopback listener with a
// client connection to it.
type coordinator struct {
	addr   string
	srv    *coordinatord.Server
	conn   *grpc.ClientConn
	client coordinatorv1.CoordinatorClient
	// extra are the connections of clients(), closed by stop.
	extra []*grpc.ClientConn
}

// streamsPerConn is how many long calls (streams, waits) one bench
// connection carries: clients spread over many connections, as real ones do,
// so that per-connection limits are not what is measured.
const streamsPerConn = 100

// clients returns a client for each of n long calls, a new connection for
// every streamsPerConn of them.
func (c *coordinator) clients(n int) ([]coordinatorv1.CoordinatorClient, error) {
	out := make([]coordinatorv1.CoordinatorClient, n)
	for i := range n {
		if i%streamsPerConn == 0 {
			conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, err
			}
			c.extra = append(c.extra, conn)
		}
		out[i] = coordinatorv1.NewCoordinatorClient(c.extra[len(c.extra)-1])
	}
	return out, nil
}

func (e benchEnv) startCoordinator(storeKind string) (*coordinator, error) {
	return e.startCoordinatorWith(storeKind, "")
}

// startCoordinatorWith starts a coordinator whose memory store keeps its
// crash-safety state in stateDir ("": none).
func (e benchEnv) startCoordinatorWith(storeKind, stateDir string) (*coordinator, error) {
	cfg, err := coordinatord.ParseConfig(flag.NewFlagSet("bench", flag.ContinueOnError), nil, func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, err
	}
	cfg.Store, cfg.RedisURL = storeKind, e.redisURL
	cfg.RedisKeyPrefix = fmt.Sprintf("bench-%d", time.Now().UnixNano())
	// The bench measures throughput and cost at loads past the default
	// caps (10,000 leases of one holder, 5,000 observers): caps off.
	cfg.Limits = limits.Config{}
	// A fresh key prefix is a new store; the memory store keeps no state.
	cfg.RedisNewStore, cfg.StateDir = true, stateDir
	srv, err := coordinatord.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &coordinator{addr: lis.Addr().String(), srv: srv, conn: conn, client: coordinatorv1.NewCoordinatorClient(conn)}, nil
}

func (c *coordinator) stop() {
	_ = c.conn.Close()
	for _, conn := range c.extra {
		_ = conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.srv.Shutdown(ctx)
}

// stateWrites reads coordinator_state_writes_total from the coordinator's
// metrics: how often its memory store wrote its state file.
func (c *coordinator) stateWrites() float64 {
	rec := httptest.NewRecorder()
	c.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "coordinator_state_writes_total "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	return 0
}
