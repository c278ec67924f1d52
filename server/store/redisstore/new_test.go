package redisstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestNewWarnsUnlessNoEviction changes the test Redis' maxmemory-policy for
// a moment (harmless without a maxmemory limit), so it does not run in
// parallel with other tests.
func TestNewWarnsUnlessNoEviction(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	orig, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil || orig["maxmemory-policy"] == "" {
		t.Fatalf("CONFIG GET maxmemory-policy unavailable on the test Redis: %v", err)
	}
	t.Cleanup(func() { c.ConfigSet(ctx, "maxmemory-policy", orig["maxmemory-policy"]) })

	for _, tc := range []struct {
		policy string
		warn   bool
	}{{"noeviction", false}, {"allkeys-lru", true}, {"volatile-lru", true}} {
		if err := c.ConfigSet(ctx, "maxmemory-policy", tc.policy).Err(); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		newStore(t, c, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		warned := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), tc.policy)
		if warned != tc.warn {
			t.Errorf("maxmemory-policy %s: warned %v, want %v; log:\n%s", tc.policy, warned, tc.warn, buf.String())
		}
	}
}

// TestVersionErrorRefusesRedisOlderThan7: the scripts rely on Redis 7's
// replication of their effects, so a Redis 6 (or older) is refused at New,
// naming its version, and the test Redis, a real one, passes.
func TestVersionErrorRefusesRedisOlderThan7(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		info   string
		refuse bool
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", false},
		{"# Server\r\nredis_version:7.2.4\r\n", false},
		{"# Server\r\nredis_version:8.0.0\r\n", false},
		{"# Server\r\nredis_version:10.1.2\r\n", false},
		{"# Server\r\nredis_version:6.2.14\r\n", true},
		{"# Server\r\nredis_version:5.0.7\r\n", true},
		{"# Server\r\nredis_version:3.2.12\r\n", true},
		{"# Server\r\nredis_mode:standalone\r\n", false}, // not there to read: New goes on
	} {
		err := versionError(tc.info)
		if (err != nil) != tc.refuse {
			t.Errorf("versionError(%q) = %v, want refused %v", tc.info, err, tc.refuse)
		}
		if err != nil && !strings.Contains(err.Error(), "older than 7.0") {
			t.Errorf("versionError(%q) = %q: want it to say the version is older than 7.0", tc.info, err)
		}
	}
	info, err := newClient(t).Info(testCtx(t), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "redis_version:") {
		t.Fatalf("INFO server of the test Redis has no redis_version:\n%s", info)
	}
	if err := versionError(info); err != nil {
		t.Errorf("the test Redis is refused: %v", err)
	}
}
