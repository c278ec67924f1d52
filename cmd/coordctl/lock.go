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
}

// runLock: coordctl lock NAME [-- CMD ARGS…].
func runLock(a *cli, args, cmdline []string) int {
	name := args[0]
	return a.holdWhile("lock", "lock "+strconv.Quote(name), cmdline, describeProbe(name), func(ctx context.Context, c *client.Client) (held, error) {
		lease, err := c.Lock(ctx, name)
		if err != nil {
			return held{}, err
		}
		return held{
			holding: lease,
			announce: func() {
				if a.output == "json" {
					a.printJSON(leaseJSON{Name: lease.Name(), Holder: lease.Holder(), Token: lease.Token(), TTL: lease.TTL().String()})
				} else {
					a.printf("lock %s held by %s with fencing token %d (ttl %s); interrupt to release\n",
						lease.Name(), lease.Holder(), lease.Token(), lease.TTL())
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
