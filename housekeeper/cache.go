package housekeeper

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The storage tasks' cache scripts; each file's header lists its KEYS, ARGV
// and reply.
var (
	//go:embed scripts/remove.lua
	removeSrc string
	//go:embed scripts/recover.lua
	recoverSrc string
	//go:embed scripts/recovery_advance.lua
	recoveryAdvanceSrc string

	removeScript          = redis.NewScript(removeSrc)
	recoverScript         = redis.NewScript(fenceSrc + recoverSrc)
	recoveryAdvanceScript = redis.NewScript(fenceSrc + recoveryAdvanceSrc)
)

// Deckard's recovery state, in its Redis under the prefix
// (internal/queue/cache/cache.go): each key is "<prefix>:{<name>}".
const (
	recoveryRunning           = "recovery"                    // "true" while a recovery runs
	recoveryStorageBreakpoint = "recovery_storage_breakpoint" // last _id copied (hex), or recoveryFinished
	recoveryBreakpoint        = "recovery_breakpoint"         // the highest _id when the recovery started
	recoveryFinished          = "recovery_finished"
)

// Errors of the recovery scripts, wrapped.
var (
	// ErrRecoveryMoved: the breakpoint is not the one the caller read:
	// another instance has moved it.
	ErrRecoveryMoved = errors.New("housekeeper: the recovery breakpoint has moved")
	// ErrLeaseEnded: a batch reached Redis after the caller's lease ended
	// by Redis' clock, and changed nothing.
	ErrLeaseEnded = errors.New("housekeeper: the batch arrived after the lease ended")
)

// deckardKey is one of Deckard's general keys: "<prefix>:{<name>}".
func (ks keyspace) deckardKey(name string) string { return ks.prefix + ":{" + name + "}" }

// recoveryFence shares the storage breakpoint's hash tag, so that one
// script can check it and move the breakpoint on a Cluster.
func (ks keyspace) recoveryFence() string {
	return ks.prefix + ":housekeeper:{" + recoveryStorageBreakpoint + "}:fence"
}

// removeChunk is how many ids one remove script call takes.
const removeChunk = 4000

// RemoveMessages removes ids from every set of their queues (byQueue: queue
// -> ids), Deckard's remove script once per queue and chunk, pipelined. It
// returns the members removed per queue, counted as Deckard counts them.
func (q *Queues) RemoveMessages(ctx context.Context, byQueue map[string][]string) (map[string]int64, error) {
	var calls []*scriptCall
	for queue, ids := range byQueue {
		if checkQueue(queue) != nil {
			continue // no such key can exist: nothing to remove
		}
		keys := make([]string, 0, numKinds)
		for k := range numKinds {
			keys = append(keys, q.ks.set(queue, k))
		}
		for start := 0; start < len(ids); start += removeChunk {
			chunk := ids[start:min(start+removeChunk, len(ids))]
			args := make([]any, len(chunk))
			for i, id := range chunk {
				args[i] = id
			}
			calls = append(calls, &scriptCall{queue: queue, script: removeScript, keys: keys, args: args})
		}
	}
	err := runScripts(ctx, q.rdb, calls)
	removed := make(map[string]int64, len(byQueue))
	var errs []error
	for _, c := range calls {
		n, cerr := c.cmd.Int64()
		if cerr != nil {
			errs = append(errs, fmt.Errorf("queue %q: %w", c.queue, cerr))
			continue
		}
		removed[c.queue] += n
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("housekeeper: remove messages from the cache: %w", errors.Join(errs...))
	}
	if err != nil {
		return removed, fmt.Errorf("housekeeper: remove messages from the cache: %w", err)
	}
	return removed, nil
}

// Sizes returns how many messages each of queues holds in the cache: its
// active pool, :tmp and both lock sets.
func (q *Queues) Sizes(ctx context.Context, queues []string) (map[string]int64, error) {
	sizes, err := q.measure(ctx, queues)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(sizes))
	for queue, s := range sizes {
		out[queue] = s.total()
	}
	return out, nil
}

// RecoveryState is Deckard's recovery state as read from its Redis.
type RecoveryState struct {
	Running bool // the "{recovery}" flag is "true"
	// StorageBreakpoint is the last _id copied (hex), "" before the first
	// batch, or "recovery_finished".
	StorageBreakpoint string
	UpTo              string // the highest _id when the recovery started, "" when not recorded
}

// Finished reports whether no recovery is due.
func (s RecoveryState) Finished() bool { return s.StorageBreakpoint == recoveryFinished }

// Recovery reads Deckard's recovery state.
func (q *Queues) Recovery(ctx context.Context) (RecoveryState, error) {
	keys := []string{q.ks.deckardKey(recoveryRunning), q.ks.deckardKey(recoveryStorageBreakpoint), q.ks.deckardKey(recoveryBreakpoint)}
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return RecoveryState{}, fmt.Errorf("housekeeper: read the recovery state: %w", err)
	}
	return RecoveryState{Running: cmds[0].Val() == "true", StorageBreakpoint: cmds[1].Val(), UpTo: cmds[2].Val()}, nil
}

// RecoveryPending reports whether the cache may still lack stored messages:
// a recovery runs (Deckard's "{recovery}" flag is "true") or is yet to run
// (the storage breakpoint is not "recovery_finished", as after the cache
// lost its data). TTL and max elements wait meanwhile: Deckard waits on the
// flag alone, and a removal from storage and cache between a recovery's
// read and its insert would leave the message in the cache.
func (q *Queues) RecoveryPending(ctx context.Context) (bool, error) {
	s, err := q.Recovery(ctx)
	if err != nil {
		return false, err
	}
	return s.Running || !s.Finished(), nil
}

// setRecovery writes Deckard's recovery flag and, when upTo is not empty,
// the recovery's upper bound.
func (q *Queues) setRecovery(ctx context.Context, running bool, upTo string) error {
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, q.ks.deckardKey(recoveryRunning), strconv.FormatBool(running), 0)
		if upTo != "" {
			p.Set(ctx, q.ks.deckardKey(recoveryBreakpoint), upTo, 0)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("housekeeper: write the recovery state: %w", err)
	}
	return nil
}

// AdvanceRecovery moves the storage breakpoint from read to next (next ""
// only takes the fence) under token. It fails with ErrFenced when a newer
// token has acted, and ErrRecoveryMoved when the breakpoint is not read.
func (q *Queues) AdvanceRecovery(ctx context.Context, token uint64, read, next string) error {
	keys := []string{q.ks.recoveryFence(), q.ks.deckardKey(recoveryStorageBreakpoint)}
	err := recoveryAdvanceScript.Run(ctx, q.rdb, keys, strconv.FormatUint(token, 10), read, next).Err()
	if err == nil {
		return nil
	}
	if current, ok := strings.CutPrefix(err.Error(), "MOVED "); ok {
		return fmt.Errorf("%w: from %q to %q, but it is %q", ErrRecoveryMoved, read, next, current)
	}
	return batchErr(err, taskRecovery, "{"+recoveryStorageBreakpoint+"}", token)
}

// Recovered is one message put back into the cache: its score as stored.
type Recovered struct {
	ID    string
	Score float64
}

// Deckard's score range (internal/queue/score): recovery clamps stored
// scores into it.
const (
	minScore = 0
	maxScore = 9007199254740992
)

// InsertRecovered puts msgs (queue -> messages) back into their queues'
// active pools with Deckard's insert semantics, one fenced script per queue,
// pipelined, each refused once Redis' clock passes validUntil. It returns
// how many it inserted; an error wraps ErrFenced or ErrLeaseEnded when a
// queue refused the batch.
func (q *Queues) InsertRecovered(ctx context.Context, msgs map[string][]Recovered, token uint64, validUntil time.Time) (int, error) {
	tok := strconv.FormatUint(token, 10)
	until := strconv.FormatInt(validUntil.UnixMilli(), 10)
	var calls []*scriptCall
	for queue, ms := range msgs {
		if checkQueue(queue) != nil {
			continue // Deckard refuses such names: no message of one is stored
		}
		keys := []string{q.ks.fence(queue, taskRecovery), q.ks.set(queue, kindActive), q.ks.set(queue, kindLockNack),
			q.ks.set(queue, kindLockAck), q.ks.set(queue, kindTmp)}
		args := make([]any, 0, 2+2*len(ms))
		args = append(args, tok, until)
		for _, m := range ms {
			args = append(args, strconv.FormatFloat(min(max(m.Score, minScore), maxScore), 'f', -1, 64), m.ID)
		}
		calls = append(calls, &scriptCall{queue: queue, script: recoverScript, keys: keys, args: args})
	}
	err := runScripts(ctx, q.rdb, calls)
	inserted := 0
	var errs []error
	for _, c := range calls {
		n, cerr := c.cmd.Int()
		switch {
		case cerr == nil:
			inserted += n
		case strings.HasPrefix(cerr.Error(), "EXPIRED "):
			errs = append(errs, fmt.Errorf("%w: recovery of queue %q", ErrLeaseEnded, c.queue))
		default:
			errs = append(errs, batchErr(cerr, taskRecovery, c.queue, token))
		}
	}
	if len(errs) > 0 {
		return inserted, errors.Join(errs...)
	}
	if err != nil {
		return inserted, fmt.Errorf("housekeeper: recovery batch: %w", err)
	}
	return inserted, nil
}

// redisClock returns Redis' clock and the local time just after reading it:
// a local deadline d is at most d + (redisNow - after) by Redis' clock.
func (q *Queues) redisClock(ctx context.Context) (redisNow, after time.Time, err error) {
	redisNow, err = q.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("housekeeper: read Redis' clock: %w", err)
	}
	return redisNow, time.Now(), nil
}

// scriptCall is one script call of a pipeline, for one queue.
type scriptCall struct {
	queue  string
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// runScripts sends calls in one pipeline with EVALSHA, then those that met
// NOSCRIPT (Redis restarted or flushed its scripts) again with EVAL. Each
// call's cmd carries its own error; the error returned is the pipeline's
// (a connection lost), nil when only some calls failed.
func runScripts(ctx context.Context, rdb redis.UniversalClient, calls []*scriptCall) error {
	retry := calls
	for _, eval := range [...]func(*redis.Script, context.Context, redis.Scripter, []string, ...any) *redis.Cmd{
		(*redis.Script).EvalSha, (*redis.Script).Eval,
	} {
		if len(retry) == 0 {
			return nil
		}
		pipe := rdb.Pipeline()
		for _, c := range retry {
			c.cmd = eval(c.script, ctx, pipe, c.keys, c.args...)
		}
		if _, err := pipe.Exec(ctx); err != nil && ctx.Err() != nil {
			return err
		}
		var next []*scriptCall
		for _, c := range retry {
			if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				next = append(next, c)
			}
		}
		retry = next
	}
	return nil
}
