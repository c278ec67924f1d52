package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

func TestTheProcsFollowTheCPUTheProcessUses(t *testing.T) {
	calm := func(busy float64) []float64 {
		r := make([]float64, procsCalm)
		for i := range r {
			r[i] = busy
		}
		return r
	}
	join := func(parts ...[]float64) []float64 {
		var all []float64
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	for _, c := range []struct {
		name     string
		most     int
		procs    int
		readings []float64
		want     int
	}{
		{"idle stays at one", 8, 1, calm(0.01), 1},
		{"a P well used but not saturated stays one", 8, 1, calm(0.7), 1},
		{"a saturated P doubles", 8, 1, []float64{0.9}, 2},
		{"a process using more than its Ps doubles them", 8, 2, []float64{1.8}, 4},
		{"doubling stops at the runtime's default", 6, 4, []float64{3.9}, 6},
		{"at the default, saturation changes nothing", 2, 2, []float64{2.0}, 2},
		{"one reading below does not lower", 8, 2, []float64{0.2}, 2},
		{"two seconds below lower by one", 8, 4, calm(0.5), 3},
		{"a busy reading restarts the count", 8, 2, join(calm(0.2)[1:], []float64{0.8}, calm(0.2)[1:]), 2},
		{"never below one", 8, 1, join(calm(0), calm(0)), 1},
		{"use between the thresholds holds", 8, 2, join(calm(0.8), calm(0.8)), 2},
		// Fewer Ps, less CPU: two Ps carrying 0.7 cores go to one, which
		// carries that without being raised again.
		{"two Ps of spinning threads come down to one", 8, 2, join(calm(0.7), calm(0.6)), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &procsGovernor{most: c.most, procs: c.procs}
			for _, busy := range c.readings {
				g.procs = g.next(busy)
			}
			if g.procs != c.want {
				t.Errorf("after %v: %d Ps, want %d", c.readings, g.procs, c.want)
			}
		})
	}
}

func TestGovernProcsStartsAtOneAndGivesTheDefaultBack(t *testing.T) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		t.Skip("GOMAXPROCS is set: GovernProcs leaves it (the next test checks that)")
	}
	most := runtime.GOMAXPROCS(0)
	if most <= 1 {
		t.Skip("one CPU: nothing to govern")
	}
	ctx, cancel := context.WithCancel(t.Context())
	GovernProcs(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS %d right after GovernProcs, want 1", got)
	}
	cancel()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("GOMAXPROCS back to the default %d after the governor's end", most), func() bool {
		return runtime.GOMAXPROCS(0) == most
	})
}

func TestGovernProcsLeavesASetGOMAXPROCSAlone(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Setenv("GOMAXPROCS", "3")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	GovernProcs(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("GOMAXPROCS %d after GovernProcs with GOMAXPROCS set, want %d as before", got, before)
	}
}
