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
	hkQueues   = 1000
	hkMessages = 200 // per queue, all due at once, half with a saved score
	hkRounds   = 3   // measurements of each, interleaved; the median is reported
	// hkLead is how far ahead of their due time the messages are written, so
	// that the instances have found the queues when they fall due, as they
	// would have in a running Deckard.
	hkLead = 3 * time.Second
)

// housekeeperSuite measures messages unlocked per second on 1,000 queues
// whose 200 messages each fall due at one instant: by the batch script
// called directly in a loop (the floor), and by 1, 3 and 10 housekeeper
// instances (in this process, each with its own coordinator client and
// membership), started one at a time. It also reports how the work was
// shared: the busiest instance's messages over the fair share.
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
	fmt.Printf("\n== housekeeper unlock, %d queues x %d messages falling due at once (batches of %d)\n", hkQueues, hkMessages, housekeeper.DefaultBatchSize)
	type measure struct {
		name      string
		instances int // 0: the batch script direct
		rates     []float64
		shares    []float64 // busiest instance's work / fair share
	}
	measures := []*measure{{name: "batch script direct, one loop"}}
	for _, n := range []int{1, 3, 10} {
		measures = append(measures, &measure{name: fmt.Sprintf("%d housekeeper instances", n), instances: n})
	}
	for round := range hkRounds {
		for i, m := range measures {
			// A queue layout of its own each time: fresh fences, nothing left over.
			prefix := fmt.Sprintf("bench-deckard-%d-%d-%d", time.Now().UnixNano(), round, i)
			var rate, share float64
			if m.instances == 0 {
				rate, err = unlockDirect(rdb, prefix, total)
			} else {
				rate, share, err = unlockByInstances(coord.addr, rdb, prefix, m.instances, total)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			m.rates = append(m.rates, rate)
			m.shares = append(m.shares, share)
			if err := dropQueues(rdb, prefix); err != nil {
				return err
			}
		}
	}
	floor := median(measures[0].rates)
	for _, m := range measures {
		line := fmt.Sprintf("  %-34s %9.0f msgs/s  (%.2f of direct; median of %d)", m.name, median(m.rates), median(m.rates)/floor, hkRounds)
		if m.instances > 1 {
			line += fmt.Sprintf("; busiest instance %.2fx its fair share (worst round)", slices.Max(m.shares))
		}
		fmt.Println(line)
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
	var keys []string
	for q := range hkQueues {
		queue := queueName(q)
		keys = append(keys, fmt.Sprintf("%s:queue:{%s}", prefix, queue), fmt.Sprintf("%s:housekeeper:{%s}:fence:unlock", prefix, queue))
	}
	return rdb.Unlink(ctx, keys...).Err()
}

func queueName(q int) string { return fmt.Sprintf("queue-%04d", q) }

// seedLocked acks every message of every queue with a lock that falls due
// at dueMs (Redis' clock), as Deckard would, half of them with a saved score.
func seedLocked(rdb redis.UniversalClient, prefix string, dueMs int64) error {
	ctx := context.Background()
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for q := range hkQueues {
			lock := fmt.Sprintf("%s:queue:{%s}:lock_ack", prefix, queueName(q))
			var members, scores []redis.Z
			for i := range hkMessages {
				id := fmt.Sprintf("m%d", i)
				members = append(members, redis.Z{Score: float64(dueMs), Member: id})
				if i%2 == 0 {
					scores = append(scores, redis.Z{Score: float64(i) - 0.5, Member: id})
				}
			}
			p.ZAdd(ctx, lock, members...)
			p.ZAdd(ctx, lock+":score", scores...)
		}
		return nil
	})
	return err
}

// seedAhead writes the layout due hkLead from now and returns when, by
// this process's clock, it falls due.
func seedAhead(rdb redis.UniversalClient, prefix string) (time.Time, error) {
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		return time.Time{}, err
	}
	due := now.Add(hkLead)
	if err := seedLocked(rdb, prefix, due.UnixMilli()); err != nil {
		return time.Time{}, err
	}
	return time.Now().Add(time.Until(now.Add(hkLead))), nil
}

// unlockDirect calls the batch script in a loop over the queues once they
// fell due.
func unlockDirect(rdb redis.UniversalClient, prefix string, total int) (float64, error) {
	queues, err := housekeeper.NewQueues(rdb, prefix)
	if err != nil {
		return 0, err
	}
	due, err := seedAhead(rdb, prefix)
	if err != nil {
		return 0, err
	}
	time.Sleep(time.Until(due) + time.Millisecond)
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

// benchInstance is one housekeeper of unlockByInstances.
type benchInstance struct {
	c      *client.Client
	member *housekeeper.CoordinatorMembership
	reg    *prometheus.Registry
}

func (in benchInstance) unlocked() float64 {
	families, _ := in.reg.Gather()
	var n float64
	for _, f := range families {
		if f.GetName() == "housekeeper_messages_unlocked_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// unlockByInstances starts instances one at a time, each once the view
// holds the ones before it, writes the layout, and measures messages per
// second from the moment they fell due until every one was unlocked. It
// also returns the busiest instance's share over the fair share.
func unlockByInstances(addr string, rdb redis.UniversalClient, prefix string, instances, total int) (rate, share float64, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ins []benchInstance
	defer func() {
		cancel()
		wg.Wait()
		for _, in := range ins {
			_ = in.c.Close()
		}
	}()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range instances {
		c, err := client.New(addr, client.WithIdentity(fmt.Sprintf("bench-hk-%d", i)))
		if err != nil {
			return 0, 0, err
		}
		in := benchInstance{c: c, reg: prometheus.NewRegistry()}
		ins = append(ins, in)
		if in.member, err = housekeeper.NewCoordinatorMembership(c, housekeeper.MembershipConfig{Namespace: prefix, Logger: quiet}); err != nil {
			return 0, 0, err
		}
		ins[i] = in
		r, err := housekeeper.New(rdb, in.member, housekeeper.Config{Prefix: prefix, Logger: quiet, Registerer: in.reg})
		if err != nil {
			return 0, 0, err
		}
		wg.Go(func() { _ = in.member.Run(ctx) })
		wg.Go(func() { _ = r.Run(ctx) })
		if err := waitMembers(ins, i+1); err != nil {
			return 0, 0, err
		}
	}
	due, err := seedAhead(rdb, prefix)
	if err != nil {
		return 0, 0, err
	}
	// Done when every lock set is gone (Redis deletes a sorted set as it
	// empties): one EXISTS a poll, which costs Redis next to nothing and the
	// instances nothing at all.
	keys := make([]string, hkQueues)
	for q := range keys {
		keys[q] = fmt.Sprintf("%s:queue:{%s}:lock_ack", prefix, queueName(q))
	}
	for {
		left, err := rdb.Exists(context.Background(), keys...).Result()
		if err != nil {
			return 0, 0, err
		}
		if left == 0 {
			break
		}
		if time.Since(due) > time.Minute {
			return 0, 0, fmt.Errorf("%d queues not unlocked a minute after they fell due", left)
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(due)
	var busiest, moved float64
	for _, in := range ins {
		busiest = max(busiest, in.unlocked())
		moved += in.unlocked()
	}
	if moved != float64(total) {
		return 0, 0, fmt.Errorf("the instances count %.0f messages unlocked, not %d", moved, total)
	}
	return float64(total) / elapsed.Seconds(), busiest / (float64(total) / float64(instances)), nil
}

// waitMembers waits until every instance works under a view of n members.
func waitMembers(ins []benchInstance, n int) error {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		agreed := true
		for _, in := range ins {
			if v, _ := in.member.View(); len(v.Members) != n || !in.member.Live() {
				agreed = false
			}
		}
		if agreed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no view of %d members after 30s", n)
		}
	}
}
