package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
)

// maxWait is the longest wait one TryAcquire may ask for
// (TryAcquireRequest.wait's rule); a longer wait asks again.
const maxWait = 5 * time.Minute

// attachedLease is a lease lock -session took in a session that another
// process keeps alive (session create -keep, a worker): coordctl does not
// renew it, it watches it, and releases it alone (compare-and-set) on the
// way out, leaving the session be. The SDK attaches only to sessions it
// made, so this talks to the API.
type attachedLease struct {
	name, holder, session string
	token                 uint64
	ttl                   time.Duration
	weight                uint32

	ended context.Context
	end   context.CancelCauseFunc
	stop  context.CancelFunc // ends the watch
	gone  chan struct{}      // closed when the watch returned
}

func (l *attachedLease) Done() <-chan struct{} { return l.ended.Done() }

func (l *attachedLease) Err() error {
	if l.ended.Err() == nil {
		return nil
	}
	return context.Cause(l.ended)
}

// release stops watching and releases the lease, unless it ended already.
func (l *attachedLease) release(ctx context.Context, c *client.Client) error {
	l.stop()
	<-l.gone
	l.end(client.ErrReleased)
	_, err := c.API().Release(ctx, &coordinatorv1.ReleaseRequest{Name: l.name, Holder: l.holder, Token: l.token})
	return err
}

// acquireAttached waits in line for name (with lock's capacity and weight)
// as a lease of session, then watches it until release. A wait that ctx
// ends is given up; a grant whose answer it lost is released again.
func (a *cli) acquireAttached(ctx context.Context, c *client.Client, name, session string) (*attachedLease, error) {
	capacity, weight := a.shares()
	req := &coordinatorv1.TryAcquireRequest{Name: name, Holder: c.Identity(), Ttl: durationpb.New(a.ttl),
		Wait: durationpb.New(maxWait), Capacity: capacity, Weight: weight, SessionId: session}
	retry := backoff.New(50*time.Millisecond, 2*time.Second)
	var holder string
	for {
		resp, err := c.API().TryAcquire(ctx, req)
		switch {
		case err == nil && resp.GetAcquired():
			//nolint:contextcheck // the watch outlives the wait, until release
			return a.watchAttached(c, resp.GetLease()), nil
		case ctx.Err() != nil || waitEnded(err):
			// The RPC may see its deadline before ctx does.
			//nolint:contextcheck // ctx ended; giving up must not
			if other := abandon(c, name, req.GetHolder()); holder == "" {
				holder = other
			}
			return nil, &client.NotAcquiredError{Name: name, Holder: holder, Err: cmp.Or(ctx.Err(), context.DeadlineExceeded)}
		case err == nil:
			holder = resp.GetHolder() // waited maxWait: ask again
		case status.Code(err) == codes.Unavailable:
			t := time.NewTimer(retry.Next())
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		default:
			return nil, fmt.Errorf("lock %q in session %s: %w", name, session, err)
		}
	}
}

// waitEnded reports whether err is the end of the RPC's own deadline or
// cancellation: a wait given up, not a refusal.
func waitEnded(err error) bool {
	code := status.Code(err)
	return code == codes.DeadlineExceeded || code == codes.Canceled
}

// abandon releases what holder may have been granted on name by a call
// whose answer was lost (best effort: the session's end releases it
// anyway), and returns who else holds name, for the error.
func abandon(c *client.Client, name, holder string) (other string) {
	ctx, cancel := releaseCtx()
	defer cancel()
	d, err := c.API().Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
	if err != nil {
		return ""
	}
	for _, l := range grants(d) {
		if l.GetHolder() == holder {
			_, _ = c.API().Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: l.GetToken()})
		} else if other == "" {
			other = l.GetHolder()
		}
	}
	return other
}

// grants are every live grant of a described name.
func grants(d *coordinatorv1.DescribeResponse) []*coordinatorv1.Lease {
	if len(d.GetHolders()) > 0 {
		return d.GetHolders()
	}
	if d.GetHeld() {
		return []*coordinatorv1.Lease{d.GetLease()}
	}
	return nil
}

// watchAttached starts watching the granted lease g: about every third of
// its TTL (the session's) it asks whether the name still has it, and ends
// it when not (released by someone else, or its session ended), or when no
// answer came before its last known expiry.
func (a *cli) watchAttached(c *client.Client, g *coordinatorv1.Lease) *attachedLease {
	ended, end := context.WithCancelCause(context.Background())
	watch, stop := context.WithCancel(ended)
	l := &attachedLease{name: g.GetName(), holder: g.GetHolder(), session: g.GetSessionId(), token: g.GetToken(),
		ttl: g.GetTtl().AsDuration(), weight: max(g.GetWeight(), 1), ended: ended, end: end, stop: stop, gone: make(chan struct{})}
	every := min(max(l.ttl/3, 100*time.Millisecond), 5*time.Second)
	expires := g.GetExpiresAt().AsTime()
	go func() {
		defer close(l.gone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-watch.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(watch, every)
			held, exp, err := l.stillHeld(ctx, c)
			cancel()
			switch {
			case watch.Err() != nil:
				return
			case err == nil && held:
				expires = exp
			case err == nil:
				end(l.whyGone(watch, c))
				return
			case !time.Now().Before(expires):
				end(fmt.Errorf("%w: %s: no answer from the coordinator before the session's expiry (%w)", client.ErrExpired, l.name, err))
				return
			}
		}
	}()
	return l
}

// stillHeld asks whether the name still has l, and until when.
func (l *attachedLease) stillHeld(ctx context.Context, c *client.Client) (bool, time.Time, error) {
	d, err := c.API().Describe(ctx, &coordinatorv1.DescribeRequest{Name: l.name})
	if err != nil {
		return false, time.Time{}, err
	}
	for _, g := range grants(d) {
		if g.GetHolder() == l.holder && g.GetToken() == l.token {
			return true, g.GetExpiresAt().AsTime(), nil
		}
	}
	return false, time.Time{}, nil
}

// whyGone says why l is no longer held: its session's end, when the
// session says so, else a release or expiry of the lease itself.
func (l *attachedLease) whyGone(ctx context.Context, c *client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.API().DescribeSession(ctx, &coordinatorv1.DescribeSessionRequest{SessionId: l.session})
	if reason := client.ErrorReason(err); reason != "" && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %s (token %d): session %s: %s", client.ErrLost, l.name, l.token, l.session, reason)
	}
	return fmt.Errorf("%w: %s is no longer held with token %d (released by someone else?)", client.ErrLost, l.name, l.token)
}

// shares is the capacity and weight lock's flags ask for.
func (a *cli) shares() (capacity, weight uint32) {
	switch {
	case a.shared:
		return uint32(client.RWCapacity), 1
	case a.write:
		return uint32(client.RWCapacity), uint32(client.RWCapacity)
	case a.slots > 1:
		return uint32(a.slots), 1
	}
	return 1, 1
}
