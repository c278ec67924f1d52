package storage_test

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/housekeeper/storage"
	"github.com/coordinator-dev/coordinator/internal/testkit/mongotest"
)

func open(t *testing.T) (*storage.Storage, *mongo.Database) {
	t.Helper()
	db := mongotest.Database(t)
	return storage.New(db, "", "", nil), db
}

func ids(refs []storage.Ref) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.Queue + "/" + r.ID
	}
	return out
}

func TestExpiredReturnsWhatExpiredEarliestFirst(t *testing.T) {
	s, db := open(t)
	now := time.Now().Truncate(time.Millisecond)
	housekeepertest.Store(t, db,
		housekeepertest.Stored{Queue: "a", ID: "late", Expiry: now.Add(-time.Second)},
		housekeepertest.Stored{Queue: "b", ID: "early", Expiry: now.Add(-time.Hour)},
		housekeepertest.Stored{Queue: "a", ID: "now", Expiry: now},
		housekeepertest.Stored{Queue: "a", ID: "future", Expiry: now.Add(time.Millisecond)},
	)
	for _, tc := range []struct {
		limit int
		want  []string
	}{
		{10, []string{"b/early", "a/late", "a/now"}},
		{2, []string{"b/early", "a/late"}},
	} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			refs, err := s.Expired(t.Context(), now, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(refs); !slices.Equal(got, tc.want) {
				t.Fatalf("Expired = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDeleteExpiredKeepsAMessageRenewedMeanwhile(t *testing.T) {
	s, db := open(t)
	now := time.Now()
	housekeepertest.Store(t, db,
		housekeepertest.Stored{Queue: "q", ID: "1", Expiry: now.Add(-time.Minute)},
		housekeepertest.Stored{Queue: "q", ID: "2", Expiry: now.Add(-time.Minute)},
	)
	refs, err := s.Expired(t.Context(), now, 10)
	if err != nil || len(refs) != 2 {
		t.Fatalf("Expired = %v, %v", refs, err)
	}
	// An Add of "2" between the read and the delete renews it.
	housekeepertest.Store(t, db, housekeepertest.Stored{Queue: "q", ID: "2", Expiry: now.Add(time.Hour)})
	deleted, err := s.DeleteExpired(t.Context(), refs, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(deleted); !slices.Equal(got, []string{"q/1"}) {
		t.Fatalf("deleted %v, want only q/1", got)
	}
	if left := housekeepertest.StoredIDs(t, db, "q"); !left["2"] || left["1"] {
		t.Fatalf("stored after the delete: %v, want 2 only", left)
	}
}

func TestExcessIsTheEarliestExpiringBeyondTheNewestMax(t *testing.T) {
	s, db := open(t)
	now := time.Now()
	var msgs []housekeepertest.Stored
	for i := range 10 {
		msgs = append(msgs, housekeepertest.Stored{Queue: "q", ID: fmt.Sprint(i), Expiry: now.Add(time.Duration(i) * time.Minute)})
	}
	msgs = append(msgs, housekeepertest.Stored{Queue: "other", ID: "x", Expiry: now})
	housekeepertest.Store(t, db, msgs...)
	for _, tc := range []struct {
		max   int64
		limit int
		want  []string
	}{
		{7, 100, []string{"0", "1", "2"}},
		{10, 100, nil},
		{20, 100, nil},
		{0, 100, []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}},
		{5, 2, []string{"3", "4"}}, // a batch takes the newest of the excess first
	} {
		t.Run(fmt.Sprintf("max%d-limit%d", tc.max, tc.limit), func(t *testing.T) {
			refs, err := s.Excess(t.Context(), "q", tc.max, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range refs {
				got = append(got, r.ID)
			}
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Excess = %v, want %v", got, tc.want)
			}
		})
	}
}

// Two trims that read the excess before either deletes, with messages
// arriving between, leave the queue at its maximum: never below.
func TestRacingTrimsNeverGoBelowTheMaximum(t *testing.T) {
	s, db := open(t)
	now := time.Now()
	const max = 5
	var msgs []housekeepertest.Stored
	for i := range 9 {
		msgs = append(msgs, housekeepertest.Stored{Queue: "q", ID: fmt.Sprint("old", i), Expiry: now.Add(time.Duration(i) * time.Minute)})
	}
	housekeepertest.Store(t, db, msgs...)
	first, err := s.Excess(t.Context(), "q", max, 100)
	if err != nil {
		t.Fatal(err)
	}
	housekeepertest.Store(t, db, housekeepertest.Stored{Queue: "q", ID: "new", Expiry: now.Add(time.Hour)})
	if _, err := s.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	second, err := s.Excess(t.Context(), "q", max, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(t.Context(), first); err != nil { // the stale trim, again
		t.Fatal(err)
	}
	if _, err := s.Delete(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	if left := housekeepertest.StoredIDs(t, db, "q"); len(left) != max || !left["new"] {
		t.Fatalf("left %v, want the %d latest expiring, new among them", left, max)
	}
}

func TestMaxElementsReadsPositiveLimits(t *testing.T) {
	s, db := open(t)
	housekeepertest.SetMaxElements(t, db, "a", 10)
	housekeepertest.SetMaxElements(t, db, "b", 0)
	housekeepertest.SetMaxElements(t, db, "c", -1)
	housekeepertest.SetMaxElements(t, db, "d::x", 1)
	got, err := s.MaxElements(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"] != 10 || got["d::x"] != 1 {
		t.Fatalf("MaxElements = %v, want a:10 d::x:1", got)
	}
}

func TestCountsCountsEachQueue(t *testing.T) {
	s, db := open(t)
	now := time.Now()
	housekeepertest.Store(t, db,
		housekeepertest.Stored{Queue: "a", ID: "1", Expiry: now},
		housekeepertest.Stored{Queue: "a", ID: "2", Expiry: now},
		housekeepertest.Stored{Queue: "b", ID: "1", Expiry: now},
		housekeepertest.Stored{Queue: "c", ID: "1", Expiry: now},
	)
	got, err := s.Counts(t.Context(), []string{"a", "b", "none"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"] != 2 || got["b"] != 1 {
		t.Fatalf("Counts = %v, want a:2 b:1", got)
	}
}

func TestPagesFollowInsertionOrderWithinTheBounds(t *testing.T) {
	s, db := open(t)
	if newest, err := s.NewestID(t.Context()); err != nil || newest != "" {
		t.Fatalf("NewestID of an empty storage = %q, %v", newest, err)
	}
	now := time.Now()
	for i := range 7 {
		housekeepertest.Store(t, db, housekeepertest.Stored{Queue: fmt.Sprint("q", i%2), ID: fmt.Sprint(i), Score: float64(i), Expiry: now})
	}
	newest, err := s.NewestID(t.Context())
	if err != nil || newest == "" {
		t.Fatalf("NewestID = %q, %v", newest, err)
	}
	housekeepertest.Store(t, db, housekeepertest.Stored{Queue: "q0", ID: "after", Expiry: now})
	var got []string
	after := ""
	for {
		page, err := s.Page(t.Context(), after, newest, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			got = append(got, fmt.Sprintf("%s/%s/%g", m.Queue, m.ID, m.Score))
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].InternalID.Hex()
	}
	want := []string{"q0/0/0", "q1/1/1", "q0/2/2", "q1/3/3", "q0/4/4", "q1/5/5", "q0/6/6"}
	if !slices.Equal(got, want) {
		t.Fatalf("pages = %v, want %v (bounded by the newest id at the start)", got, want)
	}
	if _, err := s.Page(t.Context(), "not-hex", "", 3); err == nil {
		t.Fatal("Page with a malformed breakpoint: no error")
	}
}

func TestStatsCountsAndAgesEachPrefix(t *testing.T) {
	s, db := open(t)
	now := time.Now().Truncate(time.Millisecond)
	housekeepertest.Store(t, db,
		housekeepertest.Stored{Queue: "p::a", ID: "1", Expiry: now, LastUsage: now.Add(-time.Hour)},
		housekeepertest.Stored{Queue: "p::b", ID: "1", Expiry: now, LastUsage: now.Add(-time.Minute)},
		housekeepertest.Stored{Queue: "r", ID: "1", Expiry: now, LastUsage: now},
	)
	got, err := s.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]storage.PrefixStats{
		"p": {Total: 2, Oldest: now.Add(-time.Hour)},
		"r": {Total: 1, Oldest: now},
	}
	if len(got) != len(want) {
		t.Fatalf("Stats = %v, want %v", got, want)
	}
	for prefix, w := range want {
		if g := got[prefix]; g.Total != w.Total || !g.Oldest.Equal(w.Oldest) {
			t.Fatalf("Stats[%q] = %+v, want %+v", prefix, g, w)
		}
	}
}

// ExcessOf, one read for several queues, picks what Excess picks for each.
func TestExcessOfPicksWhatExcessPicksForEachQueue(t *testing.T) {
	s, db := open(t)
	now := time.Now().Truncate(time.Millisecond)
	var msgs []housekeepertest.Stored
	for i := range 60 {
		// Ties in expiry_date are broken by _id, as Excess's sort does.
		msgs = append(msgs, housekeepertest.Stored{Queue: fmt.Sprint("q", i%3), ID: fmt.Sprint(i), Expiry: now.Add(time.Duration(i%7) * time.Minute)})
	}
	housekeepertest.Store(t, db, msgs...)
	limits := map[string]int64{"q0": 5, "q1": 20, "q2": 0, "none": 3}
	got, err := s.ExcessOf(t.Context(), limits)
	if err != nil {
		t.Fatal(err)
	}
	for queue, max := range limits {
		want, err := s.Excess(t.Context(), queue, max, 1000)
		if err != nil {
			t.Fatal(err)
		}
		w, g := ids(want), ids(got[queue])
		sort.Strings(w)
		sort.Strings(g)
		if !slices.Equal(w, g) {
			t.Errorf("queue %s: ExcessOf %v, Excess %v", queue, g, w)
		}
	}
}
