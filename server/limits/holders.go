package limits

import (
	"sync"
	"time"
)

// holders counts, per holder, the leases this coordinator saw granted or
// renewed and not yet released, each until its TTL runs out (measured from
// when the answer passed through here, on this process's clock, so that a
// store clock set apart cannot skew the count). Grants in progress are
// reserved, so that concurrent calls cannot pass the cap together.
type holders struct {
	max int
	mu  sync.Mutex
	m   map[string]*holderLeases
	ops int
}

type holderLeases struct {
	leases  map[string]heldLease // by name
	pending int
}

type heldLease struct {
	token uint64
	until time.Time
}

// sweepEvery is how many changes pass between sweeps of every holder, which
// forgets holders whose leases all ran out without a word.
const sweepEvery = 4096

func newHolders(maxLeases int) *holders {
	return &holders{max: maxLeases, m: map[string]*holderLeases{}}
}

func (h *holders) enabled() bool { return h.max > 0 }

// reserve admits a grant of name to holder, or refuses it when the holder
// is at the cap. A name the holder already holds is always admitted: asking
// again is a renewal. reserved says whether done must give a place back.
func (h *holders) reserve(holder, name string, now time.Time) (reserved, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hl := h.leasesOf(holder)
	if _, held := hl.leases[name]; held && now.Before(hl.leases[name].until) {
		return false, true
	}
	if len(hl.leases)+hl.pending >= h.max {
		// Leases that ran out still count until pruned; prune only here,
		// where it matters, so that a grant costs O(1) below the cap.
		hl.prune(now)
		if len(hl.leases)+hl.pending >= h.max {
			h.forgetIfEmpty(holder, hl)
			return false, false
		}
	}
	hl.pending++
	return true, true
}

// done gives back a place reserve took.
func (h *holders) done(holder string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hl := h.m[holder]; hl != nil {
		hl.pending--
		h.forgetIfEmpty(holder, hl)
	}
}

// granted records a lease granted or renewed for ttl from now.
func (h *holders) granted(holder, name string, token uint64, ttl time.Duration, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hl := h.leasesOf(holder)
	hl.leases[name] = heldLease{token: token, until: now.Add(ttl)}
	h.sweepSometimes(now)
}

// leasesOf returns holder's entry, made when missing; h.mu is held.
func (h *holders) leasesOf(holder string) *holderLeases {
	hl := h.m[holder]
	if hl == nil {
		hl = &holderLeases{leases: map[string]heldLease{}}
		h.m[holder] = hl
	}
	return hl
}

// released forgets a lease that was released or found lost.
func (h *holders) released(holder, name string, token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hl := h.m[holder]
	if hl == nil {
		return
	}
	if l, ok := hl.leases[name]; ok && l.token == token {
		delete(hl.leases, name)
	}
	h.forgetIfEmpty(holder, hl)
}

func (h *holders) forgetIfEmpty(holder string, hl *holderLeases) {
	if len(hl.leases) == 0 && hl.pending <= 0 {
		delete(h.m, holder)
	}
}

func (h *holders) sweepSometimes(now time.Time) {
	if h.ops++; h.ops%sweepEvery != 0 {
		return
	}
	for holder, hl := range h.m {
		hl.prune(now)
		h.forgetIfEmpty(holder, hl)
	}
}

func (hl *holderLeases) prune(now time.Time) {
	for name, l := range hl.leases {
		if !now.Before(l.until) {
			delete(hl.leases, name)
		}
	}
}
