// Package client is the Go SDK of the coordinator: locks and leader
// elections as leases that renew themselves.
//
// A Client connects to one coordinator. TryLock and Lock return a *Lease on
// a name; Semaphore(name, n) shares a name among holders of weights that sum
// to at most n (Acquire, TryAcquire), and RWMutex(name) among readers or one
// writer (RLock, Lock), each share a *Lease of its own; Campaign and RunAsLeader make this process the leader of an
// election (a *Leadership); Leader and Observe tell who leads. Every blocking
// call takes a context.
//
//	c, err := client.New("127.0.0.1:7400")
//	…
//	defer c.Close()
//	lease, err := c.Lock(ctx, "reports/nightly")
//	…
//	defer lease.Release(context.Background())
//	work(lease.Context(ctx), lease.Token())
//
// # Sessions
//
// A Session is a liveness on the coordinator that leases attach to, as
// etcd's concurrency.Session: one renewal keeps all of them, and they end
// together. Every Client has a default session (Client.Session), made by
// the first acquisition that needs it (a Client that only observes or
// describes makes none) with the Client's TTL: TryLock, Lock, the
// semaphore and read-write acquisitions, Campaign and RunAsLeader join it
// unless given WithSession (another session, from NewSession) or WithTTL (a
// lease of its own, of that TTL, renewed on its own). WithoutDefaultSession
// makes every lease one of its own, as before sessions; so does a
// coordinator without sessions (the Client says so once in its log).
//
// A lease in a session keeps its own fencing token and is released, or
// resigned, alone; its TTL and Deadline are the session's. When the
// session is lost (a renewal refused: the coordinator closed or expired
// it) or expires (no renewal answered before its deadline), its Done
// closes, and so does that of every lease in it, Err saying how the
// session ended. A lost default session is never reused: the next
// acquisition makes a new one. Session.Close, and Client.Close for every
// session of the Client, closes a session on the coordinator in one call,
// which releases all its leases.
//
// As a lease in a session is not renewed on its own, the Client does not
// notice one that was released on its behalf (an operator's Release by
// holder and token) while the session lives: its Done stays open. A lease
// of its own ends with ErrLost at its next renewal then. Either way the
// fencing token is what protects the resource.
//
// # Renewal
//
// A session, and a held Lease or Leadership of its own, renews itself in
// the background about every TTL/3 (DefaultTTL is 15s; see WithTTL) until
// it is released, lost or its Client is closed. All of a Client's sessions
// and leases share one scheduler goroutine, and the same renewal rules,
// which runs only while the Client holds something.
//
// # One stream per Client
//
// A Client makes its lease calls (TryLock, Lock, Campaign, Proclaim,
// Release, Resign) and its renewals (renew of a lease, renew_session of a
// session) over one operation stream, opened when
// first needed and closed after 30s with nothing in flight. Operations that
// goroutines start together go out together in one message, and their
// results come back the same way, so a busy process costs the coordinator
// a fraction of the messages of unary calls; an operation alone goes out at
// once. Each operation has the semantics and errors of its unary call. When
// the stream breaks, the operations in flight fail with Unavailable: Lock
// and Campaign retry them as the same holder, which finds a grant whose
// answer was lost; renewals are retried while the lease is valid.
// WithUnaryCalls makes unary calls and renews leases over a KeepAlive
// stream and sessions with unary RenewSession calls instead, as does a
// coordinator without the Stream method. Observe, Leader, API and the
// session calls other than renewals (CreateSession, CloseSession) stay
// unary.
//
// Validity is measured on this process's monotonic clock, never compared
// with the coordinator's: a lease is valid until the time its last
// successful grant or renewal was sent, plus the TTL, minus a margin of
// max(TTL/10, 50ms). Transient failures (coordinator or store unreachable)
// are retried while it is valid. If no renewal succeeds by then, the lease
// ends with ErrExpired at that local deadline, which comes before the
// coordinator's own expiry: the coordinator cannot have granted the name to
// anyone else yet. A renewal the coordinator refuses (the lease expired
// there, or the coordinator lost it) ends it with ErrLost at once.
//
// Done is closed and Context is cancelled the moment a lease ends, and Err
// says why: ErrReleased, ErrLost, ErrExpired or ErrClosed.
//
// # Guarantees and limits
//
// The coordinator grants a lock to at most one holder at a time (the shares
// of a semaphore never weigh more than its capacity), and every grant
// carries a fencing token (Lease.Token, Leadership.Term) larger than every
// earlier grant's for that name, across releases, expiries, restarts and
// store data loss. Waiters (Lock, Acquire, RLock, Campaign) are served in
// arrival order. Of a semaphore's shares, the tokens order the grants, not
// the holders' actions: a resource can refuse every token below the last
// writer's (a share of the whole capacity), not order two readers.
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
// A coordinator on the memory store forgets every lease when it restarts;
// leases held through it end with ErrLost at their next renewal, while their
// holders may still be acting: again, only fencing tokens protect then.
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
