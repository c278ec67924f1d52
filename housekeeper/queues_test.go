package housekeeper_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/housekeeper"
	hkt "github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

func newQueues(t *testing.T) (*redis.Client, hkt.Deckard, *housekeeper.Queues) {
	t.Helper()
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	q, err := housekeeper.NewQueues(rdb, d.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	return rdb, d, q
}

func TestUnlockRestoresSavedScoresExactly(t *testing.T) {
	rdb, d, q := newQueues(t)
	scores := []float64{
		-3.5, 0.125, 1e15 + 0.5, 0.1, 1.0 / 3, 123456789.123456789, math.Copysign(0, -1), 0,
		1 << 53, 1<<53 - 1, -(1 << 53), 1e300, -1e-300, 5e-324, math.MaxFloat64,
		math.Inf(1), math.Inf(-1),
	}
	for _, lock := range []struct {
		lock         housekeeper.LockType
		set, savedIn hkt.Set
	}{{housekeeper.LockAck, hkt.LockAck, hkt.LockAckScore}, {housekeeper.LockNack, hkt.LockNack, hkt.LockNackScore}} {
		for _, score := range scores {
			t.Run(fmt.Sprintf("%s/%v", lock.lock, score), func(t *testing.T) {
				ctx := t.Context()
				queue := fmt.Sprintf("scores-%s-%v", lock.lock, score)
				now := hkt.NowMs(t, rdb)
				d.Seed(t, rdb, func(p redis.Pipeliner) {
					d.Put(ctx, p, queue, lock.set, "m", float64(now-1000))
					d.Put(ctx, p, queue, lock.savedIn, "m", score)
				})
				moved, err := q.UnlockBatch(ctx, queue, lock.lock, 1, 10)
				if err != nil || moved != 1 {
					t.Fatalf("UnlockBatch = %d, %v; want 1, nil", moved, err)
				}
				snap := d.Snapshot(t, rdb, queue)
				got, ok := snap[hkt.Active]["m"]
				if !ok {
					t.Fatalf("m is not in the active pool: %v", snap)
				}
				if math.Float64bits(got) != math.Float64bits(score) && !(got == 0 && score == 0) {
					t.Errorf("restored score %v (%s), want %v (%s)", got, strconv.FormatFloat(got, 'g', -1, 64), score, strconv.FormatFloat(score, 'g', -1, 64))
				}
				if len(snap[lock.set]) != 0 || len(snap[lock.savedIn]) != 0 {
					t.Errorf("lock set %v and score set %v should be empty", snap[lock.set], snap[lock.savedIn])
				}
			})
		}
	}
}

func TestUnlockWithoutSavedScoreUsesNowForAckAndZeroForNack(t *testing.T) {
	rdb, d, q := newQueues(t)
	tests := []struct {
		lock         housekeeper.LockType
		set, savedIn hkt.Set
		wantNow      bool
	}{
		{housekeeper.LockAck, hkt.LockAck, hkt.LockAckScore, true},
		{housekeeper.LockNack, hkt.LockNack, hkt.LockNackScore, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.lock), func(t *testing.T) {
			ctx := t.Context()
			queue := "defaults-" + string(tt.lock)
			before := hkt.NowMs(t, rdb)
			d.Seed(t, rdb, func(p redis.Pipeliner) {
				d.Put(ctx, p, queue, tt.set, "plain", float64(before-5))
				d.Put(ctx, p, queue, tt.set, "saved", float64(before-5))
				d.Put(ctx, p, queue, tt.savedIn, "saved", 42.5)
			})
			moved, err := q.UnlockBatch(ctx, queue, tt.lock, 1, 10)
			after := hkt.NowMs(t, rdb)
			if err != nil || moved != 2 {
				t.Fatalf("UnlockBatch = %d, %v; want 2, nil", moved, err)
			}
			active := d.Snapshot(t, rdb, queue)[hkt.Active]
			if active["saved"] != 42.5 {
				t.Errorf("saved score: got %v, want 42.5", active["saved"])
			}
			got, ok := active["plain"]
			switch {
			case !ok:
				t.Fatalf("plain is not in the active pool: %v", active)
			case tt.wantNow && (got < float64(before) || got > float64(after)):
				t.Errorf("ack default score %v is outside Redis TIME [%d, %d] around the call", got, before, after)
			case tt.wantNow && got != math.Trunc(got):
				t.Errorf("ack default score %v is not whole milliseconds", got)
			case !tt.wantNow && got != 0:
				t.Errorf("nack default score %v, want 0", got)
			}
		})
	}
}

// batch runs one kind of batch on a queue.
type batch struct {
	name string
	set  hkt.Set // the set it moves from
	run  func(ctx context.Context, q *housekeeper.Queues, queue string, token uint64, limit int) (int, error)
}

var batches = []batch{
	{"unlock ack", hkt.LockAck, func(ctx context.Context, q *housekeeper.Queues, queue string, token uint64, limit int) (int, error) {
		return q.UnlockBatch(ctx, queue, housekeeper.LockAck, token, limit)
	}},
	{"unlock nack", hkt.LockNack, func(ctx context.Context, q *housekeeper.Queues, queue string, token uint64, limit int) (int, error) {
		return q.UnlockBatch(ctx, queue, housekeeper.LockNack, token, limit)
	}},
	{"timeout", hkt.Tmp, func(ctx context.Context, q *housekeeper.Queues, queue string, token uint64, limit int) (int, error) {
		return q.TimeoutBatch(ctx, queue, token, limit)
	}},
}

func TestBatchesNeverMoveMessagesNotYetDue(t *testing.T) {
	rdb, d, q := newQueues(t)
	for _, b := range batches {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			queue := "not-due-" + b.name
			now := hkt.NowMs(t, rdb)
			d.Seed(t, rdb, func(p redis.Pipeliner) {
				d.Put(ctx, p, queue, hkt.Active, "waiting", 7)
				d.Put(ctx, p, queue, b.set, "due", float64(now-1))
				d.Put(ctx, p, queue, b.set, "soon", float64(now+60_000))
				d.Put(ctx, p, queue, b.set, "later", float64(now+3_600_000))
				if b.set != hkt.Tmp {
					d.Put(ctx, p, queue, b.set+":score", "soon", -1)
				}
			})
			moved, err := b.run(ctx, q, queue, 1, 100)
			if err != nil || moved != 1 {
				t.Fatalf("batch = %d, %v; want 1, nil", moved, err)
			}
			snap := d.Snapshot(t, rdb, queue)
			if _, ok := snap[hkt.Active]["due"]; !ok || len(snap[hkt.Active]) != 2 {
				t.Errorf("active pool %v, want waiting and due", snap[hkt.Active])
			}
			want := map[string]float64{"soon": float64(now + 60_000), "later": float64(now + 3_600_000)}
			if fmt.Sprint(snap[b.set]) != fmt.Sprint(want) {
				t.Errorf("%s set %v, want %v", b.set, snap[b.set], want)
			}
			if b.set != hkt.Tmp && snap[b.set+":score"]["soon"] != -1 {
				t.Errorf("saved score of a message not due was touched: %v", snap[b.set+":score"])
			}
		})
	}
}

func TestBatchesRepeatUntilNothingIsDue(t *testing.T) {
	rdb, d, q := newQueues(t)
	const due, limit = 2500, 1000
	for _, b := range batches {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			queue := "repeat-" + b.name
			now := hkt.NowMs(t, rdb)
			d.Seed(t, rdb, func(p redis.Pipeliner) {
				for i := range due {
					d.Put(ctx, p, queue, b.set, fmt.Sprintf("m%d", i), float64(now-int64(i)-1))
				}
				d.Put(ctx, p, queue, b.set, "later", float64(now+3_600_000))
			})
			var got []int
			for {
				moved, err := b.run(ctx, q, queue, 1, limit)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, moved)
				if moved < limit {
					break
				}
			}
			if fmt.Sprint(got) != "[1000 1000 500]" {
				t.Errorf("batches moved %v, want [1000 1000 500]", got)
			}
			snap := d.Snapshot(t, rdb, queue)
			if len(snap[hkt.Active]) != due || len(snap[b.set]) != 1 {
				t.Errorf("active %d, %s %d; want %d and 1", len(snap[hkt.Active]), b.set, len(snap[b.set]), due)
			}
		})
	}
}

func TestTimeoutMovesExpiredInFlightMessagesWithScoreZero(t *testing.T) {
	rdb, d, q := newQueues(t)
	ctx := context.Background()
	now := hkt.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		d.Put(ctx, p, "jobs", hkt.Active, "fresh", float64(now))
		d.Put(ctx, p, "jobs", hkt.Tmp, "abandoned", float64(now-300_000))
		d.Put(ctx, p, "jobs", hkt.Tmp, "just-expired", float64(now-1))
		d.Put(ctx, p, "jobs", hkt.Tmp, "working", float64(now+300_000))
	})
	moved, err := q.TimeoutBatch(ctx, "jobs", 1, 1000)
	if err != nil || moved != 2 {
		t.Fatalf("TimeoutBatch = %d, %v; want 2, nil", moved, err)
	}
	snap := d.Snapshot(t, rdb, "jobs")
	want := map[string]float64{"fresh": float64(now), "abandoned": 0, "just-expired": 0}
	if fmt.Sprint(snap[hkt.Active]) != fmt.Sprint(want) {
		t.Errorf("active pool %v, want %v", snap[hkt.Active], want)
	}
	if fmt.Sprint(snap[hkt.Tmp]) != fmt.Sprint(map[string]float64{"working": float64(now + 300_000)}) {
		t.Errorf("tmp %v, want only working", snap[hkt.Tmp])
	}
}

func TestBatchWithAStaleTokenIsRefusedAndMovesNothing(t *testing.T) {
	rdb, d, q := newQueues(t)
	tests := []struct {
		name          string
		first, second uint64
		fenced        bool
	}{
		{"lower token is refused", 5, 3, true},
		{"equal token passes", 5, 5, false},
		{"higher token passes", 5, 6, false},
		{"fewer digits is lower", 10, 9, true},
		{"more digits is higher", 9, 10, false},
		{"zero after one is refused", 1, 0, true},
		{"beyond float precision, lower", math.MaxUint64, math.MaxUint64 - 1, true},
		{"beyond float precision, higher", 1<<53 + 1, 1<<53 + 2, false},
	}
	for _, b := range batches {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				ctx := t.Context()
				queue := "fence-" + b.name + "-" + tt.name
				task := "unlock"
				if b.set == hkt.Tmp {
					task = "timeout"
				}
				fence := d.Prefix + ":housekeeper:{" + queue + "}:fence:" + task
				if _, err := b.run(ctx, q, queue, tt.first, 10); err != nil {
					t.Fatalf("first batch, token %d: %v", tt.first, err)
				}
				now := hkt.NowMs(t, rdb)
				d.Seed(t, rdb, func(p redis.Pipeliner) { d.Put(ctx, p, queue, b.set, "due", float64(now-1)) })

				moved, err := b.run(ctx, q, queue, tt.second, 10)
				snap := d.Snapshot(t, rdb, queue)
				highest, _ := rdb.Get(ctx, fence).Result()
				if tt.fenced {
					if !errors.Is(err, housekeeper.ErrFenced) || moved != 0 {
						t.Errorf("batch = %d, %v; want 0, ErrFenced", moved, err)
					}
					if len(snap[b.set]) != 1 || len(snap[hkt.Active]) != 0 {
						t.Errorf("a fenced batch moved messages: %v", snap)
					}
					if highest != strconv.FormatUint(tt.first, 10) {
						t.Errorf("fence %q, want %d", highest, tt.first)
					}
					return
				}
				if err != nil || moved != 1 {
					t.Errorf("batch = %d, %v; want 1, nil", moved, err)
				}
				if highest != strconv.FormatUint(tt.second, 10) {
					t.Errorf("fence %q, want %d", highest, tt.second)
				}
			})
		}
	}
}

func TestFencesAreKeptPerTaskAndQueue(t *testing.T) {
	rdb, d, q := newQueues(t)
	ctx := context.Background()
	if _, err := q.UnlockBatch(ctx, "a", housekeeper.LockAck, 100, 10); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func() error
	}{
		{"the other lock type of the same task shares the fence", func() error {
			_, err := q.UnlockBatch(ctx, "a", housekeeper.LockNack, 99, 10)
			return err
		}},
		{"the timeout task of the same queue has its own", func() error {
			_, err := q.TimeoutBatch(ctx, "a", 1, 10)
			return err
		}},
		{"another queue has its own", func() error {
			_, err := q.UnlockBatch(ctx, "b", housekeeper.LockAck, 1, 10)
			return err
		}},
	}
	want := []bool{true, false, false}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); errors.Is(err, housekeeper.ErrFenced) != want[i] {
				t.Errorf("err = %v, fenced want %v", err, want[i])
			}
		})
	}
	if keys := allKeys(t, rdb, d); len(keys) != 3 {
		t.Errorf("keys %v, want the three fences", keys)
	}
}

func TestBatchesRejectBadArguments(t *testing.T) {
	_, _, q := newQueues(t)
	ctx := context.Background()
	tests := []struct {
		name string
		run  func() error
	}{
		{"empty queue", func() error { _, err := q.TimeoutBatch(ctx, "", 1, 10); return err }},
		{"queue with a brace", func() error { _, err := q.TimeoutBatch(ctx, "a}b", 1, 10); return err }},
		{"zero limit", func() error { _, err := q.TimeoutBatch(ctx, "a", 1, 0); return err }},
		{"unknown lock type", func() error { _, err := q.UnlockBatch(ctx, "a", "both", 1, 10); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestQueuesRejectAPrefixThatChangesTheHashTag(t *testing.T) {
	if _, err := housekeeper.NewQueues(redistest.Client(t), "dv{1}"); err == nil {
		t.Error("NewQueues accepted a prefix with braces")
	}
}

func TestTheIndexListsWhatWasPublishedAndTellsWhatIsNew(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	q, err := housekeeper.NewQueues(rdb, d.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b, c := housekeeper.WorkSet("a", "tmp"), housekeeper.WorkSet("a", "lock_ack"), housekeeper.WorkSet("x:lock_nack", "lock_nack")
	// Something not a queue set in the index is dropped by the next publish.
	rdb.ZAdd(ctx, d.Prefix+":housekeeper:sets", redis.Z{Score: 0, Member: d.Prefix + ":queue:{a}:lock_ack:score"})
	steps := []struct {
		publish   []string
		after     int64
		want      []string
		wantAfter int64
	}{
		{[]string{a, b}, 0, []string{a, b}, 2},
		{[]string{b, c}, 2, []string{c}, 3}, // only what is new
		{[]string{b, c}, 0, []string{b, c}, 3},
		{[]string{b, c}, 3, nil, 3}, // nothing new: the same numbers stand
		{nil, 0, nil, 0},
	}
	for i, st := range steps {
		if err := housekeeper.Publish(ctx, q, st.publish); err != nil {
			t.Fatal(err)
		}
		got, highest, err := housekeeper.ReadIndex(ctx, q, st.after)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Sorted(slices.Values(st.want))
		if !slices.Equal(got, want) || highest != st.wantAfter {
			t.Errorf("step %d: read after %d = %v up to %d, want %v up to %d", i, st.after, got, highest, want, st.wantAfter)
		}
	}
}
