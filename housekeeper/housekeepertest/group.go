// Package housekeepertest helps test and benchmark the housekeeper: an
// in-memory membership standing in for the coordinator and its elected
// leader, and a writer of queues laid out in Redis exactly as Deckard lays
// them out.
package housekeepertest

import (
	"slices"
	"sync"
	"time"

	"github.com/coordinator-dev/coordinator/housekeeper"
)

// Group is an in-memory membership shared by the Runners of a test, as one
// coordinator and its elected leader keep it: each Join and Leave publishes
// a new view at once, under a token above every earlier view's.
type Group struct {
	mu      sync.Mutex
	token   uint64
	view    housekeeper.View
	changed chan struct{}
}

// NewGroup returns a Group with no member.
func NewGroup() *Group { return &Group{changed: make(chan struct{})} }

// View is the view in force.
func (g *Group) View() housekeeper.View {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.view
}

func (g *Group) publishLocked(members []string) {
	g.token++
	g.view = housekeeper.NewView(g.token, members)
	close(g.changed)
	g.changed = make(chan struct{})
}

// Join adds id and publishes the new view.
func (g *Group) Join(id string) *Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := &Member{g: g, id: id, live: true}
	g.publishLocked(append(slices.Clone(g.view.Members), id))
	return m
}

// Member is one instance's housekeeper.Membership in a Group.
type Member struct {
	g  *Group
	id string

	// Guarded by g.mu.
	live   bool
	frozen *housekeeper.View // the view it keeps seeing while frozen
	frozeC chan struct{}
}

// ID implements housekeeper.Membership.
func (m *Member) ID() string { return m.id }

// View implements housekeeper.Membership.
func (m *Member) View() (housekeeper.View, <-chan struct{}) {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if m.frozen != nil {
		return *m.frozen, m.frozeC
	}
	if !m.live {
		return housekeeper.View{}, m.g.changed
	}
	return m.g.view, m.g.changed
}

// Live implements housekeeper.Membership.
func (m *Member) Live() bool {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	return m.live
}

// Deadline implements housekeeper.Membership: a live member's membership
// holds for another minute (a test's member never expires by time), a
// member that left has none.
func (m *Member) Deadline() time.Time {
	if !m.Live() {
		return time.Time{}
	}
	return time.Now().Add(time.Minute)
}

// Leave ends the membership and publishes a view without it, as a clean
// shutdown or a lease the leader saw expire does.
func (m *Member) Leave() {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if !m.live {
		return
	}
	m.live = false
	m.g.publishLocked(slices.DeleteFunc(slices.Clone(m.g.view.Members), func(id string) bool { return id == m.id }))
}

// Freeze keeps the member on the view in force, live, whatever the group
// publishes next: an instance that is cut off, or paused, and does not know
// it yet. Thaw undoes it.
func (m *Member) Freeze() {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	v := m.g.view
	m.frozen, m.frozeC = &v, make(chan struct{})
}

// Thaw lets the member see the group's views again.
func (m *Member) Thaw() {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if m.frozen != nil {
		close(m.frozeC)
		m.frozen, m.frozeC = nil, nil
	}
}

// Evict publishes a view without the member while leaving it live in its
// own eyes: with Freeze, an instance paused past its membership that goes
// on working under the view it had.
func (m *Member) Evict() {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	m.g.publishLocked(slices.DeleteFunc(slices.Clone(m.g.view.Members), func(id string) bool { return id == m.id }))
}
