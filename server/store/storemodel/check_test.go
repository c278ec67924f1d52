package storemodel

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// memFactory makes memory stores on a fake clock, with the lock delay the
// sequence asks for or, with ignore, none at all.
func memFactory(ignoreLockDelay bool) Factory {
	return func(lockDelay time.Duration) (Subject, error) {
		if ignoreLockDelay {
			lockDelay = 0
		}
		clock := clockwork.NewFakeClockAt(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		s := memstore.New(memstore.WithClock(clock), memstore.WithLockDelay(lockDelay), memstore.WithIdleNameTTL(24*time.Hour))
		return Subject{Store: s, Now: clock.Now, Advance: clock.Advance, Close: func() { _ = s.Close() }}, nil
	}
}

// TestCheckFindsAStoreWithoutItsLockDelay: a store that was given no lock
// delay, checked against a model that has one, disagrees within a few
// sequences, and the disagreement shrinks to the few operations that show
// it: a grant, time passing past its expiry, and another grant or a
// Describe that counts the expired grant's weight.
func TestCheckFindsAStoreWithoutItsLockDelay(t *testing.T) {
	cfg := FakeClock
	cfg.LockDelays = []time.Duration{2500 * time.Millisecond}
	for seed := range uint64(20) {
		seq := cfg.Generate(Seeded(seed), 300)
		mm, _, _, err := run(context.Background(), cfg, memFactory(true), seq, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if mm == nil {
			continue
		}
		small, _ := shrink(cfg, memFactory(true), seq, mm, Options{})
		if len(small.Ops) > 6 {
			t.Errorf("seed %d: shrunk to %d operations, want at most 6: %v", seed, len(small.Ops), small.Ops)
		}
		if again, _, _, _ := run(context.Background(), cfg, memFactory(true), small, 0, false); again == nil || again.class() != mm.class() {
			t.Errorf("seed %d: the shrunk sequence %v does not fail as %q: %v", seed, small.Ops, mm.Why, again)
		}
		if ok, _, _, _ := run(context.Background(), cfg, memFactory(false), small, 0, false); ok != nil {
			t.Errorf("seed %d: a store with its lock delay fails the shrunk sequence too: %v", seed, ok)
		}
		return
	}
	t.Fatal("20 sequences found no difference between a store without its lock delay and the model")
}
