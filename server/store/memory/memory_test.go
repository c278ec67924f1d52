package memstore_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	memstore "github.com/coordinator-dev/coordinator/server/store/memory"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opts storetest.Options) storetest.Subject {
		if opts.RealTime {
			return storetest.Subject{Store: memstore.New(memstore.WithLockDelay(opts.LockDelay))}
		}
		clock := clockwork.NewFakeClockAt(time.Now())
		s := memstore.New(memstore.WithLockDelay(opts.LockDelay), memstore.WithClock(clock))
		return storetest.Subject{Store: s, Sleep: clock.Advance}
	})
}
