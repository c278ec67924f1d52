package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

func lockGroup(c coordinatorv1.CoordinatorClient, holder string, ttl, wait time.Duration, names ...string) (*coordinatorv1.AcquireGroupResponse, error) {
	req := &coordinatorv1.AcquireGroupRequest{Holder: holder, Ttl: servertest.Dur(ttl)}
	if wait > 0 {
		req.Wait = servertest.Dur(wait)
	}
	for _, n := range names {
		req.Members = append(req.Members, &coordinatorv1.GroupMember{Name: n})
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	return c.AcquireGroup(ctx, req)
}

// TestGroupWaitsInEveryLine: a waiting group is granted when its last
// blocker goes, not starved by single acquisitions of its free member, and
// without holding up a name outside it.
func TestGroupWaitsInEveryLine(t *testing.T) {
	_, c := serveService(t, server.ServiceOptions{})
	const ttl = time.Minute
	blocker := servertest.MustAcquire(t, c, "a", "blocker", ttl)

	type answer struct {
		resp *coordinatorv1.AcquireGroupResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := lockGroup(c, "group", ttl, 30*time.Second, "b", "a")
		done <- answer{resp, err}
	}()
	servertest.WaitQueued(t, c, "b", 1)

	// b is free, but the group waits for it: a single try of b does not
	// pass it; an unrelated name is granted.
	if resp, err := servertest.TryAcquire(c, "b", "single", ttl, 0); err != nil || resp.GetAcquired() {
		t.Fatalf("TryAcquire of a member a group waits for: %v, %v; want refused", resp, err)
	}
	if resp, err := servertest.TryAcquire(c, "c", "single", ttl, 0); err != nil || !resp.GetAcquired() {
		t.Fatalf("TryAcquire of a name outside the group: %v, %v; want granted", resp, err)
	}
	if _, err := c.Release(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ReleaseRequest{Name: "a", Holder: "blocker", Token: blocker.GetToken()}); err != nil {
		t.Fatal(err)
	}
	var got answer
	select {
	case got = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the group was not granted 20s after its blocker was released")
	}
	if got.err != nil || !got.resp.GetAcquired() || len(got.resp.GetLeases()) != 2 {
		t.Fatalf("AcquireGroup: %v, %v; want both members", got.resp, got.err)
	}
	if l := got.resp.GetLeases(); l[0].GetName() != "b" || l[1].GetName() != "a" || l[1].GetToken() <= blocker.GetToken() {
		t.Fatalf("leases %v: want b then a, a's token above %d", l, blocker.GetToken())
	}
	for _, name := range []string{"a", "b"} {
		d, err := c.Describe(servertest.Timeout(t, 5*time.Second), &coordinatorv1.DescribeRequest{Name: name})
		if err != nil || d.GetLease().GetHolder() != "group" || d.GetWaiters() != 0 {
			t.Fatalf("Describe %s: %v, %v; want held by the group, nobody waiting", name, d, err)
		}
	}
	released, err := c.ReleaseGroup(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ReleaseGroupRequest{Holder: "group", Leases: []*coordinatorv1.GroupLease{
		{Name: "a", Token: got.resp.GetLeases()[1].GetToken()}, {Name: "b", Token: got.resp.GetLeases()[0].GetToken()},
	}})
	if err != nil || !released.GetReleased() {
		t.Fatalf("ReleaseGroup: %v, %v", released, err)
	}
	if resp, err := servertest.TryAcquire(c, "b", "single", ttl, 0); err != nil || !resp.GetAcquired() {
		t.Fatalf("TryAcquire after the group's release: %v, %v; want granted", resp, err)
	}
}

// TestGroupGivesUpCleanly: a group whose wait runs out, or whose caller
// leaves, is refused naming its blocker and leaves no place and no grant.
func TestGroupGivesUpCleanly(t *testing.T) {
	_, c := serveService(t, server.ServiceOptions{})
	servertest.MustAcquire(t, c, "y", "blocker", time.Minute)

	resp, err := lockGroup(c, "group", time.Minute, 300*time.Millisecond, "x", "y")
	if err != nil || resp.GetAcquired() || resp.GetBlockedName() != "y" || resp.GetHolder() != "blocker" {
		t.Fatalf("AcquireGroup: %v, %v; want refused naming y and its holder", resp, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := c.AcquireGroup(ctx, &coordinatorv1.AcquireGroupRequest{Holder: "group", Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(time.Minute),
			Members: []*coordinatorv1.GroupMember{{Name: "x"}, {Name: "y"}}})
		errs <- err
	}()
	servertest.WaitQueued(t, c, "x", 1)
	cancel()
	if err := <-errs; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled AcquireGroup: %v; want Canceled", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := c.Describe(servertest.Timeout(t, 5*time.Second), &coordinatorv1.DescribeRequest{Name: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if d.GetWaiters() == 0 && !d.GetHeld() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("x after the group left: %v; want neither held nor awaited", d)
		}
		time.Sleep(20 * time.Millisecond) // the leave runs after the answer
	}
}

// TestGroupRequestValidation: bad groups are InvalidArgument naming the
// field.
func TestGroupRequestValidation(t *testing.T) {
	_, c := serveService(t, server.ServiceOptions{})
	members := func(names ...string) []*coordinatorv1.GroupMember {
		var out []*coordinatorv1.GroupMember
		for _, n := range names {
			out = append(out, &coordinatorv1.GroupMember{Name: n})
		}
		return out
	}
	many := make([]string, 33)
	for i := range many {
		many[i] = string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	ttl := servertest.Dur(time.Minute)
	for _, tc := range []struct {
		name  string
		req   *coordinatorv1.AcquireGroupRequest
		field string
	}{
		{"no members", &coordinatorv1.AcquireGroupRequest{Holder: "h", Ttl: ttl}, "members"},
		{"too many", &coordinatorv1.AcquireGroupRequest{Holder: "h", Ttl: ttl, Members: members(many...)}, "members"},
		{"twice", &coordinatorv1.AcquireGroupRequest{Holder: "h", Ttl: ttl, Members: members("a", "b", "a")}, "members"},
		{"bad name", &coordinatorv1.AcquireGroupRequest{Holder: "h", Ttl: ttl, Members: members("a", "b//c")}, "members[1].name"},
		{"weight above capacity", &coordinatorv1.AcquireGroupRequest{Holder: "h", Ttl: ttl,
			Members: []*coordinatorv1.GroupMember{{Name: "a", Capacity: 2, Weight: 3}}}, "members[0].weight"},
		{"no holder", &coordinatorv1.AcquireGroupRequest{Ttl: ttl, Members: members("a")}, "holder"},
		{"no ttl", &coordinatorv1.AcquireGroupRequest{Holder: "h", Members: members("a")}, "ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AcquireGroup(servertest.Timeout(t, 5*time.Second), tc.req)
			if status.Code(err) != codes.InvalidArgument || !containsField(err, tc.field) {
				t.Fatalf("AcquireGroup: %v; want InvalidArgument naming %q", err, tc.field)
			}
		})
	}
	if _, err := c.ReleaseGroup(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ReleaseGroupRequest{Holder: "h",
		Leases: []*coordinatorv1.GroupLease{{Name: "a"}}}); status.Code(err) != codes.InvalidArgument || !containsField(err, "leases[0].token") {
		t.Fatalf("ReleaseGroup without a token: %v; want InvalidArgument naming leases[0].token", err)
	}
}

func containsField(err error, field string) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(interface{ GetMetadata() map[string]string }); ok && info.GetMetadata()["field"] == field {
			return true
		}
	}
	return false
}
