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
	storetest.RunGroups(t, factory)
}

// TestGroupConformanceOnACluster runs the groups' conformance suite on a
// Redis Cluster, where a group's names mostly lie in several slots, taken
// one slot after the other.
func TestGroupConformanceOnACluster(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	storetest.RunGroups(t, func(t *testing.T, opts storetest.Options) storetest.Subject {
		s := newStore(t, client, Options{LockDelay: opts.LockDelay, IdleNameTTL: opts.IdleNameTTL})
		return storetest.Subject{
			Store:       s,
			Remembers:   func(name string) bool { return remembers(t, s, name) },
			SplitsGroup: func(names []string) bool { return len(s.slotParts(names)) > 1 },
		}
	})
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
