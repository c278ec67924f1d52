package housekeeper_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/housekeeper"
	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// instance is one housekeeper on a real coordinator: its own client,
// membership and Runner.
type instance struct {
	id     string
	c      *client.Client
	m      *housekeeper.CoordinatorMembership
	reg    *prometheus.Registry
	cancel context.CancelFunc
	wg     sync.WaitGroup
	killed atomic.Bool
}

func startInstance(t *testing.T, addr string, rdb redis.UniversalClient, d housekeepertest.Deckard, id string, ttl time.Duration) *instance {
	t.Helper()
	// No release on Close: stop() with kill leaves the leases to expire, as
	// kill -9 does.
	c, err := client.New(addr, client.WithIdentity(id), client.WithCloseTimeout(0), client.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{id: id, c: c, reg: prometheus.NewRegistry()}
	in.m, err = housekeeper.NewCoordinatorMembership(c, housekeeper.MembershipConfig{
		ID: id, Namespace: d.Prefix, TTL: ttl, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fast
	cfg.Prefix, cfg.Registerer, cfg.Logger = d.Prefix, in.reg, testLogger(t)
	r, err := housekeeper.New(rdb, in.m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	in.wg.Go(func() {
		if err := in.m.Run(ctx); err != nil && (!in.killed.Load() || !errors.Is(err, client.ErrClosed)) {
			t.Errorf("%s: membership: %v", id, err)
		}
	})
	in.wg.Go(func() { _ = r.Run(ctx) })
	t.Cleanup(func() { in.stop() })
	return in
}

// kill ends the instance without a word to the coordinator: its
// membership expires.
func (in *instance) kill() {
	in.killed.Store(true)
	_ = in.c.Close()
	in.stop()
}

// stop shuts the instance down cleanly: it leaves the membership.
func (in *instance) stop() {
	in.cancel()
	in.wg.Wait()
	_ = in.c.Close()
}

func (in *instance) moved(t *testing.T) float64 {
	return metric(t, in.reg, "housekeeper_messages_unlocked_total") + metric(t, in.reg, "housekeeper_messages_timed_out_total")
}

func TestCoordinatorMembershipSharesTheQueuesAndTakesOverAKilledInstance(t *testing.T) {
	const ttl = 500 * time.Millisecond
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	var ins []*instance
	for i := range 3 {
		ins = append(ins, startInstance(t, coord.Addr(), rdb, d, fmt.Sprint("hk-", i), ttl))
	}
	testwait.Until(t, 20*time.Second, "a view of all three", func() bool {
		for _, in := range ins {
			if v, _ := in.m.View(); len(v.Members) != 3 {
				return false
			}
		}
		return true
	})
	view, _ := ins[0].m.View()
	for _, in := range ins[1:] {
		if v, _ := in.m.View(); v.Token != view.Token {
			t.Fatalf("views differ: %s has token %d, %s %d", ins[0].id, view.Token, in.id, v.Token)
		}
	}
	seed := func(queues int) {
		now := housekeepertest.NowMs(t, rdb)
		d.Seed(t, rdb, func(p redis.Pipeliner) {
			for q := range queues {
				d.Put(context.Background(), p, fmt.Sprint("q", q), housekeepertest.Tmp, fmt.Sprint("m", now), float64(now-1))
			}
		})
	}
	seed(60)
	testwait.Until(t, 20*time.Second, "every message moved", func() bool {
		return ins[0].moved(t)+ins[1].moved(t)+ins[2].moved(t) == 60
	})
	for _, in := range ins {
		if in.moved(t) == 0 {
			t.Errorf("%s moved nothing of 60 queues", in.id)
		}
	}

	ins[0].kill()
	testwait.Until(t, 20*time.Second, "a view without the killed instance", func() bool {
		for _, in := range ins[1:] {
			if v, _ := in.m.View(); len(v.Members) != 2 || v.Has(ins[0].id) {
				return false
			}
		}
		return true
	})
	before := ins[1].moved(t) + ins[2].moved(t)
	seed(60)
	testwait.Until(t, 20*time.Second, "the survivors move every queue's message", func() bool {
		return ins[1].moved(t)+ins[2].moved(t) == before+60
	})
	if v, _ := ins[1].m.View(); v.Token <= view.Token {
		t.Errorf("the view after the kill has token %d, not above %d", v.Token, view.Token)
	}
}

// TestCutOffInstanceStopsBeforeItsMembershipExpires takes the coordinator
// away from a working instance: it must stop working before its
// membership could have expired on the server (when a successor elsewhere
// could take its queues), and resume once the coordinator is back.
func TestCutOffInstanceStopsBeforeItsMembershipExpires(t *testing.T) {
	const ttl = time.Second
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	in := startInstance(t, coord.Addr(), rdb, d, "alone", ttl)
	seed := func() {
		now := housekeepertest.NowMs(t, rdb)
		d.Seed(t, rdb, func(p redis.Pipeliner) {
			for q := range 5 {
				d.Put(context.Background(), p, fmt.Sprint("q", q), housekeepertest.Tmp, fmt.Sprint("m", now), float64(now-1))
			}
		})
	}
	inFlight := func() int {
		total := 0
		for q := range 5 {
			total += len(d.Snapshot(t, rdb, fmt.Sprint("q", q))[housekeepertest.Tmp])
		}
		return total
	}
	seed()
	testwait.Until(t, 20*time.Second, "the first messages to time out", func() bool { return inFlight() == 0 })

	coord.Kill()
	// Within ttl of the cut-off the membership granted or renewed before it
	// may expire on the server: the instance must have stopped by then.
	testwait.Until(t, ttl, "the instance to see its membership end", func() bool { return !in.m.Live() })
	seed()
	reads := metric(t, in.reg, "housekeeper_set_reads_total")
	time.Sleep(20 * fast.ProbeInterval) // many rounds of reads, were it still working
	if n := inFlight(); n != 5 {
		t.Fatalf("%d of 5 messages moved after the instance's membership ran out", 5-n)
	}
	if metric(t, in.reg, "housekeeper_set_reads_total") != reads {
		t.Error("the instance went on reading sets without a membership")
	}
	coord.Restart()
	testwait.Until(t, 30*time.Second, "work to resume with the coordinator back", func() bool { return inFlight() == 0 })
}

func TestNewCoordinatorMembershipRejectsBadConfig(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	c, err := client.New(coord.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	for _, tt := range []struct {
		name string
		c    *client.Client
		cfg  housekeeper.MembershipConfig
	}{
		{"no client", nil, housekeeper.MembershipConfig{}},
		{"id with a slash", c, housekeeper.MembershipConfig{ID: "a/b"}},
		{"negative TTL", c, housekeeper.MembershipConfig{TTL: -time.Second}},
		{"negative check interval", c, housekeeper.MembershipConfig{CheckInterval: -time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := housekeeper.NewCoordinatorMembership(tt.c, tt.cfg); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// A credential that may not use the election's name makes Run return an
// error, promptly, with the membership given back: an instance that can
// never learn a view must not hang.
func TestMembershipRefusedItsElectionReturnsAnError(t *testing.T) {
	cfg := coordtest.Config(t, "memory")
	access := filepath.Join(t.TempDir(), "access")
	if err := os.WriteFile(access, []byte("s3cret  hk/housekeeper/members/ hk/housekeeper/view\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.AccessFile = access
	coord := coordtest.Start(t, cfg)
	c, err := client.New(coord.Addr(), client.WithInsecureBearerToken("s3cret"), client.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	m, err := housekeeper.NewCoordinatorMembership(c, housekeeper.MembershipConfig{ID: "hk-1", Namespace: "hk", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	select {
	case err := <-done:
		if client.ErrorReason(err) != "PERMISSION_DENIED" && !strings.Contains(err.Error(), "PermissionDenied") {
			t.Fatalf("Run returned %v, want the election's PermissionDenied", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of the refusal")
	}
	if d, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: "hk/housekeeper/members/hk-1"}); err != nil || d.GetHeld() {
		t.Errorf("the membership is still held after Run returned (%v, %v)", d, err)
	}
}
