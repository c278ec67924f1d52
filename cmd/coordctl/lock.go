package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/coordinator-dev/coordinator/client"
)

type leaseJSON struct {
	Name   string `json:"name"`
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
	TTL    string `json:"ttl"`
	Weight int64  `json:"weight"`
}

// runLock: coordctl lock [-n N | -shared | -write] NAME [-- CMD ARGS…].
func runLock(a *cli, args, cmdline []string) int {
	name := args[0]
	kind, take := a.lockKind(name)
	return a.holdWhile("lock", kind+" "+strconv.Quote(name), cmdline, describeProbe(name), func(ctx context.Context, c *client.Client) (held, error) {
		lease, err := take(ctx, c)
		if err != nil {
			return held{}, err
		}
		return held{
			holding: lease,
			announce: func() {
				if a.output == "json" {
					a.printJSON(leaseJSON{Name: lease.Name(), Holder: lease.Holder(), Token: lease.Token(), TTL: lease.TTL().String(), Weight: lease.Weight()})
				} else {
					a.printf("%s %s held by %s with fencing token %d (ttl %s); interrupt to release\n",
						kind, lease.Name(), lease.Holder(), lease.Token(), lease.TTL())
				}
			},
			env: []string{
				"COORDINATOR_FENCING_TOKEN=" + strconv.FormatUint(lease.Token(), 10),
				"COORDINATOR_LOCK_NAME=" + name,
			},
			giveUp:   lease.Release,
			giveUpAs: "release",
		}, nil
	})
}

// lockKind says what lock's flags ask for on name, and how to take it.
func (a *cli) lockKind(name string) (string, func(ctx context.Context, c *client.Client) (*client.Lease, error)) {
	switch {
	case a.shared:
		return "read lock", func(ctx context.Context, c *client.Client) (*client.Lease, error) { return c.RWMutex(name).RLock(ctx) }
	case a.write:
		return "write lock", func(ctx context.Context, c *client.Client) (*client.Lease, error) { return c.RWMutex(name).Lock(ctx) }
	case a.slots > 1:
		kind := fmt.Sprintf("slot of %d of", a.slots)
		return kind, func(ctx context.Context, c *client.Client) (*client.Lease, error) {
			return c.Semaphore(name, a.slots).Acquire(ctx, 1)
		}
	}
	return "lock", func(ctx context.Context, c *client.Client) (*client.Lease, error) { return c.Lock(ctx, name) }
}

// waitFailed reports a lock or campaign that ended without the lease.
func (a *cli) waitFailed(sigs *signals, what string, err error) int {
	if sigs.interrupted.Err() != nil && (errors.Is(err, client.ErrNotAcquired) || errors.Is(err, context.Canceled)) {
		return a.fail(fmt.Errorf("interrupted while waiting for %s", what))
	}
	return a.fail(err)
}

// waitCtx bounds waiting for a lock or leadership by -timeout and the
// first signal.
func (a *cli) waitCtx(sigs *signals) (context.Context, context.CancelFunc) {
	if a.timeout == 0 {
		return context.WithCancel(sigs.interrupted)
	}
	return context.WithTimeout(sigs.interrupted, a.timeout)
}
