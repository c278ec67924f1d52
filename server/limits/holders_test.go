package limits

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestConcurrentGrantsCannotPassTheCapTogether(t *testing.T) {
	h := newHolders(10)
	now := time.Now()
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			if reserved, ok := h.reserve("h", fmt.Sprint("n", i), now); ok && reserved {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 10 {
		t.Fatalf("%d grants admitted at once; want the cap, 10", got)
	}
}

func TestAHoldersLeasesCountUntilTheirTTLOrRelease(t *testing.T) {
	h := newHolders(2)
	now := time.Now()
	h.granted("h", "a", 1, time.Second, now)
	h.granted("h", "b", 2, time.Minute, now)
	if _, ok := h.reserve("h", "c", now); ok {
		t.Fatal("a third lease was admitted")
	}
	if reserved, ok := h.reserve("h", "a", now); !ok || reserved {
		t.Fatalf("asking again for a held name: reserved %v, ok %v; want admitted without a new place", reserved, ok)
	}
	later := now.Add(2 * time.Second) // a has run out
	if reserved, ok := h.reserve("h", "c", later); !ok || !reserved {
		t.Fatal("the place of an expired lease was not freed")
	}
	h.done("h")
	h.released("h", "b", 99) // another token: not this lease
	h.granted("h", "c", 3, time.Minute, later)
	if _, ok := h.reserve("h", "d", later); ok {
		t.Fatal("a release under another token freed a place")
	}
	h.released("h", "b", 2)
	if _, ok := h.reserve("h", "d", later); !ok {
		t.Fatal("a release did not free a place")
	}
}

func TestIdleHoldersAreForgotten(t *testing.T) {
	h := newHolders(5)
	now := time.Now()
	for i := range sweepEvery {
		h.granted(fmt.Sprint("early-", i), "n", 1, time.Second, now)
	}
	// An hour on, the early leases have run out; the next sweep, every
	// sweepEvery grants, forgets their holders.
	for i := range sweepEvery {
		h.granted(fmt.Sprint("late-", i), "n", 1, time.Second, now.Add(time.Hour))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.m) != sweepEvery {
		t.Fatalf("%d holders remembered; want only the %d late ones", len(h.m), sweepEvery)
	}
}
