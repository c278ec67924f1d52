package housekeeper

import (
	"context"
	"slices"
	"strings"

	"github.com/jonboulle/clockwork"
)

// WithClock returns cfg with its schedule on clock, for tests that drive
// time by hand.
func WithClock(cfg Config, clock clockwork.Clock) Config {
	cfg.clock = clock
	return cfg
}

// OwnerOf is View.Owner for a task named as the metrics name it.
func OwnerOf(v View, t string, queue string) string { return v.Owner(task(t), queue) }

// WorkSet names queue's set of the given kind ("tmp", "lock_ack",
// "lock_nack") as Publish and ReadIndex take and return them.
func WorkSet(queue, kind string) string { return queue + "|" + kind }

func toWorkSet(s string) workSet {
	queue, k, _ := strings.Cut(s, "|")
	switch k {
	case "tmp":
		return workSet{queue, kindTmp}
	case "lock_nack":
		return workSet{queue, kindLockNack}
	}
	return workSet{queue, kindLockAck}
}

func fromWorkSet(w workSet) string { return w.queue + "|" + kindSuffixes[w.kind][1:] }

// Publish is Queues.publish of sets named by WorkSet.
func Publish(ctx context.Context, q *Queues, sets []string) error {
	found := map[workSet]struct{}{}
	for _, s := range sets {
		found[toWorkSet(s)] = struct{}{}
	}
	return q.publish(ctx, found)
}

// ReadIndex is Queues.readIndex, its sets named by WorkSet and sorted.
func ReadIndex(ctx context.Context, q *Queues, after int64) ([]string, int64, error) {
	found, highest, err := q.readIndex(ctx, after)
	var out []string
	for w := range found {
		out = append(out, fromWorkSet(w))
	}
	slices.Sort(out)
	return out, highest, err
}
