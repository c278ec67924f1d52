// Package redisstore is the Redis-backed store.Store: every state transition
// is one Lua script (scripts/*.lua), so it is atomic on the Redis server and
// timed by Redis' clock (TIME, PEXPIRE), never by the coordinator's.
//
// # Connecting
//
// New takes any go-redis client: *redis.Client (standalone or Sentinel, as
// made by redis.NewFailoverClient) or *redis.ClusterClient (Cluster mode,
// detected from the type). NewFromURL builds one from a URL of any form
// package internal/redisurl accepts: redis://, rediss://, unix://,
// redis+sentinel:// and redis+cluster://.
//
// # Keys
//
// This is the one description of the key layout: keys.go builds these names,
// and each script's header only says which of them it is given.
//
// Every key of one name shares the hash tag {<enc>}, so one script's keys lie
// in one Cluster slot; <enc> is the name with '%', '{' and '}' percent-encoded
// (the empty name is "%00"). Times are unix ms of Redis' clock.
//
// Every key of a name expires, so that Redis holds only the names in use: a
// name idle for Options.IdleNameTTL (store.DefaultIdleNameTTL) has no key
// left. Forgetting a name is safe: its next token is seeded from the clock, as
// after data loss (see Fencing and data loss).
//
//	<prefix>:{<enc>}:lease    HASH of the name's grants and their summary:
//	                          h:<holder>: one grant, live or in its lock delay
//	                          (until expires + lock delay), its value packing
//	                          token:weight:ttl_ms:expires:value (holders.lua
//	                          encodes and decodes it, alone); used: the sum of
//	                          the grants' weights; n: their number; low: at
//	                          most the earliest of their expiries (set at each
//	                          grant to the minimum, exact after a sweep), so
//	                          that a script reads the grants (HGETALL) only
//	                          when now >= low + lock delay, when one may have
//	                          run out; high: at least the latest expiry; cap:
//	                          the capacity (absent: 1); token (decimal): the
//	                          last issued token, kept after the grants end as
//	                          the name's fencing counter; queued: "1" while
//	                          waiters may be queued; watched: the time until
//	                          which some coordinator observes the name. The
//	                          key expires the idle retention after the last
//	                          grant and its lock delay would end (set at each
//	                          grant and renewal), the retention after the last
//	                          release, never before the observation mark nor
//	                          the latest waiter's deadline at its arrival
//	<prefix>:{<enc>}:queue    ZSET waiter -> arrival order * 2^20 + weight: the
//	                          order first, the weight the waiter asked for in
//	                          the low 20 bits (holders.lua), exact in a double
//	                          while a queue that never empties has seen fewer
//	                          than 2^33 arrivals
//	<prefix>:{<enc>}:waiters  ZSET waiter -> deadline; both queue keys expire at
//	                          the latest deadline (acquire and RefreshWaiters
//	                          push deadlines out)
//	<prefix>:marker           data-loss marker (standalone and Sentinel): grants
//	                          are refused until the time it holds; never expires
//	<prefix>:{<tag>}:marker   the data-loss marker of one slot (Cluster: 16384 of
//	                          them, <tag> being the shortest decimal string
//	                          hashing to the slot); never expire
//	<prefix>:events           pub/sub channel carrying the name of a lease or queue
//	                          that changed, published only while the name's
//	                          lease key says waiters are queued or it is watched
//
// One key holds what an uncontended grant and release need, so that a cycle
// costs Redis 9 commands in its two scripts (acquire 5: TIME, GET marker,
// HMGET, HSET, PEXPIRE; release 4: HMGET, TIME, HDEL, PEXPIRE) where it cost
// 13 when the counter and the observation mark were keys of their own. The
// summary fields keep it so for semaphores too: a grant beside others costs
// the same while none of them ran out, a release beside others one HSET
// more.
//
// Observing costs little while nothing changes: Watch reads many names in one
// script call per 200 names (per slot on a Cluster), all in one pipeline,
// with one HGETALL a name, and marks a name again (HSET, PTTL, PEXPIREAT) only
// when due.
// RefreshWaiters keeps any number of waiters of a name queued with one call
// of about ten commands.
//
// # Notifications
//
// All Changes subscriptions of a Store share one pub/sub subscription to the
// events channel, opened by the first Changes call, pinged when silent and
// opened again after it breaks. Each time Redis confirms it, every Changes
// subscriber receives a value: whatever was published before then was not
// heard, so waiters and observers look again rather than trusting a replay.
//
// # Fencing and data loss
//
// A token is the lease key's token field plus one, but never below Redis' TIME
// in microseconds: when the field is missing (a name's first grant, a name
// idle past its retention, or after Redis lost its data) or behind, the clock
// is the token, so tokens keep
// increasing across forgetting and data loss as long as Redis' clock does not
// step back and no name is granted more than once per microsecond on
// average. For the same reason Describe reports, for a name without a token
// field, the clock in microseconds less one as its last token: no token issued
// before is above it, and every token issued after is above it. A token field
// that a failover to a lagging replica left behind the last grants is not
// detected: Describe then reports the replica's counter, while new tokens
// still come out above the clock.
//
// The markers never expire: an acquire that finds its marker missing knows
// Redis lost its data since then (a restart without persistence, FLUSHALL,
// failover to an empty replica). It re-creates the marker holding
// "quarantine until" (Redis time) and refuses grants with
// *store.QuarantineError until then, so that holders of lost leases see them
// expire first; Options.OnDataLoss is called once per detection.
//
// New runs start.lua, which writes the markers that are missing: one missing
// at start means Redis lost its data while no coordinator ran, and is written
// holding "quarantine until" exactly as an acquire would (OnDataLoss is called
// once by that New). On a Cluster only the slots whose markers are missing
// (a shard that failed over to an empty replica) are quarantined. Redis
// cannot tell a new deployment from one that lost everything, so a first
// start waits one quarantine unless the store was initialised: Init, run
// once on a brand-new Redis (coordinator init-store), writes the markers
// without quarantine through the same script, and refuses a Redis that has
// markers or other keys of the prefix. Options.NewStore does the same at
// every start, for throwaway stores (tests, benchmarks, a developer's
// Redis): it matters only when markers are missing, and left set on a real
// deployment it lets a loss while every coordinator was down go unnoticed.
//
// # Replicas and failover
//
// Replication is asynchronous: a grant acknowledged by a primary that fails
// over before a replica has it is lost. With Options.MinReplicas above 0,
// every grant and renewal (acquire.lua granting or renewing, renew.lua) is
// followed by WAIT on the connection that ran it (the WAIT ends the
// pipeline, so it covers every script in it), and is reported only once that
// many replicas acknowledged it within Options.ReplicaTimeout. Otherwise the
// call fails with store.ErrUnavailable and the lease is left to expire: a
// release would be one more unacknowledged write, and the same holder asking
// again renews it (same token) and waits again, while no other holder gets
// the name before it expires. Not supported on a Cluster, whose pipelines
// span connections.
//
// A failover to a replica that kept the marker is no data loss a script can
// see. So every new connection of a standalone or Sentinel client (New adds
// an OnConnect hook to it, after any of the client's own) reads INFO first:
// a primary with another run_id or replication ID than the one last seen,
// which took over from another (a non-zero master_replid2) or replaced a
// primary that had replicas, starts the quarantine (quarantine.lua) on that
// connection before any call uses it, and OnDataLoss is called. A primary
// without replicas restarted in place is not a failover. A Redis that
// refuses INFO is not checked (the store logs a warning once).
//
// Redis must run with maxmemory-policy noeviction: an evicted lease key (the
// lease and its fencing counter) or marker breaks these guarantees. New logs a
// warning otherwise.
//
// # Timeouts
//
// Every call is bounded by Options.CallTimeout (store.DefaultCallTimeout): a
// Redis that does not answer within it, hung or unreachable, makes the call
// fail with store.ErrUnavailable, the first call after the hang included. A
// call whose caller's context ends first fails with the context's error
// instead (context.DeadlineExceeded or context.Canceled), never
// ErrUnavailable: the caller gave up, Redis did not fail. Calls of many
// callers share pipelines; a caller that gives up leaves the others' calls
// running. Bounding a call needs a client that honours context deadlines
// (go-redis' ContextTimeoutEnabled), as package internal/redisurl's clients
// do; New warns about one that does not.
//
// # Layering
//
// A store implementation: of this module it imports only the store interface
// (server/store) and leaves of internal/ (backoff, fanout, redisurl), never
// the service above it or another store. Of the server side, it alone imports
// go-redis.
package redisstore
