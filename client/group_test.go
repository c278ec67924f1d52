package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/testproxy"
)

// freeOf reports whether name has neither a holder nor a waiter.
func freeOf(ctx context.Context, c *Client, name string) bool {
	d, err := c.Describe(ctx, name)
	return err == nil && len(d.Holders) == 0 && d.Waiters == 0
}

// Each name of a group has its own token, from its own counter: above the
// name's earlier grants, below its later ones, and the one Describe shows.
// Release gives up every name in one call, once.
func TestLockAllGrantsEachNameItsOwnToken(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c, other := dial(t, coord), dial(t, coord)
	earlier, err := other.TryLock(ctx, "tokens/b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := earlier.Release(ctx); err != nil {
		t.Fatal(err)
	}

	names := []string{"tokens/c", "tokens/a", "tokens/b"}
	g, err := c.LockAll(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Names(), names) {
		t.Fatalf("Names = %v; want %v, as asked", g.Names(), names)
	}
	session, err := c.Session(ctx)
	if err != nil || g.SessionID() != session.ID() {
		t.Fatalf("the group is in session %s; want the default session, %v (%v)", g.SessionID(), session, err)
	}
	if g.Token("tokens/b") <= earlier.Token() {
		t.Fatalf("tokens/b's token %d is not above the earlier grant's, %d", g.Token("tokens/b"), earlier.Token())
	}
	for i, l := range g.Leases() {
		d, err := c.Describe(ctx, l.Name)
		if err != nil {
			t.Fatal(err)
		}
		if l.Name != names[i] || l.Weight != 1 || len(d.Holders) != 1 || d.Holders[0].Token != l.Token || d.Holders[0].Holder != g.Holder() ||
			g.Token(l.Name) != l.Token || d.Holders[0].SessionID != session.ID() {
			t.Fatalf("lease %d %+v, Token %d; Describe says %+v", i, l, g.Token(l.Name), d.Holders)
		}
	}
	if g.Token("tokens/none") != 0 {
		t.Fatalf("Token of a name not in the group = %d; want 0", g.Token("tokens/none"))
	}
	if !strings.Contains(g.String(), `"tokens/a"`) {
		t.Fatalf("String = %q; want it to name the members", g.String())
	}

	if released, err := g.Release(ctx); !released || err != nil {
		t.Fatalf("Release = %t, %v; want released", released, err)
	}
	waitDone(t, g.Done(), time.Second, "the released group")
	if !errors.Is(g.Err(), ErrReleased) {
		t.Fatalf("Err after Release = %v; want ErrReleased", g.Err())
	}
	for _, name := range names {
		if !freeOf(ctx, c, name) {
			t.Fatalf("%s is still held or awaited after Release", name)
		}
	}
	if released, err := g.Release(ctx); released || err != nil {
		t.Fatalf("a second Release = %t, %v; want a no-op", released, err)
	}
	later, err := other.TryLock(ctx, "tokens/a")
	if err != nil {
		t.Fatal(err)
	}
	if later.Token() <= g.Token("tokens/a") {
		t.Fatalf("a later grant of tokens/a has token %d, not above the group's %d", later.Token(), g.Token("tokens/a"))
	}
}

// TryLockAll and TryAcquireAll take nothing when a name is in the way, and
// say which name and who holds it; requests the coordinator refuses are
// InvalidArgument.
func TestTryLockAllNamesWhatIsInTheWay(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	holder, c := dial(t, coord), dial(t, coord)
	lock, err := holder.TryLock(ctx, "way/lock")
	if err != nil {
		t.Fatal(err)
	}
	share, err := holder.Semaphore("way/sem", 2).TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	tooMany := make([]string, MaxGroupMembers+1)
	for i := range tooMany {
		tooMany[i] = "way/many/" + strings.Repeat("x", i+1)
	}
	for _, tc := range []struct {
		name    string
		try     func() (*Group, error)
		blocked string
		holder  string
		code    codes.Code // the refusal, instead of not acquired
	}{
		{
			name:    "a lock held",
			try:     func() (*Group, error) { return c.TryLockAll(ctx, []string{"way/free", "way/lock"}) },
			blocked: "way/lock", holder: lock.Holder(),
		},
		{
			name: "a semaphore full",
			try: func() (*Group, error) {
				return c.TryAcquireAll(ctx, []Member{{Name: "way/free"}, {Name: "way/sem", Capacity: 2, Weight: 1}})
			},
			blocked: "way/sem", holder: share.Holder(),
		},
		{
			name: "a name listed twice",
			try:  func() (*Group, error) { return c.TryLockAll(ctx, []string{"way/free", "way/free"}) },
			code: codes.InvalidArgument,
		},
		{
			name: "no name",
			try:  func() (*Group, error) { return c.TryLockAll(ctx, nil) },
			code: codes.InvalidArgument,
		},
		{
			name: "more than MaxGroupMembers names",
			try:  func() (*Group, error) { return c.TryLockAll(ctx, tooMany) },
			code: codes.InvalidArgument,
		},
		{
			name: "a capacity that differs",
			try: func() (*Group, error) {
				return c.TryAcquireAll(ctx, []Member{{Name: "way/free"}, {Name: "way/sem", Capacity: 3, Weight: 1}})
			},
			code: codes.FailedPrecondition,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.try()
			if g != nil {
				t.Fatalf("granted %v", g)
			}
			if tc.code != codes.OK {
				if status.Code(err) != tc.code || errors.Is(err, ErrNotAcquired) {
					t.Fatalf("err = %v; want %s", err, tc.code)
				}
			} else {
				var notAcquired *NotAcquiredError
				if !errors.As(err, &notAcquired) || !errors.Is(err, ErrNotAcquired) || notAcquired.Name != tc.blocked || notAcquired.Holder != tc.holder {
					t.Fatalf("err = %v; want not acquired, %s held by %s", err, tc.blocked, tc.holder)
				}
			}
			if !freeOf(ctx, c, "way/free") {
				t.Fatal("way/free is held or awaited after a group that was not granted")
			}
		})
	}
}

// A group in a session ends with it: lost when the coordinator ends the
// session, and its Release is then a no-op.
func TestAGroupEndsWithItsSession(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c := dial(t, coord)
	s, err := c.NewSession(ctx, WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"lost/a", "lost/b"}
	g, err := c.LockAll(ctx, names, WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	if g.SessionID() != s.ID() || g.TTL() != s.TTL() {
		t.Fatalf("the group is in session %s with TTL %s; want %s's, %s", g.SessionID(), g.TTL(), s.ID(), s.TTL())
	}
	gctx := g.Context(ctx)
	// Behind the Client's back, as an expiry would.
	if _, err := c.API().CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: s.ID()}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, g.Done(), 3*time.Second, "the group of a closed session")
	waitDone(t, gctx.Done(), time.Second, "the group's context")
	if !errors.Is(g.Err(), ErrLost) || !errors.Is(context.Cause(gctx), ErrLost) {
		t.Fatalf("Err = %v, its context's cause %v; want ErrLost", g.Err(), context.Cause(gctx))
	}
	if released, err := g.Release(ctx); released || err != nil {
		t.Fatalf("Release of a lost group = %t, %v; want a no-op", released, err)
	}
	for _, name := range names {
		if !freeOf(ctx, c, name) {
			t.Fatalf("%s is still held after its session closed", name)
		}
	}
}

// A LockAll given up while it waits leaves the line of every name at once;
// a grant that came before its cancel did is given up at once: nothing is
// held or awaited afterwards.
func TestACancelledLockAllLeavesNothingHeld(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	holderClient, waiterClient, third := dial(t, coord), dial(t, coord), dial(t, coord)
	held, err := holderClient.TryLock(ctx, "cancel/b")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"cancel/a", "cancel/b"}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := waiterClient.LockAll(lctx, names)
		done <- err
	}()
	eventually(t, "the group waits on both names", func() bool {
		a, errA := third.Describe(ctx, "cancel/a")
		b, errB := third.Describe(ctx, "cancel/b")
		return errA == nil && errB == nil && a.Waiters == 1 && b.Waiters == 1 && len(a.Holders) == 0
	})
	cancel()
	var notAcquired *NotAcquiredError
	if err := <-done; !errors.As(err, &notAcquired) || !errors.Is(err, context.Canceled) || !slices.Contains(names, notAcquired.Name) {
		t.Fatalf("the cancelled LockAll = %v; want not acquired, cancelled, naming a member", err)
	}
	eventually(t, "the group left both lines while cancel/b is held", func() bool {
		return freeOf(ctx, third, "cancel/a") && func() bool {
			d, err := third.Describe(ctx, "cancel/b")
			return err == nil && d.Waiters == 0
		}()
	})
	if _, err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both names free", func() bool { return freeOf(ctx, third, "cancel/a") && freeOf(ctx, third, "cancel/b") })
	g, err := third.TryLockAll(ctx, names)
	if err != nil {
		t.Fatalf("TryLockAll after the cancelled group: %v", err)
	}
	if _, err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A group waiting when its stream breaks waits again on the next one, and
// is granted when the names are free.
func TestLockAllWaitsAgainAfterTheStreamBreaks(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	proxy := testproxy.New(t, coord.Addr())
	ctx := testCtx(t)
	holderClient := dial(t, coord)
	waiterClient, err := New(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiterClient.Close() })
	held, err := holderClient.TryLock(ctx, "broken/b")
	if err != nil {
		t.Fatal(err)
	}
	waits := func() bool {
		d, err := holderClient.Describe(ctx, "broken/a")
		return err == nil && d.Waiters == 1
	}
	type result struct {
		group *Group
		err   error
	}
	got := make(chan result, 1)
	go func() {
		g, err := waiterClient.LockAll(ctx, []string{"broken/a", "broken/b"})
		got <- result{g, err}
	}()
	eventually(t, "the group waits", waits)
	proxy.Drop()
	eventually(t, "the group waits again after the stream broke", waits)
	if _, err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("LockAll across a stream break: %v", r.err)
		}
		if r.group.Token("broken/b") <= held.Token() {
			t.Fatalf("token %d after %d", r.group.Token("broken/b"), held.Token())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the group was not granted after the release")
	}
}

// abandon gives up every name a group's lost answer granted to its
// holder, and leaves others' grants be.
func TestAbandonGivesUpEveryNameOfAGroup(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c, other := dial(t, coord), dial(t, coord)
	kept, err := other.TryLock(ctx, "abandoned/kept")
	if err != nil {
		t.Fatal(err)
	}
	const holder = "abandoned-holder"
	names := []string{"abandoned/a", "abandoned/b"}
	resp, err := c.API().AcquireGroup(ctx, &coordinatorv1.AcquireGroupRequest{
		Members: []*coordinatorv1.GroupMember{{Name: names[0]}, {Name: names[1]}}, Holder: holder, Ttl: durationpb.New(time.Minute),
	})
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("AcquireGroup = %v, %v", resp, err)
	}
	c.abandon(ctx, append(names, "abandoned/kept"), holder)
	for _, name := range names {
		if !freeOf(ctx, c, name) {
			t.Fatalf("%s is still held after abandon", name)
		}
	}
	if kept.Err() != nil || freeOf(ctx, c, "abandoned/kept") {
		t.Fatal("abandon released another holder's lease")
	}
}
