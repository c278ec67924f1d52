-- dequeue.lua: remove a waiter that gave up.
--
-- KEYS[1] queue, KEYS[2] waiters: the name's keys, as the key layout in
-- doc.go describes them.
-- ARGV[1] waiter id
-- ARGV[2] pub/sub channel
-- ARGV[3] name (announced on the channel, so that the next waiter wakes up:
--         the name and a newline, as doc.go's key layout says)
--
-- Returns 1 when the waiter was queued, else 0; decodeDequeue in scripts.go
-- reads the reply.

local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. '\n')
end
return removed
