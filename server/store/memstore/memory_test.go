package memstore_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/server/store/memstore"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name       string
		persistent bool
	}{
		{"InMemory", false},
		{"WithStateDir", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			factory := func(t *testing.T, opts storetest.Options) storetest.Subject {
				storeOpts := []memstore.Option{memstore.WithLockDelay(opts.LockDelay), memstore.WithIdleNameTTL(opts.IdleNameTTL)}
				var sleep func(time.Duration)
				if !opts.RealTime {
					clock := clockwork.NewFakeClockAt(time.Now())
					storeOpts = append(storeOpts, memstore.WithClock(clock))
					sleep = clock.Advance
				}
				dir := ""
				if tc.persistent {
					dir = t.TempDir()
				}
				s, err := memstore.Open(dir, storeOpts...)
				if err != nil {
					t.Fatal(err)
				}
				return storetest.Subject{
					Store:     s,
					Sleep:     sleep,
					Remembers: func(name string) bool { return memstore.Remembers(s, name) },
				}
			}
			storetest.Run(t, factory)
			storetest.RunSessions(t, factory)
			storetest.RunGroups(t, factory)
		})
	}
}
