package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/app"
)

// sessionJSON is a session in JSON output.
type sessionJSON struct {
	ID        string    `json:"id"`
	TTL       string    `json:"ttl"`
	ExpiresAt time.Time `json:"expires_at"`
	// Names: session describe only.
	Names []string `json:"names,omitempty"`
}

func newSessionJSON(s *coordinatorv1.Session) sessionJSON {
	return sessionJSON{ID: s.GetId(), TTL: s.GetTtl().AsDuration().String(), ExpiresAt: s.GetExpiresAt().AsTime()}
}

// sessionCommand is one "coordctl session" subcommand.
type sessionCommand struct {
	name, usage, summary string
	minArgs, maxArgs     int
	takesCommand         bool // accepts -- CMD ARGS…
	run                  func(a *cli, args, cmdline []string) int
}

// sessionCommands in the order of the usage text.
var sessionCommands []sessionCommand

func init() {
	sessionCommands = []sessionCommand{
		{"create", "", "create a session of -ttl and print its id (with -keep, renew it until interrupted, then close it)", 0, 0, false, runSessionCreate},
		{"renew", "ID", "renew the session ID by its TTL from now", 1, 1, false, runSessionRenew},
		{"close", "ID", "close the session ID, releasing every lease attached to it", 1, 1, false, runSessionClose},
		{"describe", "ID", "show the session ID: its TTL, expiry and the names of its leases", 1, 1, false, runSessionDescribe},
		{"hold", "NAME… [-- CMD ARGS…]", "take every NAME (lock's flags) in one new session of -ttl, then run CMD while holding them all " +
			"(or hold them until interrupted), and close the session", 1, maxHoldNames, true, runSessionHold},
	}
}

// maxHoldNames bounds session hold's names: a command line, not a worker.
const maxHoldNames = 1000

// runSession: coordctl session SUBCOMMAND ARGS….
func runSession(a *cli, args, cmdline []string) int {
	i := slices.IndexFunc(sessionCommands, func(c sessionCommand) bool { return c.name == args[0] })
	if i < 0 {
		names := make([]string, len(sessionCommands))
		for i, c := range sessionCommands {
			names[i] = c.name
		}
		return a.usageError(fmt.Errorf("unknown session command %q (want %s)", args[0], strings.Join(names, ", ")))
	}
	sub, args := sessionCommands[i], args[1:]
	switch {
	case cmdline != nil && !sub.takesCommand:
		return a.usageError(fmt.Errorf("session %s does not run a command after --", sub.name))
	case len(args) < sub.minArgs || len(args) > sub.maxArgs:
		return a.usageError(fmt.Errorf("usage: coordctl [flags] session %s", strings.TrimSpace(sub.name+" "+sub.usage)))
	case a.keep && sub.name != "create":
		return a.usageError(errors.New("-keep: only session create keeps a session alive"))
	}
	return sub.run(a, args, cmdline)
}

// runSessionCreate: coordctl session create [-ttl D] [-keep].
func runSessionCreate(a *cli, _, _ []string) int {
	if a.keep {
		return a.keepSession()
	}
	return a.call(func(ctx context.Context, c *client.Client) int {
		resp, err := c.API().CreateSession(ctx, &coordinatorv1.CreateSessionRequest{Ttl: durationpb.New(a.ttl)})
		if err != nil {
			return a.fail(err)
		}
		a.printSessionID(resp.GetSession())
		return app.ExitOK
	})
}

// printSessionID prints a new session: its id alone on a line, for
// SESSION=$(coordctl session create), or a JSON object.
func (a *cli) printSessionID(s *coordinatorv1.Session) {
	if a.output == "json" {
		a.printJSON(newSessionJSON(s))
	} else {
		a.printf("%s\n", s.GetId())
	}
}

// keepSession creates a session, prints its id and renews it until a
// signal (then it closes it: status 0) or its loss (status 1): the session
// of an operator's terminal, which lock -session attaches to.
func (a *cli) keepSession() int {
	sigs := watchSignals()
	defer sigs.stop()
	c, err := a.dial()
	if err != nil {
		return a.fail(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := a.waitCtx(sigs)
	s, err := c.NewSession(ctx, client.WithTTL(a.ttl))
	cancel()
	if err != nil {
		return a.waitFailed(sigs, "a session", err)
	}
	// Its expiry by this process's clock (the coordinator's is a little later).
	a.printSessionID(&coordinatorv1.Session{Id: s.ID(), Ttl: durationpb.New(s.TTL()), ExpiresAt: timestamppb.New(s.Deadline())})
	code := a.holdUntilInterrupted(s, sigs)
	ctx, cancel = releaseCtx()
	defer cancel()
	if err := s.Close(ctx); err != nil && code == app.ExitOK {
		a.warnf("close session %s: %v (it expires after its TTL)", s.ID(), err)
	}
	return code
}

// runSessionRenew: coordctl session renew ID.
func runSessionRenew(a *cli, args, _ []string) int {
	return a.call(func(ctx context.Context, c *client.Client) int {
		resp, err := c.API().RenewSession(ctx, &coordinatorv1.RenewSessionRequest{SessionId: args[0]})
		if err != nil {
			return a.fail(err)
		}
		s := resp.GetSession()
		if a.output == "json" {
			a.printJSON(newSessionJSON(s))
		} else {
			a.printf("session %s renewed: ttl %s, expires %s\n", s.GetId(), s.GetTtl().AsDuration(), localTime(s.GetExpiresAt().AsTime()))
		}
		return app.ExitOK
	})
}

// runSessionClose: coordctl session close ID.
func runSessionClose(a *cli, args, _ []string) int {
	return a.call(func(ctx context.Context, c *client.Client) int {
		if _, err := c.API().CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: args[0]}); err != nil {
			return a.fail(err)
		}
		if a.output == "json" {
			a.printJSON(struct {
				ID     string `json:"id"`
				Closed bool   `json:"closed"`
			}{args[0], true})
		} else {
			a.printf("session %s closed: its leases are released\n", args[0])
		}
		return app.ExitOK
	})
}

// runSessionDescribe: coordctl session describe ID.
func runSessionDescribe(a *cli, args, _ []string) int {
	return a.call(func(ctx context.Context, c *client.Client) int {
		resp, err := c.API().DescribeSession(ctx, &coordinatorv1.DescribeSessionRequest{SessionId: args[0]})
		if err != nil {
			return a.fail(err)
		}
		s := resp.GetSession()
		if a.output == "json" {
			j := newSessionJSON(s)
			j.Names = append([]string{}, resp.GetNames()...)
			a.printJSON(j)
			return app.ExitOK
		}
		a.printf("session %s: ttl %s, expires %s, %d leases\n", s.GetId(), s.GetTtl().AsDuration(),
			localTime(s.GetExpiresAt().AsTime()), len(resp.GetNames()))
		for _, name := range resp.GetNames() {
			a.printf("  %s\n", name)
		}
		return app.ExitOK
	})
}

// runSessionHold: coordctl session hold [-ttl D] [-n N | -shared | -write]
// NAME… [-- CMD ARGS…]. Every NAME is taken the same way (lock's flags),
// one after the other in the order given: give the names in the same order
// everywhere, or two holders can wait for each other for ever (lock NAME
// NAME… takes them all at once instead, which never deadlocks).
func runSessionHold(a *cli, names, cmdline []string) int {
	what := "session of " + strconv.Quote(strings.Join(names, " "))
	return a.holdWhile("session hold", what, cmdline, describeProbe(names[0]), func(ctx context.Context, c *client.Client) (held, error) {
		s, err := c.NewSession(ctx, client.WithTTL(a.ttl))
		if err != nil {
			return held{}, err
		}
		leases := make([]*client.Lease, 0, len(names))
		kind := ""
		for _, name := range names {
			var take func(context.Context, *client.Client, ...client.LockOption) (*client.Lease, error)
			kind, take = a.lockKind(name)
			l, err := take(ctx, c, client.WithSession(s))
			if err != nil {
				cctx, cancel := releaseCtx()
				_ = s.Close(cctx) //nolint:contextcheck // closing must outlive the interrupted wait
				cancel()
				return held{}, err
			}
			leases = append(leases, l)
		}
		tokens := make([]uint64, len(leases))
		for i, l := range leases {
			tokens[i] = l.Token()
		}
		env := append(locksEnv(names, tokens), "COORDINATOR_SESSION_ID="+s.ID())
		return held{
			holding: s,
			announce: func() {
				if a.output == "json" {
					j := struct {
						Session sessionJSON `json:"session"`
						Leases  []leaseJSON `json:"leases"`
					}{Session: sessionJSON{ID: s.ID(), TTL: s.TTL().String(), ExpiresAt: s.Deadline()}}
					for _, l := range leases {
						j.Leases = append(j.Leases, leaseJSON{Name: l.Name(), Holder: l.Holder(), Token: l.Token(), TTL: l.TTL().String(), Weight: l.Weight()})
					}
					a.printJSON(j)
					return
				}
				parts := make([]string, len(leases))
				for i, l := range leases {
					parts[i] = fmt.Sprintf("%s (token %d)", l.Name(), l.Token())
				}
				a.printf("session %s (ttl %s) holds %s %s; interrupt to close it\n", s.ID(), s.TTL(), kind, strings.Join(parts, ", "))
			},
			env:      env,
			giveUp:   s.Close,
			giveUpAs: "close session " + s.ID(),
		}, nil
	})
}

// localTime formats an expiry for a text line.
func localTime(t time.Time) string { return t.Local().Format(time.RFC3339Nano) }
