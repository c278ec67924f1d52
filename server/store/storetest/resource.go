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
