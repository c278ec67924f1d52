package client

import (
	"context"
	"fmt"
	"iter"
	"time"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// LeaseInfo is one live grant of a name, as Describe, List and Observe
// report it: a lock's, a semaphore or read-write lock's share, or an
// election's term.
type LeaseInfo struct {
	// Name is the leased name (for a leadership, the election).
	Name string
	// Holder is who holds it (for a leadership, the candidate).
	Holder string
	// Token is the grant's fencing token (for a leadership, the term).
	Token uint64
	// Weight is how much of the name's capacity the grant holds.
	Weight int64
	// SessionID is the session the grant is attached to; empty for a lease
	// of its own TTL (made with the unary calls, not through a Client).
	SessionID string
	// TTL is the TTL last granted (a session's, for a grant in one).
	TTL time.Duration
	// ExpiresAt is when the grant ends unless renewed, by the
	// coordinator's store clock.
	ExpiresAt time.Time
	// Value is what an election's leader proclaimed; empty for locks.
	Value []byte
}

func leaseInfo(l *coordinatorv1.Lease) LeaseInfo {
	info := LeaseInfo{Name: l.GetName(), Holder: l.GetHolder(), Token: l.GetToken(), Weight: int64(max(l.GetWeight(), 1)),
		SessionID: l.GetSessionId(), TTL: l.GetTtl().AsDuration(), Value: l.GetValue()}
	if ts := l.GetExpiresAt(); ts.IsValid() {
		info.ExpiresAt = ts.AsTime()
	}
	return info
}

// Description is the state of a name, as Describe reports it.
type Description struct {
	// Holders are the name's live grants in token order: none when it is
	// free, one for a lock, up to the holder cap for a semaphore.
	Holders []LeaseInfo
	// Capacity is the name's capacity: 1 for a lock, or for a name nobody
	// holds or waits for.
	Capacity int64
	// Waiters is how many callers are queued for the name, and
	// WaitingWeight the sum of their weights.
	Waiters       int
	WaitingWeight int64
	// LastToken is a floor of the fencing tokens issued for the name: at
	// least every token issued before the call, and below every token
	// issued after it.
	LastToken uint64
}

// Describe returns the state of the name: its holders, capacity, waiters
// and last token. It holds nothing, and makes no session.
func (c *Client) Describe(ctx context.Context, name string) (Description, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.api.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
	if err != nil {
		return Description{}, callError(ctx, fmt.Sprintf("describe %q", name), err)
	}
	d := Description{Capacity: int64(max(resp.GetCapacity(), 1)), Waiters: int(resp.GetWaiters()),
		WaitingWeight: int64(resp.GetWaitingWeight()), LastToken: resp.GetLastToken()}
	for _, l := range resp.GetHolders() {
		d.Holders = append(d.Holders, leaseInfo(l))
	}
	return d, nil
}

// List yields every live grant of the names that start with prefix (empty:
// every name the caller may see), in name order, a semaphore's in token
// order, fetching them a page at a time as the loop goes on. It stops after
// yielding an error. It holds nothing, and makes no session.
func (c *Client) List(ctx context.Context, prefix string) iter.Seq2[LeaseInfo, error] {
	return func(yield func(LeaseInfo, error) bool) {
		ctx, cancel := c.callCtx(ctx)
		defer cancel()
		req := &coordinatorv1.ListRequest{Prefix: prefix}
		for {
			resp, err := c.api.List(ctx, req)
			if err != nil {
				yield(LeaseInfo{}, callError(ctx, fmt.Sprintf("list %q", prefix), err))
				return
			}
			for _, l := range resp.GetLeases() {
				if !yield(leaseInfo(l), nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
}
