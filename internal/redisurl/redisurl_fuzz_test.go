package redisurl

import (
	"net"
	"strings"
	"testing"
)

// urlSeeds are the documented forms, their edge cases and the URLs the
// unit tests refuse.
var urlSeeds = []string{
	"redis://localhost:6380/2",
	"rediss://user:secret@cache.example/0?read_timeout=2s",
	"unix:///run/redis.sock?db=3",
	"unix://user:secret@/run/redis.sock",
	"redis+sentinel://user:secret@s1:26380,s2,[::1]:26381/mymaster/4?sentinel_password=sp&dial_timeout=2s",
	"rediss+sentinel://s1/mymaster",
	"redis+sentinel://s1,s2/m?sentinel_username=su&sentinel_password=sp",
	"redis+cluster://user:secret@n1:7000,n2:7001,n3?read_timeout=1s",
	"rediss+cluster://n1:7000/",
	"REDIS+CLUSTER://[::1],[::2]:7001",
	"redis://localhost:6379/0?protocol=3",
	"redis://:onlypass@h",
	"redis://user:p%40ss@h:1/0",
	"redis://user:pa:ss@h@x:1",
	"localhost:6379",
	"http://localhost",
	"redis://localhost/a",
	"redis://localhost?bogus=1",
	"redis://user:secret@host:port",
	"redis+sentinel://user:secret@s1",
	"redis+sentinel://s1/m/1/2",
	"redis+sentinel://s1/m?master_name=x",
	"redis+sentinel://s1:1,s2:2/m#frag",
	"redis+cluster://user:secret@n1/3",
	"redis+cluster://n1,,n2",
	"redis+cluster://n1?bogus=1",
	"redis+cluster://[::1",
	"redis+cluster://",
	"://",
}

// FuzzParse parses arbitrary URLs: Parse never panics; it either fails or
// names exactly one deployment, with an address for every node, context
// deadlines on and RESP2 unless the URL asks for a protocol; NewClient
// accepts what Parse accepts. Redact never fails and is idempotent.
func FuzzParse(f *testing.F) {
	for _, s := range urlSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		red := Redact(raw)
		if again := Redact(red); again != red {
			t.Fatalf("Redact(%q) = %q, but Redact of that is %q", raw, red, again)
		}
		c, err := Parse(raw)
		if err != nil {
			if c != (Config{}) {
				t.Fatalf("Parse(%q) failed (%v) but returned %+v", raw, err, c)
			}
			if !strings.HasPrefix(err.Error(), "invalid Redis URL ") {
				t.Fatalf("Parse(%q): error %q does not say what failed", raw, err)
			}
			return
		}
		set := 0
		var addrs []string
		var timeouts bool
		var protocol int
		if o := c.Standalone; o != nil {
			set++
			addrs, timeouts, protocol = []string{o.Addr}, o.ContextTimeoutEnabled, o.Protocol
		}
		if o := c.Sentinel; o != nil {
			set++
			addrs, timeouts, protocol = o.SentinelAddrs, o.ContextTimeoutEnabled, o.Protocol
			if o.MasterName == "" {
				t.Fatalf("Parse(%q): a sentinel config without a master name: %+v", raw, o)
			}
		}
		if o := c.Cluster; o != nil {
			set++
			addrs, timeouts, protocol = o.Addrs, o.ContextTimeoutEnabled, o.Protocol
		}
		if set != 1 {
			t.Fatalf("Parse(%q) set %d deployments: %+v", raw, set, c)
		}
		if !timeouts {
			t.Fatalf("Parse(%q): context deadlines are not honoured", raw)
		}
		if !strings.Contains(raw, "protocol=") && protocol != 2 {
			t.Fatalf("Parse(%q): protocol %d; want RESP2 when the URL asks for none", raw, protocol)
		}
		if len(addrs) == 0 {
			t.Fatalf("Parse(%q): no address", raw)
		}
		for _, a := range addrs {
			if a == "" {
				t.Fatalf("Parse(%q): an empty address in %q", raw, addrs)
			}
			if c.Standalone != nil && c.Standalone.Network == "unix" {
				continue
			}
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				t.Fatalf("Parse(%q): address %q has no port (%v)", raw, a, err)
			}
		}
		client, err := NewClient(raw)
		if err != nil {
			t.Fatalf("Parse(%q) succeeded, NewClient failed: %v", raw, err)
		}
		_ = client.Close()
	})
}

// secret is the password FuzzParseHidesPasswords puts in URLs.
const secret = "Zq9-secret-7Xw"

// FuzzParseHidesPasswords builds URLs of every scheme around a password, in
// the userinfo or as sentinel_password: neither Redact nor an error of
// Parse ever shows it.
func FuzzParseHidesPasswords(f *testing.F) {
	for _, s := range urlSeeds {
		scheme, rest, _ := strings.Cut(s, "://")
		hostEnd := strings.IndexAny(rest, "/?#")
		if hostEnd < 0 {
			hostEnd = len(rest)
		}
		authority, tail := rest[:hostEnd], rest[hostEnd:]
		user := ""
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			user, _, _ = strings.Cut(authority[:at], ":")
			authority = authority[at+1:]
		}
		f.Add(scheme, user, authority, tail, false)
		f.Add(scheme, user, authority, tail, true)
	}
	f.Fuzz(func(t *testing.T, scheme, user, hosts, tail string, inQuery bool) {
		for _, s := range []string{scheme, user, hosts, tail} {
			if strings.Contains(s, "Zq9") || strings.Contains(s, "7Xw") {
				return // the fuzzer wrote (part of) the password itself
			}
		}
		// Out of scope: a scheme or user name that ends the authority
		// before the password (there is no userinfo then), and hosts that
		// start the query or fragment before sentinel_password.
		if strings.ContainsAny(scheme, ":/?#@") || strings.ContainsAny(user, "/?#") || (inQuery && strings.ContainsAny(hosts, "?#")) {
			return
		}
		var raw string
		if inQuery {
			tail, frag, hasFrag := strings.Cut(tail, "#")
			sep := "?"
			if strings.Contains(tail, "?") {
				sep = "&"
			}
			raw = scheme + "://" + hosts + tail + sep + "sentinel_password=" + secret
			if hasFrag {
				raw += "#" + frag
			}
		} else {
			raw = scheme + "://" + user + ":" + secret + "@" + hosts + tail
		}
		if red := Redact(raw); strings.Contains(red, secret) {
			t.Fatalf("Redact(%q) = %q shows the password", raw, red)
		}
		if _, err := Parse(raw); err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("Parse(%q) error shows the password: %v", raw, err)
		}
	})
}
