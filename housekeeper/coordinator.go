package housekeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordinator-dev/coordinator/client"
)

// CoordinatorLocker is the Locker of a real deployment: leases from the
// coordinator through its Go SDK. Each lease renews itself over the client's
// one KeepAlive stream and closes Done the moment it is lost, or just before
// it would expire when the coordinator cannot be reached.
func CoordinatorLocker(c *client.Client) Locker { return coordinatorLocker{c} }

type coordinatorLocker struct{ c *client.Client }

func (l coordinatorLocker) TryLock(ctx context.Context, name string, ttl time.Duration) (Lease, error) {
	lease, err := l.c.TryLock(ctx, name, client.WithTTL(ttl))
	if errors.Is(err, client.ErrNotAcquired) {
		return nil, fmt.Errorf("%w: %w", ErrNotAcquired, err)
	}
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// Lead campaigns in election with the coordinator until ctx ends, marking r
// the leader (SetLeader) while this instance holds the leadership, so that
// of several instances exactly one reports the queue gauges. The leadership
// has the queue leases' TTL: a dead leader is replaced as fast as its queues.
func (r *Runner) Lead(ctx context.Context, c *client.Client, election string) error {
	err := c.RunAsLeader(ctx, election, []byte(c.Identity()), func(ctx context.Context) error {
		r.log.Info("elected leader", "election", election)
		r.SetLeader(true)
		<-ctx.Done()
		r.SetLeader(false)
		r.log.Info("no longer leader", "election", election)
		return nil
	}, client.WithTTL(r.cfg.LeaseTTL))
	if ctx.Err() != nil {
		return nil
	}
	return err
}
