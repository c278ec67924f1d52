package access

import (
	"crypto/sha256"
	"strings"
	"testing"
)

func tokenID(token string) identity {
	return identity{hasToken: true, digest: sha256.Sum256([]byte(token))}
}

func TestParseGrantsCredentialsTheirPrefixes(t *testing.T) {
	rules, err := Parse(strings.NewReader(`
# team tokens
tok-a   team-a/ shared/      # a trailing comment
tok-b   team-b/ team-b/jobs/ # the second is covered by the first
tok#hash  hashes/
admin   *
cert:billing billing/
`), ParseOptions{ClientCerts: true, MaxPrefixBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id    identity
		name  string
		allow bool
	}{
		{tokenID("tok-a"), "team-a/x", true},
		{tokenID("tok-a"), "shared/y", true},
		{tokenID("tok-a"), "team-b/x", false},
		{tokenID("tok-a"), "team-ab", false},
		{tokenID("tok-b"), "team-b/jobs/1", true},
		{tokenID("tok#hash"), "hashes/1", true},
		{tokenID("admin"), "anything/at/all", true},
		{identity{cn: "billing"}, "billing/invoice", true},
		{identity{cn: "billing"}, "team-a/x", false},
	}
	for _, tc := range tests {
		g := rules.grantFor(tc.id)
		if g == nil {
			t.Fatalf("%+v: no grant", tc.id)
		}
		if got := g.Allows(tc.name); got != tc.allow {
			t.Errorf("%s may use %q: %v, want %v", g.Who, tc.name, got, tc.allow)
		}
	}
	for _, unknown := range []identity{tokenID("tok"), tokenID("tok-a "), tokenID("#"), {cn: "billing2"}, {}} {
		if g := rules.grantFor(unknown); g != nil {
			t.Errorf("%+v has the grant of %s", unknown, g.Who)
		}
	}
	if got := rules.grantFor(tokenID("tok-b")).prefixes; len(got) != 1 {
		t.Errorf("tok-b prefixes = %q; the covered one should be dropped", got)
	}
	if rules.Len() != 5 {
		t.Errorf("Len = %d, want 5", rules.Len())
	}
}

func TestParseRefusesABadFileNamingTheLine(t *testing.T) {
	tests := []struct {
		name, file, want string
		certs            bool
	}{
		{"no prefixes", "tok-a team-a/\ntok-b\n", "line 2: the credential has no name prefixes", false},
		{"no prefixes before a comment", "tok-b # everything\n", "line 1: the credential has no name prefixes", false},
		{"duplicate", "tok-a a/\n\ntok-a b/\n", "line 3: this credential already has a rule on line 1", false},
		{"empty CN", "cert: a/\n", `line 1: "cert:" needs`, true},
		{"cert without mTLS", "cert:svc a/\n", "line 1: \"cert:svc\": certificate rules need client certificates", false},
		{"wildcard inside", "tok a/*\n", `line 1: prefix "a/*": "*" stands alone`, false},
		{"leading slash", "tok /a\n", `line 1: prefix "/a"`, false},
		{"empty segment", "tok a//b\n", `line 1: prefix "a//b"`, false},
		{"dot segment", "tok\ta/../b\n", `line 1: prefix "a/../b"`, false},
		{"too long", "tok " + strings.Repeat("x", 257) + "\n", "line 1: prefix", false},
		{"unprintable", "tok a\x01\n", "line 1: prefix", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.file), ParseOptions{ClientCerts: tc.certs, MaxPrefixBytes: 256})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseAcceptsUnfinishedLastSegments(t *testing.T) {
	// A prefix may stop inside a segment: "jobs/." covers "jobs/.hidden".
	rules, err := Parse(strings.NewReader("tok jobs/. team-a/ab\n"), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := rules.grantFor(tokenID("tok"))
	if !g.Allows("jobs/.hidden") || !g.Allows("team-a/abc") {
		t.Fatalf("grant %q", g.prefixes)
	}
}

func TestAuthTokenMayUseEveryNameOverTheFile(t *testing.T) {
	rules, err := Parse(strings.NewReader("same a/\nother b/\n"), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules = rules.withAllToken("same")
	if g := rules.grantFor(tokenID("same")); g == nil || !g.All() {
		t.Fatalf("the auth token's grant = %+v; want every name", g)
	}
	if g := rules.grantFor(tokenID("other")); g == nil || g.Allows("a/x") {
		t.Fatalf("other's grant = %+v", g)
	}
}

func TestListNarrowsToTheGrantedPrefixesUnderTheOneAsked(t *testing.T) {
	g := &Grant{prefixes: minimal([]string{"team-a/", "team-b/x/", "shared/"})}
	tests := []struct {
		prefix string
		want   string
	}{
		{"", "shared/ team-a/ team-b/x/"},
		{"team-", "team-a/ team-b/x/"},
		{"team-b/", "team-b/x/"},
		{"other/", ""},
	}
	for _, tc := range tests {
		if got := strings.Join(g.within(tc.prefix), " "); got != tc.want {
			t.Errorf("within(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}
