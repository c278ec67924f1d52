package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/housekeeper"
	"github.com/coordinator-dev/coordinator/internal/redisurl"
)

const (
	hkQueues   = 200
	hkMessages = 1000 // per queue, all due, half with a saved score
	hkRounds   = 3    // measurements of each, interleaved; the median is reported
)

// housekeeperSuite measures messages unlocked per second on 200 queues: by
// the batch script called directly in a loop (the floor), and by one and by
// three housekeeper instances taking a coordinator lease per queue.
func housekeeperSuite(env benchEnv) error {
	rdb, err := redisurl.NewClient(env.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	coord, err := env.startCoordinator("redis")
	if err != nil {
		return err
	}
	defer coord.stop()

	total := hkQueues * hkMessages
	fmt.Printf("\n== housekeeper unlock, %d queues x %d due messages (batches of %d)\n", hkQueues, hkMessages, housekeeper.DefaultBatchSize)

	direct := func(prefix string) (float64, error) {
		queues, err := housekeeper.NewQueues(rdb, prefix)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		for q := range hkQueues {
			for {
				n, err := queues.UnlockBatch(context.Background(), queueName(q), housekeeper.LockAck, 1, housekeeper.DefaultBatchSize)
				if err != nil {
					return 0, err
				}
				if n < housekeeper.DefaultBatchSize {
					break
				}
			}
		}
		return float64(total) / time.Since(start).Seconds(), nil
	}
	measures := []struct {
		name  string
		run   func(prefix string) (float64, error)
		rates []float64
	}{
		{name: "batch script direct, one loop", run: direct},
		{name: "1 housekeeper instance", run: func(prefix string) (float64, error) { return runInstances(coord.addr, rdb, prefix, 1, total) }},
		{name: "3 housekeeper instances", run: func(prefix string) (float64, error) { return runInstances(coord.addr, rdb, prefix, 3, total) }},
	}
	for round := range hkRounds {
		for i := range measures {
			// A queue layout of its own each time: fresh fences, nothing left over.
			prefix := fmt.Sprintf("bench-deckard-%d-%d", round, i)
			if err := seedLocked(rdb, prefix); err != nil {
				return err
			}
			rate, err := measures[i].run(prefix)
			if err != nil {
				return err
			}
			measures[i].rates = append(measures[i].rates, rate)
			if err := dropQueues(rdb, prefix); err != nil {
				return err
			}
		}
	}
	floor := median(measures[0].rates)
	for _, m := range measures {
		fmt.Printf("  %-34s %9.0f msgs/s  (%.2f of direct; median of %d)\n", m.name, median(m.rates), median(m.rates)/floor, hkRounds)
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// dropQueues deletes what a measurement left under prefix.
func dropQueues(rdb redis.UniversalClient, prefix string) error {
	ctx := context.Background()
	for q := range hkQueues {
		queue := queueName(q)
		err := rdb.Unlink(ctx, fmt.Sprintf("%s:queue:{%s}", prefix, queue),
			fmt.Sprintf("%s:housekeeper:{%s}:fence:unlock", prefix, queue)).Err()
		if err != nil {
			return err
		}
	}
	return nil
}

func queueName(q int) string { return fmt.Sprintf("queue-%03d", q) }

// seedLocked acks every message of every queue with a lock that is already
// due, as Deckard would, half of them with a saved score.
func seedLocked(rdb redis.UniversalClient, prefix string) error {
	ctx := context.Background()
	now := time.Now().UnixMilli() - 1000
	for q := range hkQueues {
		queue := queueName(q)
		lock := fmt.Sprintf("%s:queue:{%s}:lock_ack", prefix, queue)
		var members, scores []redis.Z
		for i := range hkMessages {
			id := fmt.Sprintf("m%d", i)
			members = append(members, redis.Z{Score: float64(now), Member: id})
			if i%2 == 0 {
				scores = append(scores, redis.Z{Score: float64(i) - 0.5, Member: id})
			}
		}
		if err := rdb.ZAdd(ctx, lock, members...).Err(); err != nil {
			return err
		}
		if err := rdb.ZAdd(ctx, lock+":score", scores...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// runInstances runs housekeeper Runners, each with a coordinator client of
// its own, until every message is unlocked, and returns messages per second.
func runInstances(addr string, rdb redis.UniversalClient, prefix string, instances, total int) (float64, error) {
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var clients []*client.Client
	defer func() {
		cancel()
		wg.Wait()
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	start := time.Now()
	for i := range instances {
		c, err := client.New(addr, client.WithIdentity(fmt.Sprintf("bench-hk-%d", i)))
		if err != nil {
			return 0, err
		}
		clients = append(clients, c)
		r, err := housekeeper.New(rdb, housekeeper.CoordinatorLocker(c), housekeeper.Config{
			Prefix: prefix, UnlockInterval: 50 * time.Millisecond, TimeoutInterval: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg,
		})
		if err != nil {
			return 0, err
		}
		wg.Go(func() { _ = r.Run(ctx) })
	}
	// Progress is read from the Runners' own counters, so that watching
	// costs Redis nothing.
	unlocked := func() (float64, error) {
		families, err := reg.Gather()
		if err != nil {
			return 0, err
		}
		var n float64
		for _, f := range families {
			if f.GetName() == "housekeeper_messages_unlocked_total" {
				for _, m := range f.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n, nil
	}
	for {
		n, err := unlocked()
		if err != nil {
			return 0, err
		}
		if n >= float64(total) {
			return float64(total) / time.Since(start).Seconds(), nil
		}
		if time.Since(start) > time.Minute {
			return 0, fmt.Errorf("only %.0f of %d messages unlocked after a minute", n, total)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
