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
//	<prefix>:{<enc>}:lease    HASH holder, token (decimal), value, ttl (ms), expires;
//	                          PEXPIRE'd to ttl + lock delay, so that the key
//	                          outlives an expired lease by the lock delay
//	<prefix>:{<enc>}:fence    STRING last issued token; never expires
//	<prefix>:{<enc>}:queue    ZSET waiter -> arrival order
//	<prefix>:{<enc>}:waiters  ZSET waiter -> deadline; both queue keys expire at
//	                          the latest deadline
//	<prefix>:{<enc>}:watched  STRING "1" while some coordinator observes the name;
//	                          expires unless Watch marks it again
//	<prefix>:marker           data-loss marker (standalone and Sentinel): grants
//	                          are refused until the time it holds; never expires
//	<prefix>:{<tag>}:marker   the data-loss marker of one slot (Cluster: 16384 of
//	                          them, <tag> being the shortest decimal string
//	                          hashing to the slot)
//	<prefix>:events           pub/sub channel carrying the name of a lease or queue
//	                          that changed, published only while the name's queue
//	                          or watched key exists
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
// Tokens come from INCR on the fence key. When the fence key is missing (a
// name's first grant, or after Redis lost its data) it is seeded with Redis'
// TIME in microseconds, so tokens keep increasing across data loss as long as
// Redis' clock does not step back and no name is granted more than once per
// microsecond on average.
//
// New writes the markers with SET NX and they never expire: an acquire that
// finds its marker missing knows Redis lost its data since then (a restart
// without persistence, FLUSHALL, failover to an empty replica). It re-creates
// the marker holding "quarantine until" (Redis time) and refuses grants with
// *store.QuarantineError until then, so that holders of lost leases see them
// expire first; Options.OnDataLoss is called once per detection. Data lost
// while no coordinator ran is not detected: New re-creates the markers.
//
// Redis must run with maxmemory-policy noeviction: an evicted fence key or
// lease breaks these guarantees. New logs a warning otherwise.
package redisstore
