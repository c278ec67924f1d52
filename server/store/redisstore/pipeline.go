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
// A pipeline serves many callers, so no caller's context may end it: each
// call is bounded by the store's call timeout, counted from when its caller
// made it, and each caller stops waiting when its own context ends, leaving
// the others' calls running. A pipeline runs until the earliest deadline of
// its calls, and a call whose deadline passed before a sender took it fails
// without being sent, so no caller waits past its deadline (give or take a
// scheduling delay) however Redis behaves: one timer per pipeline, not one
// per call, bounds them all.
const (
	// pipelineSenders is how many pipelines may be in flight at once,
	// besides a call sent alone. One: while its round trip is in flight,
	// every call coalesces into the next pipeline, so that a busy
	// coordinator sends few large pipelines (two senders cost about a
	// tenth more CPU per call at 64 concurrent calls, for no throughput).
	pipelineSenders  = 1
	pipelineMaxCalls = 256 // calls in one pipeline
)

type scriptCall struct {
	// ctx is the caller's: a call whose caller gave up before it was sent
	// is dropped rather than sent late.
	ctx context.Context
	// deadline is when the call times out: its caller's start plus the
	// call timeout.
	deadline time.Time
	script   *redis.Script
	keys     []string
	args     []any
	// wait asks for the replicas' acknowledgement (Options.MinReplicas).
	wait bool
	cmd  *redis.Cmd
	// acked is the WAIT that followed the script on its connection, when
	// wait and replicas are required; nil otherwise.
	acked *redis.Cmd
	// done receives one value once a sender is through with the call.
	done chan struct{}
}

// calls recycles scriptCalls, with their done channels: a call is put back
// only once nothing else may touch it, its answer received.
var calls = sync.Pool{New: func() any { return &scriptCall{done: make(chan struct{}, 1)} }}

func newScriptCall() *scriptCall { return calls.Get().(*scriptCall) }

// recycle puts back a call whose answer was received, or that was never
// queued.
func recycle(call *scriptCall) {
	done := call.done
	*call = scriptCall{done: done}
	calls.Put(call)
}

// replicaWait is Options.MinReplicas and Options.ReplicaTimeout; n == 0
// waits for no replica.
type replicaWait struct {
	n       int
	timeout time.Duration
}

// runBatch runs calls on one connection: one script alone as Script.Run
// does, several (or one that waits for replicas) in one pipeline. WAIT, when
// some call asks for it, follows every script of the pipeline on the same
// connection, so it covers the writes of all of them.
func runBatch(ctx context.Context, client redis.UniversalClient, batch []*scriptCall, w replicaWait) {
	wait := false
	for _, call := range batch {
		wait = wait || (call.wait && w.n > 0)
	}
	if len(batch) == 1 && !wait {
		call := batch[0]
		call.cmd = call.script.Run(ctx, client, call.keys, call.args...)
		return
	}
	retry := pipelined(ctx, client, batch, wait, w, (*redis.Script).EvalSha)
	if len(retry) > 0 {
		// Redis restarted or flushed its scripts: send the sources.
		pipelined(ctx, client, retry, wait, w, (*redis.Script).Eval)
	}
}

// pipelined sends calls in one pipeline with eval (EVALSHA or EVAL),
// followed by WAIT when wait, and returns the calls that met NOSCRIPT.
func pipelined(ctx context.Context, client redis.UniversalClient, calls []*scriptCall, wait bool, w replicaWait,
	eval func(*redis.Script, context.Context, redis.Scripter, []string, ...any) *redis.Cmd,
) []*scriptCall {
	pipe := client.Pipeline()
	for _, call := range calls {
		call.cmd = eval(call.script, ctx, pipe, call.keys, call.args...)
	}
	var acked *redis.Cmd
	if wait {
		acked = pipe.Do(ctx, "WAIT", w.n, durationMS(w.timeout))
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var retry []*scriptCall
	for _, call := range calls {
		if err := call.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, call)
			continue
		}
		if call.wait {
			call.acked = acked
		}
	}
	return retry
}

// runAlone runs one call on the caller's goroutine, bounded by its deadline.
func runAlone(ctx context.Context, client redis.UniversalClient, call *scriptCall, w replicaWait) {
	ctx, cancel := context.WithDeadline(ctx, call.deadline)
	defer cancel()
	runBatch(ctx, client, []*scriptCall{call}, w)
}

// pipeliner batches script calls onto one client.
type pipeliner struct {
	client   redis.UniversalClient
	replicas replicaWait
	timeout  time.Duration // bounds a call that has no deadline of its own
	inFlight atomic.Int64  // calls between run's start and end
	calls    chan *scriptCall
	// stop tells the senders to return; stopped is closed once they have,
	// so that no queued call can be sent any more.
	stop    chan struct{}
	stopped chan struct{}
	wg      sync.WaitGroup
}

func newPipeliner(ctx context.Context, client redis.UniversalClient, timeout time.Duration, replicas replicaWait) *pipeliner {
	p := &pipeliner{
		client:   client,
		replicas: replicas,
		timeout:  timeout,
		calls:    make(chan *scriptCall, pipelineMaxCalls),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	for range pipelineSenders {
		p.wg.Add(1)
		// The senders serve every caller, so no caller's cancellation may
		// end them.
		go p.send(context.WithoutCancel(ctx))
	}
	return p
}

// run runs call like Script.Run, sharing a pipeline with concurrent calls,
// and returns its script's reply and the WAIT that followed it (nil unless
// the call waits for replicas). ctx is the caller's; call.deadline, or the
// call timeout from now when it has none, bounds the call.
func (p *pipeliner) run(ctx context.Context, call *scriptCall) (cmd, acked *redis.Cmd) {
	if call.deadline.IsZero() {
		call.deadline = time.Now().Add(p.timeout)
	}
	defer p.inFlight.Add(-1)
	if p.inFlight.Add(1) == 1 {
		runAlone(ctx, p.client, call, p.replicas)
		return answer(call)
	}
	call.ctx = ctx
	if call.done == nil {
		call.done = make(chan struct{}, 1)
	}
	// The send may win over a closed stop, and a queued call may never be
	// picked up: stopped ends the wait for it.
	// A sender writes call.cmd and call.acked before signalling done; until
	// then only it may touch them.
	select {
	case p.calls <- call:
	case <-ctx.Done():
		return failedCmd(ctx, ctx.Err()), nil
	case <-p.stop:
		return failedCmd(ctx, redis.ErrClosed), nil
	}
	select {
	case <-call.done:
		return answer(call)
	case <-ctx.Done():
		// The call may still take effect, as any call cut off in flight.
		return failedCmd(ctx, ctx.Err()), nil
	case <-p.stopped:
		// A sender that took the call finished it before stopped closed.
		select {
		case <-call.done:
			return answer(call)
		default:
			return failedCmd(ctx, redis.ErrClosed), nil
		}
	}
}

// answer returns the answer of a call that nothing else touches any more,
// and recycles the call.
func answer(call *scriptCall) (cmd, acked *redis.Cmd) {
	cmd, acked = call.cmd, call.acked
	recycle(call)
	return cmd, acked
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
	now := time.Now()
	var deadline time.Time
	live := batch[:0]
	for _, call := range batch {
		err := call.ctx.Err()
		if err == nil && !now.Before(call.deadline) {
			// Not sent in time: the call timeout, as if Redis had not
			// answered it.
			err = context.DeadlineExceeded
		}
		if err != nil {
			call.cmd = failedCmd(ctx, err)
			call.done <- struct{}{}
			continue
		}
		if deadline.IsZero() || call.deadline.Before(deadline) {
			deadline = call.deadline
		}
		live = append(live, call)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	runBatch(ctx, p.client, live, p.replicas)
	for _, call := range live {
		call.done <- struct{}{}
	}
}

// close stops the senders once their pipelines are done; calls still queued,
// or queued later, fail with ErrClosed.
func (p *pipeliner) close() {
	close(p.stop)
	p.wg.Wait()
	close(p.stopped)
}
