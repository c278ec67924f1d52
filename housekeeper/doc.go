// Package housekeeper moves Deckard's messages back into their queues when
// their time comes, from several instances side by side on one Redis.
//
// # Tasks
//
// Deckard (takenet/deckard) keeps each queue Q in sorted sets sharing the
// hash tag {Q} (the prefix P defaults to "deckard_v1"):
//
//	P:queue:{Q}                  active pool: id -> priority
//	P:queue:{Q}:tmp              pulled, not yet acked: id -> ack deadline (unix ms)
//	P:queue:{Q}:lock_ack         acked with a lock: id -> unlock time (unix ms)
//	P:queue:{Q}:lock_nack        nacked with a lock: id -> unlock time (unix ms)
//	P:queue:{Q}:lock_ack:score   id -> score to restore on unlock, when the ack gave one
//	P:queue:{Q}:lock_nack:score  the same for nacks
//
// The unlock task moves every lock-set message whose unlock time has passed
// to the active pool, with its saved score (exactly as stored) or else now
// (lock_ack) or 0 (lock_nack). The timeout task moves every tmp message whose
// ack deadline has passed to the active pool with score 0. "Passed" and "now"
// are Redis' clock (TIME inside the script), so that hosts agree. Each batch
// of at most Config.BatchSize ids is one Lua script (scripts/*.lua), hence
// atomic; batches repeat until one finds fewer due ids than the limit.
//
// Every cycle (Config.UnlockInterval, Config.TimeoutInterval) discovers the
// queues afresh with SCAN (every master of a Cluster), MATCH
// P:queue:{*}:lock_*ack and P:queue:{*}:tmp. The queue name is read from the
// hash tag, never by splitting on ':' ("a::b:tmp" is a queue name), and what
// follows the tag must be one of the six suffixes; other keys are skipped.
//
// # Leases and fencing
//
// Before working queue Q a Runner holds the lease "housekeeper/unlock/Q" or
// "housekeeper/timeout/Q" (behind Config.LeaseNamespace) from its Locker,
// keeps it across batches and cycles while it is live, and skips Q for the
// cycle when another instance holds it. It checks the lease before each batch
// and leaves Q as soon as it is lost; the batch in flight then still runs.
// Leases of queues not found for Config.LeaseIdleTimeout are released, and
// all of them on shutdown; a release that fails (the coordinator is out of
// reach) is logged as such, and that lease expires after its TTL.
//
// Each batch carries its lease's fencing token. Redis keeps the highest token
// seen per task and queue in P:housekeeper:{Q}:fence:unlock and
// P:housekeeper:{Q}:fence:timeout (same hash tag, outside the scanned
// P:queue: space); a batch with a lower token moves nothing and fails with
// ErrFenced, an equal or higher one is accepted and stored. So once a newer
// holder has run a batch on Q, a stale holder (paused, partitioned, its lease
// expired without its knowing) cannot run another there.
//
// What this does not give: the fence only knows tokens it has seen, so a
// stale holder's batch that reaches Redis before the new holder's first one
// is accepted. That is harmless here: every batch is atomic and moves only
// what is still due and still in its set, so two batches on one queue, in
// any order or overlap, can neither duplicate nor lose a message. The leases
// spread the work and keep it from being done twice; correctness never rests
// on them. Fence keys never expire (expiring one would let stale tokens back
// in) and are not deleted when a queue goes away.
//
// # Metrics
//
// A Runner registers on Config.Registerer, every series labelled with its
// key prefix (prefix="deckard_v1"), so that Runners on several prefixes can
// share one registry:
//
//	housekeeper_messages_unlocked_total{queue,lock_type}  lock_type: ack, nack
//	housekeeper_messages_timed_out_total{queue}
//	housekeeper_batch_duration_seconds{task}              histogram; task: unlock, timeout
//	housekeeper_batches_fenced_total{task}
//	housekeeper_leases_lost_total{task}
//	housekeeper_leader                                    gauge: 1 while SetLeader(true)
//	housekeeper_queue_messages{queue,set}                 gauge; only while SetLeader(true)
//
// The queue gauges are measured at scrape time (a SCAN and four ZCARDs per
// queue), which is why only the elected leader reports them. Runners of one
// prefix on one registry share their series.
package housekeeper
