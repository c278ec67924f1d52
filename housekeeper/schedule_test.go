package housekeeper

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

// slowScan delays every SCAN by d.
type slowScan struct{ d time.Duration }

func (h slowScan) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowScan) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h slowScan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}

type soloMember struct{}

func (soloMember) ID() string { return "solo" }
func (soloMember) View() (View, <-chan struct{}) {
	return NewView(1, []string{"solo"}), make(chan struct{})
}
func (soloMember) Live() bool { return true }

func (soloMember) Deadline() time.Time { return time.Now().Add(time.Minute) }

// An idle Runner sleeps until its next read, discovery or due head, also
// while a slow discovery is in flight: it never spins.
func TestAnIdleRunnerDoesNotSpin(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := fmt.Sprintf("hk-spin-%d", time.Now().UnixNano())
	later := float64(time.Now().Add(time.Hour).UnixMilli())
	for q := range 50 {
		rdb.ZAdd(t.Context(), fmt.Sprintf("%s:queue:{q%d}:tmp", prefix, q), redis.Z{Score: later, Member: "m"})
	}
	rdb.AddHook(slowScan{100 * time.Millisecond})
	r, err := New(rdb, soloMember{}, Config{Prefix: prefix, DiscoveryInterval: 50 * time.Millisecond, ProbeInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	time.Sleep(2 * time.Second)
	cancel()
	<-done
	// A discovery every 150 ms and a round of reads every 200 ms, each
	// waking the loop twice (start and result): about 25 a second.
	if n := r.wakeups.Load(); n > 100 {
		t.Errorf("the schedule woke %d times in 2s, want fewer than 100", n)
	}
}
