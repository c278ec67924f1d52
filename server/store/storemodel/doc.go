// Package storemodel is a reference model of the lease rules of package
// store, and a check of a store against it: random sequences of operations
// (from a seed, or a fuzz input) are applied to the model and to a fresh
// store side by side, and every answer must agree, as must Describe of the
// names an operation touched (in half the sequences, after every step; in
// all, at Describe operations). A mismatch is shrunk to a sequence from
// which no operation can be dropped, printed with both sides' answers.
//
// The model (Model) is written from the rules in store's doc comments, as
// plain loops over plain data with time as an argument: capacity and
// weights, FIFO waiting (a waiter passes those ahead only when they all
// fit, a caller that does not wait is refused while anyone waits, waiters
// leave at their deadline), renewal by the holder (same token, value kept
// or replaced), renewals guarded by a token, the lock delay after an expiry
// (not after a release), the holder cap, capacity mismatches, sessions
// (create, renew, close, expiry; attached grants live and die with their
// session), groups (all or none, queued on every member, queued again at
// the back of all when its place lapsed on some; releases under a claim),
// Dequeue, RefreshWaiters, Describe and List. The store chooses tokens and
// session ids: the model takes them from its answers, and the check holds
// the store to the rules instead (a fresh grant's token above every token
// issued or reported before for its name, a renewal's the same as before,
// Describe's LastToken the last one issued, or a floor of those to come).
//
// Where the rules leave a store a choice, the check accepts each: a
// refusal may name any of the grants that end first; a List page may stop
// short of its limit, as long as it skips no held name before its Next;
// the capacity Describe reports for a name nobody holds or waits for is
// not compared (store.Description says 1; both stores report the last one
// until they forget the name). A store on real time is compared within a
// slack, and one whose names learn of their sessions lazily
// (Subject.LazySessions: Redis) may report an attached grant's expiry as
// its name last learned it, and, until the name learns that the session
// ended, still release the grant or refuse to renew it as attached.
//
// Not modelled: forgetting idle names and sessions (the checks keep them
// longer than a run), data loss and its quarantine, a persistent store's
// restarts, Watch and change notifications, a group split across the slots
// of a Redis Cluster (GroupResult.Held and Queued), calls that time out or
// are cancelled, and a store clock that steps back.
//
// It is a test kit: only tests import it (the memory store's, and its own,
// which check the Redis store). Of this module it imports only the store
// interface.
package storemodel
