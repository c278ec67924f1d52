// Package store defines the lease state machine every coordinator store
// implements (Leases), the change notifications that let callers wait
// without polling (Notifier), and the errors both report.
//
// A store keeps, per name, at most one unexpired lease, a fencing counter and
// a queue of waiters. Every state change is atomic: a Redis store runs each one
// as a single Lua script, the memory store under one mutex. Expiry is measured
// by the store's own clock, never by the caller's.
//
// State is bounded by the names in use: a name that nobody has held, waited
// for or watched for the idle retention (DefaultIdleNameTTL unless the store
// is configured otherwise) is forgotten, its fencing counter included. That
// is safe because a token never depends on the counter alone (below).
//
// Guarantees every implementation keeps (the conformance suite in storetest
// proves them):
//   - at most one unexpired holder per name;
//   - every grant's token is larger than every token issued before for that
//     name, including across releases, expiries, restarts, forgetting and
//     data loss: a token is the counter plus one or the store clock in
//     microseconds, whichever is larger, so a missing counter restarts from
//     the clock (as long as the clock does not step back);
//   - Describe's LastToken is at least every token issued before for the
//     name and below every token issued after, also for a forgotten name
//     (then the store clock in microseconds less one; the same condition);
//   - a renewal keeps the token; acquiring again as the holder is idempotent;
//   - renew and release are compare-and-set on (holder, token);
//   - a free name goes to the oldest live waiter first.
//
// A call whose context ends (deadline or cancel) fails with an error for
// which errors.Is(err, ctx.Err()) holds, never ErrUnavailable: the caller
// gave up, the store did not fail. A store that does not answer within its
// own call timeout (DefaultCallTimeout unless configured otherwise) fails
// with ErrUnavailable.
//
// Notifications are hints, not a log: a change may be announced more than
// once, and a broken Redis subscription is reported as "look again" rather
// than replayed. Callers re-read the state they care about after each one.
//
// # Layering
//
// The store interface is a leaf: it owns its types (Lease, Changes, the
// errors) and imports nothing of this module, so that a store can be written,
// and checked with storetest, outside it. The service (server) uses it; the
// implementations (memstore, redisstore) implement it and never import the
// service.
package store
