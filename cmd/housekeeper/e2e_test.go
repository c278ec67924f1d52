package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

// expected is where one seeded message must end up.
type expected struct {
	set   housekeepertest.Set
	score float64
}

// TestThreeInstancesOneKilled runs three housekeeper processes against one
// coordinator (which requires a bearer token, sent over loopback plaintext
// as explicitly allowed) and one Deckard Redis, kills one with SIGKILL
// mid-run, and checks that every due message reached the active pool
// exactly once with the right score while nothing not yet due moved.
func TestThreeInstancesOneKilled(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "housekeeper")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	coordCfg := coordtest.Config(t, "redis")
	coordCfg.AuthToken = "s3cret"
	coord := coordtest.Start(t, coordCfg)
	rdb := redistest.Client(t)
	d := housekeepertest.Deckard{Prefix: fmt.Sprintf("hk-e2e-%d", time.Now().UnixNano())}
	now := housekeepertest.NowMs(t, rdb)

	const queues = 200
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]map[string]expected{} // queue -> id -> where it must end
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		for q := range queues {
			queue := fmt.Sprintf("q%d", q)
			if q%50 == 0 {
				queue += "::x:tmp" // a look-alike name
			}
			want[queue] = map[string]expected{}
			for i := range 120 {
				id := fmt.Sprintf("m%d", i)
				// Due over the next two seconds, so the work spans the kill; a
				// tenth are due only in an hour and must not move.
				due := now + int64(rng.IntN(2000))
				if i%10 == 0 {
					due = now + 3_600_000
				}
				switch i % 3 {
				case 0: // in flight: times out to score 0
					d.Put(context.Background(), p, queue, housekeepertest.Tmp, id, float64(due))
					want[queue][id] = expected{housekeepertest.Active, 0}
					if i%10 == 0 {
						want[queue][id] = expected{housekeepertest.Tmp, float64(due)}
					}
				case 1: // acked with a lock and a saved score, some negative or fractional
					score := float64(rng.IntN(1000)) - 500.25
					d.Put(context.Background(), p, queue, housekeepertest.LockAck, id, float64(due))
					d.Put(context.Background(), p, queue, housekeepertest.LockAckScore, id, score)
					want[queue][id] = expected{housekeepertest.Active, score}
					if i%10 == 0 {
						want[queue][id] = expected{housekeepertest.LockAck, float64(due)}
					}
				case 2: // nacked with a lock, no saved score: back with 0
					d.Put(context.Background(), p, queue, housekeepertest.LockNack, id, float64(due))
					want[queue][id] = expected{housekeepertest.Active, 0}
					if i%10 == 0 {
						want[queue][id] = expected{housekeepertest.LockNack, float64(due)}
					}
				}
			}
		}
	})

	var procs []*exec.Cmd
	var metricsAddrs []string
	for i := range 3 {
		metricsAddr := freeAddr(t)
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(),
			"HOUSEKEEPER_COORDINATOR_ADDR="+coord.Addr(),
			"HOUSEKEEPER_COORDINATOR_TOKEN="+coordCfg.AuthToken,
			"HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN=true",
			"HOUSEKEEPER_REDIS_URL="+redistest.URL(t),
			"HOUSEKEEPER_PREFIX="+d.Prefix,
			fmt.Sprintf("HOUSEKEEPER_INSTANCE_ID=hk-%d", i),
			"HOUSEKEEPER_METRICS_LISTEN="+metricsAddr,
			"HOUSEKEEPER_UNLOCK_INTERVAL=100ms",
			"HOUSEKEEPER_TIMEOUT_INTERVAL=100ms",
			"HOUSEKEEPER_LEASE_TTL=1s",
			"HOUSEKEEPER_BATCH_SIZE=7",
			"HOUSEKEEPER_LEASE_NAMESPACE="+d.Prefix,
		)
		cmd.Stderr = &prefixWriter{t: t, prefix: fmt.Sprintf("hk-%d: ", i)}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		procs = append(procs, cmd)
		metricsAddrs = append(metricsAddrs, metricsAddr)
	}

	// Kill the instance that holds the most queue leases, once one holds
	// any: it is then at work, and its queues must be taken over.
	observer, err := client.New(coord.Addr(), client.WithIdentity("e2e-observer"), client.WithInsecureBearerToken(coordCfg.AuthToken))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = observer.Close() }()
	victim := -1
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		most := 0
		for i, n := range queueLeases(t, observer, d.Prefix) {
			if n > most {
				victim, most = i, n
			}
		}
		if victim >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no instance holds a queue lease after 20s")
		}
	}
	if err := procs[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed hk-%d", victim)
	survivors := slices.Delete(slices.Clone(procs), victim, victim+1)
	survivorMetrics := slices.Delete(slices.Clone(metricsAddrs), victim, victim+1)

	// The survivors take the dead one's queues over within its lease TTL.
	deadline := time.Now().Add(20 * time.Second)
	for {
		pending := 0
		for queue, ids := range want {
			snap := d.Snapshot(t, rdb, queue)
			for id, w := range ids {
				if got, ok := snap[w.set][id]; !ok || got != w.score {
					pending++
				}
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages are not where they belong", pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Exactly once: every id is in exactly one set, with nothing left behind
	// in a score set.
	for queue, ids := range want {
		snap := d.Snapshot(t, rdb, queue)
		total := 0
		for _, s := range []housekeepertest.Set{housekeepertest.Active, housekeepertest.Tmp, housekeepertest.LockAck, housekeepertest.LockNack} {
			total += len(snap[s])
		}
		if total != len(ids) {
			t.Fatalf("queue %s holds %d messages across its sets, want %d", queue, total, len(ids))
		}
		for id := range snap[housekeepertest.LockAckScore] {
			if ids[id].set == housekeepertest.Active {
				t.Fatalf("queue %s: %s moved but its saved score stayed", queue, id)
			}
		}
	}

	// Exactly one survivor leads (within a lease TTL of the kill, should the
	// dead one have led) and reports the queue gauges.
	var leaders int
	for deadline := time.Now().Add(10 * time.Second); ; {
		leaders = 0
		for _, addr := range survivorMetrics {
			body := scrape(t, addr)
			if strings.Contains(body, "\nhousekeeper_leader{prefix=\""+d.Prefix+"\"} 1\n") {
				leaders++
				if !strings.Contains(body, "housekeeper_queue_messages{") {
					t.Fatalf("the leader reports no queue gauges:\n%s", body)
				}
			}
		}
		if leaders == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if leaders != 1 {
		t.Fatalf("%d leaders among the survivors, want 1", leaders)
	}

	// SIGTERM: the survivors finish, release their leases and exit 0.
	for _, p := range survivors {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range survivors {
		if err := p.Wait(); err != nil {
			t.Fatalf("housekeeper exited with %v after SIGTERM", err)
		}
	}
}

// queueLeases counts the queue leases (not the election) that each
// instance hk-N holds, by N.
func queueLeases(t *testing.T, c *client.Client, namespace string) map[int]int {
	t.Helper()
	held := make(map[int]int)
	for page := ""; ; {
		resp, err := c.API().List(context.Background(), &coordinatorv1.ListRequest{Prefix: namespace + "/housekeeper/", PageSize: 1000, PageToken: page})
		if err != nil {
			t.Fatalf("list leases: %v", err)
		}
		for _, l := range resp.GetLeases() {
			if strings.HasSuffix(l.GetName(), "/housekeeper/leader") {
				continue
			}
			identity, _, _ := strings.Cut(l.GetHolder(), "#")
			if n, err := strconv.Atoi(strings.TrimPrefix(identity, "hk-")); err == nil {
				held[n]++
			}
		}
		if page = resp.GetNextPageToken(); page == "" {
			return held
		}
	}
}

func freeAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	return lis.Addr().String()
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	var lastErr error
	for range 50 {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			var b strings.Builder
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				b.WriteString(sc.Text() + "\n")
			}
			_ = resp.Body.Close()
			return b.String()
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("scrape %s: %v", addr, lastErr)
	return ""
}

// prefixWriter sends a process's log lines to the test log.
type prefixWriter struct {
	t      *testing.T
	prefix string
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
