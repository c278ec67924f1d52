package coordinatord

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/coordinator-dev/coordinator/server/store/redisstore"
)

// ErrStoreNotNew is what InitStore refuses a Redis with: it has data-loss
// markers, or other keys of the prefix (see redisstore.Init).
var ErrStoreNotNew = redisstore.ErrNotNew

// InitStore prepares the brand-new Redis that cfg names for the
// coordinators of a deployment, once, before the first one starts
// (`coordinator init-store`): it writes the data-loss markers that the
// first start would otherwise read as data lost, and refuses, with an error
// wrapping ErrStoreNotNew, a Redis that has them or that was in use. Of cfg
// it uses the store, the Redis URL, the key prefix and the store timeout.
func InitStore(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.Store != StoreRedis {
		return fmt.Errorf("init-store prepares a Redis store (-store=%s); the %s store needs nothing", StoreRedis, cfg.Store)
	}
	_, err := redisstore.InitFromURL(ctx, cfg.RedisURL, redisstore.Options{
		KeyPrefix:   cfg.RedisKeyPrefix,
		CallTimeout: cfg.StoreTimeout,
		Logger:      log,
	})
	return err
}
