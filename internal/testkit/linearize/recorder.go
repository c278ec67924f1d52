package linearize

import (
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder records the operations of concurrent clients. Its zero value is
// ready to use; it is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	calls   []*Call
	clients map[string]int
}

// Call is one recorded operation: finish it with the method that says how
// it was answered. One never finished has an unknown outcome.
type Call struct {
	r        *Recorder
	client   int
	in       Input
	out      Output
	called   time.Time
	returned time.Time
}

// Acquire records that holder is about to ask for weight of name's
// capacity for ttl; call it before sending the request.
func (r *Recorder) Acquire(name, holder string, capacity, weight int64, ttl time.Duration) *Call {
	return r.record(Input{Kind: Acquire, Name: name, Holder: holder, Capacity: capacity, Weight: weight, TTL: ttl})
}

// Release records that holder is about to give back its lease on name under
// token.
func (r *Recorder) Release(name, holder string, token uint64) *Call {
	return r.record(Input{Kind: Release, Name: name, Holder: holder, Token: token})
}

func (r *Recorder) record(in Input) *Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clients == nil {
		r.clients = map[string]int{}
	}
	client, ok := r.clients[in.Holder]
	if !ok {
		client = len(r.clients)
		r.clients[in.Holder] = client
	}
	c := &Call{r: r, client: client, in: in, called: time.Now()}
	r.calls = append(r.calls, c)
	return c
}

// Granted finishes an acquisition that was granted the lease under token,
// with weight, for ttl (zero for the one asked for).
func (c *Call) Granted(token uint64, weight int64, ttl time.Duration) {
	c.finish(Output{Outcome: Granted, Token: token, Weight: weight, TTL: ttl})
}

// Refused finishes an acquisition answered without a grant.
func (c *Call) Refused() { c.finish(Output{Outcome: Refused}) }

// Released finishes a release that answered released.
func (c *Call) Released(released bool) { c.finish(Output{Outcome: Released, Released: released}) }

// Failed finishes a call that failed: its outcome is unknown, as that of a
// call never finished.
func (c *Call) Failed() { c.finish(Output{Outcome: Unknown}) }

func (c *Call) finish(out Output) {
	now := time.Now()
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	c.out, c.returned = out, now
}

// Operations is the history so far as porcupine's operations. Times are
// nanoseconds since the first call; an operation whose outcome is unknown
// returns after every other (math.MaxInt64), as porcupine wants it: it may
// have taken effect at any moment after its call, or never.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil
	}
	start := r.calls[0].called
	ops := make([]porcupine.Operation, 0, len(r.calls))
	for _, c := range r.calls {
		in, out := c.in, c.out
		in.Call = c.called.Sub(start)
		ret := int64(math.MaxInt64)
		if out.Outcome != Unknown {
			in.Return = c.returned.Sub(start)
			ret = int64(in.Return)
		}
		ops = append(ops, porcupine.Operation{ClientId: c.client, Input: in, Call: int64(in.Call), Output: out, Return: ret})
	}
	return ops
}
