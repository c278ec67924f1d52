package backoff

import (
	"context"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
)

// Jitter is the fraction by which each delay of New is randomly moved up or
// down.
const Jitter = 0.2

// Backoff hands out the delays of successive attempts. It is not safe for
// concurrent use; each retry loop owns one.
type Backoff struct {
	delay retry.BackoffFunc
	// unread is what delay is given for a context: go-grpc-middleware's
	// backoff functions take one for their interface's sake and never read
	// it. Whether to wait at all is the retry loop's own context's call.
	unread  context.Context
	attempt uint
}

// New returns a backoff whose first delay is about min and whose delays never
// exceed max, each moved up or down by up to Jitter.
func New(min, max time.Duration) *Backoff { return NewWithJitter(min, max, Jitter) }

// NewWithJitter is New with each delay moved up or down by up to the
// fraction jitter instead: for callers whose spread is set elsewhere (the
// SDK's comes from the proto's client rules).
func NewWithJitter(min, max time.Duration, jitter float64) *Backoff {
	return &Backoff{delay: retry.BackoffExponentialWithJitterBounded(min, jitter, max), unread: context.Background()}
}

// Next returns the delay before the next attempt.
func (b *Backoff) Next() time.Duration {
	b.attempt++
	return b.delay(b.unread, b.attempt)
}

// Reset starts again from the first delay, after a success.
func (b *Backoff) Reset() { b.attempt = 0 }
