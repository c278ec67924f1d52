package memstore_test

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/server/store/memstore"
	"github.com/coordinator-dev/coordinator/server/store/storemodel"
)

// modelFactory makes memory stores on a fake clock for the model's check,
// keeping idle names and dead sessions longer than any run (the model does
// not forget them).
func modelFactory(lockDelay time.Duration) (storemodel.Subject, error) {
	clock := clockwork.NewFakeClockAt(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.WithClock(clock), memstore.WithLockDelay(lockDelay), memstore.WithIdleNameTTL(24*time.Hour))
	return storemodel.Subject{Store: s, Now: clock.Now, Advance: clock.Advance, Close: func() { _ = s.Close() }}, nil
}

// EnvModelOps, when set, makes TestModel run random sequences instead of
// its fixed seeds, until that many operations ran (make fuzz sets it).
const EnvModelOps = "COORDINATOR_MODEL_OPS"

// TestModel checks the memory store against the reference model: fixed
// seeds in make test (60,000 operations), and with COORDINATOR_MODEL_OPS as
// many random operations as it says, on every core.
func TestModel(t *testing.T) {
	opts := storemodel.Options{Ops: 300}
	for seed := range uint64(200) {
		opts.Seeds = append(opts.Seeds, seed)
	}
	if v := os.Getenv(EnvModelOps); v != "" {
		total, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvModelOps, v, err)
		}
		opts.Seeds, opts.Total, opts.Parallel = nil, total, runtime.GOMAXPROCS(0)
	}
	stats := storemodel.Check(t, modelFactory, storemodel.FakeClock, opts)
	t.Log(stats)
}

// FuzzModel checks the memory store against the reference model on the
// sequences that fuzz inputs draw.
func FuzzModel(f *testing.F) {
	for seed := range uint64(8) {
		b := make([]byte, 800)
		src := storemodel.Seeded(seed)
		for i := range b {
			b[i] = byte(src.IntN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		storemodel.CheckInput(t, modelFactory, storemodel.FakeClock, input, 200)
	})
}
