package redisstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/backoff"
	"github.com/coordinator-dev/coordinator/internal/fanout"
	"github.com/coordinator-dev/coordinator/server/store"
)

const (
	// eventsHealthInterval is how long the subscription may stay silent
	// before it is pinged; a ping unanswered for as long again drops the
	// connection and subscribes anew.
	eventsHealthInterval = 10 * time.Second
	eventsMinBackoff     = 50 * time.Millisecond
	eventsMaxBackoff     = 5 * time.Second
)

// events is a Store's single subscription to its channel, fanning each
// published name out to the Changes subscribers of that name.
//
// Whenever Redis confirms the subscription, at first or after it broke,
// every subscriber is told to look again: announcements made before then
// were not heard. That is what lets Changes return at once instead of
// waiting for Redis, and what replaces replaying a broken subscription.
type events struct {
	s *Store
	// health is how long the subscription may stay silent before it is
	// pinged; eventsHealthInterval but in tests.
	health time.Duration
	hub    fanout.Hub[string, store.Change]

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu      sync.Mutex
	started bool
	closed  bool
	ps      *redis.PubSub
}

func (e *events) init(s *Store) {
	e.s = s
	e.health = eventsHealthInterval
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.done = make(chan struct{})
}

// changes subscribes to name, starting the Redis subscription on first use.
func (e *events) changes(name string) *store.Changes {
	sub := e.hub.Subscribe(name, 1, fanout.Replace)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started && !e.closed {
		e.started = true
		go e.run()
	}
	return store.NewChanges(sub.C, sub.Cancel)
}

// close stops the subscription, then closes every Changes channel.
func (e *events) close() {
	e.mu.Lock()
	e.closed = true
	started := e.started
	ps := e.ps
	e.mu.Unlock()
	e.cancel()
	if ps != nil {
		_ = ps.Close() // unblocks Receive
	}
	if started {
		<-e.done
	}
	e.hub.Close()
}

// run subscribes, and subscribes again with backoff whenever the
// subscription breaks, until close.
func (e *events) run() {
	defer close(e.done)
	retry := backoff.New(eventsMinBackoff, eventsMaxBackoff)
	for {
		ps := e.s.client.Subscribe(e.ctx, e.s.channel)
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			_ = ps.Close()
			return
		}
		e.ps = ps
		e.mu.Unlock()

		subscribed, err := e.consume(ps)
		_ = ps.Close()
		if e.ctx.Err() != nil {
			return
		}
		if subscribed {
			retry.Reset()
		}
		delay := retry.Next()
		e.s.log.Warn("Redis event subscription broke; subscribing again", "error", err, "retry_in", delay)
		timer := time.NewTimer(delay)
		select {
		case <-e.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// consume reads ps until it fails; subscribed reports that Redis confirmed
// the subscription on the way.
func (e *events) consume(ps *redis.PubSub) (subscribed bool, err error) {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(e.ctx, e.health)
		if err != nil {
			var nerr net.Error
			if errors.As(err, &nerr) && nerr.Timeout() && !pinged && e.ctx.Err() == nil {
				if err := ps.Ping(e.ctx); err != nil {
					return subscribed, err
				}
				pinged = true
				continue
			}
			return subscribed, err
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			name, change := parseAnnouncement(m.Payload)
			e.hub.Publish(name, change)
		case *redis.Subscription:
			// Also sent when go-redis subscribes again by itself after a
			// broken read: either way, earlier announcements were missed.
			if m.Kind == "subscribe" {
				subscribed = true
				// A broken subscription may stand for a restarted or
				// failed-over Redis, which lost the watched marks.
				e.s.marks.forget()
				e.hub.PublishAll(store.Change{})
			}
		}
	}
}

// parseAnnouncement reads a message of the channel: the name, a newline and
// the token of the grant announced, or a minus and the token of the grant
// whose release is announced, or nothing after the newline for any other
// change. The name comes first, and the last newline ends it, so that any
// name reads back. A payload without a newline is a name.
func parseAnnouncement(payload string) (string, store.Change) {
	i := strings.LastIndexByte(payload, '\n')
	if i < 0 {
		return payload, store.Change{}
	}
	name, what := payload[:i], payload[i+1:]
	if released, ok := strings.CutPrefix(what, "-"); ok {
		token, _ := strconv.ParseUint(released, 10, 64) // garbage: zero
		return name, store.Change{Released: token}
	}
	token, _ := strconv.ParseUint(what, 10, 64) // "" or garbage: zero
	return name, store.Change{Granted: token}
}
