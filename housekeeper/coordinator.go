package housekeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
)

// Defaults of MembershipConfig's zero fields.
const (
	DefaultMembershipTTL = time.Second
	DefaultElection      = "housekeeper/leader"
)

// releaseTimeout bounds the release of the membership and the leadership
// at shutdown.
const releaseTimeout = 2 * time.Second

// MembershipConfig configures a CoordinatorMembership. Zero fields take the
// defaults.
type MembershipConfig struct {
	// ID names this instance in views; unique per instance. The client's
	// Identity when empty.
	ID string
	// Namespace, when set, prefixes every coordinator name:
	// "<ns>/housekeeper/members/<id>" instead of "housekeeper/members/<id>".
	Namespace string
	// Election is the election whose leader publishes the views, under
	// Namespace; DefaultElection.
	Election string
	// TTL of the session the membership lease and the leadership are held
	// in; DefaultMembershipTTL.
	// A killed instance's queues are taken over within TTL + CheckInterval.
	TTL time.Duration
	// CheckInterval is how often the leader lists the members; TTL/4 when zero.
	CheckInterval time.Duration
	// OnLeading, when set, is called with true when this instance is
	// elected and with false when its term ends.
	OnLeading func(leading bool)
	Logger    *slog.Logger // slog.Default() when nil
}

// CoordinatorMembership is the Membership of a real deployment, kept by the
// coordinator with three names (behind the namespace):
//
//	housekeeper/members/<id>   a lease each instance holds while it runs (TTL)
//	housekeeper/leader         the election whose leader publishes the views
//	housekeeper/view           granted and released at once by the leader for
//	                           each new view: its token is the view's
//
// The leader lists the members every CheckInterval and, when they differ
// from the view in force, proclaims a new view as the election's value;
// every instance observes the election. The cost is one renewed session per
// instance (the SDK renews it about every TTL/3) and the leader's listing,
// whatever the number of queues.
type CoordinatorMembership struct {
	c   *client.Client
	cfg MembershipConfig
	log *slog.Logger

	lease atomic.Pointer[client.Lease] // the membership while held

	// The session of cfg.TTL that the membership and the leadership are
	// held in: made on first need, and again after one ended.
	sessionMu sync.Mutex
	session   *client.Session

	mu      sync.Mutex
	view    View
	changed chan struct{} // closed when view changes
}

// NewCoordinatorMembership returns the membership of c's instance; Run
// keeps it.
func NewCoordinatorMembership(c *client.Client, cfg MembershipConfig) (*CoordinatorMembership, error) {
	if c == nil {
		return nil, errors.New("housekeeper: nil coordinator client")
	}
	if cfg.ID == "" {
		cfg.ID = c.Identity()
	}
	if strings.Contains(cfg.ID, "/") {
		return nil, fmt.Errorf("housekeeper: instance id %q must not contain '/'", cfg.ID)
	}
	switch {
	case cfg.TTL < 0:
		return nil, fmt.Errorf("housekeeper: membership TTL %v is negative", cfg.TTL)
	case cfg.TTL == 0:
		cfg.TTL = DefaultMembershipTTL
	}
	switch {
	case cfg.CheckInterval < 0:
		return nil, fmt.Errorf("housekeeper: membership check interval %v is negative", cfg.CheckInterval)
	case cfg.CheckInterval == 0:
		cfg.CheckInterval = cfg.TTL / 4
	}
	if cfg.Namespace != "" {
		cfg.Namespace = strings.TrimSuffix(cfg.Namespace, "/") + "/"
	}
	if cfg.Election == "" {
		cfg.Election = DefaultElection
	}
	cfg.Election = cfg.Namespace + cfg.Election
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &CoordinatorMembership{
		c:       c,
		cfg:     cfg,
		log:     log.With("component", "housekeeper-membership", "instance", cfg.ID),
		changed: make(chan struct{}),
	}, nil
}

// ID implements Membership.
func (m *CoordinatorMembership) ID() string { return m.cfg.ID }

// View implements Membership.
func (m *CoordinatorMembership) View() (View, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view, m.changed
}

// Live implements Membership: the membership lease is held, and not past
// its deadline by this process's clock.
func (m *CoordinatorMembership) Live() bool {
	l := m.lease.Load()
	return l != nil && !isDone(l)
}

// Deadline implements Membership: the membership lease's deadline by this
// process's clock; the zero time while none is held.
func (m *CoordinatorMembership) Deadline() time.Time {
	if l := m.lease.Load(); l != nil {
		return l.Deadline()
	}
	return time.Time{}
}

// setView replaces the view; offer only with a newer one.
func (m *CoordinatorMembership) setView(v View, onlyNewer bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if onlyNewer && v.Token <= m.view.Token {
		return
	}
	if v.Token == m.view.Token && slices.Equal(v.Members, m.view.Members) {
		return
	}
	m.view = v
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *CoordinatorMembership) memberPrefix() string {
	return m.cfg.Namespace + "housekeeper/members/"
}

// Run keeps the membership until ctx ends: it holds the membership lease
// (taking it again after a loss), observes the views, and campaigns to
// publish them. Then it releases the lease and, if leading, resigns, and
// returns nil. It returns an error only when the coordinator refuses its
// names outright (the client was closed, the credential may not use them).
func (m *CoordinatorMembership) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var leadErr error
	wg.Go(func() {
		if leadErr = m.lead(ctx); leadErr != nil {
			cancel() // the election is refused: membership is pointless
		}
	})
	err := m.hold(ctx)
	cancel()
	wg.Wait()
	m.sessionMu.Lock()
	if m.session != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = m.session.Close(rctx) // else it expires within its TTL
		cancel()
	}
	m.sessionMu.Unlock()
	return errors.Join(err, leadErr)
}

// liveSession returns the session to hold the membership and the
// leadership in, of cfg.TTL, making a new one when the last ended.
func (m *CoordinatorMembership) liveSession(ctx context.Context) (*client.Session, error) {
	m.sessionMu.Lock()
	defer m.sessionMu.Unlock()
	if m.session != nil && m.session.Err() == nil {
		return m.session, nil
	}
	s, err := m.c.NewSession(ctx, client.WithTTL(m.cfg.TTL))
	if err != nil {
		return nil, err
	}
	m.session = s
	return s, nil
}

// inSession runs acquire in the live session.
func inSession[T any](ctx context.Context, m *CoordinatorMembership, acquire func(client.LockOption) (T, error)) (T, error) {
	s, err := m.liveSession(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	return acquire(client.WithSession(s))
}

// hold takes the membership lease, waiting while another process holds it
// (an earlier run of this instance whose lease has not expired), and
// observes the views while it holds it. Views are only taken from an
// observation begun under the lease held now, so that an instance whose
// membership lapsed works under no view older than its return.
func (m *CoordinatorMembership) hold(ctx context.Context) error {
	b := backoff.New(100*time.Millisecond, 5*time.Second)
	name := m.memberPrefix() + m.cfg.ID
	for ctx.Err() == nil {
		lease, err := inSession(ctx, m, func(in client.LockOption) (*client.Lease, error) { return m.c.Lock(ctx, name, in) })
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if refused(err) {
				return fmt.Errorf("housekeeper: membership %q: %w", name, err)
			}
			m.log.Warn("cannot take the membership lease; retrying", "lease", name, "err", err)
			if !sleepCtx(ctx, b.Next()) {
				break
			}
			continue
		}
		b.Reset()
		m.lease.Store(lease)
		m.log.Info("joined", "lease", name, "token", lease.Token())
		lctx := lease.Context(ctx)
		m.observe(lctx)
		m.lease.Store(nil)
		m.setView(View{}, false)
		switch {
		case ctx.Err() != nil:
			m.release(ctx, name, lease)
			return nil
		case !isDone(lease):
			// Observe ended under a live lease: the coordinator refused it,
			// or the client is closing. Leave, and join again later.
			m.log.Warn("observing the election ended; leaving the membership to join again", "election", m.cfg.Election)
			m.release(ctx, name, lease)
			if !sleepCtx(ctx, b.Next()) {
				return nil
			}
		default:
			m.log.Warn("membership lost; working nothing until it is back", "lease", name, "err", lease.Err())
		}
	}
	return nil
}

// release gives the membership back, within releaseTimeout even when ctx
// has ended; a release that fails leaves the lease to expire.
func (m *CoordinatorMembership) release(ctx context.Context, name string, lease *client.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, err := lease.Release(rctx); err != nil {
		m.log.Warn("releasing the membership failed; it expires within its TTL", "lease", name, "err", err)
	}
}

// observe takes every view the election's leader proclaims until ctx ends.
// Values that are no view (a newly elected leader's empty campaign value)
// are skipped: the view in force stays until the leader proclaims another.
func (m *CoordinatorMembership) observe(ctx context.Context) {
	for ev := range m.c.Observe(ctx, m.cfg.Election) {
		if ev.Kind == client.Vacant {
			continue
		}
		if v, err := DecodeView(ev.Leader.Value); err == nil {
			m.setView(v, true)
		}
	}
}

// lead campaigns until ctx ends and publishes the views while elected.
// Only a member campaigns, so that a leader's first view has itself in it.
func (m *CoordinatorMembership) lead(ctx context.Context) error {
	b := backoff.New(100*time.Millisecond, 5*time.Second)
	for ctx.Err() == nil {
		if !m.Live() {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		e, err := inSession(ctx, m, func(in client.LockOption) (*client.Leadership, error) {
			return m.c.Campaign(ctx, m.cfg.Election, nil, in)
		})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if refused(err) {
				return fmt.Errorf("housekeeper: election %q: %w", m.cfg.Election, err)
			}
			m.log.Warn("cannot campaign; retrying", "election", m.cfg.Election, "err", err)
			if !sleepCtx(ctx, b.Next()) {
				break
			}
			continue
		}
		b.Reset()
		m.log.Info("elected leader", "election", m.cfg.Election, "term", e.Term())
		if m.cfg.OnLeading != nil {
			m.cfg.OnLeading(true)
		}
		m.publish(e.Context(ctx), e)
		if m.cfg.OnLeading != nil {
			m.cfg.OnLeading(false)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_, _ = e.Resign(rctx) // else it ends with its session
		cancel()
		m.log.Info("no longer leader", "election", m.cfg.Election, "term", e.Term(), "reason", e.Err())
	}
	return nil
}

// publish lists the members every CheckInterval while leading and
// proclaims a view whenever they differ from the one proclaimed. The first
// proclamation of a term restates the view in force when its members are
// still the same, so that leader changes do not move queues.
func (m *CoordinatorMembership) publish(ctx context.Context, e *client.Leadership) {
	var proclaimed View
	t := time.NewTicker(m.cfg.CheckInterval)
	defer t.Stop()
	for {
		if members, err := m.members(ctx); err != nil {
			if ctx.Err() == nil {
				m.log.Warn("cannot list the members", "err", err)
			}
		} else if proclaimed.Token == 0 || !slices.Equal(members, proclaimed.Members) {
			if v, err := m.proclaim(ctx, e, members); err != nil {
				if ctx.Err() == nil {
					m.log.Warn("cannot publish a view", "members", len(members), "err", err)
				}
			} else {
				proclaimed = v
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// proclaim publishes members: the view in force again when it has them,
// else a new view under a fresh token.
func (m *CoordinatorMembership) proclaim(ctx context.Context, e *client.Leadership, members []string) (View, error) {
	v, _ := m.View()
	if v.Token == 0 || !slices.Equal(v.Members, members) {
		token, err := m.freshToken(ctx)
		if err != nil {
			return View{}, err
		}
		v = NewView(token, members)
	}
	if err := e.Proclaim(ctx, v.Encode()); err != nil {
		return View{}, fmt.Errorf("proclaim view %d: %w", v.Token, err)
	}
	m.log.Info("view published", "token", v.Token, "members", len(v.Members))
	m.setView(v, true) // at once, rather than when the leader's own Observe hears it
	return v, nil
}

// freshToken is a token above every earlier view's: a grant of the view
// name, released at once.
func (m *CoordinatorMembership) freshToken(ctx context.Context) (uint64, error) {
	name := m.cfg.Namespace + "housekeeper/view"
	l, err := inSession(ctx, m, func(in client.LockOption) (*client.Lease, error) { return m.c.TryLock(ctx, name, in) })
	if err != nil {
		return 0, fmt.Errorf("view token %q: %w", name, err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_, _ = l.Release(rctx) // else it ends with its session; the token stands either way
	return l.Token(), nil
}

// members lists the instances holding a membership lease, sorted.
func (m *CoordinatorMembership) members(ctx context.Context) ([]string, error) {
	prefix := m.memberPrefix()
	var ids []string
	for page := ""; ; {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.TTL)
		resp, err := m.c.API().List(cctx, &coordinatorv1.ListRequest{Prefix: prefix, PageSize: 1000, PageToken: page})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", prefix, err)
		}
		for _, l := range resp.GetLeases() {
			if id, ok := strings.CutPrefix(l.GetName(), prefix); ok && id != "" {
				ids = append(ids, id)
			}
		}
		if page = resp.GetNextPageToken(); page == "" {
			break
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// refused reports an error that retrying cannot mend: the client was
// closed, or the coordinator refuses the name or the credential.
func refused(err error) bool {
	switch client.ErrorReason(err) {
	case "INVALID_FIELD", "PERMISSION_DENIED":
		return true
	}
	return errors.Is(err, client.ErrClosed) || status.Code(err) == codes.Unauthenticated
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
