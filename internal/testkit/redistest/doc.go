// Package redistest gives tests a real Redis: a shared one (the Redis that
// COORDINATOR_TEST_REDIS_URL names, or a throwaway one started on demand),
// or private redis-server processes that a fault-injection test may stop,
// restart with or without its data, or pause.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package redistest
