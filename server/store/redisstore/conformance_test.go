package redisstore

import (
	"context"
	"testing"

	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

func TestConformance(t *testing.T) {
	factory := func(t *testing.T, opts storetest.Options) storetest.Subject {
		s := newStore(t, nil, Options{LockDelay: opts.LockDelay, IdleNameTTL: opts.IdleNameTTL})
		return storetest.Subject{Store: s, Remembers: func(name string) bool { return remembers(t, s, name) }}
	}
	storetest.Run(t, factory)
	storetest.RunSessions(t, factory)
}

// remembers reports whether any key of name exists.
func remembers(t testing.TB, s *Store, name string) bool {
	t.Helper()
	k := s.keys(name)
	n, err := s.client.Exists(context.Background(), k.lease, k.queue, k.waiters).Result()
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	return n > 0
}
