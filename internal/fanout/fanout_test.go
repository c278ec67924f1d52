package fanout

import (
	"slices"
	"sync"
	"testing"
)

func received[T any](c <-chan T) (vals []T, closed bool) {
	for {
		select {
		case v, ok := <-c:
			if !ok {
				return vals, true
			}
			vals = append(vals, v)
		default:
			return vals, false
		}
	}
}

func TestPublishReachesOnlyTheKeysSubscribers(t *testing.T) {
	var h Hub[string, int]
	a := h.Subscribe("a", 4, Coalesce)
	b := h.Subscribe("b", 4, Coalesce)
	if n := h.Publish("a", 1); n != 1 {
		t.Fatalf("Publish reported %d subscribers, want 1", n)
	}
	if got, _ := received(a.C); len(got) != 1 || got[0] != 1 {
		t.Fatalf("a received %v, want [1]", got)
	}
	if got, _ := received(b.C); len(got) != 0 {
		t.Fatalf("b received %v, want nothing", got)
	}
}

func TestOverflow(t *testing.T) {
	tests := []struct {
		name       string
		overflow   Overflow
		wantValues []int
		wantClosed bool
		wantSubs   int
	}{
		{"coalesce keeps the pending values and drops the rest", Coalesce, []int{1, 2}, false, 1},
		{"evict closes the channel of a subscriber that fell behind", Evict, []int{1, 2}, true, 0},
		{"replace keeps the latest values", Replace, []int{4, 5}, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Hub[string, int]
			s := h.Subscribe("k", 2, tt.overflow)
			for i := 1; i <= 5; i++ {
				h.Publish("k", i)
			}
			got, closed := received(s.C)
			if !slices.Equal(got, tt.wantValues) {
				t.Fatalf("received %v, want %v", got, tt.wantValues)
			}
			if closed != tt.wantClosed {
				t.Fatalf("closed = %v, want %v", closed, tt.wantClosed)
			}
			if n := h.Subscribers("k"); n != tt.wantSubs {
				t.Fatalf("%d subscribers left, want %d", n, tt.wantSubs)
			}
			s.Cancel() // safe after eviction too
		})
	}
}

func TestInitialValuesComeFirst(t *testing.T) {
	var h Hub[string, int]
	s := h.Subscribe("k", 3, Evict, 10, 11)
	h.Publish("k", 12)
	got, _ := received(s.C)
	if len(got) != 3 || got[0] != 10 || got[1] != 11 || got[2] != 12 {
		t.Fatalf("received %v, want [10 11 12]", got)
	}
}

func TestCancelStopsDeliveryWithoutClosing(t *testing.T) {
	var h Hub[string, int]
	s := h.Subscribe("k", 1, Coalesce)
	s.Cancel()
	s.Cancel()
	if n := h.Publish("k", 1); n != 0 {
		t.Fatalf("Publish after Cancel reached %d subscribers", n)
	}
	if got, closed := received(s.C); len(got) != 0 || closed {
		t.Fatalf("after Cancel: received %v, closed %v; want nothing, open", got, closed)
	}
	if h.Keys() != 0 {
		t.Fatalf("a key without subscribers is still tracked")
	}
}

func TestPublishAllReachesEveryKey(t *testing.T) {
	var h Hub[string, struct{}]
	subs := []*Subscription[string, struct{}]{h.Subscribe("a", 1, Coalesce), h.Subscribe("b", 1, Coalesce), h.Subscribe("b", 1, Coalesce)}
	h.PublishAll(struct{}{})
	for i, s := range subs {
		if got, _ := received(s.C); len(got) != 1 {
			t.Fatalf("subscriber %d received %d values, want 1", i, len(got))
		}
	}
}

func TestClose(t *testing.T) {
	var h Hub[string, int]
	before := h.Subscribe("k", 1, Coalesce)
	h.Close()
	h.Close()
	if _, closed := received(before.C); !closed {
		t.Fatal("Close left a subscriber's channel open")
	}
	after := h.Subscribe("k", 1, Coalesce)
	if _, closed := received(after.C); !closed {
		t.Fatal("a Subscribe after Close returned an open channel")
	}
	if n := h.Publish("k", 1); n != 0 {
		t.Fatalf("Publish after Close reached %d subscribers", n)
	}
	after.Cancel()
}

func TestConcurrentUse(t *testing.T) {
	var h Hub[int, int]
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				s := h.Subscribe(g%3, 1, Overflow(i%3))
				h.Publish(g%3, i)
				h.PublishAll(i)
				s.Cancel()
			}
		}()
	}
	wg.Wait()
	h.Close()
	if h.Keys() != 0 {
		t.Fatalf("%d keys still tracked", h.Keys())
	}
}
