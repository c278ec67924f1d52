// Command coordctl is the coordinator's command-line client: it takes locks
// and leaderships around commands, and shows and manages leases.
//
//	coordctl [flags] lock [-n N | -shared | -write] [-session ID] NAME [NAME…] [-- CMD ARGS…]
//	coordctl [flags] elect ELECTION VALUE [-- CMD ARGS…]
//	coordctl [flags] leader ELECTION
//	coordctl [flags] observe ELECTION
//	coordctl [flags] describe NAME
//	coordctl [flags] list [PREFIX]
//	coordctl [flags] release NAME HOLDER TOKEN
//	coordctl [flags] session create [-ttl D] [-keep]
//	coordctl [flags] session renew|close|describe ID
//	coordctl [flags] session hold [-ttl D] [-n N | -shared | -write] NAME… [-- CMD ARGS…]
//
// lock with several NAMEs takes them all at once or none, as one group
// (client.AcquireAll): it waits in line for every NAME at once and never
// deadlocks with other groups, whatever order they list their names in;
// CMD gets every name's token in COORDINATOR_FENCING_TOKENS, in the order of
// COORDINATOR_LOCK_NAMES. lock's flags apply to every NAME; -session takes
// one.
//
// lock -n N holds one of the N slots of the semaphore NAME (Consul's
// "consul lock -n"); every user of NAME must give the same N. -shared holds
// NAME as a reader of a read-write lock, beside other readers; -write as
// its writer. A plain lock (no flag) on a read-write lock's name is refused
// with FailedPrecondition (its capacity differs): writers say -write.
//
// A session is a liveness leases attach to. session create prints a new
// session's id, for lock -session ID in other commands; with -keep it renews
// the session until interrupted and then closes it (the operator's terminal
// keeps the session; the locks are taken elsewhere). lock -session does not
// renew anything: it watches its lease (about every third of the session's
// TTL) and ends CMD when the session ends or the lease is released, and
// releases the lease alone on the way out. session hold is one process that
// takes several locks in a session of its own, renews it, and closes it on
// the way out: one call releases them all.
//
// Exit status: 0 success; 1 not acquired, lost, not found, unreachable or
// failed; 2 bad usage; with CMD, CMD's own status when it ran to its end.
//
// It is a binary built on the SDK (client), the generated API and
// internal/app; it knows nothing of the server side.
package main
