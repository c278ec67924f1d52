package redisstore

import (
	"context"
	"errors"

	"github.com/coordinator-dev/coordinator/server/store"
)

// TEMPORARY scaffolding so the tree builds while the group scripts are
// written; replaced by the real implementation.
var errGroupsPending = errors.New("redisstore: groups not implemented yet")

// AcquireGroup implements store.Leases.
func (s *Store) AcquireGroup(context.Context, store.GroupRequest) (store.GroupResult, error) {
	return store.GroupResult{}, errGroupsPending
}

// ReleaseGroup implements store.Leases.
func (s *Store) ReleaseGroup(context.Context, string, []store.GroupLease) ([]bool, error) {
	return nil, errGroupsPending
}
