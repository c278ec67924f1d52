package memstore

import (
	"container/list"
	"time"
)

// queue is a name's waiters in arrival order. Every step of a handoff
// (queueing, refreshing, leaving, finding the head) costs the same with
// thousands of waiters as with ten: a list for the order, a map to find a
// waiter in it. Dead waiters are dropped from the head as the head is
// needed, and from the whole queue only when all of it is read.
type queue struct {
	order *list.List // of *waiter
	byID  map[string]*list.Element
}

type waiter struct {
	id       string
	weight   int64
	deadline time.Time
}

func (q *queue) len() int {
	if q.order == nil {
		return 0
	}
	return q.order.Len()
}

// enqueue adds the waiter at the back, or refreshes its deadline in place
// (keeping the weight it arrived with) while it is live at now. A place
// whose deadline passed is gone, even where no prune has dropped it yet:
// the waiter queues again at the back, with its new weight.
func (q *queue) enqueue(id string, weight int64, deadline, now time.Time) {
	if id == "" {
		return
	}
	if el, ok := q.byID[id]; ok {
		if w := el.Value.(*waiter); now.Before(w.deadline) {
			w.deadline = deadline
			return
		}
		q.dequeue(id)
	}
	if q.order == nil {
		q.order, q.byID = list.New(), map[string]*list.Element{}
	}
	q.byID[id] = q.order.PushBack(&waiter{id: id, weight: weight, deadline: deadline})
}

// refresh sets the deadline of a queued waiter, and reports whether it was
// queued.
func (q *queue) refresh(id string, deadline time.Time) bool {
	el, ok := q.byID[id]
	if ok {
		el.Value.(*waiter).deadline = deadline
	}
	return ok
}

// has reports whether the waiter is queued and live at now.
func (q *queue) has(id string, now time.Time) bool {
	el, ok := q.byID[id]
	return ok && now.Before(el.Value.(*waiter).deadline)
}

func (q *queue) dequeue(id string) bool {
	el, ok := q.byID[id]
	if !ok {
		return false
	}
	q.order.Remove(el)
	delete(q.byID, id)
	return true
}

// pruneHead drops dead waiters from the head until a live one leads, and
// reports whether a new head took the place of a dead one: it must be told.
func (q *queue) pruneHead(now time.Time) (headGone bool) {
	dropped := false
	for q.len() > 0 {
		w := q.order.Front().Value.(*waiter)
		if now.Before(w.deadline) {
			break
		}
		q.dequeue(w.id)
		dropped = true
	}
	return dropped && q.len() > 0
}

// pruneAll drops every dead waiter, and reports whether a new head took the
// place of a dead one.
func (q *queue) pruneAll(now time.Time) (headGone bool) {
	headGone = q.pruneHead(now)
	for el := q.front(); el != nil; {
		next := el.Next()
		if w := el.Value.(*waiter); !now.Before(w.deadline) {
			q.dequeue(w.id)
		}
		el = next
	}
	return headGone
}

func (q *queue) front() *list.Element {
	if q.order == nil {
		return nil
	}
	return q.order.Front()
}

// fits reports whether the live waiters queued ahead of id (all of them when
// id is "" or not queued, or when its place is dead) weigh at most room in
// all: a waiter is granted before the waiters ahead of it only when they
// would fit too, so that it never delays them. A caller that does not wait
// (id "") fits only when nobody waits. Dead waiters on the way are skipped,
// not dropped (the head was pruned).
func (q *queue) fits(id string, now time.Time, room int64) bool {
	if room < 0 {
		return false
	}
	if id == "" {
		return q.len() == 0
	}
	var ahead int64
	for el := q.front(); el != nil; el = el.Next() {
		w := el.Value.(*waiter)
		if !now.Before(w.deadline) {
			continue
		}
		if w.id == id {
			break
		}
		if ahead += w.weight; ahead > room {
			return false
		}
	}
	return true
}

// weight sums the weights of the queued waiters.
func (q *queue) weight() int64 {
	var sum int64
	for el := q.front(); el != nil; el = el.Next() {
		sum += el.Value.(*waiter).weight
	}
	return sum
}
