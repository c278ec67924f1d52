package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// MaxGroupMembers is the most names a group may have
// (AcquireGroupRequest.members' rules).
var MaxGroupMembers = int(fieldRules(&coordinatorv1.AcquireGroupRequest{}, "members").GetMaxValue())

// Member is one name of a group (AcquireAll, TryAcquireAll) and the share
// of it to hold: Weight of Capacity, as a Semaphore's share. 0 means 1, so
// Member{Name: name} is the lock name; a read-write lock's reader has
// Capacity RWCapacity and Weight 1, its writer Weight RWCapacity too.
type Member struct {
	Name             string
	Capacity, Weight uint32
}

// GroupLease is one name a Group holds, with its own fencing token.
type GroupLease struct {
	Name string
	// Token is the name's fencing token: it obeys the name's rule as a
	// Lease's does, whoever else holds the name alone or in groups.
	Token uint64
	// Weight is how much of the name's capacity the group holds of it.
	Weight int64
}

// Group is several names held together through a Client: granted all at
// once or not at all (LockAll, AcquireAll and their Try variants), each
// with its own fencing token, attached to one session like a Lease, and
// released together. Hand each name's Token to the resource it protects.
// A Group is safe for concurrent use.
type Group struct {
	l *lease
}

// LockAll acquires the locks names all at once, waiting until every one of
// them is free for it or ctx ends; it returns with every name or none (on a
// Redis Cluster whose names lie in several slots, the coordinator may hold
// some of them for the group while it waits for the others). It
// retries transient errors as Lock does; when ctx ends first, the error is
// a *NotAcquiredError that matches ErrNotAcquired and ctx's error.
//
// A waiting group keeps its place in the arrival order of every one of its
// names at once: a later request of one of them that would not fit beside
// it waits behind it (a stream of TryLocks of one name cannot starve the
// group), while requests of other names never wait for it. Groups never
// deadlock, whatever order their names are listed in. docs/groups.md says
// what "at once" means on each store.
//
// Each name may be listed once, and a group has 1 to MaxGroupMembers
// names: the coordinator refuses others with InvalidArgument. The group is attached
// as a Lease is (the default session, or WithSession's).
func (c *Client) LockAll(ctx context.Context, names []string, opts ...LockOption) (*Group, error) {
	return c.acquireAll(ctx, lockMembers(names), true, opts)
}

// TryLockAll acquires the locks names all at once if every one of them is
// free (and nobody is queued for it), without waiting, or none of them.
// Otherwise the error is a *NotAcquiredError matching ErrNotAcquired that
// names a name in the way and its holder. It is attached as LockAll's is.
func (c *Client) TryLockAll(ctx context.Context, names []string, opts ...LockOption) (*Group, error) {
	return c.acquireAll(ctx, lockMembers(names), false, opts)
}

// AcquireAll is LockAll for shares: it takes every member's weight of its
// name, of its capacity (locks, semaphore shares and read-write locks'
// readers or writers together), waiting as LockAll does. Every user of a
// name must agree on its capacity, as with Semaphore.
func (c *Client) AcquireAll(ctx context.Context, members []Member, opts ...LockOption) (*Group, error) {
	return c.acquireAll(ctx, members, true, opts)
}

// TryAcquireAll is TryLockAll for shares, as AcquireAll is LockAll's.
func (c *Client) TryAcquireAll(ctx context.Context, members []Member, opts ...LockOption) (*Group, error) {
	return c.acquireAll(ctx, members, false, opts)
}

func lockMembers(names []string) []Member {
	members := make([]Member, len(names))
	for i, name := range names {
		members[i] = Member{Name: name}
	}
	return members
}

func (c *Client) acquireAll(ctx context.Context, members []Member, wait bool, opts []LockOption) (*Group, error) {
	a := acquisition{kind: groupKind, names: make([]string, len(members)), call: c.tryAcquireGroup(members)}
	for i, m := range members {
		a.names[i] = m.Name
	}
	l, err := c.acquire(ctx, opts, wait, a)
	if err != nil {
		return nil, err
	}
	return &Group{l: l}, nil
}

// tryAcquireGroup asks for members at once.
func (c *Client) tryAcquireGroup(members []Member) acquireCall {
	asked := make([]*coordinatorv1.GroupMember, len(members))
	for i, m := range members {
		asked[i] = &coordinatorv1.GroupMember{Name: m.Name, Capacity: m.Capacity, Weight: m.Weight}
	}
	return func(ctx context.Context, holder string, session *Session, wait time.Duration) (grant, error) {
		req := &coordinatorv1.AcquireGroupRequest{Members: asked, Holder: holder, Ttl: durationpb.New(session.s.asked), SessionId: session.ID()}
		if wait > 0 {
			req.Wait = durationpb.New(wait)
		}
		resp, err := c.acquireGroupCall(ctx, req)
		if err != nil {
			return grant{}, err
		}
		if !resp.GetAcquired() {
			return grant{holder: resp.GetHolder(), blocked: resp.GetBlockedName()}, nil
		}
		if len(resp.GetLeases()) != len(asked) {
			// Internal: the outcome is unknown, and acquire gives up
			// whatever the holder was granted.
			return grant{}, status.Errorf(codes.Internal, "coordinator: a group of %d names was granted %d leases", len(asked), len(resp.GetLeases()))
		}
		g := grant{acquired: true, members: make([]GroupLease, len(asked))}
		for i, l := range resp.GetLeases() {
			g.members[i] = GroupLease{Name: asked[i].GetName(), Token: l.GetToken(), Weight: max(int64(l.GetWeight()), 1)}
		}
		return g, nil
	}
}

func groupLeases(members []GroupLease) []*coordinatorv1.GroupLease {
	leases := make([]*coordinatorv1.GroupLease, len(members))
	for i, m := range members {
		leases[i] = &coordinatorv1.GroupLease{Name: m.Name, Token: m.Token}
	}
	return leases
}

// Names are the group's names, in the order they were asked for.
func (g *Group) Names() []string {
	names := make([]string, len(g.l.members))
	for i, m := range g.l.members {
		names[i] = m.Name
	}
	return names
}

// Token is the fencing token of name, one of the group's names; 0 for a
// name not in the group.
func (g *Group) Token(name string) uint64 {
	for _, m := range g.l.members {
		if m.Name == name {
			return m.Token
		}
	}
	return 0
}

// Leases are the group's names with their tokens and weights, in the order
// they were asked for.
func (g *Group) Leases() []GroupLease { return append([]GroupLease(nil), g.l.members...) }

// Holder is who holds every name of the group: the Client's identity and a
// suffix unique to this acquisition.
func (g *Group) Holder() string { return g.l.holder }

// SessionID is the id of the session the group is attached to: the
// Client's default session, or WithSession's.
func (g *Group) SessionID() string { return g.l.session.id }

// TTL is the TTL of the group's session, as last granted.
func (g *Group) TTL() time.Duration { return g.l.session.currentTTL() }

// Deadline is when the group's session, and so the group, stops being
// valid by this process's clock unless the session is renewed before (see
// Session.Deadline). Meaningless once Done is closed.
func (g *Group) Deadline() time.Time { return g.l.session.currentDeadline() }

// Done is closed the moment the group ends: released, lost or expired with
// its session, or its Client closed. Err then says which. The names end
// together.
func (g *Group) Done() <-chan struct{} { return g.l.ended.Done() }

// Err is nil while the group is held; afterwards an error matching
// ErrReleased, ErrLost, ErrExpired or ErrClosed.
func (g *Group) Err() error { return g.l.err() }

// Context returns a context derived from parent that is cancelled when the
// group ends; context.Cause then returns Err.
func (g *Group) Context(parent context.Context) context.Context {
	return g.l.context(parent)
}

// Release closes Done (Err returns ErrReleased), then gives up every name
// of the group on the coordinator in one call, retrying transient errors
// until ctx ends. It reports whether the coordinator released any of them.
// A group no longer held (released already, lost, or given up by Close) is
// a no-op: false, and no error.
func (g *Group) Release(ctx context.Context) (bool, error) {
	return g.l.release(ctx, func(ctx context.Context) (bool, error) {
		resp, err := g.l.c.releaseGroupCall(ctx, &coordinatorv1.ReleaseGroupRequest{Holder: g.l.holder, Leases: groupLeases(g.l.members)})
		return resp.GetReleased(), err
	})
}

// String describes the group for logs.
func (g *Group) String() string {
	return fmt.Sprintf("%s held by %s", g.l.describe(), g.l.holder)
}
