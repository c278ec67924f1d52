-- dequeue.lua: remove a waiter that gave up.
--
-- KEYS[1] queue    ZSET waiter -> arrival order
-- KEYS[2] waiters  ZSET waiter -> deadline (unix ms)
-- ARGV[1] waiter id
-- ARGV[2] pub/sub channel
-- ARGV[3] name (published on the channel, so that the next waiter wakes up)
--
-- Returns 1 when the waiter was queued, else 0.

local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return removed
