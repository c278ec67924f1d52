package main

// The groups suite's cycles through the Go SDK.

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/coordinator-dev/coordinator/client"
)

var sdkCalls = groupCalls{single: "TryLock + Release", group: "TryLockAll + Release",
	pairs: "LockAll", waiting: "Lock"}

// sdkPath is one Go SDK Client shared by every worker: its operation
// stream, its leases and groups in its default session.
type sdkPath struct{ c *client.Client }

func (p sdkPath) single(names []string) func(ctx context.Context, worker, i int) error {
	return sdkCycle(p.c, names)
}

func (p sdkPath) group(names [][]string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		g, err := p.c.TryLockAll(ctx, names[worker])
		if err != nil {
			return err
		}
		_, err = g.Release(ctx)
		return err
	}
}

// The SDK's waits end with the attempt's context: a wait that runs out is
// ErrNotAcquired.

func (p sdkPath) pairTry(hot []string) tryFunc {
	return func(ctx context.Context, _ int, rng *rand.Rand) (bool, error) {
		a, b := randomPair(rng, len(hot))
		wctx, cancel := context.WithTimeout(ctx, groupsWait)
		defer cancel()
		g, err := p.c.LockAll(wctx, []string{hot[a], hot[b]})
		if errors.Is(err, client.ErrNotAcquired) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, err = g.Release(ctx)
		return true, err
	}
}

func (p sdkPath) singleTry(hot []string) tryFunc {
	return func(ctx context.Context, _ int, rng *rand.Rand) (bool, error) {
		wctx, cancel := context.WithTimeout(ctx, groupsWait)
		defer cancel()
		lease, err := p.c.Lock(wctx, hot[rng.IntN(len(hot))])
		if errors.Is(err, client.ErrNotAcquired) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, err = lease.Release(ctx)
		return true, err
	}
}
