package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/server/store"
)

// unavailablePrefixes are Redis error replies meaning "not now": the server
// is loading, failing over, read-only, out of memory or busy.
var unavailablePrefixes = []string{
	"LOADING", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "TRYAGAIN",
	"NOREPLICAS", "MOVED", "ASK", "BUSY", "OOM", "MISCONF", "UNBLOCKED",
	"max number of clients reached",
}

// wrapErr maps a go-redis error. Errors that mean Redis could not be reached
// or could not answer in time wrap store.ErrUnavailable as well as the cause;
// a cancelled context stays context.Canceled; other errors (a reply this
// store does not understand, an unexpected key type, a permission error) are
// returned as they are, wrapped with the operation.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	if isUnavailable(err) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

func isUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) {
		return true
	}
	if errors.Is(err, redis.Nil) {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		// Not a server reply: network errors, timeouts, pool exhaustion.
		return true
	}
	msg := strings.TrimPrefix(rerr.Error(), "ERR ")
	// Inside a script, an error raised by redis.call may be reported with
	// the script's context in front of the original reply.
	for _, p := range unavailablePrefixes {
		if strings.HasPrefix(msg, p+" ") || msg == p || strings.Contains(msg, "-"+p+" ") {
			return true
		}
	}
	return false
}
