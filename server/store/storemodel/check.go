package storemodel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Options say how many sequences Check runs, and how.
type Options struct {
	// Seeds are the seeds of the sequences to run, Ops operations each.
	Seeds []uint64
	Ops   int
	// Total, when above 0, goes on after Seeds with sequences of fresh
	// random seeds until that many operations ran, Parallel sequences at
	// a time (0: 1).
	Total    int
	Parallel int
	// Window is the unit of a Config made by RealTime, for a store on real
	// time; 0 otherwise.
	Window time.Duration
	// ShrinkRuns bounds the replays that shrink a failing sequence; 0
	// means 2000.
	ShrinkRuns int
}

// Stats count what a Check ran.
type Stats struct {
	Sequences, Ops int
	Elapsed        time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("%d sequences, %d operations in %s (%.0f operations/s)", s.Sequences, s.Ops,
		s.Elapsed.Round(time.Millisecond), float64(s.Ops)/max(s.Elapsed.Seconds(), 1e-9))
}

// failure is a failing sequence, by seed.
type failure struct {
	seed uint64
	seq  Sequence
	mm   *Mismatch
}

// Check runs the sequences opts asks for against fresh stores of f and the
// model, step by step, and fails t at the first mismatch with the sequence
// shrunk to a minimal one (every operation of it needed to fail) and both
// sides' answers to each of its steps.
func Check(t testing.TB, f Factory, cfg Config, opts Options) Stats {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	var stats Stats
	var mu sync.Mutex
	var first *failure
	var runErr error
	one := func(seed uint64) bool {
		seq := cfg.Generate(Seeded(seed), opts.Ops)
		mm, _, n, err := run(ctx, cfg, f, seq, opts.Window, false)
		mu.Lock()
		defer mu.Unlock()
		stats.Sequences++
		stats.Ops += n
		switch {
		case mm != nil && first == nil:
			first = &failure{seed: seed, seq: seq, mm: mm}
			cancel()
		case err != nil && !errors.Is(err, context.Canceled) && runErr == nil:
			runErr = fmt.Errorf("seed %d: %w", seed, err)
			cancel()
		}
		return mm == nil && err == nil
	}
	for _, seed := range opts.Seeds {
		if !one(seed) {
			break
		}
	}
	if opts.Total > 0 && first == nil && runErr == nil {
		base := rand.Uint64() //nolint:gosec // a seed, logged to replay the run: no secret here
		t.Logf("storemodel: random sequences from seed %d on", base)
		var next atomic.Uint64
		var wg sync.WaitGroup
		for range max(opts.Parallel, 1) {
			wg.Go(func() {
				for ctx.Err() == nil {
					mu.Lock()
					done := stats.Ops >= opts.Total
					mu.Unlock()
					if done || !one(base+next.Add(1)-1) {
						return
					}
				}
			})
		}
		wg.Wait()
	}
	stats.Elapsed = time.Since(start)
	if first != nil {
		t.Fatalf("storemodel: seed %d: %s", first.seed, Shrink(cfg, f, first.seq, first.mm, opts))
	}
	if runErr != nil {
		t.Fatalf("storemodel: %v", runErr)
	}
	return stats
}

// CheckInput runs the sequence a fuzz input draws (at most maxOps
// operations) and fails t as Check does.
func CheckInput(t testing.TB, f Factory, cfg Config, input []byte, maxOps int) {
	t.Helper()
	seq := cfg.Generate(NewBytes(input), -maxOps)
	mm, _, _, err := run(context.Background(), cfg, f, seq, 0, false)
	if err != nil {
		t.Fatalf("storemodel: %v", err)
	}
	if mm != nil {
		t.Fatalf("storemodel: %s", Shrink(cfg, f, seq, mm, Options{}))
	}
}

// class is what kind of mismatch m is, as shrinking keeps it: what
// differs (an error's kinds, or the field), without the values.
func (m *Mismatch) class() string {
	c := m.Why
	if i := strings.Index(c, " store "); i >= 0 && !strings.HasPrefix(c, "error:") {
		c = c[:i]
	}
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, c)
}

// Shrink shrinks seq, which failed with mm, to a sequence from which no
// operation can be dropped without the failure going away (as far as
// opts.ShrinkRuns replays find), and describes it: each step with both
// sides' answers, and the mismatch.
func Shrink(cfg Config, f Factory, seq Sequence, mm *Mismatch, opts Options) string {
	small, runs := shrink(cfg, f, seq, mm, opts)
	final, trace, _, err := run(context.Background(), cfg, f, small, opts.Window, true)
	var b strings.Builder
	fmt.Fprintf(&b, "the store and the model disagree at operation %d of %d (lock delay %s, observed: %v)",
		mm.Step+1, len(seq.Ops), seq.LockDelay, seq.Observe)
	if final == nil {
		// Not reproduced (a store on real time): show the original.
		fmt.Fprintf(&b, "; shrinking did not reproduce it (%v), so here is the first failure: %v", err, mm)
		return b.String()
	}
	fmt.Fprintf(&b, "; shrunk in %d replays to %d operations:\n", runs, len(small.Ops))
	for i, s := range trace {
		fmt.Fprintf(&b, "  %2d %v\n", i, s.Op)
		if s.Op.Kind != Advance {
			fmt.Fprintf(&b, "       store: %s\n       model: %s\n", s.Store, s.Model)
		}
	}
	fmt.Fprintf(&b, "  mismatch at %d: %s", final.Step, final.Why)
	if strings.Contains(final.Why, "after the step") {
		fmt.Fprintf(&b, "\n       store: %s\n       model: %s", final.Store, final.Model)
	}
	return b.String()
}

// shrink is delta debugging: it drops chunks of seq's operations while the
// same kind of mismatch as mm remains, halving the chunks when none can
// go, until no single operation can. It returns the sequence left and how
// many replays that took.
func shrink(cfg Config, f Factory, seq Sequence, mm *Mismatch, opts Options) (Sequence, int) {
	budget := opts.ShrinkRuns
	if budget <= 0 {
		budget = 2000
	}
	runs := 0
	fails := func(s Sequence) bool {
		runs++
		got, _, _, _ := run(context.Background(), cfg, f, s, opts.Window, false)
		return got != nil && got.class() == mm.class()
	}
	small := Sequence{LockDelay: seq.LockDelay, Observe: seq.Observe, Ops: seq.Ops[:mm.Step+1]}
	for chunks := 2; len(small.Ops) > 1 && runs < budget; {
		size := (len(small.Ops) + chunks - 1) / chunks
		dropped := false
		for from := 0; from < len(small.Ops) && runs < budget; from += size {
			rest := small
			rest.Ops = append(append([]Op{}, small.Ops[:from]...), small.Ops[min(from+size, len(small.Ops)):]...)
			if len(rest.Ops) > 0 && fails(rest) {
				small, dropped = rest, true
				chunks = max(chunks-1, 2)
				break
			}
		}
		if !dropped {
			if size == 1 {
				break
			}
			chunks = min(2*chunks, len(small.Ops))
		}
	}
	return small, runs
}
