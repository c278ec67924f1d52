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
	// Session: lock -session only.
	Session string `json:"session,omitempty"`
}

// runLock: coordctl lock [-n N | -shared | -write] [-session ID] NAME [-- CMD ARGS…].
func runLock(a *cli, args, cmdline []string) int {
	name := args[0]
	kind, take := a.lockKind(name)
	if a.session != "" {
		return a.lockInSession(kind, name, cmdline)
	}
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
			env:      lockEnv(name, lease.Token()),
			giveUp:   ignoreAnswer(lease.Release),
			giveUpAs: "release",
		}, nil
	})
}

// lockInSession is lock -session ID: the lease lives as long as the
// session, which another process renews.
func (a *cli) lockInSession(kind, name string, cmdline []string) int {
	what := kind + " " + strconv.Quote(name) + " in session " + a.session
	return a.holdWhile("lock", what, cmdline, describeProbe(name), func(ctx context.Context, c *client.Client) (held, error) {
		l, err := a.acquireAttached(ctx, c, name, a.session)
		if err != nil {
			return held{}, err
		}
		return held{
			holding: l,
			announce: func() {
				if a.output == "json" {
					a.printJSON(leaseJSON{Name: l.name, Holder: l.holder, Token: l.token, TTL: l.ttl.String(), Weight: int64(l.weight), Session: l.session})
				} else {
					a.printf("%s %s held by %s with fencing token %d in session %s (ttl %s); interrupt to release\n",
						kind, l.name, l.holder, l.token, l.session, l.ttl)
				}
			},
			env:      append(lockEnv(name, l.token), "COORDINATOR_SESSION_ID="+l.session),
			giveUp:   func(ctx context.Context) error { return l.release(ctx, c) },
			giveUpAs: "release",
		}, nil
	})
}

// lockEnv is what CMD learns of the lock it runs under.
func lockEnv(name string, token uint64) []string {
	return []string{
		"COORDINATOR_FENCING_TOKEN=" + strconv.FormatUint(token, 10),
		"COORDINATOR_LOCK_NAME=" + name,
	}
}

// lockKind says what lock's flags ask for on name, and how to take it.
func (a *cli) lockKind(name string) (string, func(ctx context.Context, c *client.Client, opts ...client.LockOption) (*client.Lease, error)) {
	switch {
	case a.shared:
		return "read lock", func(ctx context.Context, c *client.Client, opts ...client.LockOption) (*client.Lease, error) {
			return c.RWMutex(name).RLock(ctx, opts...)
		}
	case a.write:
		return "write lock", func(ctx context.Context, c *client.Client, opts ...client.LockOption) (*client.Lease, error) {
			return c.RWMutex(name).Lock(ctx, opts...)
		}
	case a.slots > 1:
		kind := fmt.Sprintf("slot of %d of", a.slots)
		return kind, func(ctx context.Context, c *client.Client, opts ...client.LockOption) (*client.Lease, error) {
			return c.Semaphore(name, a.slots).Acquire(ctx, 1, opts...)
		}
	}
	return "lock", func(ctx context.Context, c *client.Client, opts ...client.LockOption) (*client.Lease, error) {
		return c.Lock(ctx, name, opts...)
	}
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
