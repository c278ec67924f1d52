package redisstore

import (
	"context"
	"time"
)

// sweeps runs what a store does in the background on its own: the reaper
// (reaper.go) and the detacher (detacher.go), one after the other at each
// tick of one goroutine.
type sweeps struct {
	stop context.CancelFunc
	done chan struct{} // closed when the goroutine returns
}

// sweepInterval is how often the sweeps look for work due.
const sweepInterval = time.Second

// startSweeps starts the sweeps' goroutine; Close stops it.
func (s *Store) startSweeps(ctx context.Context) {
	ctx, s.sweeps.stop = context.WithCancel(context.WithoutCancel(ctx))
	s.sweeps.done = make(chan struct{})
	go func() {
		defer close(s.sweeps.done)
		tick := time.NewTicker(sweepInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				s.reapDue(ctx, now)
				s.detachDue(ctx, now)
			}
		}
	}()
}

// stopSweeps stops the sweeps' goroutine and waits for it.
func (s *Store) stopSweeps() {
	if s.sweeps.stop != nil {
		s.sweeps.stop()
		<-s.sweeps.done
	}
}
