package redisstore

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store"
)

// oddNames need escaping in keys, in hash tags or in SCAN patterns.
var oddNames = []string{
	"plain", "with:colons:lease", "{braces}", "}abc", "abc{", "a{b}c", "{}", "%", "100%", "%7B", "%25", "%00",
	"ünïcødé/名前", `glob*?[x]\`, "sp ace", "", "x}:lease",
}

func TestOddNamesRoundTrip(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	leases := map[string]store.Lease{}
	for _, name := range oddNames {
		l := mustGrant(t, s, req(name, "h", time.Minute, "v:"+name))
		leases[name] = l
		d := mustDescribe(t, s, name)
		if !d.Held || d.LastToken != l.Token {
			t.Errorf("Describe(%q) = %+v", name, d)
		}
		sameLease(t, d.Lease, l)
	}
	page, err := s.List(testCtx(t), "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(oddNames))
	var got []string
	for _, l := range page.Leases {
		got = append(got, l.Name)
		sameLease(t, l, leases[l.Name])
	}
	if !slices.Equal(got, want) || page.Next != "" {
		t.Errorf("List names = %q (next %q), want %q", got, page.Next, want)
	}
	for _, prefix := range []string{"{", "}", "%", "%7", "a{", "ünï", `glob*`, "x}:"} {
		page, err := s.List(testCtx(t), prefix, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, l := range page.Leases {
			got = append(got, l.Name)
		}
		for _, n := range oddNames {
			if strings.HasPrefix(n, prefix) {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("List(prefix %q) = %q, want %q", prefix, got, want)
		}
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	var want []string
	for i := range 25 {
		name := fmt.Sprintf("job/%02d", i)
		want = append(want, name)
		mustGrant(t, s, req(name, "h", time.Minute, ""))
	}
	mustGrant(t, s, req("jo", "h", time.Minute, ""))
	mustGrant(t, s, req("other/x", "h", time.Minute, ""))
	mustGrant(t, s, req("job/expired", "h", 20*time.Millisecond, ""))
	released := mustGrant(t, s, req("job/released", "h", time.Minute, ""))
	mustRelease(t, s, released)
	mustRefuse(t, s, waitReq("job/00", "w", 10*time.Second)) // a queue is not a lease
	testwait.Until(t, 5*time.Second, "job/expired to expire", func() bool { return !mustDescribe(t, s, "job/expired").Held })

	tests := []struct {
		name, prefix, cursor string
		limit                int
		pages                []int
		want                 []string
	}{
		{name: "pages through a prefix in name order", prefix: "job/", limit: 7, pages: []int{7, 7, 7, 4}, want: want},
		{name: "one page when the limit is larger", prefix: "job/", limit: 100, pages: []int{25}, want: want},
		{name: "a page exactly the size of the rest ends the listing", prefix: "job/", limit: 25, pages: []int{25}, want: want},
		{name: "starts after the cursor", prefix: "job/", cursor: "job/10", limit: 3, pages: []int{3, 3, 3, 3, 2}, want: want[11:]},
		{name: "a cursor between names", prefix: "job/", cursor: "job/10a", limit: 100, pages: []int{14}, want: want[11:]},
		{name: "all names", limit: 10, pages: []int{10, 10, 7}, want: slices.Concat([]string{"jo"}, want, []string{"other/x"})},
		{name: "no match", prefix: "nothing", limit: 10, pages: []int{0}},
		{name: "a limit that is not positive means the default", prefix: "job/", pages: []int{25}, want: want},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			var sizes []int
			cursor := tc.cursor
			for {
				page, err := s.List(testCtx(t), tc.prefix, cursor, tc.limit)
				if err != nil {
					t.Fatal(err)
				}
				sizes = append(sizes, len(page.Leases))
				for _, l := range page.Leases {
					got = append(got, l.Name)
					if l.Holder != "h" || l.Token == 0 || l.TTL != time.Minute || l.ExpiresAt.Before(time.Now()) {
						t.Errorf("listed lease %+v", l)
					}
				}
				if page.Next == "" {
					break
				}
				if len(page.Leases) == 0 || page.Next != page.Leases[len(page.Leases)-1].Name {
					t.Fatalf("page %q: Next = %q, want the last name", got, page.Next)
				}
				if len(sizes) > 20 {
					t.Fatal("too many pages")
				}
				cursor = page.Next
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(sizes, tc.pages) {
				t.Errorf("listed %q in pages %v, want %q in pages %v", got, sizes, tc.want, tc.pages)
			}
		})
	}
}
