package storetest

import (
	"fmt"
	"sync"
	"time"
)

// Resource stands for what a lease protects. It checks what a fenced resource
// should: a token never goes backwards, and no two holders are inside while
// both believe their leases valid.
type Resource struct {
	mu         sync.Mutex
	highest    uint64
	owner      string // the holder the highest token was issued to
	holder     string
	validUntil time.Time
}

// Enter records that holder acts with token, believing its lease valid until
// validUntil by the caller's clock.
func (r *Resource) Enter(holder string, token uint64, validUntil time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	// An equal token is the same lease entering again; a lower one is stale.
	if token < r.highest || (token == r.highest && holder != r.owner) {
		return fmt.Errorf("%s entered with token %d, but %s had %d already", holder, token, r.owner, r.highest)
	}
	if r.holder != "" && r.holder != holder && time.Now().Before(r.validUntil) {
		return fmt.Errorf("%s entered with token %d while %s is inside with a valid lease", holder, token, r.holder)
	}
	r.highest, r.owner, r.holder, r.validUntil = token, holder, holder, validUntil
	return nil
}

// Leave records that holder stopped acting.
func (r *Resource) Leave(holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holder == holder {
		r.holder = ""
	}
}

// WeightedResource stands for what a semaphore protects: holders share it,
// each with the weight it was granted. It checks what such a resource can:
// the weights of the holders inside with valid leases never sum past the
// capacity, and no holder enters with a token below that of the last
// exclusive holder (weight = capacity) to enter, since an exclusive grant's
// token is above every token granted before it.
type WeightedResource struct {
	Capacity int64

	mu sync.Mutex
	// exclusive is the highest token an exclusive holder entered with, and
	// exclusiveOwner that holder.
	exclusive      uint64
	exclusiveOwner string
	inside         map[string]weightedEntry
	mostHolders    int
}

// MostHolders is the most holders inside with valid leases at once: above
// 1, it shows that holders did share the resource.
func (r *WeightedResource) MostHolders() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mostHolders
}

type weightedEntry struct {
	token      uint64
	weight     int64
	validUntil time.Time
}

// Enter records that holder acts with token and weight, believing its lease
// valid until validUntil by the caller's clock.
func (r *WeightedResource) Enter(holder string, token uint64, weight int64, validUntil time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.exclusive || (token == r.exclusive && holder != r.exclusiveOwner) {
		return fmt.Errorf("%s entered with token %d, but exclusive holder %s had %d already", holder, token, r.exclusiveOwner, r.exclusive)
	}
	if r.inside == nil {
		r.inside = map[string]weightedEntry{}
	}
	now := time.Now()
	sum, holders := weight, 1
	for h, e := range r.inside {
		if h != holder && now.Before(e.validUntil) {
			sum += e.weight
			holders++
		}
	}
	if sum > r.Capacity {
		return fmt.Errorf("%s entered with token %d and weight %d: %d of capacity %d held by valid leases", holder, token, weight, sum, r.Capacity)
	}
	r.inside[holder] = weightedEntry{token: token, weight: weight, validUntil: validUntil}
	r.mostHolders = max(r.mostHolders, holders)
	if weight == r.Capacity {
		r.exclusive, r.exclusiveOwner = token, holder
	}
	return nil
}

// Leave records that holder stopped acting.
func (r *WeightedResource) Leave(holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inside, holder)
}
