package access

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzParse reads arbitrary access files. Parse never panics; an error
// names a line of the file; and a file it accepts means what the format
// says, line by line as read here independently of Parse: one credential
// per line that has words before its first "#" word, each with a grant
// that allows exactly the names under the line's prefixes (every name for
// "*"), kept minimal and sorted, and every prefix one that names could
// start with.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"# only a comment\n\n   \n",
		"tok-a   team-a/ shared/      # a trailing comment\ntok-b   team-b/ team-b/jobs/\ntok#hash  hashes/\nadmin   *\ncert:billing billing/\n",
		"tok a/ *\n",
		"tok jobs/. team-a/ab\n",
		"tok a/\r\ntok2 b/\r\n",
		"tok a/ a/ a/b a\n",
		"tok-a team-a/\ntok-b\n",
		"tok-b # everything\n",
		"tok-a a/\n\ntok-a b/\n",
		"cert: a/\n",
		"cert:svc a/\n",
		"tok a/*\n",
		"tok /a\n",
		"tok a//b\n",
		"tok\ta/../b\n",
		"tok " + strings.Repeat("x", 257) + "\n",
		"tok a\x01\n",
		"tok a\xff\n",
		"tok\u00a0a/ b/\n", // a no-break space separates words too
		"t\u0085ok a/\n",
		strings.Repeat("x", MaxTokenBytes+1) + " a/\n",
		"no newline at the end a/",
	} {
		f.Add(seed, true, uint16(256))
		f.Add(seed, false, uint16(0))
	}
	f.Fuzz(func(t *testing.T, file string, certs bool, maxPrefix uint16) {
		opts := ParseOptions{ClientCerts: certs, MaxPrefixBytes: int(maxPrefix)}
		rules, err := Parse(strings.NewReader(file), opts)
		lines := scanLines(file)
		if err != nil {
			n, _, ok := strings.Cut(strings.TrimPrefix(err.Error(), "line "), ":")
			line, convErr := strconv.Atoi(n)
			if !strings.HasPrefix(err.Error(), "line ") || !ok || convErr != nil || line < 1 || line > len(lines) {
				t.Fatalf("error %q names no line of the file's %d", err, len(lines))
			}
			return
		}
		creds := 0
		for i, line := range lines {
			words := strings.Fields(line)
			if j := slices.IndexFunc(words, func(w string) bool { return strings.HasPrefix(w, "#") }); j >= 0 {
				words = words[:j]
			}
			if len(words) == 0 {
				continue
			}
			creds++
			cred, prefixes := words[0], words[1:]
			var g *Grant
			if cn, ok := strings.CutPrefix(cred, "cert:"); ok {
				if !certs {
					t.Fatalf("line %d: a certificate rule accepted without client certificates", i+1)
				}
				g = rules.grantFor(identity{cn: cn})
				if g == nil || g.Who != cred {
					t.Fatalf("line %d: the grant of %q is %+v", i+1, cred, g)
				}
			} else {
				g = rules.grantFor(tokenID(cred))
				if want := fmt.Sprintf("the token of line %d", i+1); g == nil || g.Who != want {
					t.Fatalf("line %d: the grant of its token is %+v; want %q", i+1, g, want)
				}
				if len(cred) > MaxTokenBytes {
					t.Fatalf("line %d: a token of %d bytes accepted", i+1, len(cred))
				}
			}
			checkGrant(t, i+1, g, prefixes, opts)
		}
		if rules.Len() != creds {
			t.Fatalf("Len = %d; the file has %d credentials", rules.Len(), creds)
		}
	})
}

// scanLines splits a file into lines as the format defines them: "\n" ends
// a line, a "\r" before it is dropped, and a last line needs no "\n".
func scanLines(file string) []string {
	if file == "" {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(file, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

// checkGrant checks that g, read from a line with these prefixes, allows
// exactly the names under them.
func checkGrant(t *testing.T, line int, g *Grant, prefixes []string, opts ParseOptions) {
	t.Helper()
	if len(prefixes) == 0 {
		t.Fatalf("line %d: a credential without prefixes accepted", line)
	}
	if all := slices.Contains(prefixes, "*"); g.All() != all {
		t.Fatalf("line %d: All() = %v for the prefixes %q", line, g.All(), prefixes)
	}
	if g.All() {
		if len(g.prefixes) != 0 {
			t.Fatalf("line %d: a grant of every name keeps prefixes %q", line, g.prefixes)
		}
		return
	}
	if !slices.IsSorted(g.prefixes) {
		t.Fatalf("line %d: prefixes %q are not sorted", line, g.prefixes)
	}
	for i, p := range g.prefixes {
		if !slices.Contains(prefixes, p) {
			t.Fatalf("line %d: prefix %q is not on the line %q", line, p, prefixes)
		}
		for j, q := range g.prefixes {
			if i != j && strings.HasPrefix(p, q) {
				t.Fatalf("line %d: prefix %q is covered by %q", line, p, q)
			}
		}
	}
	for _, p := range prefixes {
		if opts.MaxPrefixBytes > 0 && len(p) > opts.MaxPrefixBytes {
			t.Fatalf("line %d: prefix %q is longer than %d bytes", line, p, opts.MaxPrefixBytes)
		}
		if !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }) {
			t.Fatalf("line %d: prefix %q is not printable UTF-8", line, p)
		}
		if strings.Contains(p, "*") {
			t.Fatalf("line %d: prefix %q holds a \"*\"", line, p)
		}
		segs := strings.Split(p, "/")
		for _, s := range segs[:len(segs)-1] {
			if s == "" || s == "." || s == ".." {
				t.Fatalf("line %d: prefix %q has a segment %q no name has", line, p, s)
			}
		}
	}
	// Names at, just past and just short of every prefix.
	var names []string
	for _, p := range prefixes {
		names = append(names, p, p+"x", p[:len(p)-1])
	}
	for _, name := range names {
		want := slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
		if got := g.Allows(name); got != want {
			t.Fatalf("line %d: Allows(%q) = %v for the prefixes %q; want %v", line, name, got, prefixes, want)
		}
	}
}
