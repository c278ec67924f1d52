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
// redis+sentinel:// and redis+cluster://. Both refuse a Redis older than 7
// (MinRedisVersion, on every master of a Cluster): the scripts read TIME
// before they write and rely on Redis 7 replicating their effects, which
// older versions had to be asked for at every call.
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
//	                          token:weight:ttl_ms:expires:session:value, the
//	                          session being the id of the session the grant
//	                          is attached to, its expires then a bound (see
//	                          Sessions), or "" (holders.lua
//	                          encodes and decodes it, alone); sum: the
//	                          grants' summary, packing n:used:low:high and
//	                          :slow while grants may be attached (holders.lua
//	                          too), absent while there is no
//	                          grant: n their number, used the sum of their
//	                          weights, low at most the earliest of their
//	                          expiries (set at each grant to the minimum,
//	                          exact after a sweep), so that a script reads
//	                          the grants (HGETALL) only when now >= low +
//	                          lock delay, when one may have run out, high
//	                          at least the latest expiry, and slow at most
//	                          the earliest bound of the attached grants;
//	                          cap: the capacity (absent: 1);
//	                          token (decimal): the
//	                          last issued token, kept after the grants end as
//	                          the name's fencing counter; queued: "1" while
//	                          waiters may be queued; watched: the time until
//	                          which some coordinator observes the name; ex:
//	                          the key's expiry as the scripts last set it
//	                          (see below); d:<id>: T:until, session <id>
//	                          detached from the name at T (ms of the
//	                          session slot's clock): until then (ms, this
//	                          clock) a grant of it attached at or before T
//	                          is refused (see Sessions); hot: "1" once a
//	                          name was granted in a session again within a
//	                          retention of its
//	                          last grant (see below). The key expires the idle
//	                          retention, and up to a quarter of it more,
//	                          after the last grant and its lock delay would
//	                          end (as of each grant and renewal), after the
//	                          last release, never before the observation
//	                          mark nor the latest waiter's deadline at its
//	                          arrival
//	<prefix>:{<enc>}:queue    ZSET waiter -> arrival order * 2^20 + weight: the
//	                          order first, the weight the waiter asked for in
//	                          the low 20 bits (holders.lua), exact in a double
//	                          while a queue that never empties has seen fewer
//	                          than 2^33 arrivals; a waiting group is queued
//	                          under one id on each of its names (see Groups)
//	<prefix>:{<enc>}:waiters  ZSET waiter -> deadline; both queue keys expire at
//	                          the latest deadline (acquire and RefreshWaiters
//	                          push deadlines out)
//	<prefix>:marker           data-loss marker (standalone and Sentinel): grants
//	                          are refused until the time it holds; never expires
//	<prefix>:{<tag>}:marker   the data-loss marker of one slot (Cluster: 16384 of
//	                          them, <tag> being the shortest decimal string
//	                          hashing to the slot); never expire
//	<prefix>:{<id>}:session   HASH of a session (its own slot, <id> being its
//	                          32 hex digits): owner, ttl (ms), expires,
//	                          closed ("1" once closed: dead for ever),
//	                          refreshed (when its names last learned its
//	                          expiry), pruned (the latest time as of which
//	                          its names forgot names: attaches are recorded
//	                          later); expires the retention (the idle name
//	                          TTL) after the session would end
//	<prefix>:{<id>}:names     HASH from each name the session attached grants
//	                          to, to when it last did (ms): set before each
//	                          grant, kept at a release, forgotten once the
//	                          name, holding none of the session's grants,
//	                          was detached from it (see Sessions: seconds
//	                          after a release, or at a refresh); expires the
//	                          session keep after the session would end,
//	                          deleted once its close or its expiry settled
//	                          every name (reaper.go)
//	<prefix>:events           pub/sub channel carrying the name of a lease or queue
//	                          that changed and a newline, and after it the token
//	                          when the change is a grant (acquire.lua), a minus
//	                          and the token when it is a release (release.lua);
//	                          published
//	                          only while the name's lease key says waiters are
//	                          queued or it is watched
//
// One key holds what an uncontended grant and release need, so that a cycle
// costs Redis 7 commands in its two scripts (acquire 4: TIME, GET marker,
// HMGET, HSET; release 3: HMGET, TIME, HDEL) where it cost 13 when the
// counter and the observation mark were keys of their own, and 9 when each
// script also set the key's expiry. A script that must move the expiry sets
// it an eighth of a retention past what it needs and records it in ex;
// acquire, renew and release leave the expiry alone while ex covers what
// they need by no more than a quarter of a retention (a PEXPIREAT at a
// name's first grant and about once per eighth of a retention), and a
// release that finds it further out (a grant whose TTL and lock delay pass
// an eighth of the retention) brings it down to one retention and drops
// ex. So an idle name is forgotten the retention, and at most a quarter of
// it more, after its last use: for names used once each, up to a quarter
// more of them in Redis at once. A grant attached to a session needs its
// key to outlive its bound by the session keep (see Sessions: an hour at
// least), and the release of a name's last attached grant takes the
// expiry back to one retention, so that a name used once in a session
// goes after the retention too; but not for a hot name (granted again
// within a retention of its last grant), whose grants keep coming back
// and would each move the expiry up again: its key lives up to the
// session keep after its last use. The summary (sum, one field for the
// grants' number, weights and expiry bounds, so that the uncontended grant
// reads 7 fields and writes 3 pairs, and the release reads 6 and deletes
// 2, attached to a session or not) keeps the cost so for semaphores too: a grant beside others costs the
// same while none of them ran out, a release beside others one HSET more.
//
// The scripts of a cycle (acquire, renew, release, and a group's
// acquire_group and release_group) take the store's
// settings (quarantine, lock delay, retention, session keep, the pub/sub
// channel) as constants of the store's own copy, not as arguments, and
// acquire's arguments that are rarely set come last and are left out at
// their defaults (7 for a grant of its own that does not wait): each
// argument costs Redis a string per call, and each number it converts
// about as much again. scripts/callgrind-cycle.sh counts the instructions
// a cycle costs Redis (bench/README.md, "Where a cycle's time goes").
//
// Observing costs little while nothing changes: Watch reads many names in one
// script call per 200 names (per slot on a Cluster), all in one pipeline,
// with one HGETALL a name, and marks a name again (HSET, PTTL, PEXPIREAT) only
// when due.
// RefreshWaiters keeps any number of waiters of a name queued with one script
// call of about ten commands per refreshWaitersBatch waiters, each call on
// its own outside the pipeline, so that a line of thousands holds up
// neither Redis nor the coordinator's other calls longer than one batch.
//
// # Sessions
//
// A session (store.Sessions) lives in its own slot; the names its grants
// are attached to live in theirs, so no script sees both. session.lua
// renews it in one script whatever the number of leases (5 commands), and
// checks that slot's data-loss marker exactly as a grant does.
//
// An attached grant's record carries a bound instead of an expiry of its
// own: the session's expiry as the name last learned it. It crosses slots
// as remaining milliseconds, never as a time of another shard's clock: the
// name applies it as its own now plus what the coordinator has left of it
// (the milliseconds less the time since their reply arrived), so the bound
// is no earlier than the session's end (the check ran before the reply
// arrived, the name's script runs after it was sent), later only by the
// transit: the safe side, since the store must keep a lease at least as
// long as its holder may believe in it.
//
// Liveness is atomic with each grant because a name's script never trusts
// an attached record past its bound. Acquire, Describe and Watch (List
// reads through Describe) first settle a name whose slow passed: every
// attached record whose bound passed needs a proof of its session, and
// without one the script changes nothing and answers "check these
// sessions" ({-4, ids}). The coordinator runs session.lua's check on each
// session's slot (a slot that lost its data is quarantined and refuses, as
// grants are: the session's holder may still believe in it) and calls
// again with the proofs as ARGV. A proof of life only pushes a bound out
// (a lazy renewal, for the names someone contends for or observes); a proof
// of death ends the record: expired, as an expiry with its lock delay from
// when the session ran out (its age crosses as milliseconds too); closed,
// as a release; unknown to its slot, as dead for at least the retention. A
// dead session never revives (renew and attach refuse it, its id is never
// made again, and its keys outlive it by the retention), so a proof of death
// can never be stale, and a proof of life, if stale, only yields a bound
// the session had reached anyway. Attaching checks the session (as its
// owner, adding the name to its names) before the grant, and the grant's
// bound is that proof's; a coordinator that attached the name less than
// half a TTL ago, with a proof of life that has half a TTL left, grants
// with that proof and skips the session's script (attachments.go says why
// that is safe), so a name used in a loop in one session costs a cycle
// what a lease of its own costs.
//
// Bounds of names nobody visits go stale, so the lease key of a name with
// attached grants outlives its bounds and lock delay by the larger of the
// idle retention and an hour, and a renewal carries the session's expiry
// to all its names (settle.lua, one script a name, pipelined) once per half
// of that: an hour's keys for an amortised script per lease every half
// hour, beside the one renewal every TTL/3. A name is never removed from
// the session's names while it may hold one of its grants, since it would
// then miss the refresh and lose its key under its holder. A release keeps
// it; seconds later (detacher.go), or at a refresh, the name is settled and,
// holding none of the session's grants, detached from it at a time T of
// the session's slot: marked (d:<id>) to refuse every grant of the session
// attached at or before T, for longer than such a grant can take to land
// and be believed (a TTL and two call timeouts; the next mark set on the
// name drops those that ran out). The session's names then
// forget it, unless it was attached again after T (session.lua prune), and
// every attach is recorded after the latest such T. So a grant on a name
// its session's names forgot can only come from a later attach, which put
// the name back; a refused one attaches again. A name used once in a
// session leaves its names seconds after its release, where it stayed an
// hour, about 90 bytes each; the release of the last grant of a hot name
// (see above) or of one with waiters queued is not detached, its next
// grant needing the name anyway. With a
// retention shorter than the mark must last, a name's next grant or
// release could take its key, mark and all, too soon: a refresh then
// forgets only names last attached an hour and two TTLs before, as when
// there were no marks, and releases are not detached.
//
// CloseSession marks the session closed and gets its names in one script,
// then settles each name with the proof of its close (pipelined, announced)
// and forgets the names. A session that expires without a close (its
// client vanished) is settled so too, with the proof of its expiry, by the
// store that last created, renewed or attached through it, about a second
// after its expiry (reaper.go): so the names of a client that crashed
// holding them go a retention after its session's end, not the session
// keep; those of a session whose coordinator stopped too keep theirs.
// Settling (a close's or a refresh's) pushes out the expiry of a name that
// still has attached grants, and takes a name left with none back to what
// a release would give it (the retention past its grants and their lock
// delay): a name the session released keeps the one retention its release
// gave it, and one whose grants the close released goes after a retention
// too, not the session keep its attached grant had set.
// A coordinator that stops in between leaves records whose bounds pass and
// whose check then finds the session closed; a second close finishes the
// work. Release of an attached grant by its holder succeeds even past its
// bound, which may be stale.
//
// # Groups
//
// AcquireGroup takes several names at once (store.GroupRequest), each with
// its own capacity and weight, and ReleaseGroup gives them back.
//
// The names of one slot (every name on a standalone or Sentinel Redis; on
// a Cluster, names that hash to one slot) are taken in one script call,
// acquire_group.lua: one state change, all of them or none. It runs
// acquire.lua's own code, not a copy: scripts.go makes the part of
// acquire.lua after its clock and data-loss check a function, acquire_one,
// which the group calls for each member. First it checks every member
// (would it be granted, renewed, or refused, as a single acquire of it
// alone would decide, changing nothing but what any call may: grants past
// their lock delay, dead waiters, attached grants settled with proofs).
// When every one would be granted, it grants each (renewing those the
// holder holds), each with a token from its own name's counter; a member's
// grant takes the fields its check read, so a name costs one read and one
// write. When one would be refused, none is granted, and a waiting group
// is queued on every member with the same waiter id; one that fails
// (another capacity, the holder cap) fails the call, naming it, with no
// grant and no place queued. The script has one clock, so the grant pass
// decides as the checks did; were a member refused there anyway, the
// call's grants are released (release.lua's code, release_one) and the
// group answered as refused.
//
// Fairness and deadlock freedom in one slot: a group is queued on all its
// members in one script, so in every queue it stands in the same order
// relative to every other waiter, and the oldest waiter is first in every
// queue it is in: it is granted once the holders in its way leave, which
// they do (their leases end). A request for one of its names that does not
// fit beside it waits behind it, as behind any waiter (a stream of tries
// of one name cannot starve it), and requests for other names never wait
// for it. A group whose place lapsed on some members but not all (its
// refreshes failed) is taken out of every queue and queued again at the
// back of all of them: queued again on the lapsed ones alone, it would
// stand ahead of another group in one queue and behind it in another, each
// waiting for the other for ever. Describe shows a waiting group as a
// waiter of each of its names.
//
// Names in several Cluster slots cannot be taken in one script. They are
// taken slot by slot, in ascending slot order whatever order the request
// lists them in (ordered locking), one acquire_group.lua call a slot, each
// all or none within its slot; the call goes on to the next slot only once
// a slot is granted whole. The first slot that refuses ends it, answering
// refused: GroupResult.Members holds that slot's answers, and Acquired for
// the members of the earlier slots (held) and of the later ones (not asked
// for: not known to be in the way); GroupResult.Held holds the leases of
// the earlier slots: real grants, of the group's TTL or attached to its
// session. A waiting group is queued in the refusing slot's queues alone
// (GroupResult.Queued says which members: the coordinator parks the group
// in those names' lines only), and the call takes its waiter out of the
// later slots' queues, where an earlier attempt that got further may have
// left it. Asked again, the group renews what it holds (same tokens) and
// goes on from there.
//
// Every grant and renewal of a group stores the acquisition's claim
// (store.GroupRequest.Claim) as the lease's value, and what is given back
// for a group that was not granted (this store's undo after an error, the
// coordinator's give-up) is released by release_group.lua only while it
// still carries that claim: a retry of the same holder that began before
// the abandoned call gave its parts back, and renewed them since (same
// tokens), has put its own claim there and keeps them.
//
// This is deadlock-free by construction: a group waits only in the lowest
// slot it does not hold, while holding members of lower slots only. A
// waiter in slot s waits for the holders of its names in slot s and for
// the waiters queued ahead of it there; a holder is a single lease or a
// group that waits for nothing (granted whole) or for a slot above s. So
// every chain of waits climbs to ever higher slots, and ends, within the
// 16,384 slots, at holders that wait for nothing, whose leases end. Within
// a slot the argument above holds. Fairness is each slot's: its FIFO
// queues, where a group waits as any waiter does; while it waits it holds
// its lower slots' members, and requests for those wait for it as for any
// holder (the price of taking slots in order: the group renews them by
// asking again within their TTL, and gives them back when it gives up).
//
// What a caller sees: Acquired only when every member is held, never a
// part of the group as a grant. A call that took longer than the TTL from
// its first slot's grant to its last (the first ones may have run out)
// fails with store.ErrUnavailable, reporting Held. An error in a later slot
// (another capacity, the holder cap, Redis unavailable) releases what the
// call granted anew in earlier slots and reports the rest (parts held
// before and renewed, or not released) in Held. A coordinator killed
// mid-acquisition leaves at most the parts it took: those of their own
// TTL expire within it, and the group's places leave the queues at the
// waiter TTL; those attached to a session live with it until its client
// asks again (renewing them and going on) or gives up (releasing them),
// which the SDKs do, or the session ends. Tokens never go backwards: every
// grant of a part is a single name's grant in that name's slot, above the
// name's counter (or the clock), a renewal keeps its token, and a part
// given back leaves the counter where its grant put it. A group whose
// part in a lower slot ran out (its caller did not ask again in time) and
// was taken may still hold members of higher slots from an earlier
// attempt while it waits in the lower one: nothing renews those, and they
// end within their TTL.
//
// Names are never placed together by a hash tag of their own: '{' and '}'
// in a name are escaped (see Keys), so a user's "{tag}" does not pick the
// slot. Hashing such names by their tag would move the keys of every
// existing name holding braces, and two coordinators of a rolling upgrade
// would then grant such a name twice.
//
// Costs: an uncontended group of n names in one slot is one script of
// 2 + 2n Redis commands (TIME and the marker once, an HMGET and an HSET a
// name), where n acquires run 4n, and its release one script of 3 a name;
// per name, acquire and release cost Redis about 1.1 times the
// instructions of a single name's cycle for a group of 2, 0.85 times for
// a group of 8, and 1.35 times for a group of one
// (scripts/callgrind-cycle.sh). A group over k Cluster slots costs k calls
// of its names' slots, one after the other (k round trips), and k release
// calls, concurrent: for one name a slot, 1.35 times k single cycles. The
// group scripts are loaded into Redis at their first use, not by New:
// every script Redis holds makes every call cost a little more.
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
// span connections: there a failover is made safe by the quarantine alone.
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
// On a Cluster, the same check runs per node, before this store's commands
// use it (a hook on each of the Cluster client's node clients, since the
// client may hold connections to a replica from before its promotion): a
// primary that is not the one last seen at its address, and took over from
// another, has every slot it serves quarantined (quarantine.lua on each
// slot's marker) before any command goes on; the other shards grant as
// before. A check holds until a node answers as if the topology changed
// (MOVED, READONLY, CLUSTERDOWN, no answer), or the node went unused for
// half a second; then every node is checked again at its next use (one
// INFO each). A slot migration moves keys with MIGRATE, which loses
// nothing: the nodes stay the primaries they were, and nothing is
// quarantined. Since the Cluster client reloads its slot map after a node
// stopped answering only at its reload interval (a minute by default), the
// watch asks it to reload at once. A planned failover (CLUSTER FAILOVER,
// which waits for the replica to catch up) is quarantined too: the store
// cannot tell it from an unplanned one.
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
