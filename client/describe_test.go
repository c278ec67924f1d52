package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
)

// TestListPagesThroughEveryGrant: List yields every grant under its prefix
// in name order, across the coordinator's pages (100 names a page); it
// stops when the loop does (yielding again would panic), and yields the
// coordinator's refusal as an error.
func TestListPagesThroughEveryGrant(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c := dial(t, coord)
	const n = 150
	for i := range n {
		if _, err := c.TryLock(ctx, fmt.Sprintf("paged/%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.TryLock(ctx, "other/x"); err != nil {
		t.Fatal(err)
	}
	var names []string
	for l, err := range c.List(ctx, "paged/") {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, l.Name)
	}
	if len(names) != n || names[0] != "paged/000" || names[n-1] != fmt.Sprintf("paged/%03d", n-1) {
		t.Fatalf("listed %d names from %v; want the %d under the prefix, in order", len(names), names[:min(3, len(names))], n)
	}
	seen := 0
	for _, err := range c.List(ctx, "paged/") {
		if err != nil {
			t.Fatal(err)
		}
		if seen++; seen == 2 {
			break
		}
	}
	if _, err := c.Describe(ctx, ""); err == nil {
		t.Error("Describe of an empty name succeeded")
	}
	for _, err := range c.List(ctx, "bad//prefix") {
		if err == nil {
			t.Error("List of an invalid prefix yielded no error")
		}
	}
}

// TestDescribeReportsHoldersWaitersAndTheLastToken: a semaphore's holders
// with their weights and session, its capacity, who waits, and a last
// token at least that of every grant.
func TestDescribeReportsHoldersWaitersAndTheLastToken(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c := dial(t, coord)
	sem := c.Semaphore("described", 3)
	big, err := sem.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = sem.Acquire(waitCtx, 2) }()
	var d Description
	eventually(t, "a waiter", func() bool {
		d, err = c.Describe(ctx, "described")
		return err == nil && d.Waiters == 1
	})
	h := d.Holders
	if len(h) != 1 || h[0].Token != big.Token() || h[0].Weight != 2 || h[0].SessionID != big.SessionID() || h[0].Holder != big.Holder() ||
		h[0].TTL != DefaultTTL || time.Until(h[0].ExpiresAt) <= 0 || d.Capacity != 3 || d.WaitingWeight != 2 || d.LastToken < big.Token() {
		t.Fatalf("Describe = %+v; want %v alone, capacity 3, one waiter of weight 2", d, big)
	}
}
