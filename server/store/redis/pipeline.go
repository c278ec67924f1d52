package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script calls that arrive while others are on their way to Redis are sent
// together as one pipeline: concurrent requests then share round trips and
// system calls, on the coordinator and on Redis, which is where a lease
// service spends its time. Each script stays atomic; calls that are
// concurrent anyway have no order to keep. A call that finds no other in
// flight goes out at once, on its caller's goroutine.
//
// A pipeline serves many callers, so no caller's context may end it: each is
// bounded by the store's call timeout instead, and each caller stops waiting
// when its own context ends, leaving the others' calls running.
const (
	pipelineSenders  = 2   // pipelines in flight at once
	pipelineMaxCalls = 256 // calls in one pipeline
)

type scriptCall struct {
	// ctx is the caller's: a call whose caller gave up before it was sent
	// is dropped rather than sent late.
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{}
}

// pipeliner batches script calls onto one client.
type pipeliner struct {
	client   redis.UniversalClient
	timeout  time.Duration // bounds one pipeline
	inFlight atomic.Int64  // calls between run's start and end
	calls    chan *scriptCall
	// stop tells the senders to return; stopped is closed once they have,
	// so that no queued call can be sent any more.
	stop    chan struct{}
	stopped chan struct{}
	wg      sync.WaitGroup
}

func newPipeliner(ctx context.Context, client redis.UniversalClient, timeout time.Duration) *pipeliner {
	p := &pipeliner{
		client:  client,
		timeout: timeout,
		calls:   make(chan *scriptCall, pipelineMaxCalls),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	for range pipelineSenders {
		p.wg.Add(1)
		// The senders serve every caller, so no caller's cancellation may
		// end them.
		go p.send(context.WithoutCancel(ctx))
	}
	return p
}

// run runs script like Script.Run, sharing a pipeline with concurrent calls.
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	defer p.inFlight.Add(-1)
	if p.inFlight.Add(1) == 1 {
		return script.Run(ctx, p.client, keys, args...)
	}
	call := &scriptCall{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	// The send may win over a closed stop, and a queued call may never be
	// picked up: stopped ends the wait for it.
	select {
	case p.calls <- call:
	case <-ctx.Done():
		return failedCmd(ctx, ctx.Err())
	case <-p.stop:
		return failedCmd(ctx, redis.ErrClosed)
	}
	select {
	case <-call.done:
		return call.cmd
	case <-ctx.Done():
		// The call may still take effect, as any call cut off in flight.
		return failedCmd(ctx, ctx.Err())
	case <-p.stopped:
		// A sender that took the call finished it before stopped closed.
		select {
		case <-call.done:
			return call.cmd
		default:
			return failedCmd(ctx, redis.ErrClosed)
		}
	}
}

func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

func (p *pipeliner) send(ctx context.Context) {
	defer p.wg.Done()
	batch := make([]*scriptCall, 0, pipelineMaxCalls)
	for {
		select {
		case call := <-p.calls:
			batch = append(batch[:0], call)
		case <-p.stop:
			return
		}
	more:
		for len(batch) < pipelineMaxCalls {
			select {
			case call := <-p.calls:
				batch = append(batch, call)
			default:
				break more
			}
		}
		p.exec(ctx, batch)
	}
}

func (p *pipeliner) exec(ctx context.Context, batch []*scriptCall) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	live := batch[:0]
	for _, call := range batch {
		if err := call.ctx.Err(); err != nil {
			call.cmd = failedCmd(ctx, err)
			close(call.done)
			continue
		}
		live = append(live, call)
	}
	batch = live
	switch len(batch) {
	case 0:
		return
	case 1:
		call := batch[0]
		call.cmd = call.script.Run(ctx, p.client, call.keys, call.args...)
		close(call.done)
		return
	}
	pipe := p.client.Pipeline()
	for _, call := range batch {
		call.cmd = call.script.EvalSha(ctx, pipe, call.keys, call.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for _, call := range batch {
		if err := call.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// Redis restarted or flushed its scripts: send the source.
			call.cmd = call.script.Run(ctx, p.client, call.keys, call.args...)
		}
		close(call.done)
	}
}

// close stops the senders once their pipelines are done; calls still queued,
// or queued later, fail with ErrClosed.
func (p *pipeliner) close() {
	close(p.stop)
	p.wg.Wait()
	close(p.stopped)
}
