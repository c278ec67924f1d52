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
// is configured otherwise) is forgotten, its fencing counter included (a
// store may take longer: the Redis store's keys expire up to a quarter of
// a retention later, which spares most calls setting an expiry). That is safe because a token never depends on
// the counter alone (below).
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
// Sessions (Sessions, AcquireRequest.Session): a session is a liveness of
// its own (an id, a TTL, renewals, expiry by the store's clock) to which
// grants attach instead of carrying a TTL. Every implementation keeps, as
// the conformance suite (storetest.RunSessions) proves:
//   - one RenewSession keeps every attached grant: one store operation,
//     whatever their number;
//   - an attached grant lives exactly as long as its session: when the
//     session expires every attached grant expires with it (its lock delay
//     running from the session's end), when it is closed every attached
//     grant is released (waiters granted, observers told); observers never
//     report an attached grant vacant while its session lives;
//   - a dead session (expired, closed, or unknown) never revives: renewing,
//     attaching to or closing it fails with ErrSessionExpired,
//     ErrSessionClosed or ErrSessionNotFound (closing a closed one succeeds);
//   - a session's id is a capability of its owner: renewing, closing,
//     describing or attaching with another owner fails with
//     ErrSessionNotOwned (without authentication every caller has the same,
//     empty, owner);
//   - attached grants keep everything else a grant has: their own token from
//     the name's counter, compare-and-set release of one grant (the session
//     goes on), idempotent re-acquire (asked again without the session, a
//     grant leaves it and keeps its token), FIFO waiting, capacity and
//     weights, quarantine; Renew of one fails with ErrLeaseInSession.
//
// What a resource can rely on is what a lease gives: a fencing token that
// increases. A session's holder should count its leases valid only until
// the session's TTL from when it sent its last answered renewal.
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
