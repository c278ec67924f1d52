package redisstore

import (
	"testing"

	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opts storetest.Options) storetest.Subject {
		return storetest.Subject{Store: newStore(t, nil, Options{LockDelay: opts.LockDelay})}
	})
}
