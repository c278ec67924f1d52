package main

import (
	"bufio"
	"context"
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

const (
	idleQueues = 1000
	// killLead is how far ahead of the kill the messages that fall due at
	// its instant are written.
	killLead = 3 * time.Second
)

// housekeeperIdleSuite measures housekeeper processes beside a coordinator
// process (Redis store) and a Deckard Redis of their own, with default
// settings, on idleQueues queues that each hold a pulled and an acked
// message due in 10 minutes: every instance finds every queue and nothing
// is due. It reports what that costs the coordinator, both Redis servers
// and the CPU, then kills one instance (the elected leader first) at the
// instant one message of every queue falls due, and measures how long until
// every one of them was moved.
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
	fmt.Printf("  %9s %16s %16s %16s %14s %14s %18s %22s\n", "instances", "coord calls+msgs/s", "coord Redis cmd/s", "Deckard cmd/s", "CPU hk+coord", "CPU/instance", "sets owned min-max", "takeover after kill -9")
	for _, n := range cfg.instances {
		row, err := measureHousekeepers(env, cfg, bin, deckard, crdb, n)
		if err != nil {
			return fmt.Errorf("%d instances: %w", n, err)
		}
		fmt.Println(row)
	}
	fmt.Println("  (CPU: all housekeeper and coordinator processes, % of one core; takeover: worst and median of the kills, the first of the leader)")
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

func startHousekeeper(bin, id, coordAddr, redisURL, prefix string) (*hkProcess, error) {
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
	start := time.Now()
	time.Sleep(cfg.window)
	c1, _ := infoStat(ctx, crdb, "total_commands_processed")
	d1, _ := infoStat(ctx, rdb, "total_commands_processed")
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

	takeovers, err := killRuns(cfg, bin, coord, deckard, prefix, procs)
	if err != nil {
		return "", err
	}
	slices.Sort(takeovers)
	return fmt.Sprintf("  %9d %16.0f %16.0f %16.0f %13.1f%% %13.2f%% %18s %12s / %s", n,
		(msgs1-msgs0)/secs, float64(c1-c0-1)/secs, float64(d1-d0-1)/secs, cpu, used.by["housekeeper"].Seconds()/secs*100/float64(n),
		ownedRange, takeovers[len(takeovers)-1].Round(time.Millisecond), takeovers[len(takeovers)/2].Round(time.Millisecond)), nil
}

// killRuns kills one instance cfg.kills times, the leader first, each at
// the instant one message of every queue falls due (in a lock_nack set of
// its own), and returns how long each took until all of them were moved.
// The victim is started again after each run.
func killRuns(cfg hkIdleConfig, bin string, coord *coordinator, deckard *redisServer, prefix string, procs []*hkProcess) ([]time.Duration, error) {
	ctx := context.Background()
	rdb := deckard.rdb
	c, err := client.New(coord.addr, client.WithIdentity("bench-observer"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	keys := make([]string, idleQueues)
	for q := range keys {
		keys[q] = fmt.Sprintf("%s:queue:{%s}:lock_nack", prefix, queueName(q))
	}
	var out []time.Duration
	for run := range cfg.kills {
		victim := run % len(procs)
		if run == 0 {
			if l, err := c.Leader(ctx, prefix+"/housekeeper/leader"); err == nil {
				for i, p := range procs {
					if strings.HasPrefix(l.Candidate, p.id+"#") || l.Candidate == p.id {
						victim = i
					}
				}
			}
		}
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			return nil, err
		}
		due := now.Add(killLead)
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.ZAdd(ctx, k, redis.Z{Score: float64(due.UnixMilli()), Member: fmt.Sprint("due-", run)})
			}
			return nil
		}); err != nil {
			return nil, err
		}
		localDue := time.Now().Add(time.Until(now.Add(killLead)))
		time.Sleep(time.Until(localDue))
		procs[victim].signal(syscall.SIGKILL)
		for {
			left, err := rdb.Exists(ctx, keys...).Result()
			if err != nil {
				return nil, err
			}
			if left == 0 {
				break
			}
			if time.Since(localDue) > time.Minute {
				return nil, fmt.Errorf("%d queues' messages not moved a minute after the kill", left)
			}
			time.Sleep(5 * time.Millisecond)
		}
		out = append(out, time.Since(localDue))
		if procs[victim], err = startHousekeeper(bin, procs[victim].id, coord.addr, deckard.url, prefix); err != nil {
			return nil, err
		}
		time.Sleep(5 * time.Second) // it joins again, and the view settles
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
