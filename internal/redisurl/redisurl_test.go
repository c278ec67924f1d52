package redisurl

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url   string
		check func(t *testing.T, c Config)
	}{
		{"redis://localhost:6380/2", func(t *testing.T, c Config) {
			o := c.Standalone
			if o == nil || o.Addr != "localhost:6380" || o.DB != 2 || o.TLSConfig != nil {
				t.Errorf("standalone = %+v", o)
			}
		}},
		{"rediss://user:secret@cache.example/0?read_timeout=2s", func(t *testing.T, c Config) {
			o := c.Standalone
			if o == nil || o.Addr != "cache.example:6379" || o.Username != "user" || o.Password != "secret" ||
				o.TLSConfig == nil || o.ReadTimeout != 2*time.Second {
				t.Errorf("standalone = %+v", o)
			}
		}},
		{"unix:///run/redis.sock?db=3", func(t *testing.T, c Config) {
			if o := c.Standalone; o == nil || o.Network != "unix" || o.Addr != "/run/redis.sock" || o.DB != 3 {
				t.Errorf("standalone = %+v", o)
			}
		}},
		{"redis+sentinel://user:secret@s1:26380,s2,[::1]:26381/mymaster/4?sentinel_password=sp&dial_timeout=2s",
			func(t *testing.T, c Config) {
				o := c.Sentinel
				if o == nil {
					t.Fatalf("config = %+v, want sentinel", c)
				}
				if want := []string{"s1:26380", "s2:26379", "[::1]:26381"}; !slices.Equal(o.SentinelAddrs, want) {
					t.Errorf("SentinelAddrs = %q, want %q", o.SentinelAddrs, want)
				}
				if o.MasterName != "mymaster" || o.DB != 4 || o.Username != "user" || o.Password != "secret" ||
					o.SentinelPassword != "sp" || o.DialTimeout != 2*time.Second || o.TLSConfig != nil {
					t.Errorf("sentinel = %+v", o)
				}
			}},
		{"rediss+sentinel://s1/mymaster", func(t *testing.T, c Config) {
			o := c.Sentinel
			if o == nil || !slices.Equal(o.SentinelAddrs, []string{"s1:26379"}) || o.MasterName != "mymaster" ||
				o.DB != 0 || o.TLSConfig == nil || o.Password != "" || o.SentinelPassword != "" {
				t.Errorf("sentinel = %+v", o)
			}
		}},
		{"redis+cluster://user:secret@n1:7000,n2:7001,n3?read_timeout=1s", func(t *testing.T, c Config) {
			o := c.Cluster
			if o == nil {
				t.Fatalf("config = %+v, want cluster", c)
			}
			if want := []string{"n1:7000", "n2:7001", "n3:6379"}; !slices.Equal(o.Addrs, want) {
				t.Errorf("Addrs = %q, want %q", o.Addrs, want)
			}
			if o.Username != "user" || o.Password != "secret" || o.ReadTimeout != time.Second || o.TLSConfig != nil {
				t.Errorf("cluster = %+v", o)
			}
		}},
		{"rediss+cluster://n1:7000/", func(t *testing.T, c Config) {
			if o := c.Cluster; o == nil || !slices.Equal(o.Addrs, []string{"n1:7000"}) || o.TLSConfig == nil {
				t.Errorf("cluster = %+v", o)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			c, err := Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestParseURLRejects(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"localhost:6379",
		"http://localhost",
		"redis://localhost/a",
		"redis://localhost?bogus=1",
		"redis+sentinel://user:secret@s1",
		"redis+sentinel://s1/m/1/2",
		"redis+sentinel://s1/m?master_name=x",
		"redis+cluster://user:secret@n1/3",
		"redis+cluster://n1,,n2",
		"redis+cluster://n1?bogus=1",
	} {
		_, err := Parse(raw)
		if err == nil {
			t.Errorf("Parse(%q): no error", raw)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Parse(%q) error shows the password: %v", raw, err)
		}
	}
}

func TestParseDefaultsToRESP2(t *testing.T) {
	for url, want := range map[string]int{
		"redis://localhost:6379/0":            2,
		"redis://localhost:6379/0?protocol=3": 3,
		"redis+cluster://a:1,b:2":             2,
		"redis+sentinel://s1:26379/main":      2,
	} {
		c, err := Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		switch {
		case c.Standalone != nil:
			got = c.Standalone.Protocol
		case c.Cluster != nil:
			got = c.Cluster.Protocol
		case c.Sentinel != nil:
			got = c.Sentinel.Protocol
		}
		if got != want {
			t.Errorf("%s: protocol %d, want %d", url, got, want)
		}
	}
}

func TestClientsHonourContextDeadlines(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"redis://localhost:6379/0", "redis+cluster://a:1,b:2", "redis+sentinel://s1:26379/main"} {
		c, err := Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		if (c.Standalone != nil && !c.Standalone.ContextTimeoutEnabled) ||
			(c.Cluster != nil && !c.Cluster.ContextTimeoutEnabled) ||
			(c.Sentinel != nil && !c.Sentinel.ContextTimeoutEnabled) {
			t.Errorf("%s: ContextTimeoutEnabled is off", url)
		}
	}
}

// A Redis that hangs (SIGSTOP) keeps its connections open and answers
// nothing: a call must end with its context, on a new connection and on one
// already open, not wait out go-redis' read timeout (5s) and its retries.
func TestHungRedisCallEndsWithItsContext(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, false)
	for _, warm := range []bool{false, true} {
		c, err := NewClient(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		if warm {
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		srv.Freeze()
		const deadline = 300 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		err = c.Ping(ctx).Err()
		took := time.Since(start)
		cancel()
		srv.Thaw()
		_ = c.Close()
		if err == nil || took > deadline+2*time.Second { // generous: the machine may be loaded
			t.Errorf("PING to a hung Redis (connection open before: %v) = %v after %s, want an error within %s",
				warm, err, took, deadline)
		}
	}
}
