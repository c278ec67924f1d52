package fanout

import "sync"

// Overflow says what Publish does when a subscriber's buffer is full.
type Overflow int

const (
	// Coalesce drops the new value: the subscriber has one pending already.
	Coalesce Overflow = iota
	// Evict removes the subscriber and closes its channel.
	Evict
	// Replace drops the oldest pending value to make room for the new one:
	// with a buffer of one, what is pending is the latest value.
	Replace
)

// Hub fans values out to subscribers by key. The zero Hub is ready to use.
type Hub[K comparable, T any] struct {
	mu     sync.Mutex
	subs   map[K]map[*Subscription[K, T]]struct{}
	closed bool
}

// Subscription is one subscriber of one key.
type Subscription[K comparable, T any] struct {
	// C receives the published values. It is closed when the subscriber is
	// evicted or the hub is closed, never by Cancel.
	C <-chan T

	ch       chan T
	key      K
	overflow Overflow
	hub      *Hub[K, T]
}

// Subscribe adds a subscriber of key with a buffer of size values (at least
// one) and the given overflow policy. The initial values are placed in the
// buffer before any published value, so a caller can hand a new subscriber
// the current state atomically with respect to its own publishing; more
// initial values than the buffer holds are dropped.
func (h *Hub[K, T]) Subscribe(key K, size int, overflow Overflow, initial ...T) *Subscription[K, T] {
	ch := make(chan T, max(size, 1))
	s := &Subscription[K, T]{C: ch, ch: ch, key: key, overflow: overflow, hub: h}
	for _, v := range initial {
		select {
		case ch <- v:
		default:
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return s
	}
	if h.subs == nil {
		h.subs = map[K]map[*Subscription[K, T]]struct{}{}
	}
	set, ok := h.subs[key]
	if !ok {
		set = map[*Subscription[K, T]]struct{}{}
		h.subs[key] = set
	}
	set[s] = struct{}{}
	return s
}

// Cancel removes the subscriber. It is safe to call more than once, and
// after the subscriber was evicted or the hub closed.
func (s *Subscription[K, T]) Cancel() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(s)
}

// remove deletes s; h.mu is held.
func (h *Hub[K, T]) remove(s *Subscription[K, T]) bool {
	set, ok := h.subs[s.key]
	if !ok {
		return false
	}
	if _, ok := set[s]; !ok {
		return false
	}
	delete(set, s)
	if len(set) == 0 {
		delete(h.subs, s.key)
	}
	return true
}

// Publish delivers v to every subscriber of key and reports how many there
// were. It never blocks.
func (h *Hub[K, T]) Publish(key K, v T) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[key]
	n := len(set)
	for s := range set {
		h.deliver(s, v)
	}
	return n
}

// PublishAll delivers v to every subscriber of every key, for news that
// concerns them all (notifications may have been missed).
func (h *Hub[K, T]) PublishAll(v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.subs {
		for s := range set {
			h.deliver(s, v)
		}
	}
}

// deliver sends v to s under its overflow policy; h.mu is held.
func (h *Hub[K, T]) deliver(s *Subscription[K, T], v T) {
	select {
	case s.ch <- v:
		return
	default:
	}
	switch s.overflow {
	case Evict:
		h.remove(s)
		close(s.ch)
	case Replace:
		// Only publishers send, under h.mu: once one value is taken out
		// (by this or by the reader meanwhile), v fits.
		select {
		case <-s.ch:
		default:
		}
		s.ch <- v
	}
}

// Subscribers reports how many subscribers key has.
func (h *Hub[K, T]) Subscribers(key K) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs[key])
}

// Keys reports how many keys have at least one subscriber.
func (h *Hub[K, T]) Keys() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Close closes every subscriber's channel and refuses new subscribers. It is
// safe to call more than once.
func (h *Hub[K, T]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for _, set := range h.subs {
		for s := range set {
			close(s.ch)
		}
	}
	h.subs = nil
}
