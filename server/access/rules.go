package access

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Grant is what one credential may use.
type Grant struct {
	// Who names the credential in messages, never its secret: "cert:CN",
	// or "the token of line N".
	Who      string
	all      bool
	prefixes []string // none covers another
}

// Allows reports whether the grant covers name.
func (g *Grant) Allows(name string) bool {
	if g.all {
		return true
	}
	for _, p := range g.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// All reports whether the grant covers every name.
func (g *Grant) All() bool { return g.all }

// within returns the grant's prefixes that extend prefix: the part of the
// names under prefix the grant may see, when it does not cover prefix
// itself.
func (g *Grant) within(prefix string) []string {
	var out []string
	for _, p := range g.prefixes {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	return out
}

// Rules are the credentials of one version of the access file.
type Rules struct {
	tokens []tokenRule
	certs  map[string]*Grant
}

type tokenRule struct {
	digest [sha256.Size]byte
	grant  *Grant
}

// ParseOptions says what the server can check.
type ParseOptions struct {
	// ClientCerts is set when the server verifies client certificates
	// (mTLS); without it a "cert:" rule could never match and is refused.
	ClientCerts bool
	// MaxPrefixBytes bounds a prefix (a name's length); 0 means no bound.
	MaxPrefixBytes int
}

// MaxTokenBytes bounds a token: longer ones are surely a mistake (a file
// pasted in the wrong place).
const MaxTokenBytes = 4096

// Load reads an access file.
func Load(path string, opts ParseOptions) (*Rules, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the operator names this file in the configuration; reading it is the point
	if err != nil {
		return nil, fmt.Errorf("access file: %w", err)
	}
	defer func() { _ = f.Close() }()
	rules, err := Parse(f, opts)
	if err != nil {
		return nil, fmt.Errorf("access file %s: %w", path, err)
	}
	return rules, nil
}

// Parse reads rules, one a line. An error names the line it is on.
func Parse(r io.Reader, opts ParseOptions) (*Rules, error) {
	rules := &Rules{certs: map[string]*Grant{}}
	seen := map[string]int{} // credential → line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		words := fields(sc.Text())
		if len(words) == 0 {
			continue
		}
		cred, prefixes := words[0], words[1:]
		if err := rules.add(n, cred, prefixes, seen, opts); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return rules, nil
}

// fields splits a line into words up to the first word that starts with
// "#": a "#" inside a token is part of it.
func fields(line string) []string {
	words := strings.Fields(line)
	for i, w := range words {
		if strings.HasPrefix(w, "#") {
			return words[:i]
		}
	}
	return words
}

func (r *Rules) add(line int, cred string, prefixes []string, seen map[string]int, opts ParseOptions) error {
	if first, dup := seen[cred]; dup {
		return fmt.Errorf("this credential already has a rule on line %d; give all its prefixes on one line", first)
	}
	seen[cred] = line
	g := &Grant{}
	if cn, ok := strings.CutPrefix(cred, "cert:"); ok {
		if cn == "" {
			return errors.New(`"cert:" needs the client certificate's Common Name after it`)
		}
		if !opts.ClientCerts {
			return fmt.Errorf("%q: certificate rules need client certificates (-tls-client-ca, COORDINATOR_TLS_CLIENT_CA)", cred)
		}
		g.Who = cred
	} else {
		if len(cred) > MaxTokenBytes {
			return fmt.Errorf("the token is %d bytes long; at most %d are allowed", len(cred), MaxTokenBytes)
		}
		g.Who = fmt.Sprintf("the token of line %d", line)
	}
	if len(prefixes) == 0 {
		return errors.New("the credential has no name prefixes: give one or more, or * for every name")
	}
	for _, p := range prefixes {
		if p == "*" {
			g.all = true
			continue
		}
		if err := checkPrefix(p, opts.MaxPrefixBytes); err != nil {
			return fmt.Errorf("prefix %q: %w", p, err)
		}
		g.prefixes = append(g.prefixes, p)
	}
	g.prefixes = minimal(g.prefixes)
	if g.all {
		g.prefixes = nil
	}
	if cn, ok := strings.CutPrefix(cred, "cert:"); ok {
		r.certs[cn] = g
	} else {
		r.tokens = append(r.tokens, tokenRule{digest: sha256.Sum256([]byte(cred)), grant: g})
	}
	return nil
}

// checkPrefix refuses what no valid name could start with, so that a typo
// shows up when the file is read rather than as a caller refused later.
func checkPrefix(p string, maxBytes int) error {
	if maxBytes > 0 && len(p) > maxBytes {
		return fmt.Errorf("is %d bytes long; names have at most %d", len(p), maxBytes)
	}
	if !utf8.ValidString(p) {
		return errors.New("is not valid UTF-8")
	}
	for _, c := range p {
		if !unicode.IsPrint(c) {
			return fmt.Errorf("contains the unprintable character %U", c)
		}
	}
	if strings.Contains(p, "*") {
		return errors.New(`"*" stands alone, for every name; it is not a wildcard inside a prefix`)
	}
	segs := strings.Split(p, "/")
	for _, seg := range segs[:len(segs)-1] { // the last one may be unfinished
		if seg == "" || seg == "." || seg == ".." {
			return errors.New(`names have no empty, "." or ".." segments (a leading "/" or "//")`)
		}
	}
	return nil
}

// minimal drops prefixes that another one covers.
func minimal(prefixes []string) []string {
	slices.Sort(prefixes)
	prefixes = slices.Compact(prefixes)
	var out []string
	for _, p := range prefixes {
		if len(out) > 0 && strings.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// withAllToken adds a token that may use every name (COORDINATOR_AUTH_TOKEN);
// it wins over a rule of the file for the same token.
func (r *Rules) withAllToken(token string) *Rules {
	if token == "" {
		return r
	}
	out := &Rules{certs: r.certs}
	digest := sha256.Sum256([]byte(token))
	for _, t := range r.tokens {
		if t.digest != digest {
			out.tokens = append(out.tokens, t)
		}
	}
	out.tokens = append(out.tokens, tokenRule{digest: digest, grant: &Grant{Who: "the -auth-token", all: true}})
	return out
}

// grantFor returns the grant of a caller, or nil when its credential is
// unknown. Token digests are compared in constant time, against every rule,
// so that the time taken tells nothing of how close a guess came.
func (r *Rules) grantFor(id identity) *Grant {
	if id.hasToken {
		var found *Grant
		for _, t := range r.tokens {
			if subtle.ConstantTimeCompare(t.digest[:], id.digest[:]) == 1 {
				found = t.grant
			}
		}
		return found
	}
	if id.cn != "" {
		return r.certs[id.cn]
	}
	return nil
}

// Len is the number of credentials.
func (r *Rules) Len() int { return len(r.tokens) + len(r.certs) }
