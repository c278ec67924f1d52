package server

import "sync"

// wakeups fans a store's change notifications out to the calls waiting on a
// name in this process, so a waiter retries when something changed instead
// of polling.
type wakeups struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

func newWakeups() *wakeups {
	return &wakeups{waiters: map[string]map[chan struct{}]struct{}{}}
}

// watch returns a channel that receives a value after each change of name
// (changes that come while one is pending are merged), and a func to stop.
func (w *wakeups) watch(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	set, ok := w.waiters[name]
	if !ok {
		set = map[chan struct{}]struct{}{}
		w.waiters[name] = set
	}
	set[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(set, ch)
		if len(set) == 0 {
			delete(w.waiters, name)
		}
	}
}

// notify wakes every watcher of name. It never blocks.
func (w *wakeups) notify(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// notifyAll wakes every watcher of every name, after notifications may have
// been missed (the store's subscription was broken and is back).
func (w *wakeups) notifyAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, set := range w.waiters {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}
