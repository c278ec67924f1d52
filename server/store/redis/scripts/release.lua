-- release.lua: compare-and-set delete of a held lease.
--
-- KEYS[1] lease  HASH holder, token, value, ttl (ms)
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] pub/sub channel
-- ARGV[4] name (published on the channel)
--
-- Returns 1 when the lease was released, 0 when (holder, token) did not
-- hold it.

local cur = redis.call('HMGET', KEYS[1], 'holder', 'token')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
