// Package housekeeper does Deckard's six housekeeping tasks from several
// instances side by side: it moves messages back into their queues when
// their time comes (unlock, timeout), on Deckard's Redis, and, given its
// MongoDB, deletes expired messages (TTL) and a queue's excess (max
// elements), copies the storage back into a cache that lost it (recovery)
// and reports the queue metrics.
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
// # Dividing the work: views
//
// Every instance holds a membership lease, "housekeeper/members/<id>"
// (behind MembershipConfig.Namespace), that its SDK renews about every
// TTL/3. The instance elected in "housekeeper/leader" lists the members
// every CheckInterval and, when they changed, publishes a View as the
// election's value: the sorted member ids and a fencing token, taken from a
// grant of "housekeeper/view" so that it is above every earlier view's.
// Every instance observes the election. A queue's unlock task and its
// timeout task each belong to one member of the view, by rendezvous hashing
// (View.Owner), so that instances holding the same view never work the
// same set, a member's arrival or departure moves only the sets it takes or
// leaves, and the work spreads evenly whatever order instances started in.
// The cost is one renewed lease per instance and the leader's listing, not
// one per queue: a short TTL (a second by default) is cheap. A killed
// instance's sets move on within TTL + CheckInterval of its last renewal.
//
// An instance works nothing while its membership lease is lost or past its
// local deadline, or while the view it holds does not name it, and checks
// both before every batch. After a lapse it takes views only from an
// observation begun under its new lease.
//
// # Fencing
//
// Each batch carries the token of the view it was planned under. Redis keeps
// the highest token seen per task and queue in P:housekeeper:{Q}:fence:unlock
// and P:housekeeper:{Q}:fence:timeout (same hash tag, outside the scanned
// P:queue: space); a batch with a lower token moves nothing and fails with
// ErrFenced, an equal or higher one is accepted and stored. So once an
// instance working under a newer view has run a batch on Q, one still on an
// older view (paused, partitioned, not yet told) cannot run another there;
// it waits for a newer view before trying that set again. View tokens are
// coordinator fencing tokens of one name, so they stay monotonic across
// leader changes, coordinator restarts and a coordinator Redis that lost its
// data.
//
// What this does not give: the fence only knows tokens it has seen, so a
// stale instance's batch that reaches Redis before the new owner's first one
// is accepted. That is harmless here: every batch is atomic and moves only
// what is still due and still in its set, so two batches on one queue, in
// any order or overlap, can neither duplicate nor lose a message. The views
// spread the work and keep it from being done twice; correctness never
// rests on them. Fence keys never expire (expiring one would let stale
// tokens back in) and are not deleted when a queue goes away.
//
// # Finding the work: discovery and reads
//
// Every Config.DiscoveryInterval one SCAN (every master of a Cluster),
// MATCH P:queue:{*}:*, finds the sets. The members take turns, in view
// order, so that the keyspace is scanned once an interval however many
// instances run: the one on duty publishes what it found in the index
// P:housekeeper:sets (member: the set's key; score: a number from
// P:housekeeper:sets:seq given when it was first published), and the others
// read what is new since their last read, and the whole index every tenth
// time to learn which sets are gone. A new queue is thus found within two
// intervals. The queue name is read from the hash tag, never by splitting
// on ':' ("a::b:tmp" is a queue name), and what follows the tag must be one
// of the six suffixes; other keys are skipped.
//
// A set is not run every cycle. Its earliest entry, the head, is read (one
// ZRANGE 0 0 WITHSCORES) every Config.ProbeInterval: each round reads every
// set the instance owns in one pipeline (a pipeline per 500 sets) with one
// TIME. A set is also read at once when the instance first owns it and
// after it was drained, and it is drained when its head falls due, by a
// timer. So an idle instance costs Redis about (its sets / ProbeInterval)
// ZRANGEs a second, pipelined, plus its share of discovery, and every
// message is moved within about ProbeInterval of falling due: at its due
// time when it was its set's head when read, otherwise at the first round
// after (a lock shorter than every lock already in its set, say).
//
// # The storage tasks
//
// With Config.Storage.Storage set, four more tasks work on Deckard's
// MongoDB (package storage) and the cache, under the same views: each
// belongs to the member View.Owner names for the task with an empty queue,
// so that the storage's cost does not grow with the number of instances (a
// step serves every queue at once), and a dead owner's task moves on with
// the view.
// Each task's loop (storagetasks.go) runs every Storage.Interval, at once
// when the view changes, and step after step while a step was full; before
// each step it checks that the membership holds and the view is the one
// the work was planned under.
//
//   - TTL deletes, earliest expiry first, the messages whose expiry_date has
//     passed: from storage, only those still expired when the delete runs,
//     then from the cache with Deckard's remove script (scripts/remove.lua).
//   - Max elements deletes a queue's messages ranked after its newest
//     max_elements by expiry (storage.Excess): racing trims cannot take a
//     queue below its maximum. A queue is counted in storage only when its
//     cache holds more than the maximum, when it changes hands, and every
//     Storage.RecheckInterval.
//   - Recovery copies the storage back into a cache that lost it, with
//     Deckard's state keys (P:{recovery}, P:{recovery_storage_breakpoint},
//     P:{recovery_breakpoint}) and insert semantics. Each batch's inserts
//     (scripts/recover.lua, one per queue) are fenced per queue in
//     P:housekeeper:{Q}:fence:recovery and refused by Redis once its clock
//     passes the membership lease's deadline, converted to Redis' clock
//     with a TIME read before the batch; the breakpoint then moves by a
//     fenced compare-and-set (scripts/recovery_advance.lua) whose fence,
//     P:housekeeper:{recovery_storage_breakpoint}:fence, shares its slot.
//     So a deposed instance can neither move the breakpoint once its
//     successor has, nor insert into a queue its successor has recovered
//     into, nor insert anything after its lease ended (given clocks that
//     run at the same rate). A kill between the inserts and the move copies
//     that batch again, and the inserts skip what is there.
//   - TTL and max elements wait while a recovery is due or runs.
//   - The metrics task reads deckard_total_messages and
//     deckard_oldest_message per queue prefix every Storage.MetricsInterval;
//     only its owner reports them.
//
// # Metrics
//
// A Runner registers on Config.Registerer, every series labelled with its
// key prefix (prefix="deckard_v1"), so that Runners on several prefixes can
// share one registry:
//
//	housekeeper_messages_unlocked_total{queue,lock_type}  lock_type: ack, nack
//	housekeeper_messages_timed_out_total{queue}
//	housekeeper_batch_duration_seconds{task}              histogram; task: unlock, timeout, or a storage task's run
//	housekeeper_batches_fenced_total{task}
//	housekeeper_messages_recovered_total
//	housekeeper_set_reads_total                           sets whose head was read (a command each)
//	housekeeper_sets_owned{task}                          gauge: sets worked under the view in force
//	housekeeper_view_token, housekeeper_view_members      gauges: the view in force; token 0: none
//	housekeeper_leader                                    gauge: 1 while SetLeader(true)
//	housekeeper_queue_messages{queue,set}                 gauge; only while SetLeader(true)
//
// and Deckard's own metrics under Deckard's names (deckardmetrics.go).
//
// The queue gauges are measured at scrape time (a SCAN and four ZCARDs per
// queue), which is why only the elected leader reports them. Runners of one
// prefix on one registry share their series.
package housekeeper
