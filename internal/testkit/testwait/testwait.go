package testwait

import (
	"testing"
	"time"
)

// every is how often a condition is checked again.
const every = 10 * time.Millisecond

// Until polls cond every 10 ms until it holds, failing t after timeout with
// what it was waiting for.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: still waiting for %s", timeout, what)
		}
		time.Sleep(every)
	}
}

// UntilNil polls check every 10 ms until it returns nil, failing t after
// timeout with what it was waiting for and the last error, which says what
// is still missing.
func UntilNil(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: still waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(every)
	}
}
