// Package storetest is the conformance suite every store.Store must pass.
// It drives the store through its interface only, so the same assertions
// hold for the memory store and for Redis. A store that keeps time by a clock
// the test controls lets the suite move that clock instead of sleeping; one
// that keeps its own time (Redis) gets short real TTLs and real sleeps, with
// margins chosen so that a busy machine makes the test slower, not flaky.
//
// It is a test kit: only tests import it (the stores' own, and the process's
// fault tests). Of this module it imports only the store interface.
package storetest
