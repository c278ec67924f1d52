package housekeeper

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeView decodes arbitrary proclaimed values, and encodes views of
// arbitrary members. DecodeView fails or returns a view: a token, members
// sorted without duplicates, whose Encode decodes to the same view, and
// whose owners are members. Every view with a token round-trips through
// Encode and DecodeView; a view without one is refused. Member ids are
// valid UTF-8 (they are lease names, which the coordinator checks): JSON
// cannot carry other bytes.
func FuzzDecodeView(f *testing.F) {
	for _, seed := range []string{
		`{"token":7,"members":["hk-1","hk-0"]}`,
		`{"token":7,"members":["b","a","b"]}`,
		`{"token":18446744073709551615,"members":[]}`,
		`{"token":1,"members":null}`,
		`{"token":0,"members":["a"]}`,
		`{"members":["a"]}`,
		`{"token":-1}`,
		`{"token":1.5}`,
		`{"token":"7"}`,
		`{"TOKEN":3,"Members":["x"],"extra":true}`,
		`{"token":2,"members":["\ud800","\u00e9"]}`,
		`{"token":2,"token":3}`,
		`[]`,
		`null`,
		``,
		"host-a:8080",
	} {
		f.Add([]byte(seed), uint64(7), "hk-1\nhk-0")
	}
	f.Add([]byte(nil), uint64(0), "a")
	f.Add([]byte(nil), uint64(1), "")
	f.Add([]byte(nil), uint64(1), "a\na\n\n")
	f.Add([]byte(nil), uint64(1), "\"quoted\"\n\\back\\\n\u2028")
	f.Fuzz(func(t *testing.T, raw []byte, token uint64, members string) {
		if v, err := DecodeView(raw); err == nil {
			checkView(t, v)
			again, err := DecodeView(v.Encode())
			if err != nil || !sameView(again, v) {
				t.Fatalf("DecodeView(%q) = %+v, whose Encode %q decodes to %+v, %v", raw, v, v.Encode(), again, err)
			}
		} else if !strings.HasPrefix(err.Error(), "housekeeper: ") {
			t.Fatalf("DecodeView(%q): error %q", raw, err)
		}

		if !utf8.ValidString(members) {
			return
		}
		v := NewView(token, strings.Split(members, "\n"))
		checkMembers(t, v)
		got, err := DecodeView(v.Encode())
		if token == 0 {
			if err == nil {
				t.Fatalf("a view without a token, %q, decoded as %+v", v.Encode(), got)
			}
			return
		}
		if err != nil || !sameView(got, v) {
			t.Fatalf("%+v encoded as %q decodes to %+v, %v", v, v.Encode(), got, err)
		}
	})
}

func checkView(t *testing.T, v View) {
	t.Helper()
	if v.Token == 0 {
		t.Fatalf("a view without a token: %+v", v)
	}
	checkMembers(t, v)
	for _, queue := range []string{"orders", ""} {
		for _, task := range []task{taskUnlock, taskTimeout} {
			owner := v.Owner(task, queue)
			if (owner == "") != (len(v.Members) == 0) || (owner != "" && !v.Has(owner)) {
				t.Fatalf("view %+v: %s of %q is owned by %q", v, task, queue, owner)
			}
		}
	}
}

func checkMembers(t *testing.T, v View) {
	t.Helper()
	for i := 1; i < len(v.Members); i++ {
		if v.Members[i-1] >= v.Members[i] {
			t.Fatalf("members %q are not sorted without duplicates", v.Members)
		}
	}
	for _, m := range v.Members {
		if !v.Has(m) {
			t.Fatalf("view %+v: Has(%q) is false", v, m)
		}
	}
}

func sameView(a, b View) bool { return a.Token == b.Token && slices.Equal(a.Members, b.Members) }
