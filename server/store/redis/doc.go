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
// Every key of one name shares the hash tag {<enc>}, so one script's keys lie
// in one Cluster slot; <enc> is the name with '%', '{' and '}' percent-encoded
// (the empty name is "%00"):
//
//	<prefix>:{<enc>}:lease    HASH holder, token, value, ttl (ms); PEXPIRE'd to the ttl
//	<prefix>:{<enc>}:fence    STRING last issued token; never expires
//	<prefix>:{<enc>}:queue    ZSET waiter -> arrival order (expires with the last waiter deadline)
//	<prefix>:{<enc>}:waiters  ZSET waiter -> deadline, unix ms (same expiry)
//	<prefix>:marker           data-loss marker (standalone and Sentinel)
//	<prefix>:{<tag>}:marker   data-loss marker of one slot (Cluster: 16384 of them,
//	                          <tag> being the shortest decimal string hashing to the slot)
//	<prefix>:events           pub/sub channel: a name whose lease or queue changed
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
