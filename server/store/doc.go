// Package store defines the lease state machine every coordinator store
// implements (Leases), the change notifications that let callers wait
// without polling (Notifier), and the errors both report.
//
// A store keeps, per name, a capacity (1 unless a request set another), the
// grants that share it, a fencing counter and a queue of waiters. Each grant
// holds a weight of the capacity and is a lease of its own (holder, token,
// TTL, value): an exclusive lock is a name of capacity 1 granted with weight
// 1, a counting semaphore a larger capacity, a read-write lock capacity
// RWCapacity with readers of weight 1 and writers of all of it. Every state change is atomic: a Redis store runs each one
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
//   - the weights of a name's grants, live or in their lock delay, never
//     sum past its capacity (so at most one unexpired holder of a lock);
//   - a grant that expired without a release keeps its weight for the lock
//     delay, then gives it back: a holder that dies leaks nothing;
//   - every grant's token is larger than every token issued before for that
//     name, across all its holders, including across releases, expiries, restarts, forgetting and
//     data loss: a token is the counter plus one or the store clock in
//     microseconds, whichever is larger, so a missing counter restarts from
//     the clock (as long as the clock does not step back);
//   - Describe's LastToken is at least every token issued before for the
//     name and below every token issued after, also for a forgotten name
//     (then the store clock in microseconds less one; the same condition);
//   - a renewal keeps the token; acquiring again as the holder is idempotent;
//   - renew and release are compare-and-set on (holder, token);
//   - waiters are served in arrival order: a request is granted when the
//     weights held, those of the live waiters queued ahead of it and its own
//     fit in the capacity, so that a waiter passes those ahead only when
//     they would fit beside it (never delaying them: a writer waiting behind
//     readers is granted before the readers that came after it), and one
//     that does not wait is refused while anyone waits;
//   - a request whose capacity differs from the name's while anyone holds
//     (a lock delay included) or waits fails with *CapacityError; with
//     nobody there the name takes it;
//   - the grants a name carries at once are capped (AcquireRequest.
//     MaxHolders), past which a grant fails with *HolderLimitError.
//
// What a resource can check with the tokens: an exclusive grant's token is
// above every token granted before it for the name, so a resource that
// remembers the last exclusive token it saw refuses every lower one (a
// holder from before the exclusive grant, whose lease must have ended). Of
// two shared grants the later has the larger token, but shared holders may
// act in any order: the resource cannot order them, only fence them from
// the exclusive grants before and after.
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
