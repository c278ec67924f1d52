package testwait

import (
	"testing"
	"time"
)

// Until polls cond every 10 ms until it holds, failing t after timeout with
// what it was waiting for.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: still waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
