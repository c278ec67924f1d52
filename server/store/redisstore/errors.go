package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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

// wrapErr maps the go-redis error of a call made for a caller whose context
// is ctx (the call itself ran under ctx bounded by the call timeout).
//
// When the caller's own context ended (cancelled, or its deadline passed),
// that is the whole story: the error is the context's error, never
// store.ErrUnavailable, so that the caller's deadline is not blamed on Redis.
// A deadline that is not the caller's is the call timeout: Redis did not
// answer in time. Other errors map as mapErr says.
func (s *Store) wrapErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := callerDone(ctx); cerr != nil {
		return fmt.Errorf("redisstore: %s: %w", op, cerr)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// The cause is kept as text only: wrapping it would make the call
		// timeout look like the caller's own deadline.
		return fmt.Errorf("redisstore: %s: %w: no answer within %s (%s)", op, store.ErrUnavailable, s.callTimeout, err.Error())
	}
	return mapErr(op, err)
}

// callerDone is ctx's error, or context.DeadlineExceeded once ctx's deadline
// has passed: go-redis sets the socket deadline from the context, so a read
// may time out a moment before the context's own timer fires.
func callerDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// mapErr maps a go-redis error. Errors that mean Redis could not be reached
// or could not answer in time wrap store.ErrUnavailable as well as the cause;
// other errors (a reply this store does not understand, an unexpected key
// type, a permission error) are returned as they are, wrapped with the
// operation.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if isUnavailable(err) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

func isUnavailable(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
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
