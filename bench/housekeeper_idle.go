package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
)

// hkIdleConfig configures the housekeeper-idle suite.
type hkIdleConfig struct {
	instances []int         // instance counts to measure
	warmup    time.Duration // after the last instance started, before measuring
	window    time.Duration // how long the idle cost is measured
	kills     int           // kill -9 runs per instance count
	bin       string        // a housekeeper binary to measure instead of building ./cmd/housekeeper
}

// idleQueues is how many queues the suite seeds.
const idleQueues = 1000

// housekeeperIdleSuite measures housekeeper processes beside a coordinator
// process (Redis store) and a Deckard Redis of their own, with default
// settings, on idleQueues queues that each hold a pulled and an acked
// message due in 10 minutes: every instance finds every queue and nothing
// is due. It reports what that costs the coordinator, both Redis servers
// (commands, and Deckard's Redis' own CPU) and the CPU of the processes.
// Then, cfg.kills times each, it acks one more message in every queue with
// a lock that ends at once, before the head of its lock_ack set, and
// measures how long until every one of them was moved: with every instance
// running, and at the kill -9 of one instance (the elected leader first).
func housekeeperIdleSuite(env benchEnv) error {
	cfg := env.hkIdle
	bin := cfg.bin
	if bin == "" {
		var err error
		if bin, err = buildHousekeeper(); err != nil {
			return err
		}
	}
	deckard, err := startRedisServer()
	if err != nil {
		return err
	}
	defer deckard.stop()
	coordRedis, err := redis.ParseURL(env.redisURL)
	if err != nil {
		return err
	}
	crdb := redis.NewClient(coordRedis)
	defer crdb.Close()

	fmt.Printf("\n== housekeeper processes, %d idle queues (a pulled and an acked message each, due in 10 min), default settings\n", idleQueues)
	fmt.Printf("   %s\n", bin)
	fmt.Printf("  %9s %16s %16s %16s %14s %14s %14s %18s %18s %22s\n", "instances", "coord calls+msgs/s", "coord Redis cmd/s", "Deckard cmd/s",
		"Deckard Redis CPU", "CPU hk+coord", "CPU/instance", "sets owned min-max", "lateness, running", "lateness after kill -9")
	for _, n := range cfg.instances {
		row, err := measureHousekeepers(env, cfg, bin, deckard, crdb, n)
		if err != nil {
			return fmt.Errorf("%d instances: %w", n, err)
		}
		fmt.Println(row)
	}
	fmt.Println("  (CPU: % of one core; Deckard Redis CPU from its INFO cpu; lateness: from a message falling due before its set's head")
	fmt.Println("   until the last of the 1,000 moved, worst and median of the runs; targets: Deckard Redis <= 5 %, hk+coord <= 20 %,")
	fmt.Println("   lateness <= 1 s running and <= 2 s after the kill -9, the first run killing the leader)")
	return nil
}

func buildHousekeeper() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "bench-housekeeper-")
	if err != nil {
		return "", err
	}
	removeOnExit(dir)
	bin := filepath.Join(dir, "housekeeper")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/housekeeper")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the housekeeper: %w\n%s", err, out)
	}
	return bin, nil
}

// redisServer is a redis-server child without persistence.
type redisServer struct {
	cmd  *exec.Cmd
	url  string
	rdb  *redis.Client
	done func()
}

func startRedisServer() (*redisServer, error) {
	addr := freeAddr()
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command("redis-server", "--bind", host, "--port", port, "--save", "", "--appendonly", "no")
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &redisServer{cmd: cmd, url: "redis://" + addr + "/0", rdb: redis.NewClient(&redis.Options{Addr: addr})}
	s.done = onExit(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); s.rdb.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s does not answer", addr)
		}
	}
	return s, nil
}

func (s *redisServer) stop() {
	_ = s.rdb.Close()
	s.done()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// hkProcess is one housekeeper process.
type hkProcess struct {
	id      string
	metrics string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startHousekeeper starts an instance; extra are more HOUSEKEEPER_*
// settings (KEY=VALUE).
func startHousekeeper(bin, id, coordAddr, redisURL, prefix string, extra ...string) (*hkProcess, error) {
	p := &hkProcess{id: id, metrics: freeAddr(), done: make(chan struct{})}
	p.cmd = exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOUSEKEEPER_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env,
		"HOUSEKEEPER_COORDINATOR_ADDR="+coordAddr, "HOUSEKEEPER_REDIS_URL="+redisURL, "HOUSEKEEPER_PREFIX="+prefix,
		"HOUSEKEEPER_INSTANCE_ID="+id, "HOUSEKEEPER_METRICS_LISTEN="+p.metrics, "HOUSEKEEPER_LEASE_NAMESPACE="+prefix,
		"HOUSEKEEPER_LOG_LEVEL=error")
	p.cmd.Env = append(p.cmd.Env, extra...)
	p.cmd.Stderr = os.Stderr
	p.cmd.SysProcAttr = childAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start housekeeper %s: %w", id, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *hkProcess) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// scrapeSum sums the samples of name on the process's /metrics whose labels
// contain each of with; false when it reports none (an older housekeeper).
func scrapeSum(url, name string, with ...string) (float64, bool) {
	resp, err := http.Get(url) //nolint:noctx // a loopback child of ours
	if err != nil {
		return 0, false
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<22)
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		if !containsAll(line, with) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

func measureHousekeepers(env benchEnv, cfg hkIdleConfig, bin string, deckard *redisServer, crdb *redis.Client, n int) (string, error) {
	ctx := context.Background()
	coord, err := env.startCoordinatorWith(coordOpts{store: "redis", metrics: true, caps: true})
	if err != nil {
		return "", err
	}
	defer coord.stop()
	prefix := fmt.Sprintf("bench-hk-%d", time.Now().UnixNano())
	rdb := deckard.rdb
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return "", err
	}
	later := float64(now.Add(10 * time.Minute).UnixMilli())
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for q := range idleQueues {
			key := fmt.Sprintf("%s:queue:{%s}", prefix, queueName(q))
			p.ZAdd(ctx, key+":tmp", redis.Z{Score: later, Member: "pulled"})
			p.ZAdd(ctx, key+":lock_ack", redis.Z{Score: later, Member: "acked"})
			p.ZAdd(ctx, key+":lock_ack:score", redis.Z{Score: 7, Member: "acked"})
		}
		return nil
	}); err != nil {
		return "", err
	}
	defer func() { _ = dropIdleQueues(rdb, prefix) }()

	procs := make([]*hkProcess, n)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.signal(syscall.SIGTERM)
			}
		}
	}()
	for i := range procs { // one at a time
		if procs[i], err = startHousekeeper(bin, fmt.Sprintf("hk-%d", i), coord.addr, deckard.url, prefix); err != nil {
			return "", err
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(cfg.warmup)

	meter := &cpuMeter{}
	for _, p := range procs {
		meter.add("housekeeper", p.cmd.Process.Pid)
	}
	meter.add("coordinator", coord.cmd.Process.Pid)
	msgs := func() float64 { v, _ := scrapeSum(coord.metricsURL, "grpc_server_msg_received_total"); return v }
	cpu0, msgs0 := meter.read(), msgs()
	c0, err := infoStat(ctx, crdb, "total_commands_processed")
	if err != nil {
		return "", err
	}
	d0, err := infoStat(ctx, rdb, "total_commands_processed")
	if err != nil {
		return "", err
	}
	dcpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		return "", err
	}
	start := time.Now()
	time.Sleep(cfg.window)
	c1, _ := infoStat(ctx, crdb, "total_commands_processed")
	d1, _ := infoStat(ctx, rdb, "total_commands_processed")
	dcpu1, err := redisCPU(ctx, rdb)
	if err != nil {
		return "", err
	}
	used, msgs1 := meter.since(cpu0), msgs()
	secs := time.Since(start).Seconds()
	var owned []float64
	for _, p := range procs {
		if v, ok := scrapeSum("http://"+p.metrics+"/metrics", "housekeeper_sets_owned"); ok {
			owned = append(owned, v)
		}
	}
	ownedRange := "n/a"
	if len(owned) > 0 {
		ownedRange = fmt.Sprintf("%.0f-%.0f", slices.Min(owned), slices.Max(owned))
	}
	cpu := (used.by["housekeeper"] + used.by["coordinator"]).Seconds() / secs * 100

	running, err := latenessRuns(cfg, bin, coord, deckard, prefix, procs, false)
	if err != nil {
		return "", err
	}
	takeovers, err := latenessRuns(cfg, bin, coord, deckard, prefix, procs, true)
	if err != nil {
		return "", err
	}
	worstAndMedian := func(ds []time.Duration) string {
		slices.Sort(ds)
		return fmt.Sprintf("%s / %s", ds[len(ds)-1].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond))
	}
	return fmt.Sprintf("  %9d %16.0f %16.0f %16.0f %16.2f%% %13.1f%% %13.2f%% %18s %18s %22s", n,
		(msgs1-msgs0)/secs, float64(c1-c0-1)/secs, float64(d1-d0-1)/secs, (dcpu1-dcpu0).Seconds()/secs*100,
		cpu, used.by["housekeeper"].Seconds()/secs*100/float64(n),
		ownedRange, worstAndMedian(running), worstAndMedian(takeovers)), nil
}

// latenessRuns acks, cfg.kills times, one more message in every queue with
// a lock that ends at once: it goes into the queue's lock_ack set before the
// message already there (due in 10 minutes), so only a read of the set after
// it arrived can find it. With kill, one instance (the leader first) is
// killed with SIGKILL at that instant and started again afterwards. It
// returns how long each run took until all of them were moved.
func latenessRuns(cfg hkIdleConfig, bin string, coord *coordinator, deckard *redisServer, prefix string, procs []*hkProcess, kill bool) ([]time.Duration, error) {
	ctx := context.Background()
	rdb := deckard.rdb
	c, err := client.New(coord.addr, client.WithIdentity("bench-observer"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	keys := make([]string, idleQueues)
	for q := range keys {
		keys[q] = fmt.Sprintf("%s:queue:{%s}:lock_ack", prefix, queueName(q))
	}
	var out []time.Duration
	for run := range cfg.kills {
		victim := run % len(procs)
		if kill && run == 0 {
			if l, err := c.Leader(ctx, prefix+"/housekeeper/leader"); err == nil {
				for i, p := range procs {
					if strings.HasPrefix(l.Candidate, p.id+"#") || l.Candidate == p.id {
						victim = i
					}
				}
			}
		}
		member := fmt.Sprintf("due-%v-%d", kill, run)
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			return nil, err
		}
		if kill {
			procs[victim].signal(syscall.SIGKILL)
		}
		at := time.Now()
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.ZAdd(ctx, k, redis.Z{Score: float64(now.UnixMilli()), Member: member})
			}
			return nil
		}); err != nil {
			return nil, err
		}
		left := slices.Clone(keys)
		for len(left) > 0 {
			cmds := make([]*redis.FloatCmd, len(left))
			if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range left {
					cmds[i] = p.ZScore(ctx, k, member)
				}
				return nil
			}); err != nil && !errors.Is(err, redis.Nil) {
				return nil, err
			}
			var still []string
			for i, cmd := range cmds {
				if cmd.Err() == nil {
					still = append(still, left[i])
				}
			}
			if left = still; len(left) == 0 {
				break
			}
			if time.Since(at) > time.Minute {
				return nil, fmt.Errorf("%d queues' messages not moved a minute after they fell due", len(left))
			}
			time.Sleep(10 * time.Millisecond)
		}
		out = append(out, time.Since(at))
		if kill {
			if procs[victim], err = startHousekeeper(bin, procs[victim].id, coord.addr, deckard.url, prefix); err != nil {
				return nil, err
			}
			time.Sleep(5 * time.Second) // it joins again, and the view settles
		} else {
			time.Sleep(time.Second)
		}
	}
	return out, nil
}

func dropIdleQueues(rdb *redis.Client, prefix string) error {
	ctx := context.Background()
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+":*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
