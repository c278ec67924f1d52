package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// The peers: what a Go program would use instead of the coordinator, each
// in its plainest form, on the same Redis as the coordinator (bsm/redislock,
// go-redsync) or on an etcd of its own (etcd's concurrency package).

// peerRedis is the go-redis client of the Redis peers, with a connection for
// every worker (PoolSize = the most workers), so that the pool is not what
// limits them.
func peerRedis(redisURL string, workers int) (*redis.Client, error) {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, err
	}
	opts.PoolSize = max(workers, opts.PoolSize)
	return redis.NewClient(opts), nil
}

// redislockCycle is bsm/redislock's Obtain (its Lua script: SET NX PX, or
// the same token again) and Release (a Lua compare-and-delete), without
// retries.
func redislockCycle(locker *redislock.Client, keys []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		lock, err := locker.Obtain(ctx, keys[worker], benchTTL, nil)
		if err != nil {
			return err
		}
		return lock.Release(ctx)
	}
}

// redislockTry is one contended attempt: granted (and released) or not.
func redislockTry(locker *redislock.Client, keys []string) func(ctx context.Context, worker int) (bool, error) {
	return func(ctx context.Context, worker int) (bool, error) {
		lock, err := locker.Obtain(ctx, keys[worker], benchTTL, nil)
		if errors.Is(err, redislock.ErrNotObtained) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, lock.Release(ctx)
	}
}

// redsyncMutexes makes one go-redsync Mutex per worker, all on one pool
// (one go-redis client: the single-instance setup, quorum 1).
func redsyncMutexes(rdb *redis.Client, keys []string) []*redsync.Mutex {
	rs := redsync.New(redsyncgoredis.NewPool(rdb))
	out := make([]*redsync.Mutex, len(keys))
	for w := range out {
		out[w] = rs.NewMutex(keys[w], redsync.WithExpiry(benchTTL))
	}
	return out
}

// redsyncCycle is go-redsync's Lock (SET NX PX with a random value) and
// Unlock (a Lua compare-and-delete).
func redsyncCycle(mutexes []*redsync.Mutex) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		m := mutexes[worker]
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock: not held")
		}
		return err
	}
}

// redsyncTry is one contended attempt (TryLock: one try, no retry delay).
func redsyncTry(mutexes []*redsync.Mutex) func(ctx context.Context, worker int) (bool, error) {
	return func(ctx context.Context, worker int) (bool, error) {
		m := mutexes[worker]
		err := m.TryLockContext(ctx)
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, err = m.UnlockContext(ctx)
		return true, err
	}
}

// etcdPeer is an etcd client (one gRPC connection, as the coordinator's
// clients have) and one concurrency.Session (one etcd lease, kept alive on
// the client's shared keep-alive stream) per worker. A session per worker,
// not one shared: two Mutexes of one session on one name would both "hold"
// it (the lock key is prefix/lease), so a shared session cannot contend.
type etcdPeer struct {
	cli      *clientv3.Client
	sessions []*concurrency.Session
}

func newEtcdPeer(endpoint string) (*etcdPeer, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      quietZap(),
	})
	if err != nil {
		return nil, err
	}
	return &etcdPeer{cli: cli}, nil
}

// session returns worker's session, making sessions up to it first.
func (p *etcdPeer) session(worker int) (*concurrency.Session, error) {
	for len(p.sessions) <= worker {
		s, err := concurrency.NewSession(p.cli, concurrency.WithTTL(int(benchTTL/time.Second)))
		if err != nil {
			return nil, fmt.Errorf("etcd session: %w", err)
		}
		p.sessions = append(p.sessions, s)
	}
	return p.sessions[worker], nil
}

// mutexes makes one Mutex per worker, each on its worker's session.
func (p *etcdPeer) mutexes(prefixes []string) ([]*concurrency.Mutex, error) {
	out := make([]*concurrency.Mutex, len(prefixes))
	for w := range out {
		s, err := p.session(w)
		if err != nil {
			return nil, err
		}
		out[w] = concurrency.NewMutex(s, prefixes[w])
	}
	return out, nil
}

func (p *etcdPeer) close() {
	for _, s := range p.sessions {
		_ = s.Close() // revokes its lease
	}
	_ = p.cli.Close()
}

// etcdCycle is Mutex.TryLock (one Txn: create the key if absent, read the
// first waiter) and Unlock (a Delete).
func etcdCycle(mutexes []*concurrency.Mutex) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		m := mutexes[worker]
		if err := m.TryLock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
}

// etcdTry is one contended attempt. A refused TryLock deletes its key
// again: two round trips.
func etcdTry(mutexes []*concurrency.Mutex) func(ctx context.Context, worker int) (bool, error) {
	return func(ctx context.Context, worker int) (bool, error) {
		m := mutexes[worker]
		err := m.TryLock(ctx)
		if errors.Is(err, concurrency.ErrLocked) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, m.Unlock(ctx)
	}
}

// quietZap is the etcd client's logger: none. (Its errors reach the bench
// as the errors of the calls.)
func quietZap() *zap.Logger { return zap.NewNop() }
