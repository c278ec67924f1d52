package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/testkit/mongotest"
	"github.com/coordinator-dev/coordinator/internal/testkit/proctest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// TestStorageTasksWithInstancesJoiningLeavingAndKilled runs housekeeper
// processes with the storage tasks on, against a coordinator process, one
// Deckard Redis and a MongoDB wire protocol (FerretDB), starting on a cache
// that lost its data: recovery runs first, and the instance doing it is
// killed midway; then messages expire over several seconds while instances
// join, one leaves with SIGTERM and one is killed with SIGKILL, and excess
// arrives in queues with max_elements. In the end every message that
// expired is gone from storage and cache, every queue with max_elements
// holds exactly its latest-expiring max_elements, and every other message
// is stored and in exactly one set of its queue.
func TestStorageTasksWithInstancesJoiningLeavingAndKilled(t *testing.T) {
	const token = "s3cret"
	hkBin, coordBin := buildBinaries(t)
	coordAddr := startCoordinator(t, coordBin, redistest.URL(t), token)
	rdb := redistest.Client(t)
	db := mongotest.Database(t)
	d := housekeepertest.Deckard{Prefix: fmt.Sprintf("hk-e2e-storage-%d", time.Now().UnixNano())}
	ctx := context.Background()

	type proc struct {
		id, metrics string
		*proctest.Process
	}
	start := func(id string) *proc {
		p := &proc{id: id, metrics: proctest.FreeAddr(t)}
		p.Process = startHousekeeper(t, hkBin, coordAddr, token, d.Prefix, id,
			"HOUSEKEEPER_STORAGE_URI="+mongotest.URI(t),
			"HOUSEKEEPER_MONGO_DATABASE="+db.Name(),
			"HOUSEKEEPER_METRICS_LISTEN="+p.metrics,
			"HOUSEKEEPER_DISCOVERY_INTERVAL=200ms",
			"HOUSEKEEPER_STORAGE_INTERVAL=200ms",
			"HOUSEKEEPER_METRICS_INTERVAL=1s",
			"HOUSEKEEPER_MAX_ELEMENTS_READ_INTERVAL=200ms",
			"HOUSEKEEPER_RECOVERY_BATCH=10",
			"HOUSEKEEPER_TTL_BATCH=25",
			"HOUSEKEEPER_LEASE_TTL=1s",
		)
		return p
	}

	// The storage: plain queues whose messages expire over the next
	// seconds or in a day, and queues with max_elements.
	const plainQueues, maxQueues, perQueue, maxElements = 30, 6, 40, 15
	now := time.Now()
	type msg struct {
		housekeepertest.Stored
		expires bool
	}
	var msgs []msg
	for q := range plainQueues {
		queue := fmt.Sprintf("p%d::x", q)
		for i := range perQueue {
			m := msg{Stored: housekeepertest.Stored{Queue: queue, ID: fmt.Sprint("m", i), Score: float64(i), Expiry: now.Add(24 * time.Hour)}}
			if i%4 == 0 { // a quarter expire between 3 and 9 s from now
				m.Expiry, m.expires = now.Add(3*time.Second+time.Duration(q*perQueue+i)*6*time.Second/(plainQueues*perQueue)), true
			}
			msgs = append(msgs, m)
		}
	}
	for q := range maxQueues {
		queue := fmt.Sprintf("max%d", q)
		housekeepertest.SetMaxElements(t, db, queue, maxElements)
		for i := range 10 { // under the maximum at first
			msgs = append(msgs, msg{Stored: housekeepertest.Stored{Queue: queue, ID: fmt.Sprint("m", i), Score: 1, Expiry: now.Add(time.Duration(i+1) * time.Hour)}})
		}
	}
	stored := make([]housekeepertest.Stored, len(msgs))
	for i, m := range msgs {
		stored[i] = m.Stored
	}
	housekeepertest.Store(t, db, stored...)
	// The cache lost everything but one pulled message per plain queue,
	// which recovery must leave where it is.
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for q := range plainQueues {
			d.Put(ctx, p, fmt.Sprintf("p%d::x", q), housekeepertest.Tmp, "m1", float64(now.Add(time.Hour).UnixMilli()))
		}
	})

	breakpoint := func() string {
		v, _ := rdb.Get(ctx, d.Prefix+":{recovery_storage_breakpoint}").Result()
		return v
	}
	live := []*proc{start("hk-0"), start("hk-1")}
	without := func(gone *proc) {
		for i, p := range live {
			if p == gone {
				live = append(live[:i:i], live[i+1:]...)
				return
			}
		}
	}

	// Kill the instance doing the recovery once it has copied a batch.
	var recovering *proc
	testwait.Until(t, 30*time.Second, "an instance to begin the recovery", func() bool {
		if breakpoint() == "recovery_finished" {
			return true
		}
		for _, p := range live {
			body := scrape(t, p.metrics)
			if strings.Contains(body, "housekeeper_messages_recovered_total{prefix=\""+d.Prefix+"\"} ") &&
				!strings.Contains(body, "housekeeper_messages_recovered_total{prefix=\""+d.Prefix+"\"} 0\n") {
				recovering = p
			}
		}
		return recovering != nil
	})
	if recovering == nil {
		t.Log("the recovery finished before an instance could be killed midway; the kill is skipped")
	} else {
		t.Logf("%s is recovering (breakpoint %q): killed", recovering.id, breakpoint())
		recovering.Signal(t, syscall.SIGKILL)
		without(recovering)
		live = append(live, start("hk-r"))
	}
	testwait.Until(t, 60*time.Second, "the recovery to finish", func() bool { return breakpoint() == "recovery_finished" })

	// Messages expire from now on; instances come and go; excess arrives.
	added := 0
	addExcess := func() {
		var more []housekeepertest.Stored
		for q := range maxQueues {
			queue := fmt.Sprintf("max%d", q)
			for k := 10 + added; k < 10+added+4; k++ {
				more = append(more, housekeepertest.Stored{Queue: queue, ID: fmt.Sprint("m", k), Score: 1, Expiry: now.Add(time.Duration(k+1) * time.Hour)})
			}
		}
		added += 4
		// Storage first, then the cache, as Deckard's Add.
		housekeepertest.Store(t, db, more...)
		d.Seed(t, rdb, func(p redis.Pipeliner) {
			for _, m := range more {
				d.Put(t.Context(), p, m.Queue, housekeepertest.Active, m.ID, m.Score)
			}
		})
	}
	var hk2 *proc
	events := []struct {
		after time.Duration
		what  string
		do    func()
	}{
		{500 * time.Millisecond, "hk-2 joins; excess arrives", func() { hk2 = start("hk-2"); live = append(live, hk2); addExcess() }},
		{2 * time.Second, "the oldest live instance leaves (SIGTERM); excess arrives", func() {
			leaving := live[0]
			leaving.Signal(t, syscall.SIGTERM)
			without(leaving)
			if err := leaving.Wait(); err != nil {
				t.Errorf("%s exited with %v after SIGTERM", leaving.id, err)
			}
			addExcess()
		}},
		{3500 * time.Millisecond, "hk-2 is killed (SIGKILL)", func() { hk2.Signal(t, syscall.SIGKILL); without(hk2) }},
		{4500 * time.Millisecond, "hk-3 joins; excess arrives", func() { live = append(live, start("hk-3")); addExcess() }},
	}
	done := func() (bool, string) {
		for q := range maxQueues {
			queue := fmt.Sprintf("max%d", q)
			if n := len(housekeepertest.StoredIDs(t, db, queue)); n != maxElements {
				return false, fmt.Sprintf("%s holds %d messages in storage", queue, n)
			}
		}
		for _, m := range msgs {
			if m.expires && time.Now().After(m.Expiry) && housekeepertest.StoredIDs(t, db, m.Queue)[m.ID] {
				return false, fmt.Sprintf("%s/%s expired and is still stored", m.Queue, m.ID)
			}
		}
		return len(events) == 0 && time.Now().After(now.Add(10*time.Second)), "the last messages to expire"
	}
	began := time.Now()
	for deadline := began.Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		for len(events) > 0 && time.Since(began) >= events[0].after {
			t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), events[0].what)
			events[0].do()
			events = events[1:]
		}
		ok, why := done()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s: %s", why)
		}
	}

	// Settled: every message where it must be, once.
	for _, queue := range queuesOf(msgs, func(m msg) string { return m.Queue }) {
		ids := housekeepertest.StoredIDs(t, db, queue)
		snap := d.Snapshot(t, rdb, queue)
		inSets := map[string]int{}
		for _, s := range []housekeepertest.Set{housekeepertest.Active, housekeepertest.Tmp, housekeepertest.LockAck, housekeepertest.LockNack} {
			for id := range snap[s] {
				inSets[id]++
			}
		}
		if strings.HasPrefix(queue, "max") {
			for i := range 10 + added {
				id := fmt.Sprint("m", i)
				keep := i >= 10+added-maxElements
				if ids[id] != keep || (inSets[id] == 1) != keep || inSets[id] > 1 {
					t.Errorf("%s/%s: stored %v, in %d sets; want kept=%v", queue, id, ids[id], inSets[id], keep)
				}
			}
			continue
		}
		for _, m := range msgs {
			if m.Queue != queue {
				continue
			}
			keep := !m.expires
			if ids[m.ID] != keep || (inSets[m.ID] == 1) != keep || inSets[m.ID] > 1 {
				t.Errorf("%s/%s: stored %v, in %d sets; want kept=%v", queue, m.ID, ids[m.ID], inSets[m.ID], keep)
			}
		}
		if _, ok := snap[housekeepertest.Tmp]["m1"]; !ok {
			t.Errorf("%s: the pulled message m1 left :tmp", queue)
		}
	}

	// One survivor reports Deckard's queue gauges; SIGTERM stops them all.
	survivors := live
	testwait.Until(t, 10*time.Second, `one survivor alone reporting deckard_total_messages{queue="max0"} 15`, func() bool {
		reporting := 0
		for _, p := range survivors {
			if strings.Contains(scrape(t, p.metrics), "deckard_total_messages{queue=\"max0\"} 15\n") {
				reporting++
			}
		}
		return reporting == 1
	})
	for _, p := range survivors {
		p.Signal(t, syscall.SIGTERM)
	}
	for _, p := range survivors {
		if err := p.Wait(); err != nil {
			t.Errorf("%s exited with %v after SIGTERM", p.id, err)
		}
	}
}

func queuesOf[M any](ms []M, queue func(M) string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		if q := queue(m); !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	return out
}
