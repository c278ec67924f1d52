package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

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

// runLock: coordctl lock [-n N | -shared | -write] [-session ID] NAME
// [NAME…] [-- CMD ARGS…]. Several names are one group: all at once or
// none.
func runLock(a *cli, args, cmdline []string) int {
	if len(args) > 1 {
		if a.session != "" {
			return a.usageError(errors.New("lock -session takes one NAME"))
		}
		return a.lockAll(args, cmdline)
	}
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
			env:      locksEnv(args, []uint64{lease.Token()}),
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
			env:      append(locksEnv([]string{name}, []uint64{l.token}), "COORDINATOR_SESSION_ID="+l.session),
			giveUp:   func(ctx context.Context) error { return l.release(ctx, c) },
			giveUpAs: "release",
		}, nil
	})
}

// lockAll is lock with several names: one group, granted all at once
// (each name with lock's flags), waited for in the line of every name.
func (a *cli) lockAll(names, cmdline []string) int {
	kind, _ := a.lockKind(names[0])
	capacity, weight := a.shares()
	members := make([]client.Member, len(names))
	for i, name := range names {
		members[i] = client.Member{Name: name, Capacity: capacity, Weight: weight}
	}
	what := fmt.Sprintf("group %q", names)
	return a.holdWhile("lock", what, cmdline, describeProbe(names[0]), func(ctx context.Context, c *client.Client) (held, error) {
		g, err := c.AcquireAll(ctx, members)
		if err != nil {
			return held{}, err
		}
		leases := g.Leases()
		tokens := make([]uint64, len(leases))
		for i, l := range leases {
			tokens[i] = l.Token
		}
		return held{
			holding: g,
			announce: func() {
				if a.output == "json" {
					j := struct {
						Leases []leaseJSON `json:"leases"`
					}{}
					for _, l := range leases {
						j.Leases = append(j.Leases, leaseJSON{Name: l.Name, Holder: g.Holder(), Token: l.Token, TTL: g.TTL().String(), Weight: l.Weight})
					}
					a.printJSON(j)
					return
				}
				parts := make([]string, len(leases))
				for i, l := range leases {
					parts[i] = fmt.Sprintf("%s (token %d)", l.Name, l.Token)
				}
				a.printf("%s %s held together by %s (ttl %s); interrupt to release\n", kind, strings.Join(parts, ", "), g.Holder(), g.TTL())
			},
			env:      locksEnv(names, tokens),
			giveUp:   ignoreAnswer(g.Release),
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

// locksEnv is what CMD learns of the locks it runs under, as session hold
// passes them: the names and their tokens, space-separated, in the same
// order; and for one name, lockEnv's variables too.
func locksEnv(names []string, tokens []uint64) []string {
	text := make([]string, len(tokens))
	for i, token := range tokens {
		text[i] = strconv.FormatUint(token, 10)
	}
	env := []string{"COORDINATOR_LOCK_NAMES=" + strings.Join(names, " "), "COORDINATOR_FENCING_TOKENS=" + strings.Join(text, " ")}
	if len(names) == 1 {
		env = append(env, lockEnv(names[0], tokens[0])...)
	}
	return env
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
