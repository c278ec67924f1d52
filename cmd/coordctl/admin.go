package main

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/app"
)

// heldJSON is a held lease in JSON output.
type heldJSON struct {
	Name      string    `json:"name"`
	Holder    string    `json:"holder"`
	Token     uint64    `json:"token"`
	TTL       string    `json:"ttl"`
	ExpiresAt time.Time `json:"expires_at"`
	Weight    uint32    `json:"weight"`
	// Session is the session the lease is attached to; none for a lease
	// of its own TTL.
	Session string `json:"session,omitempty"`
	valueJSON
}

// heldWeight sums the weights of a name's grants.
func heldWeight(ls []*coordinatorv1.Lease) uint64 {
	var sum uint64
	for _, l := range ls {
		sum += uint64(max(l.GetWeight(), 1))
	}
	return sum
}

// valueJSON is a lease's value in JSON output: as text when it is UTF-8,
// else as base64.
type valueJSON struct {
	Value       *string `json:"value,omitempty"`
	ValueBase64 []byte  `json:"value_base64,omitempty"`
}

func newValueJSON(v []byte) valueJSON {
	switch {
	case len(v) == 0:
		return valueJSON{}
	case utf8.Valid(v):
		s := string(v)
		return valueJSON{Value: &s}
	default:
		return valueJSON{ValueBase64: v}
	}
}

func newHeldJSON(l *coordinatorv1.Lease) heldJSON {
	j := heldJSON{Name: l.GetName(), Holder: l.GetHolder(), Token: l.GetToken(),
		TTL: l.GetTtl().AsDuration().String(), ExpiresAt: l.GetExpiresAt().AsTime(), Weight: max(l.GetWeight(), 1),
		Session: l.GetSessionId()}
	j.valueJSON = newValueJSON(l.GetValue())
	return j
}

// runDescribe: coordctl describe NAME.
func runDescribe(a *cli, args, _ []string) int {
	name := args[0]
	return a.call(func(ctx context.Context, c *client.Client) int {
		d, err := c.API().Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
		if err != nil {
			return a.fail(err)
		}
		if a.output == "json" {
			j := struct {
				Name          string     `json:"name"`
				Held          bool       `json:"held"`
				Lease         *heldJSON  `json:"lease,omitempty"`
				Holders       []heldJSON `json:"holders,omitempty"`
				Capacity      uint32     `json:"capacity"`
				LastToken     uint64     `json:"last_token"`
				Waiters       uint32     `json:"waiters"`
				WaitingWeight uint64     `json:"waiting_weight"`
			}{Name: name, Held: d.GetHeld(), Capacity: max(d.GetCapacity(), 1), LastToken: d.GetLastToken(),
				Waiters: d.GetWaiters(), WaitingWeight: d.GetWaitingWeight()}
			if d.GetHeld() {
				l := newHeldJSON(d.GetLease())
				j.Lease = &l
			}
			for _, h := range d.GetHolders() {
				j.Holders = append(j.Holders, newHeldJSON(h))
			}
			a.printJSON(j)
			return app.ExitOK
		}
		if d.GetCapacity() > 1 {
			// A semaphore or read-write lock: every share on a line.
			a.printf("%s: capacity %d, %d held by %d holders\n", name, d.GetCapacity(), heldWeight(d.GetHolders()), len(d.GetHolders()))
			for _, l := range d.GetHolders() {
				a.printf("  weight %d held by %s with token %d, ttl %s, expires %s%s\n", max(l.GetWeight(), 1),
					l.GetHolder(), l.GetToken(), l.GetTtl().AsDuration(), l.GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano), inSession(l))
			}
			a.printf("last token %d, %d waiting for %d\n", d.GetLastToken(), d.GetWaiters(), d.GetWaitingWeight())
			return app.ExitOK
		}
		if d.GetHeld() {
			l := d.GetLease()
			a.printf("%s: held by %s with token %d, ttl %s, expires %s%s",
				name, l.GetHolder(), l.GetToken(), l.GetTtl().AsDuration(), l.GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano), inSession(l))
			if len(l.GetValue()) > 0 {
				a.printf(", value %s", text(l.GetValue()))
			}
			a.printf("\n")
		} else {
			a.printf("%s: not held\n", name)
		}
		a.printf("last token %d, %d waiting\n", d.GetLastToken(), d.GetWaiters())
		return app.ExitOK
	})
}

// runList: coordctl list [PREFIX].
func runList(a *cli, args, _ []string) int {
	var prefix string
	if len(args) > 0 {
		prefix = args[0]
	}
	return a.call(func(ctx context.Context, c *client.Client) int {
		var leases []*coordinatorv1.Lease
		for page := ""; ; {
			resp, err := c.API().List(ctx, &coordinatorv1.ListRequest{Prefix: prefix, PageSize: 1000, PageToken: page})
			if err != nil {
				return a.fail(err)
			}
			leases = append(leases, resp.GetLeases()...)
			if page = resp.GetNextPageToken(); page == "" {
				break
			}
		}
		if a.output == "json" {
			out := make([]heldJSON, 0, len(leases))
			for _, l := range leases {
				out = append(out, newHeldJSON(l))
			}
			a.printJSON(out)
			return app.ExitOK
		}
		w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(w, "NAME\tHOLDER\tTOKEN\tTTL\tEXPIRES\tSESSION")
		for _, l := range leases {
			_, _ = fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", l.GetName(), l.GetHolder(), l.GetToken(),
				l.GetTtl().AsDuration(), l.GetExpiresAt().AsTime().Local().Format(time.RFC3339), cmp.Or(l.GetSessionId(), "-"))
		}
		_ = w.Flush()
		return app.ExitOK
	})
}

// inSession is ", session ID" for a lease attached to a session.
func inSession(l *coordinatorv1.Lease) string {
	if l.GetSessionId() == "" {
		return ""
	}
	return ", session " + l.GetSessionId()
}

// runRelease: coordctl release NAME HOLDER TOKEN.
func runRelease(a *cli, args, _ []string) int {
	name, holder := args[0], args[1]
	token, err := strconv.ParseUint(args[2], 10, 64)
	if err != nil || token == 0 {
		return a.usageError(fmt.Errorf("release: TOKEN %q is not a fencing token (a positive integer)", args[2]))
	}
	return a.call(func(ctx context.Context, c *client.Client) int {
		resp, err := c.API().Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token})
		if err != nil {
			return a.fail(err)
		}
		if a.output == "json" {
			a.printJSON(struct {
				Name     string `json:"name"`
				Holder   string `json:"holder"`
				Token    uint64 `json:"token"`
				Released bool   `json:"released"`
			}{name, holder, token, resp.GetReleased()})
		} else if resp.GetReleased() {
			a.printf("released %s (holder %s, token %d)\n", name, holder, token)
		} else {
			a.printf("%s is not held by %s with token %d: nothing released\n", name, holder, token)
		}
		if !resp.GetReleased() {
			return app.ExitFail
		}
		return app.ExitOK
	})
}
