package main

// The leases suite's cycles through the Go SDK.

import (
	"context"
	"errors"

	"github.com/coordinator-dev/coordinator/client"
)

// sdkCycle is the Go SDK: TryLock (one acquire over the Client's operation
// stream; the lease joins the Client's default session, made by the
// warm-up, whose renewals, every TTL/3, are not the cycle's) and Release.
func sdkCycle(c *client.Client, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		lease, err := c.TryLock(ctx, names[worker])
		if err != nil {
			return err
		}
		_, err = lease.Release(ctx)
		return err
	}
}

func sdkTry(c *client.Client, names []string) func(ctx context.Context, worker int) (bool, error) {
	return func(ctx context.Context, worker int) (bool, error) {
		lease, err := c.TryLock(ctx, names[worker])
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
