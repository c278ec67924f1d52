package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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

	// Before the first connection, so that it records the primaries.
	var cw *clusterWatch
	switch c := client.(type) {
	case *redis.Client:
		s.watchPrimary(c)
	case *redis.ClusterClient:
		cw = s.watchCluster(ctx, c)
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
	if cw != nil {
		cw.starting.Store(false) // every primary was reached
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

// Changes implements store.Notifier. Every Changes shares one Redis
// subscription, started by the first call.
func (s *Store) Changes(name string) *store.Changes {
	return s.events.changes(name)
}

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
