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
