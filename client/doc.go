// Package client is the Go SDK of the coordinator: locks and leader
// elections as leases held in a session that renews itself.
//
// A Client connects to one coordinator. TryLock and Lock return a *Lease on
// a name; Semaphore(name, n) shares a name among holders of weights that sum
// to at most n (Acquire, TryAcquire), and RWMutex(name) among readers or one
// writer (RLock, Lock), each share a *Lease of its own; LockAll and
// AcquireAll take several names (locks and shares) all at once or none, as
// a *Group with a fencing token per name; Campaign and RunAsLeader make
// this process the leader of an election (a *Leadership); Leader and
// Observe tell who leads; Describe and List tell who holds what. Every
// blocking call takes a context.
//
//	c, err := client.New("127.0.0.1:7400")
//	…
//	defer c.Close()
//	lease, err := c.Lock(ctx, "reports/nightly")
//	…
//	defer lease.Release(context.Background())
//	work(lease.Context(ctx), lease.Token())
//
// # One liveness model
//
// Every lease (a lock, a semaphore or read-write lock share), group and
// leadership a Client holds is attached to a session, as etcd's
// concurrency.Session: one renewal keeps all of them, and they end
// together. Every Client has a default session (Client.Session), made by
// the first acquisition that needs it with the Client's TTL (WithTTL;
// DefaultTTL, 15s, from the proto): TryLock, Lock, the semaphore and
// read-write acquisitions, LockAll and AcquireAll, Campaign and RunAsLeader
// join it unless given WithSession (another session, from NewSession, which
// takes a TTL of its own). A Client that only describes, lists or observes
// makes none. A default session that ended is never reused: the next
// acquisition makes a new one. There is no lease of its own TTL and no
// other way to renew.
//
// The one renewal path is the renewer (renewer.go): one scheduler
// goroutine, running only while the Client holds a session, sends each
// session's renew_session operation over the Client's operation stream
// about every TTL/3 (ClientRules.renewals_per_ttl, with its jitter), and
// retries a failed renewal with the proto's backoff while the session is
// valid.
//
// A lease keeps its own fencing token and is released, or resigned, alone;
// its TTL and Deadline are its session's. Release (Resign) reports whether
// the coordinator released it; a lease no longer held (released already,
// lost, or given up by Close) is a no-op that reports false, with no error.
// Session.Close, and Client.Close for every session of the Client, closes a
// session on the coordinator in one call, which releases all its leases.
//
// As a lease is not renewed on its own, the Client does not notice one
// that was released on its behalf (an operator's Release by holder and
// token) while its session lives: its Done stays open. The fencing token
// is what protects the resource.
//
// # Validity
//
// Validity is measured on this process's monotonic clock, never compared
// with the coordinator's: a session, and every lease in it, is valid until
// the time its last successful renewal (or its creation) was sent, plus the
// TTL, minus a margin of max(TTL/10, 50ms). Transient failures (coordinator
// or store unreachable) are retried while it is valid. If no renewal
// succeeds by then, the session and its leases end with ErrExpired at that
// local deadline, which comes before the coordinator's own expiry: the
// coordinator cannot have granted the names to anyone else yet. A renewal
// the coordinator refuses with a reason the proto marks ends_lease (the
// session expired or was closed there) ends them with ErrLost at once.
//
// # One stream per Client
//
// A Client makes its lease calls (TryLock, Lock, LockAll, AcquireAll,
// Campaign, Proclaim, Release, Resign) and its session renewals over one
// operation stream, opened when first needed and closed after 30s with
// nothing in flight.
// Operations that goroutines start together go out together in one
// message, and their results come back the same way, so a busy process
// costs the coordinator a fraction of the messages of unary calls; an
// operation alone goes out at once. Each operation has the semantics and
// errors of its unary call. When the stream breaks, the operations in
// flight fail with Unavailable: Lock, LockAll and Campaign retry them as
// the same holder, which finds a grant whose answer was lost; renewals are retried
// while the session is valid. Describe, List, Leader, Observe, API and the
// session calls other than renewals (CreateSession, CloseSession) are
// unary calls.
//
// Which errors are retried, which leave an outcome unknown (and make an
// acquisition give up what it may have been granted), the error domain and
// the delays are the proto's ClientRules, which the Python and TypeScript
// clients read too.
//
// Done is closed and Context is cancelled the moment a lease ends, and Err
// says why: ErrReleased, ErrLost, ErrExpired or ErrClosed.
//
// # Guarantees and limits
//
// The coordinator grants a lock to at most one holder at a time (the shares
// of a semaphore never weigh more than its capacity), and every grant
// carries a fencing token (Lease.Token, Group.Token, Leadership.Term)
// larger than every earlier grant's for that name, across releases,
// expiries, restarts and store data loss. Waiters (Lock, Acquire, RLock,
// LockAll, Campaign) are served in arrival order, a waiting group in the
// line of every one of its names at once, so that a stream of requests for
// one of them cannot starve it; groups never deadlock, whatever order they
// list their names in (docs/groups.md). Of a semaphore's shares, the tokens
// order the grants, not the holders' actions: a resource can refuse every
// token below the last writer's (a share of the whole capacity), not order
// two readers.
//
// A lease does not stop its holder from acting after it ended. A process
// that is paused (a long GC, a stopped VM, a swapped-out page) or whose
// clock jumps can go on acting after its lease expired and the name went to
// someone else; Done is closed only when this process runs again. Only the
// fencing token protects against that: pass it with every write to the
// protected resource and have the resource refuse a token lower than the
// highest it has seen. A lease without fencing is a good way to avoid doing
// work twice, not a guarantee that it never happens.
//
// Each acquisition holds under a holder of its own (the Client's Identity
// and a sequence number), so that two goroutines locking the same name
// through one Client exclude each other like two processes do.
//
// A coordinator on the memory store forgets every session and lease when it
// restarts; leases held through it end with ErrLost at their session's next
// renewal, while their holders may still be acting: again, only fencing
// tokens protect then.
//
// Close ends every session, lease and leadership of the Client (ErrClosed)
// and releases them best-effort (a session in one CloseSession), so that
// the next waiter need not wait for the TTL. No goroutine of the Client
// outlives Close.
//
// # Layering
//
// The SDK imports, of this module, only the generated API (gen) and leaves of
// internal/ (backoff): never the server side (server and below it,
// coordinatord) or Redis. The housekeeper and coordctl are built on it.
// Outside it, it adds gRPC, protobuf, clockwork and, for WithTracerProvider,
// OpenTelemetry's API and otelgrpc (never its SDK or exporters, which are
// the program's choice).
package client
