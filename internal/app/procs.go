package app

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"time"
)

// A server that waits on the network most of the time, as the coordinator
// does (each call is a round trip to its client and one to Redis), pays
// for every P it does not need: when a goroutine becomes runnable the
// runtime wakes an idle P's thread to look for work, and that thread
// mostly finds none and parks again. Each such wake-up is a context switch
// and tens of microseconds of CPU on a virtual machine, several per call.
// Measured on 2 cores (bench/README.md, "Where a cycle's time goes"), the
// coordinator on one P spent a fifth less CPU per lease cycle at 64
// concurrent callers, at the same rate, and a cycle at one caller took a
// fifth less time, than on two. So GovernProcs gives the process as many
// Ps as the CPU it uses needs, and no more.
const (
	// procsInterval is how often the process's CPU use is read.
	procsInterval = 100 * time.Millisecond
	// procsRaiseAt is the CPU use per P, in cores, at which the Ps double:
	// near saturation, where callers start to queue for a P. (A process
	// can use a little more than its Ps: system calls run off them.)
	procsRaiseAt = 0.85
	// procsLowerAt is the CPU use per P of one P fewer under which one P
	// goes, once it stayed there procsCalm readings in a row. Below
	// procsRaiseAt, so that fewer Ps are not raised again at once; and
	// fewer Ps cost less CPU than more do, which widens the gap.
	procsLowerAt = 0.75
	procsCalm    = 20 // readings: 2 s
)

// GovernProcs sizes GOMAXPROCS to the CPU the process uses, between 1 and
// the runtime's default (the CPUs the process may use, its cgroup's quota
// included), until ctx ends, when it gives the runtime its default back.
// The Ps double within a reading of the process's use nearing them, and
// go one at a time after it stayed well below them for two seconds. It
// changes nothing when GOMAXPROCS is set: the operator's setting wins; nor
// where the process's CPU time cannot be read. It returns at once; ctx's
// end is its stop.
func GovernProcs(ctx context.Context, log *slog.Logger) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return
	}
	most := runtime.GOMAXPROCS(0)
	start, ok := processCPU()
	if most <= 1 || !ok {
		return
	}
	g := &procsGovernor{most: most, procs: 1}
	runtime.GOMAXPROCS(1)
	go g.run(ctx, log, start)
}

// procsGovernor decides the Ps from readings of the process's CPU use.
type procsGovernor struct {
	most  int // the runtime's default: never more
	procs int
	calm  int // readings in a row that one P fewer would have carried
}

func (g *procsGovernor) run(ctx context.Context, log *slog.Logger, cpu time.Duration) {
	defer runtime.SetDefaultGOMAXPROCS()
	tick := time.NewTicker(procsInterval)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			used, ok := processCPU()
			if !ok {
				return
			}
			busy := float64(used-cpu) / float64(now.Sub(last))
			cpu, last = used, now
			if procs := g.next(busy); procs != g.procs {
				log.Debug("GOMAXPROCS changes with the CPU the process uses", "from", g.procs, "to", procs, "cores_used", busy)
				g.procs = procs
				runtime.GOMAXPROCS(procs)
			}
		}
	}
}

// next is the Ps for a reading of busy cores used since the last one.
func (g *procsGovernor) next(busy float64) int {
	switch {
	case g.procs < g.most && busy >= procsRaiseAt*float64(g.procs):
		g.calm = 0
		return min(g.most, 2*g.procs)
	case g.procs > 1 && busy <= procsLowerAt*float64(g.procs-1):
		if g.calm++; g.calm >= procsCalm {
			g.calm = 0
			return g.procs - 1
		}
	default:
		g.calm = 0
	}
	return g.procs
}
