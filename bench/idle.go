package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/redisurl"
)

const (
	idleElections   = 5000 // observed, one stream each; every other one has a leader
	idleWaiters     = 2000 // parked on idleWaitNames held names
	idleWaitNames   = 10
	idleSettle      = 3 * time.Second // after the setup, before counting
	idleSetupWorker = 64
)

// idleSuite measures what one coordinator costs Redis while nothing changes:
// idleElections observed elections and idleWaiters waiting calls parked on
// names whose holders keep them. Redis counts the commands itself (INFO
// commandstats, the commands run inside scripts included), so every client of
// this Redis is counted: run it on a Redis of its own, as `make bench` does.
func idleSuite(env benchEnv) error {
	rdb, err := redisurl.NewClient(env.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := env.startCoordinator("redis")
	if err != nil {
		return err
	}
	defer c.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The longest lease and wait the coordinator allows by default: nothing
	// expires or gives up while commands are counted.
	long := durationpb.New(5 * time.Minute)
	setupStart := time.Now()

	// Elections: every other one gets a leader, then each gets an observer.
	if err := closedLoopN(idleElections/2, idleSetupWorker, func(i int) error {
		resp, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{
			Election: fmt.Sprintf("bench/idle/e%d", 2*i), Candidate: "leader", Value: []byte("v"), Ttl: long,
		})
		if err == nil && !resp.GetElected() {
			err = fmt.Errorf("campaign for e%d: not elected", 2*i)
		}
		return err
	}); err != nil {
		return err
	}
	observerClients, err := c.clients(idleElections)
	if err != nil {
		return err
	}
	var events atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if err := closedLoopN(idleElections, idleSetupWorker, func(i int) error {
		stream, err := observerClients[i].Observe(ctx, &coordinatorv1.ObserveRequest{Election: fmt.Sprintf("bench/idle/e%d", i)})
		if err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil { // the current state: the stream is up
			return fmt.Errorf("observe e%d: %w", i, err)
		}
		wg.Go(func() {
			for {
				if _, err := stream.Recv(); err != nil {
					return
				}
				events.Add(1)
			}
		})
		return nil
	}); err != nil {
		return err
	}

	// Waiters: the names are held, each caller waits for one of them.
	for n := range idleWaitNames {
		resp, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: fmt.Sprintf("bench/idle/w%d", n), Holder: "holder", Ttl: long})
		if err != nil || !resp.GetAcquired() {
			return fmt.Errorf("idle setup: %v, %w", resp, err)
		}
	}
	waiterClients, err := c.clients(idleWaiters)
	if err != nil {
		return err
	}
	var ended atomic.Int64
	var firstErr atomic.Pointer[error]
	for i := range idleWaiters {
		wg.Go(func() {
			_, err := waiterClients[i].TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{
				Name: fmt.Sprintf("bench/idle/w%d", i%idleWaitNames), Holder: fmt.Sprintf("waiter-%d", i), Ttl: long, Wait: long,
			})
			if ctx.Err() == nil {
				ended.Add(1)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	deadline := time.Now().Add(2 * time.Minute)
	for n := 0; n < idleWaitNames; {
		desc, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: fmt.Sprintf("bench/idle/w%d", n)})
		if err != nil {
			return err
		}
		switch {
		case int(desc.GetWaiters()) >= idleWaiters/idleWaitNames:
			n++
		case time.Now().After(deadline):
			return fmt.Errorf("idle setup: %d of %d waiters queued on w%d", desc.GetWaiters(), idleWaiters/idleWaitNames, n)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	setup := time.Since(setupStart)
	time.Sleep(idleSettle)

	before, err := commandStats(ctx, rdb)
	if err != nil {
		return err
	}
	eventsBefore := events.Load()
	start := time.Now()
	time.Sleep(env.idleWindow)
	after, err := commandStats(ctx, rdb)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if e := firstErr.Load(); e != nil {
		return fmt.Errorf("a parked waiter failed: %w", *e)
	}
	if n := ended.Load(); n > 0 {
		return fmt.Errorf("%d parked waiters ended early", n)
	}

	type count struct {
		cmd   string
		calls int64
	}
	ran := commandsBetween(before, after)
	total := commandsIn(ran)
	var counts []count
	for cmd, n := range ran {
		counts = append(counts, count{cmd, n})
	}
	slices.SortFunc(counts, func(a, b count) int { return cmp.Compare(b.calls, a.calls) })
	var top []string
	for _, c := range counts[:min(len(counts), 6)] {
		top = append(top, fmt.Sprintf("%s %.0f/s", c.cmd, float64(c.calls)/elapsed.Seconds()))
	}
	fmt.Printf("\n== idle coordinator, redis store: %d observed elections (%d with a leader), %d waiters parked on %d names (set up in %s)\n",
		idleElections, idleElections/2, idleWaiters, idleWaitNames, setup.Round(100*time.Millisecond))
	fmt.Printf("  Redis commands over %s: %.0f/s (scripts' commands included; %d observer events)\n  top: %s\n",
		elapsed.Round(100*time.Millisecond), float64(total)/elapsed.Seconds(), events.Load()-eventsBefore, strings.Join(top, ", "))
	return nil
}

// commandsBetween is the calls of each command between two commandStats
// readings, the INFO calls that took them left out.
func commandsBetween(before, after map[string]int64) map[string]int64 {
	ran := map[string]int64{}
	for cmd, n := range after {
		if d := n - before[cmd]; d > 0 && cmd != "info" {
			ran[cmd] = d
		}
	}
	return ran
}

// commandsIn sums the calls of every command of ran.
func commandsIn(ran map[string]int64) int64 {
	var total int64
	for _, n := range ran {
		total += n
	}
	return total
}

// commandStats returns the calls of each command Redis has run (INFO
// commandstats), the commands scripts ran included.
func commandStats(ctx context.Context, rdb redis.UniversalClient) (map[string]int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		// cmdstat_evalsha:calls=12,usec=...
		line, ok := strings.CutPrefix(sc.Text(), "cmdstat_")
		if !ok {
			continue
		}
		cmd, fields, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(fields, ",")
		n, err := strconv.ParseInt(strings.TrimPrefix(calls, "calls="), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis INFO commandstats: %q: %w", sc.Text(), err)
		}
		out[cmd] = n
	}
	return out, nil
}

// infoStat is one integer field of Redis' INFO stats: total_reads_processed
// (read events: one for a pipeline of calls that arrived together) or
// total_commands_processed (commands run inside scripts included).
func infoStat(ctx context.Context, rdb redis.UniversalClient, field string) (int64, error) {
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO stats: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("redis INFO stats: no %s", field)
}

// redisCPU is the CPU time Redis reports having used, system and user
// (INFO cpu: used_cpu_sys + used_cpu_user): its own figure, whoever else
// shares the machine.
func redisCPU(ctx context.Context, rdb redis.UniversalClient) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO cpu: %w", err)
	}
	var secs float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, field := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("redis INFO cpu: %s %q: %w", field, v, err)
				}
				secs += f
				found++
			}
		}
	}
	if found != 2 {
		return 0, errors.New("redis INFO cpu: no used_cpu_sys and used_cpu_user")
	}
	return time.Duration(secs * float64(time.Second)), nil
}
