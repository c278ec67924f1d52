package housekeeper

import (
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
)

// NewWithClock is New with the clock that paces the cycles and dates the
// leases' use, so that a test can step cycles with a fake one.
func NewWithClock(rdb redis.UniversalClient, locker Locker, cfg Config, clock clockwork.Clock) (*Runner, error) {
	return newRunner(rdb, locker, cfg, clock)
}
