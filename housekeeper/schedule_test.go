package housekeeper

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// heldScans holds every SCAN until release is closed, counting those it
// holds: a discovery that takes as long as the test wants.
type heldScans struct {
	release chan struct{}
	held    atomic.Int32
}

func (h *heldScans) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *heldScans) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *heldScans) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			h.held.Add(1)
			<-h.release
			h.held.Add(-1)
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
// while a slow discovery is in flight: it never spins. Its schedule runs on
// a fake clock, which the test moves on one discovery interval at a time,
// each time once the loop waits on its timer; a loop that spun would wake
// thousands of times between two steps.
func TestAnIdleRunnerDoesNotSpin(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := fmt.Sprintf("hk-spin-%d", time.Now().UnixNano())
	const sets = 50
	later := float64(time.Now().Add(time.Hour).UnixMilli())
	for q := range sets {
		rdb.ZAdd(t.Context(), fmt.Sprintf("%s:queue:{q%d}:tmp", prefix, q), redis.Z{Score: later, Member: "m"})
	}
	scans := &heldScans{release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(scans.release) })
	rdb.AddHook(scans)
	clock := clockwork.NewFakeClock()
	cfg := Config{Prefix: prefix, DiscoveryInterval: 50 * time.Millisecond, ProbeInterval: 200 * time.Millisecond, clock: clock}
	r, err := New(rdb, soloMember{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	defer release() // first, should the test fail with the SCAN held
	// advance moves the schedule's clock steps discovery intervals on and
	// returns how many times the loop woke meanwhile.
	advance := func(steps int) int64 {
		t.Helper()
		before := r.wakeups.Load()
		for range steps {
			bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
			err := clock.BlockUntilContext(bctx, 1)
			bcancel()
			if err != nil {
				t.Fatalf("the schedule never waited on its timer (%v); it woke %d times meanwhile", err, r.wakeups.Load()-before)
			}
			clock.Advance(cfg.DiscoveryInterval)
		}
		return r.wakeups.Load() - before
	}

	go func() { _ = r.Run(ctx); close(done) }()
	testwait.Until(t, 10*time.Second, "the first discovery's SCAN", func() bool { return scans.held.Load() > 0 })
	// While the discovery is held, no set is known: each step wakes the
	// loop for its timer, and maybe once more for a tick it saw late.
	const steps = 20
	if n := advance(steps); n > 2*steps {
		t.Errorf("the schedule woke %d times in %d discovery intervals with a discovery in flight, want at most %d", n, steps, 2*steps)
	}
	release()
	testwait.Until(t, 10*time.Second, "every set read", func() bool {
		var read dto.Metric
		return r.m.probes.Write(&read) == nil && read.GetCounter().GetValue() >= sets
	})

	// Idle, each step may wake the loop for its timer (twice, if late), a
	// discovery's result, and a round's result every fourth step.
	if n, most := advance(steps), int64(3*steps+steps/4+2); n > most {
		t.Errorf("the idle schedule woke %d times in %d discovery intervals, want at most %d", n, steps, most)
	}
}
