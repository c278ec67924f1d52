// Package memstore is the embedded, in-process lease store: the default when
// no Redis is configured.
//
// It keeps the same rules as the Redis store (the conformance suite runs
// against both). Its state lives in the coordinator's memory, so a restart
// forgets every lease and queue. What a restart must not forget is kept in a
// state directory (Open) as two write-ahead bounds: a time no lease granted
// lives past, and a token no token issued exceeds. Each is raised ahead of
// the grants, at most once a second (writeInterval) however many grants
// there are, so a grant waits for the disk only when it outruns them (a
// lease longer than any recent one, or the first grant after a quiet spell).
// After a crash, the reopened store refuses grants (store.QuarantineError)
// until the lease bound, at most the longest recent lease plus its lock delay
// plus 1.5 s after the crash, and issues tokens above the token bound, even
// if the wall clock stepped back. Close writes which leases are still held
// and when each ends, so after a clean restart only those names wait, each
// as in a lock delay, and every other name is granted at once. The lease bound is wall-clock time: a wall clock that steps forward
// while the store is down shortens the wait by the step.
//
// Without a state directory (New, or Open with ""), a restart grants names at
// once while a holder from before may still act: only a resource that checks
// fencing tokens is then protected, and tokens stay above earlier ones only
// as long as the clock does not step back across the restart.
//
// Tokens increase across the whole store, not only per name: a token is
// above every token the store issued before (and the token bound of the
// previous run), and never below the clock in microseconds.
//
// Expiry uses the monotonic clock and is evaluated lazily on access: there is
// no goroutine or timer per lease. A name nobody has held or waited for in
// the idle retention (WithIdleNameTTL, store.DefaultIdleNameTTL) is
// forgotten, so that memory follows the names in use rather than every name
// ever used; its next token still comes out larger, since a token is never
// below the clock in microseconds.
//
// Sessions (store.Sessions) live in the same memory, under the same mutex:
// an attached grant's expiry is its session's, set again on each grant at a
// renewal (a visit a lease, no store operation), and a close releases the
// session's grants at once. A session's creation and renewals raise the
// lease bound like a grant, so after a crash the quarantine outlasts every
// attached lease; the sessions themselves are forgotten by a restart, and
// their ids (random, never made twice) are then refused as not found.
//
// A store implementation: of this module it imports only the store interface
// (server/store) and leaves of internal/ (fanout, statefile), never the
// service above it or another store.
package memstore
