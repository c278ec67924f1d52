package memstore_test

import (
	"testing"

	"github.com/coordinator-dev/coordinator/server/store"
	memstore "github.com/coordinator-dev/coordinator/server/store/memory"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opts storetest.Options) store.Store {
		return memstore.New(memstore.WithLockDelay(opts.LockDelay))
	})
}
