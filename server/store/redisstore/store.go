package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/server/store"
)

// DefaultKeyPrefix prefixes every key when Options.KeyPrefix is empty.
const DefaultKeyPrefix = "coordinator"

// Options configures a Store.
type Options struct {
	// KeyPrefix starts every key and the pub/sub channel; default
	// DefaultKeyPrefix. It must not contain '{' or '}'.
	KeyPrefix string
	// Quarantine is how long grants are refused after a script found that
	// Redis lost its data, so that holders of lost leases see them expire
	// first; it should be at least the longest lease TTL. 0 disables it:
	// grants go on at once, with tokens still above all earlier ones.
	Quarantine time.Duration
	// LockDelay keeps the name of a lease that expired (rather than being
	// released) from being granted again for this long, so that a holder that
	// was only paused cannot act beside its successor. 0 disables it.
	LockDelay time.Duration
	// IdleNameTTL is how long a name's keys outlive its last use, at least
	// (at most a quarter more: see the package doc); 0 means
	// store.DefaultIdleNameTTL.
	IdleNameTTL time.Duration
	// CallTimeout bounds every store call; 0 means store.DefaultCallTimeout.
	// A call that Redis does not answer within it fails with
	// store.ErrUnavailable.
	CallTimeout time.Duration
	// NoPipelining sends every script call on its own instead of batching
	// concurrent calls into pipelines; for measuring the difference.
	NoPipelining bool
	// OnDataLoss, when set, is called once per detected data loss (by the
	// coordinator whose script detected it) with Quarantine, for metrics.
	// It runs on the calling goroutine and must not block.
	OnDataLoss func(quarantine time.Duration)
	// NewStore says that this deployment's Redis is new: data-loss markers
	// that New finds missing are written without a quarantine. Without it, a
	// missing marker at start means Redis lost its data while no coordinator
	// ran, and grants wait for Quarantine as after any data loss (a
	// deployment's very first start waits once, unless Init prepared the
	// Redis). It is meant for throwaway stores (tests, benchmarks, a
	// developer's Redis); left set on a real deployment, it changes nothing
	// while the markers exist, but a data loss while every coordinator was
	// down then goes unnoticed, as before markers were checked at start.
	// Data lost while a coordinator runs is detected either way.
	NewStore bool
	// MinReplicas, when above 0, makes every grant and renewal wait (Redis
	// WAIT, on the connection that ran the script) until that many replicas
	// acknowledged it. One that fewer replicas acknowledged within
	// ReplicaTimeout is not reported: the call fails with
	// store.ErrUnavailable and the lease is left to expire (a retry by the
	// same holder renews it and waits again). Not supported on a Cluster.
	MinReplicas int
	// ReplicaTimeout bounds the wait for replicas; 0 means half the call
	// timeout. It must be shorter than the call timeout, which bounds the
	// script and the wait together.
	ReplicaTimeout time.Duration
	// Logger receives warnings; default slog.Default().
	Logger *slog.Logger
}

// Store is a store.Store kept in Redis (standalone, Sentinel or Cluster):
// Leases run scripts, Changes listen on the events channel.
type Store struct {
	client     redis.UniversalClient
	ownsClient bool
	// cluster is true for a *redis.ClusterClient: data-loss markers are then
	// kept per hash slot.
	cluster bool
	prefix  string
	channel string
	marker  string // the data-loss marker's key (not on a Cluster)
	// scripts are this store's copies of the cycle's scripts, its
	// settings built in.
	scripts storeScripts
	// boxed are arguments that calls of a script pass, boxed once: boxing
	// an int64 for each call allocates.
	boxed struct {
		waiterTTL any
	}
	quarantineMS int64
	lockDelayMS  int64
	quarantine   time.Duration
	idleMS       int64
	callTimeout  time.Duration
	onDataLoss   func(time.Duration)
	log          *slog.Logger
	marks        marks
	replicas     replicaWait
	primary      primaryWatch
	infoRefused  sync.Once

	pipeline    *pipeliner // nil with Options.NoPipelining
	events      events
	attachments attachments
	reaper      reaper
	detacher    detacher
	sweeps      sweeps
	closeOnce   sync.Once
	closeErr    error
}

var _ store.Store = (*Store)(nil)

// New checks that Redis answers, warns when its eviction policy could drop
// keys, writes the data-loss markers and loads the scripts. The caller keeps
// ownership of client: Close does not close it.
func New(ctx context.Context, client redis.UniversalClient, opts Options) (*Store, error) {
	s, err := build(client, opts)
	if err != nil {
		return nil, err
	}
	s.events.init(s)

	if c, ok := client.(*redis.Client); ok {
		// Before the first connection, so that it records the primary.
		s.watchPrimary(c)
	}
	if !honoursDeadlines(client) {
		s.log.Warn("the Redis client does not honour context deadlines (go-redis ContextTimeoutEnabled): " +
			"a Redis that hangs holds calls for the client's read timeout rather than the store's call timeout")
	}
	if err := s.Ping(ctx); err != nil {
		return nil, err
	}
	if err := s.checkVersion(ctx); err != nil {
		return nil, err
	}
	s.checkEvictionPolicy(ctx)
	if err := s.checkMarkers(ctx, opts.NewStore); err != nil {
		return nil, err
	}
	for _, sc := range append(s.scripts.all(), sharedScripts...) {
		cctx, cancel := s.bound(ctx)
		err := sc.Load(cctx, client).Err()
		cancel()
		if err != nil {
			return nil, s.wrapErr(ctx, "load scripts", err)
		}
	}
	if !opts.NoPipelining {
		s.pipeline = newPipeliner(ctx, client, s.callTimeout, s.replicas)
	}
	s.startSweeps(ctx)
	return s, nil
}

// build checks opts and makes a Store on client, without a call to
// Redis yet.
func build(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if _, ok := client.(*redis.Ring); ok {
		return nil, errors.New("redisstore: redis.Ring is not supported: use a standalone, Sentinel or Cluster client")
	}
	prefix := opts.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisstore: key prefix %q must not contain '{' or '}'", prefix)
	}
	if opts.Quarantine < 0 {
		return nil, fmt.Errorf("redisstore: negative quarantine %s", opts.Quarantine)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	_, cluster := client.(*redis.ClusterClient)
	s := &Store{
		client:     client,
		cluster:    cluster,
		prefix:     prefix,
		channel:    prefix + eventsSuffix,
		marker:     prefix + markerSuffix,
		quarantine: opts.Quarantine,
		onDataLoss: opts.OnDataLoss,
		log:        log.With("component", "redisstore"),
		reaper:     reaper{due: make(map[string]time.Time)},
	}
	if opts.LockDelay < 0 {
		return nil, fmt.Errorf("redisstore: negative lock delay %s", opts.LockDelay)
	}
	if opts.IdleNameTTL < 0 || opts.CallTimeout < 0 {
		return nil, fmt.Errorf("redisstore: negative idle name TTL %s or call timeout %s", opts.IdleNameTTL, opts.CallTimeout)
	}
	s.lockDelayMS = opts.LockDelay.Milliseconds()
	if opts.Quarantine > 0 {
		s.quarantineMS = durationMS(opts.Quarantine)
	}
	s.idleMS = durationMS(cmp.Or(opts.IdleNameTTL, store.DefaultIdleNameTTL))
	s.callTimeout = cmp.Or(opts.CallTimeout, store.DefaultCallTimeout)
	s.boxed.waiterTTL = durationMS(store.DefaultWaiterTTL)
	s.scripts = newStoreScripts(s.quarantineMS, s.lockDelayMS, s.idleMS, s.sessionKeepMS(), s.channel)
	if err := s.setReplicas(opts); err != nil {
		return nil, err
	}
	return s, nil
}

// setReplicas checks Options.MinReplicas and ReplicaTimeout.
func (s *Store) setReplicas(opts Options) error {
	switch {
	case opts.MinReplicas < 0 || opts.ReplicaTimeout < 0:
		return fmt.Errorf("redisstore: negative min replicas %d or replica timeout %s", opts.MinReplicas, opts.ReplicaTimeout)
	case opts.MinReplicas == 0:
		return nil
	case s.cluster:
		// WAIT covers one connection: a Cluster pipeline spans several.
		return errors.New("redisstore: min replicas is not supported on a Redis Cluster")
	}
	timeout := cmp.Or(opts.ReplicaTimeout, s.callTimeout/2)
	if timeout >= s.callTimeout {
		return fmt.Errorf("redisstore: replica timeout %s must be shorter than the call timeout %s", timeout, s.callTimeout)
	}
	s.replicas = replicaWait{n: opts.MinReplicas, timeout: timeout}
	return nil
}

// honoursDeadlines reports whether go-redis bounds socket reads and writes
// by the call's context (package redisurl's clients do).
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// bound limits a call made for a caller whose context is ctx to the call
// timeout.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.callTimeout)
}

// call runs one script for a caller, bounded by the call timeout, and maps
// its error.
func (s *Store) call(ctx context.Context, op string, script *redis.Script, keys []string, args ...any) (any, error) {
	v, _, err := s.callWait(ctx, op, false, script, keys, args...)
	return v, err
}

// callWait is call for a script that may grant or renew a lease: with wait,
// WAIT for Options.MinReplicas follows it on its connection, and replicated
// reports the outcome, to be checked (by s.replicated) only when the script
// did grant or renew.
func (s *Store) callWait(ctx context.Context, op string, wait bool, script *redis.Script, keys []string, args ...any) (v any, replicated func() error, err error) {
	cmd, acked := s.run(ctx, time.Time{}, wait, script, keys, args...)
	if v, err = cmd.Result(); err != nil {
		return nil, nil, s.wrapErr(ctx, op, err)
	}
	if acked == nil {
		return v, noWait, nil
	}
	// Only the WAIT's outcome is kept.
	waitErr := s.checkAcked(ctx, op, acked)
	return v, func() error { return waitErr }, nil
}

func noWait() error { return nil }

// checkAcked maps the reply of the WAIT that followed a grant or renewal:
// fewer replicas than Options.MinReplicas acknowledging it is
// store.ErrUnavailable.
func (s *Store) checkAcked(ctx context.Context, op string, acked *redis.Cmd) error {
	n, err := acked.Int64()
	if err != nil {
		return s.wrapErr(ctx, op+": wait for replicas", err)
	}
	if n < int64(s.replicas.n) {
		return fmt.Errorf("redisstore: %s: %w: %d of %d replicas acknowledged the write within %s; "+
			"the lease is left to expire", op, store.ErrUnavailable, n, s.replicas.n, s.replicas.timeout)
	}
	return nil
}

// MinRedisVersion is the oldest Redis the store runs on: its scripts rely on
// Redis 7's replication of a script's effects (its writes, never the script
// itself, which reads TIME), which older versions need to be asked for at
// every call.
const MinRedisVersion = 7

// checkVersion refuses a Redis older than MinRedisVersion, on every master of
// a Cluster. A Redis whose INFO cannot be read (a renamed command) is only
// warned of.
func (s *Store) checkVersion(ctx context.Context) error {
	check := func(ctx context.Context, c redis.Cmdable, addr string) error {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			s.log.Warn("could not read the Redis version (INFO server): the store needs Redis 7 or newer",
				"addr", addr, "error", err)
			return nil
		}
		if err := versionError(info); err != nil {
			return fmt.Errorf("redisstore: %s: %w", addr, err)
		}
		return nil
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return check(ctx, c, c.Options().Addr)
		})
	}
	return check(ctx, s.client, "Redis")
}

// versionError reads redis_version from an INFO server reply: an error when
// it is older than MinRedisVersion, nil when newer or not there to read.
func versionError(info string) error {
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err == nil && n < MinRedisVersion {
			return fmt.Errorf("redis_version %s is older than %d.0, the oldest the store runs on", v, MinRedisVersion)
		}
		return nil
	}
	return nil
}

// checkEvictionPolicy warns unless every master runs maxmemory-policy
// noeviction.
func (s *Store) checkEvictionPolicy(ctx context.Context) {
	check := func(ctx context.Context, c redis.Cmdable, addr string) {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		policy, ok := res["maxmemory-policy"]
		if err != nil || !ok {
			s.log.Warn("could not check Redis maxmemory-policy (CONFIG may be disabled): make sure it is noeviction, "+
				"or an evicted fencing counter or lease breaks token monotonicity and mutual exclusion",
				"addr", addr, "error", err)
			return
		}
		if policy != "noeviction" {
			s.log.Warn("Redis maxmemory-policy is not noeviction: under memory pressure Redis may evict "+
				"a fencing counter (tokens no longer increase) or a lease (two holders at once); "+
				"set maxmemory-policy noeviction",
				"addr", addr, "maxmemory-policy", policy)
		}
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			check(ctx, c, c.Options().Addr)
			return nil
		})
		if err != nil {
			s.log.Warn("could not check Redis maxmemory-policy on the cluster's masters", "error", err)
		}
		return
	}
	check(ctx, s.client, "")
}

// checkMarkers writes the data-loss markers that are missing, quarantining
// the names they guard unless newStore (see Options.NewStore): a marker never
// expires, so one missing at start means Redis lost its data while no
// coordinator ran. On a Cluster each slot has its marker, so a shard that
// failed over to an empty replica quarantines its slots only.
func (s *Store) checkMarkers(ctx context.Context, newStore bool) error {
	missing, err := s.writeMarkers(ctx, newStore)
	if err != nil {
		return err
	}
	switch {
	case missing == 0:
	case newStore:
		s.log.Info("new store: wrote the data-loss markers", "markers", missing)
	default:
		s.log.Error("Redis lost its data while no coordinator ran (data-loss markers missing at start): "+
			"leases, queues and fencing counters may be gone; grants wait for the quarantine "+
			"(a brand-new Redis is initialised once with coordinator init-store)",
			"markers", missing, "quarantine", s.quarantine)
		s.marks.forget()
		if s.onDataLoss != nil {
			s.onDataLoss(s.quarantine)
		}
	}
	return nil
}

// writeMarkers runs start.lua on every data-loss marker: the missing ones
// are written, with a quarantine unless newStore, and their number returned.
func (s *Store) writeMarkers(ctx context.Context, newStore bool) (int64, error) {
	flag := ""
	if newStore {
		flag = "1"
	}
	if !s.cluster {
		cctx, cancel := s.bound(ctx)
		defer cancel()
		n, err := startScript.Run(cctx, s.client, []string{s.marker}, s.quarantineMS, flag).Int64()
		if err != nil {
			return 0, s.wrapErr(ctx, "check data-loss marker", err)
		}
		return n, nil
	}
	// 16384 calls: send the script's digest, not its source, each time.
	cctx, cancel := s.bound(ctx)
	err := startScript.Load(cctx, s.client).Err()
	cancel()
	if err != nil {
		return 0, s.wrapErr(ctx, "load scripts", err)
	}
	var missing int64
	for start := 0; start < numSlots; start += markerBatch {
		n, err := s.checkSlotMarkers(ctx, start, min(start+markerBatch, numSlots), flag)
		if err != nil {
			return 0, err
		}
		missing += n
	}
	return missing, nil
}

// markerBatch is how many slot markers one pipeline checks.
const markerBatch = 1024

// checkSlotMarkers runs start.lua for the markers of slots [from, to), one
// call a slot, in one pipeline, and returns how many were missing.
func (s *Store) checkSlotMarkers(ctx context.Context, from, to int, flag string) (int64, error) {
	cctx, cancel := s.bound(ctx)
	defer cancel()
	cmds := make([]*redis.Cmd, 0, to-from)
	_, _ = s.client.Pipelined(cctx, func(p redis.Pipeliner) error {
		for slot := from; slot < to; slot++ {
			cmds = append(cmds, startScript.EvalSha(cctx, p, []string{s.slotMarker(uint16(slot))}, s.quarantineMS, flag))
		}
		return nil
	})
	var missing int64
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// A shard restarted since the script was loaded.
			cmd = startScript.Run(cctx, s.client, []string{s.slotMarker(uint16(from + i))}, s.quarantineMS, flag)
		}
		n, err := cmd.Int64()
		if err != nil {
			return 0, s.wrapErr(ctx, "check data-loss markers", err)
		}
		missing += n
	}
	return missing, nil
}

// acquireArgs are acquire.lua's ARGV, by name: argv lays them out in the
// order of the script's header, which TestAcquireArgsFollowTheScript holds.
type acquireArgs struct {
	holder     string
	ttlMS      int64
	value      []byte
	capacity   int64
	weight     int64
	maxHolders int
	name       string
	// session is the id of the session to attach to, or ""; sessionTTL its
	// ttl (ms); proofs the proofs of sessions (attached.lua) but its own.
	session    string
	sessionTTL int64
	attachedAt int64 // the attach's time (ms, the session slot's clock)
	proofs     string
	waiter     string
	waiterTTL  any    // int64 ms, boxed once for the default
	expected   string // decimal token or ""
	keepValue  string // "1" or ""
}

// argv lays the arguments out, leaving out the trailing ones that are ""
// (the script reads an absent one as ""; the waiter's ttl goes with the
// waiter, the session's ttl with the session): each costs Redis about 1k
// instructions, and a grant of its own that does not wait needs none of
// them, an attached one only its session, the session's ttl and the
// attach's time.
func (a acquireArgs) argv() []any {
	v := []any{a.holder, a.ttlMS, a.value, a.capacity, a.weight, a.maxHolders, a.name,
		a.session, a.sessionTTL, a.attachedAt, a.proofs, a.waiter, a.waiterTTL, a.expected, a.keepValue}
	switch {
	case a.keepValue != "":
		return v
	case a.expected != "":
		return v[:14]
	case a.waiter != "":
		return v[:13]
	case a.proofs != "":
		return v[:11]
	case a.session != "":
		return v[:10]
	}
	return v[:7]
}

// asked is the grant req would get from this call: acquire.lua's reply
// for a grant as asked carries only its token and expiry.
func (a acquireArgs) asked(req store.AcquireRequest) store.Lease {
	l := store.Lease{Name: req.Name, Holder: req.Holder, Value: req.Value, TTL: time.Duration(a.ttlMS) * time.Millisecond,
		Weight: a.weight, Session: a.session}
	if a.session != "" {
		l.TTL = time.Duration(a.sessionTTL) * time.Millisecond
	}
	return l
}

// acquireArgs lays out req for acquire.lua, but for its session's proofs
// and remaining time (Acquire adds them).
func (s *Store) acquireArgs(req store.AcquireRequest, capacity, weight int64) acquireArgs {
	args := acquireArgs{
		capacity: capacity, weight: weight, maxHolders: req.MaxHoldersOrDefault(),
		holder: req.Holder, ttlMS: durationMS(req.TTL), value: req.Value, waiter: req.Waiter, waiterTTL: s.boxed.waiterTTL,
		name: req.Name,
	}
	if req.WaiterTTL > 0 {
		args.waiterTTL = durationMS(req.WaiterTTL)
	}
	if req.KeepValue {
		args.keepValue = "1"
	}
	if req.Token != 0 {
		args.expected = strconv.FormatUint(req.Token, 10)
	}
	return args
}

// Acquire implements store.Leases.
//
// With a Session, it asks the session's slot first (as its owner, adding
// the name to the session's names) for the session's remaining time, which
// becomes the grant's bound. A name holding grants of sessions whose bounds
// passed asks for proofs of those sessions: they are fetched from their
// slots, and the call made again with them (see doc.go).
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if req.TTL <= 0 && req.Session == "" {
		return store.AcquireResult{}, fmt.Errorf("redisstore: acquire %q: ttl %s is not positive", req.Name, req.TTL)
	}
	capacity, weight := req.CapacityOrDefault(), req.WeightOrDefault()
	if capacity > store.MaxCapacity || weight > capacity {
		return store.AcquireResult{}, fmt.Errorf("redisstore: acquire %q: weight %d, capacity %d: want 1 <= weight <= capacity <= %d",
			req.Name, weight, capacity, store.MaxCapacity)
	}
	args := s.acquireArgs(req, capacity, weight)
	proofs := proofSet{}
	if req.Session != "" {
		if p, ok := s.attachments.proof(req.Session, req.SessionOwner, req.Name, time.Now()); ok {
			proofs[req.Session] = p
		} else if err := s.proveOwn(ctx, proofs, req); err != nil {
			return store.AcquireResult{}, err
		}
		args.session = req.Session
	}
	k := s.keys(req.Name)
	var reply acquireReply
	var replicated func() error
	attempt := func(text string) ([]string, error) {
		args.proofs = text
		if req.Session != "" {
			own, ok := proofs.left(req.Session, time.Now())
			if !ok {
				// Spent while other proofs were fetched: ask again.
				if err := s.proveOwn(ctx, proofs, req); err != nil {
					return nil, err
				}
				own, _ = proofs.left(req.Session, time.Now())
			}
			p := proofs[req.Session]
			args.ttlMS, args.sessionTTL, args.attachedAt = own, p.ttl.Milliseconds(), p.attachedAt
		}
		v, rep, err := s.callWait(ctx, "acquire", true, s.scripts.acquire,
			[]string{k.lease, k.queue, k.waiters, k.marker}, args.argv()...)
		if err != nil {
			return nil, err
		}
		if reply, err = decodeAcquire(args.asked(req), v); err != nil {
			return nil, err
		}
		if reply.lost {
			s.dataLost()
		}
		replicated = rep
		return reply.need, nil
	}
	// The script makes the attaching session's own proof from ttlMS, no
	// later than the one the proofs hold: only the others' travel. A name
	// that refuses the attach (detached from the session since) is
	// attached again: that puts it back among the session's names.
	for round := 1; ; round++ {
		if err := s.withProofs(ctx, proofs, req.Session, attempt); err != nil {
			return store.AcquireResult{}, err
		}
		if !reply.detached {
			break
		}
		s.attachments.detached(req.Session, req.Name)
		if round == maxProofRounds {
			return store.AcquireResult{}, fmt.Errorf("redisstore: acquire %q: %w: the name kept detaching its session (%d attaches)",
				req.Name, store.ErrUnavailable, round)
		}
		if err := s.proveOwn(ctx, proofs, req); err != nil {
			return store.AcquireResult{}, err
		}
	}
	switch {
	case reply.quarantined:
		return store.AcquireResult{}, &store.QuarantineError{RetryAfter: reply.retryAfter}
	case reply.capacity != 0:
		return store.AcquireResult{}, &store.CapacityError{Name: req.Name, Have: reply.capacity, Asked: capacity}
	case reply.holderLimit != 0:
		return store.AcquireResult{}, &store.HolderLimitError{Name: req.Name, Limit: reply.holderLimit}
	}
	if reply.result.Acquired {
		if err := replicated(); err != nil {
			return store.AcquireResult{}, err
		}
	}
	return reply.result, nil
}

// dataLost reports a data loss detected by this store's script.
func (s *Store) dataLost() {
	s.log.Error("Redis lost its data (data-loss marker missing): leases, queues and fencing counters are gone; "+
		"tokens are re-seeded from the Redis clock", "quarantine", s.quarantine)
	s.marks.forget() // the watched marks are gone too
	if s.onDataLoss != nil {
		s.onDataLoss(s.quarantine)
	}
}

// Renew implements store.Leases.
func (s *Store) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (store.Lease, error) {
	if ttl <= 0 {
		return store.Lease{}, fmt.Errorf("redisstore: renew %q: ttl %s is not positive", name, ttl)
	}
	k := s.keys(name)
	ttlMS := durationMS(ttl)
	v, replicated, err := s.callWait(ctx, "renew", true, s.scripts.renew, []string{k.lease},
		holder, strconv.FormatUint(token, 10), ttlMS)
	if err != nil {
		return store.Lease{}, err
	}
	l, err := decodeRenew(name, v)
	if err != nil {
		return store.Lease{}, err
	}
	if err := replicated(); err != nil {
		return store.Lease{}, err
	}
	return l, nil
}

// releaseArgs are release.lua's ARGV.
func (s *Store) releaseArgs(name, holder string, token uint64) []any {
	return []any{holder, strconv.FormatUint(token, 10), name}
}

// Release implements store.Leases.
func (s *Store) Release(ctx context.Context, name, holder string, token uint64) (bool, error) {
	k := s.keys(name)
	v, err := s.call(ctx, "release", s.scripts.release, []string{k.lease}, s.releaseArgs(name, holder, token)...)
	if err != nil {
		return false, err
	}
	released, session, err := decodeRelease(v)
	if session != "" {
		s.detacher.released(session, name, time.Now())
	}
	return released, err
}

// Dequeue implements store.Leases.
func (s *Store) Dequeue(ctx context.Context, name, waiter string) error {
	k := s.keys(name)
	v, err := s.call(ctx, "dequeue", dequeueScript, []string{k.queue, k.waiters}, waiter, s.channel, name)
	if err != nil {
		return err
	}
	_, err = decodeDequeue(v)
	return err
}

// Describe implements store.Leases.
func (s *Store) Describe(ctx context.Context, name string) (store.Description, error) {
	k := s.keys(name)
	var d store.Description
	err := s.withProofs(ctx, proofSet{}, "", func(proofs string) ([]string, error) {
		v, err := s.call(ctx, "describe", describeScript, []string{k.lease, k.queue, k.waiters},
			proofs, s.lockDelayMS, s.sessionKeepMS())
		if err != nil {
			return nil, err
		}
		var need []string
		d, need, err = decodeDescribe(name, v)
		return need, err
	})
	return d, err
}

// List implements store.Leases. It SCANs the whole key space (every master of
// a cluster) for lease keys, keeps those of each page that hold an unexpired
// lease (one HMGET a key, pipelined: a lease key outlives its lease, keeping
// the fencing counter), only the limit+1 first names after cursor, then reads
// those leases; it is meant for debugging. Each round trip is bounded by the
// call timeout, not the whole listing.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) (store.ListPage, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	pattern := globEscape(s.prefix) + ":{" + globEscape(encodePrefix(prefix)) + "*}" + leaseSuffix

	var mu sync.Mutex
	var names []string
	keep := limit + 1
	add := func(found []string) {
		mu.Lock()
		defer mu.Unlock()
		names = append(names, found...)
		if len(names) > 4*keep {
			slices.Sort(names)
			names = slices.Compact(names)
			names = names[:min(keep, len(names))]
		}
	}
	// held keeps the names of keys whose lease had not expired by Redis'
	// clock when the listing began; describeMany reads them again.
	tctx, cancel := s.bound(ctx)
	start, err := s.client.Time(tctx).Result()
	cancel()
	if err != nil {
		return store.ListPage{}, s.wrapErr(ctx, "list", err)
	}
	held := func(ctx context.Context, c redis.Cmdable, keys []string) ([]string, error) {
		var candidates []string
		var ckeys []string
		for _, key := range keys {
			name, ok := s.leaseKeyName(key)
			if !ok || !strings.HasPrefix(name, prefix) || (cursor != "" && name <= cursor) {
				continue
			}
			candidates, ckeys = append(candidates, name), append(ckeys, key)
		}
		if len(candidates) == 0 {
			return nil, nil
		}
		cctx, cancel := s.bound(ctx)
		defer cancel()
		cmds := make([]*redis.SliceCmd, len(ckeys))
		if _, err := c.Pipelined(cctx, func(p redis.Pipeliner) error {
			for i, key := range ckeys {
				cmds[i] = p.HMGet(cctx, key, "sum") // no redis.Nil to fail the pipeline
			}
			return nil
		}); err != nil {
			return nil, err
		}
		var out []string
		for i, cmd := range cmds {
			// 'sum' (holders.lua) is n:used:low:high[:slow]: high at
			// least the latest expiry of the grants; slow says grants are
			// attached to sessions, whose bounds may be stale: describe
			// settles them.
			v := cmd.Val()
			if len(v) != 1 || v[0] == nil {
				continue
			}
			sum, _ := v[0].(string)
			parts := strings.Split(sum, ":")
			if len(parts) > 4 {
				out = append(out, candidates[i])
				continue
			}
			if len(parts) < 4 {
				continue
			}
			if ms, err := strconv.ParseInt(parts[3], 10, 64); err == nil && ms > start.UnixMilli() {
				out = append(out, candidates[i])
			}
		}
		return out, nil
	}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cur uint64
		for {
			cctx, cancel := s.bound(ctx)
			keys, next, err := c.Scan(cctx, cur, pattern, 1000).Result()
			cancel()
			if err != nil {
				return err
			}
			found, err := held(ctx, c, keys)
			if err != nil {
				return err
			}
			add(found)
			if next == 0 {
				return nil
			}
			cur = next
		}
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.client)
	}
	if err != nil {
		return store.ListPage{}, s.wrapErr(ctx, "list", err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var page store.ListPage
	if len(names) > limit {
		names = names[:limit]
		page.Next = names[limit-1]
	}
	descs, err := s.describeMany(ctx, names)
	if err != nil {
		return store.ListPage{}, err
	}
	for _, d := range descs {
		// Only the live grants: one may have expired since the scan.
		page.Leases = append(page.Leases, d.Holders...)
	}
	return page, nil
}

// describeMany runs describe.lua for each name in one pipeline.
func (s *Store) describeMany(ctx context.Context, names []string) ([]store.Description, error) {
	if len(names) == 0 {
		return nil, nil
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	cmds := make([]*redis.Cmd, len(names))
	_, _ = s.client.Pipelined(cctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			k := s.keys(name)
			cmds[i] = describeScript.EvalSha(cctx, p, []string{k.lease, k.queue, k.waiters}, "", s.lockDelayMS, s.sessionKeepMS())
		}
		return nil
	})
	out := make([]store.Description, len(names))
	for i, name := range names {
		v, err := cmds[i].Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			k := s.keys(name)
			v, err = describeScript.Run(cctx, s.client, []string{k.lease, k.queue, k.waiters}, "", s.lockDelayMS, s.sessionKeepMS()).Result()
		}
		if err != nil {
			return nil, s.wrapErr(ctx, "list", err)
		}
		d, need, err := decodeDescribe(name, v)
		if err == nil && len(need) > 0 {
			// Attached grants whose bounds passed: with their proofs.
			d, err = s.Describe(ctx, name)
		}
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// Changes implements store.Notifier. Every Changes shares one Redis
// subscription, started by the first call.
func (s *Store) Changes(name string) *store.Changes {
	return s.events.changes(name)
}

// RefreshWaiters implements store.Leases.
func (s *Store) RefreshWaiters(ctx context.Context, name string, waiters []string, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("redisstore: refresh waiters of %q: ttl %s is not positive", name, ttl)
	}
	if len(waiters) == 0 {
		return nil
	}
	k := s.keys(name)
	keys := []string{k.queue, k.waiters, k.lease}
	args := make([]any, 0, 3+min(len(waiters), refreshWaitersBatch))
	for batch := range slices.Chunk(waiters, refreshWaitersBatch) {
		args = append(args[:0], durationMS(ttl), s.channel, name)
		for _, w := range batch {
			args = append(args, w)
		}
		cmd, _ := s.runAside(ctx, time.Time{}, false, refreshWaitersScript, keys, args...)
		v, err := cmd.Result()
		if err != nil {
			return s.wrapErr(ctx, "refresh waiters", err)
		}
		if _, err := decodeRefresh(v); err != nil {
			return err
		}
	}
	return nil
}

// refreshWaitersBatch is how many waiters one script call of
// RefreshWaiters refreshes. A line's refresh is the one call whose work
// grows with a queue (a ZADD of every parked waiter, about half a
// millisecond of Redis per thousand), and Redis runs a script alone: so
// the batches of a long line go one after another, each on a connection of
// its own, and neither Redis nor this coordinator's pipeline, where a
// handoff may be waiting, is held up for longer than one batch.
const refreshWaitersBatch = 250

// Ping implements store.Leases: Redis answers PING within the call timeout.
func (s *Store) Ping(ctx context.Context) error {
	cctx, cancel := s.bound(ctx)
	defer cancel()
	return s.wrapErr(ctx, "ping", s.client.Ping(cctx).Err())
}

// Close stops the subscription, closing every Changes channel, and, for a
// Store made by NewFromURL, closes the client. It is safe to call more than
// once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stopSweeps()
		s.events.close()
		if s.pipeline != nil {
			s.pipeline.close()
		}
		if s.ownsClient {
			s.closeErr = s.client.Close()
		}
	})
	return s.closeErr
}

// run runs a script for a caller whose context is ctx, in a pipeline with
// concurrent calls unless pipelining is off, followed by WAIT on the same
// connection when wait and Options.MinReplicas ask for it; acked is that
// WAIT, or nil. The call times out at deadline, or when it is zero after the
// call timeout.
func (s *Store) run(ctx context.Context, deadline time.Time, wait bool, script *redis.Script, keys []string, args ...any) (cmd, acked *redis.Cmd) {
	if s.pipeline == nil {
		return s.runAside(ctx, deadline, wait, script, keys, args...)
	}
	call := newScriptCall()
	call.deadline, call.script, call.keys, call.args, call.wait = deadline, script, keys, args, wait
	return s.pipeline.run(ctx, call)
}

// runAside is run on a connection of its own, outside the pipeline: for
// every call when pipelining is off, and for a call long enough to hold up
// the calls that would share its pipeline.
func (s *Store) runAside(ctx context.Context, deadline time.Time, wait bool, script *redis.Script, keys []string, args ...any) (cmd, acked *redis.Cmd) {
	call := newScriptCall()
	call.deadline, call.script, call.keys, call.args, call.wait = deadline, script, keys, args, wait
	if call.deadline.IsZero() {
		call.deadline = time.Now().Add(s.callTimeout)
	}
	runAlone(ctx, s.client, call, s.replicas)
	return answer(call)
}

// durationMS rounds d up to whole milliseconds, at least 1.
func durationMS(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}
