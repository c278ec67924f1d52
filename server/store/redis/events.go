package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// eventsHealthInterval is how long the subscription may stay silent
	// before it is pinged; a ping unanswered for as long again drops the
	// connection and subscribes anew.
	eventsHealthInterval = 10 * time.Second
	// subscribeWait bounds how long the first Subscribe waits for Redis to
	// confirm the subscription, so that changes made after it returns are
	// heard.
	subscribeWait    = 2 * time.Second
	eventsMinBackoff = 50 * time.Millisecond
	eventsMaxBackoff = 5 * time.Second
)

// events is a Store's single subscription to its channel, fanning each
// published name out to every subscriber.
type events struct {
	s      *Store
	onLost func()
	// health is how long the subscription may stay silent before it is
	// pinged; eventsHealthInterval but in tests.
	health time.Duration

	mu      sync.Mutex
	subs    map[uint64]func(string)
	nextID  uint64
	started bool
	closed  bool
	ps      *redis.PubSub
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	// ready is closed once Redis first confirmed the subscription.
	ready     chan struct{}
	readyOnce sync.Once
}

func (e *events) init(s *Store, onLost func()) {
	e.s = s
	e.onLost = onLost
	e.health = eventsHealthInterval
	e.subs = make(map[uint64]func(string))
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.done = make(chan struct{})
	e.ready = make(chan struct{})
}

// subscribe registers notify. The first call starts the subscription and
// waits up to subscribeWait for Redis to confirm it.
func (e *events) subscribe(notify func(string)) func() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return func() {}
	}
	id := e.nextID
	e.nextID++
	e.subs[id] = notify
	if !e.started {
		e.started = true
		go e.run()
	}
	e.mu.Unlock()

	wait := time.NewTimer(subscribeWait)
	select {
	case <-e.ready:
	case <-e.ctx.Done():
	case <-wait.C:
		e.s.log.Warn("Redis has not confirmed the event subscription yet; notifications may be late", "waited", subscribeWait)
	}
	wait.Stop()

	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			delete(e.subs, id)
			e.mu.Unlock()
		})
	}
}

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
}

func (e *events) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func (e *events) fanOut(name string) {
	e.mu.Lock()
	subs := make([]func(string), 0, len(e.subs))
	for _, f := range e.subs {
		subs = append(subs, f)
	}
	e.mu.Unlock()
	for _, f := range subs {
		f(name)
	}
}

// run subscribes, and subscribes again with backoff whenever the
// subscription breaks, until close.
func (e *events) run() {
	defer close(e.done)
	backoff := eventsMinBackoff
	gap := false // a subscription broke: tell onLost once subscribed again
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

		subscribed, err := e.consume(ps, &gap)
		_ = ps.Close()
		if e.isClosed() {
			return
		}
		gap = true
		if subscribed {
			backoff = eventsMinBackoff
		}
		e.s.log.Warn("Redis event subscription broke; subscribing again", "error", err, "retry_in", backoff)
		select {
		case <-e.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, eventsMaxBackoff)
	}
}

// consume reads ps until it fails; subscribed reports that the subscription
// was confirmed on the way.
func (e *events) consume(ps *redis.PubSub, gap *bool) (subscribed bool, err error) {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(e.ctx, e.health)
		if err != nil {
			var nerr net.Error
			if errors.As(err, &nerr) && nerr.Timeout() && !pinged && !e.isClosed() {
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
			e.fanOut(m.Payload)
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			// go-redis also re-subscribes by itself after a broken
			// read: a second confirmation means events were missed.
			if subscribed {
				*gap = true
			}
			subscribed = true
			e.readyOnce.Do(func() { close(e.ready) })
			if *gap {
				*gap = false
				if e.onLost != nil {
					e.onLost()
				}
			}
		}
	}
}
