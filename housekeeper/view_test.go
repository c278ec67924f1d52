package housekeeper_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/coordinator-dev/coordinator/housekeeper"
)

func members(n int) []string {
	var m []string
	for i := range n {
		m = append(m, fmt.Sprint("hk-", i))
	}
	return m
}

// Every member gets close to its share of 1,000 queues' two tasks, and
// the share does not depend on the order members are named in.
func TestViewOwnerSpreadsTheWorkEvenly(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10} {
		t.Run(fmt.Sprint(n, " members"), func(t *testing.T) {
			m := members(n)
			v := housekeeper.NewView(7, m)
			reversed := slices.Clone(m)
			slices.Reverse(reversed)
			w := housekeeper.NewView(7, reversed)
			counts := map[string]int{}
			for q := range 1000 {
				for _, task := range []string{"unlock", "timeout"} {
					owner := housekeeper.OwnerOf(v, task, fmt.Sprint("queue-", q))
					if other := housekeeper.OwnerOf(w, task, fmt.Sprint("queue-", q)); other != owner {
						t.Fatalf("queue-%d %s: owner %s or %s depending on the order of the members", q, task, owner, other)
					}
					counts[owner]++
				}
			}
			fair := 2000.0 / float64(n)
			for _, id := range m {
				if share := float64(counts[id]) / fair; share > 1.25 || share < 0.75 {
					t.Errorf("%s owns %d sets, %.2f of its fair share %.0f", id, counts[id], share, fair)
				}
			}
		})
	}
}

// A member that joins takes queues from the others and moves nothing
// else; one that leaves hands only its own on.
func TestAViewChangeMovesOnlyTheQueuesOfTheMemberThatCameOrWent(t *testing.T) {
	before := housekeeper.NewView(1, members(5))
	after := housekeeper.NewView(2, members(6)) // hk-5 joins
	moved := 0
	for q := range 1000 {
		queue := fmt.Sprint("queue-", q)
		was, is := housekeeper.OwnerOf(before, "timeout", queue), housekeeper.OwnerOf(after, "timeout", queue)
		if was != is {
			moved++
			if is != "hk-5" {
				t.Fatalf("%s moved from %s to %s, not to the newcomer", queue, was, is)
			}
		}
	}
	if moved < 100 || moved > 240 {
		t.Errorf("%d of 1000 queues moved to the sixth member, want about 167", moved)
	}
}

func TestViewEncodesAndDecodes(t *testing.T) {
	v := housekeeper.NewView(1<<60+3, []string{"b", "a", "b"})
	got, err := housekeeper.DecodeView(v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != v.Token || !slices.Equal(got.Members, []string{"a", "b"}) {
		t.Errorf("decoded %+v, want token %d and members [a b]", got, v.Token)
	}
	for _, bad := range []string{"", "null", `{"members":["a"]}`, `{"token":-1}`, "not json"} {
		if _, err := housekeeper.DecodeView([]byte(bad)); err == nil {
			t.Errorf("DecodeView(%q) accepted it", bad)
		}
	}
	if v.Has("c") || !v.Has("a") {
		t.Error("Has is wrong")
	}
	if owner := housekeeper.OwnerOf(housekeeper.View{}, "unlock", "q"); owner != "" {
		t.Errorf("a view without members names owner %q", owner)
	}
}
