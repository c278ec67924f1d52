package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/internal/app"
)

type leaderJSON struct {
	Election  string `json:"election"`
	Candidate string `json:"candidate,omitempty"`
	Term      uint64 `json:"term,omitempty"`
	valueJSON
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func newLeaderJSON(election, candidate string, term uint64, value []byte, expires time.Time) leaderJSON {
	j := leaderJSON{Election: election, Candidate: candidate, Term: term, valueJSON: newValueJSON(value)}
	if !expires.IsZero() {
		j.ExpiresAt = &expires
	}
	return j
}

// runElect: coordctl elect ELECTION VALUE [-- CMD ARGS…].
func runElect(a *cli, args, cmdline []string) int {
	election, value := args[0], []byte(args[1])
	return a.holdWhile("elect", "leadership of "+strconv.Quote(election), cmdline, leaderProbe(election), func(ctx context.Context, c *client.Client) (held, error) {
		e, err := c.Campaign(ctx, election, value)
		if err != nil {
			return held{}, err
		}
		return held{
			holding: e,
			announce: func() {
				if a.output == "json" {
					a.printJSON(newLeaderJSON(election, e.Candidate(), e.Term(), e.Value(), time.Time{}))
				} else {
					a.printf("leader of %s: %s in term %d with value %s; interrupt to resign\n",
						election, e.Candidate(), e.Term(), text(e.Value()))
				}
			},
			env: []string{
				"COORDINATOR_FENCING_TOKEN=" + strconv.FormatUint(e.Term(), 10),
				"COORDINATOR_ELECTION=" + election,
			},
			giveUp:   ignoreAnswer(e.Resign),
			giveUpAs: "resign",
		}, nil
	})
}

// runLeader: coordctl leader ELECTION.
func runLeader(a *cli, args, _ []string) int {
	election := args[0]
	return a.call(func(ctx context.Context, c *client.Client) int {
		info, err := c.Leader(ctx, election)
		if errors.Is(err, client.ErrNoLeader) {
			if a.output == "json" {
				a.printJSON(struct {
					Election string `json:"election"`
					Vacant   bool   `json:"vacant"`
				}{election, true})
			} else {
				a.printf("%s has no leader\n", election)
			}
			return app.ExitFail
		}
		if err != nil {
			return a.fail(err)
		}
		if a.output == "json" {
			a.printJSON(newLeaderJSON(info.Election, info.Candidate, info.Term, info.Value, info.ExpiresAt))
		} else {
			a.printf("%s in term %d with value %s (expires %s)\n",
				info.Candidate, info.Term, text(info.Value), info.ExpiresAt.Local().Format(time.RFC3339Nano))
		}
		return app.ExitOK
	})
}

// runObserve: coordctl observe ELECTION.
func runObserve(a *cli, args, _ []string) int {
	election := args[0]
	ctx, stop := app.SignalContext(context.Background())
	defer stop()
	c, err := a.dial()
	if err != nil {
		return a.fail(err)
	}
	defer func() { _ = c.Close() }()
	if err := a.reach(ctx, c, leaderProbe(election)); err != nil {
		if ctx.Err() != nil {
			return app.ExitOK // interrupted
		}
		return a.fail(err)
	}
	for ev := range c.Observe(ctx, election) {
		if ev.Kind == client.Holders {
			a.printHolders(election, ev)
			continue
		}
		if a.output == "json" {
			j := struct {
				Kind string `json:"kind"`
				leaderJSON
			}{Kind: ev.Kind.String()}
			if ev.Kind != client.Vacant {
				j.leaderJSON = newLeaderJSON(election, ev.Leader.Candidate, ev.Leader.Term, ev.Leader.Value, ev.Leader.ExpiresAt)
			} else {
				j.Election = election
			}
			a.printJSON(j)
			continue
		}
		if ev.Kind == client.Vacant {
			a.printf("%s %s\n", ev.Kind, election)
		} else {
			a.printf("%s %s: %s in term %d with value %s\n",
				ev.Kind, election, ev.Leader.Candidate, ev.Leader.Term, text(ev.Leader.Value))
		}
	}
	if ctx.Err() != nil {
		return app.ExitOK
	}
	// The coordinator refused (the client logs nothing by default).
	return a.fail(fmt.Errorf("observing %q ended: the coordinator refused the request", election))
}

// printHolders prints a semaphore's holders event: one line, or one JSON
// object with every holder.
func (a *cli) printHolders(name string, ev client.LeaderEvent) {
	if a.output == "json" {
		type holderJSON struct {
			Holder    string    `json:"holder"`
			Token     uint64    `json:"token"`
			Weight    int64     `json:"weight"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		j := struct {
			Kind     string       `json:"kind"`
			Name     string       `json:"name"`
			Capacity int64        `json:"capacity"`
			Holders  []holderJSON `json:"holders"`
		}{Kind: ev.Kind.String(), Name: name, Capacity: ev.Capacity, Holders: []holderJSON{}}
		for _, h := range ev.Holders {
			j.Holders = append(j.Holders, holderJSON{h.Holder, h.Token, h.Weight, h.ExpiresAt})
		}
		a.printJSON(j)
		return
	}
	var held int64
	parts := make([]string, len(ev.Holders))
	for i, h := range ev.Holders {
		held += h.Weight
		parts[i] = fmt.Sprintf("%s (weight %d, token %d)", h.Holder, h.Weight, h.Token)
	}
	a.printf("%s %s: %d of %d held by %d: %s\n", ev.Kind, name, held, ev.Capacity, len(ev.Holders), strings.Join(parts, ", "))
}
